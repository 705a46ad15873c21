"""Prometheus as grl-rlc's second history source: Debian's real `prometheus`
scrapes a real controller of a fleet under load; `grl-rlc import --prometheus`
turns its range queries into samples (mean and max per interval, the region
from grl_controller_info) and the store holds them, near the load driven."""

import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
import urllib.request

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)

RLC_BIN = os.path.join(f.BUILD_DIR, "rlc", "grl-rlc")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
WINDOW = 4  # s, the recording interval asked of the source
LOAD_S = 18
BUCKETS = [
    "g procedure_prefix=/g rate=200r/s",
    "zb procedure_prefix=/z rate=1000r/s scope=zone",
]


class Prometheus:
    def __init__(self, targets):
        assert os.path.exists(PROMETHEUS), "prometheus not installed (bash .ci/install-deps)"
        self.dir = tempfile.mkdtemp(prefix="grl-prom-")
        self.port = f.h.free_port()
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg, "w") as fh:
            fh.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                     "scrape_configs:\n  - job_name: grl\n    static_configs:\n"
                     "      - targets: [%s]\n" % ", ".join("'%s'" % t for t in targets))
        self.log_path = os.path.join(self.dir, "prometheus.log")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port], stdout=log, stderr=log)
        log.close()
        self.url = "http://127.0.0.1:%d" % self.port

        def ready():
            assert self.proc.poll() is None, "prometheus exited:\n" + self.log()[-3000:]
            return urllib.request.urlopen(self.url + "/-/ready", timeout=2).status == 200
        f.h.wait_until(ready, 30, interval=0.2, what="prometheus to be ready")

    def log(self):
        with open(self.log_path, errors="replace") as fh:
            return fh.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def rows(store, bucket, scope, region="", zone=""):
    db = sqlite3.connect(store)
    try:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute(
            "SELECT s.* FROM samples s JOIN instances i ON i.id = s.instance "
            "WHERE i.bucket = ? AND i.scope = ? AND i.region = ? AND i.zone = ? "
            "ORDER BY s.start_s", (bucket, scope, region, zone))]
    finally:
        db.close()


def test_import_from_prometheus_scraping_a_real_controller(fleet):
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl])
    ns = [fleet.nginx("h1", "z1", col, BUCKETS), fleet.nginx("h2", "z1", col, BUCKETS)]
    fleet.wait_hosts(ctl, 2)
    prom = Prometheus([ctl.endpoints["metrics"]])
    store_dir = tempfile.mkdtemp(prefix="grl-rlc-")
    try:
        t_load = time.time()
        loads = [f.Load([(ns[0], 2), (ns[1], 1)], "150:%d" % LOAD_S, "/g/x"),
                 f.Load([(ns[0], 1), (ns[1], 1)], "80:%d" % LOAD_S, "/z/x")]
        for ld in loads:
            ld.result()
        # The load ran at least over [t_load, t_load + LOAD_S] (it started after t_load).
        t_end = t_load + LOAD_S
        time.sleep(WINDOW + 1)  # the last window under load has closed
        store = os.path.join(store_dir, "h.db")
        p = subprocess.run([RLC_BIN, "import", "--store", store, "--prometheus", prom.url,
                            "--since", "2m", "--interval", "%ds" % WINDOW, "--scrape", "1s"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode(errors="replace")
        print(out)
        assert p.returncode == 0, out + prom.log()[-2000:]

        g = rows(store, "g", "global")
        print("g:", g)
        steady = [r for r in g if r["start_s"] >= t_load + 3 and r["start_s"] + WINDOW <= t_end - 1]
        assert len(steady) >= 2, g
        for r in steady:
            assert abs(r["offered_mean_mrps"] / 1000 - 150) <= 0.15 * 150, r
            assert r["offered_mean_mrps"] <= r["offered_peak_mrps"] <= 2 * r["offered_mean_mrps"], r
            assert r["limit_mrps"] == 200000 and r["mode"] == 0, r
            assert 2 <= r["ticks"] <= WINDOW + 1, r  # scrapes in the window, 1 s apart

        zb = rows(store, "zb", "zone", "r1", "z1")  # region from grl_controller_info
        steady = [r for r in zb if r["start_s"] >= t_load + 3 and r["start_s"] + WINDOW <= t_end - 1]
        assert len(steady) >= 2, zb
        for r in steady:
            assert abs(r["offered_mean_mrps"] / 1000 - 80) <= 0.15 * 80, r
            assert r["limit_mrps"] == 1000000, r
    finally:
        prom.close()
        shutil.rmtree(store_dir, ignore_errors=True)
