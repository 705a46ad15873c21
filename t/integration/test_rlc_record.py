"""grl-rlc record against a real fleet (nginx with the module, grl-collector,
grl-controller, real load): the store holds every bucket instance with the
offered mean and peak near the load driven, the limit and mode in force; two
controllers of one region (active-active) are not counted twice, and one of
them dying is logged once while the other keeps being recorded. The store is
read with Python's sqlite3 module, the way any other reader would."""

import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time

import pytest

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)

RLC_BIN = os.path.join(f.BUILD_DIR, "rlc", "grl-rlc")
INTERVAL = 2  # s, the recording interval under test
BUCKETS = [
    "g procedure_prefix=/g rate=200r/s",
    "zb procedure_prefix=/z rate=1000r/s scope=zone",
    "sh procedure_prefix=/s rate=50r/s mode=shadow",
]


class Silent:
    """A "controller" whose host is gone: TCP connections complete (the kernel's
    backlog) but nothing ever answers, so every fetch runs into its timeout."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.endpoints = {"metrics": "127.0.0.1:%d" % self.sock.getsockname()[1]}


class Record:
    """grl-rlc record in the background, its log in a file."""

    def __init__(self, controllers, interval=INTERVAL, store=None):
        self.dir = tempfile.mkdtemp(prefix="grl-rlc-")
        self.store = store or os.path.join(self.dir, "history.db")
        self.log_path = os.path.join(self.dir, "record.log")
        log = open(self.log_path, "wb")
        args = [RLC_BIN, "record", "--store", self.store, "--interval", "%ds" % interval,
                "--poll", "250ms"]
        for c in controllers:
            args += ["--controller", c.endpoints["metrics"]]
        self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        log.close()

    def stop(self):
        """SIGTERM (the open interval is flushed) and the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError("grl-rlc record did not stop on SIGTERM:\n" + self.log())

    def log(self):
        with open(self.log_path, errors="replace") as fh:
            return fh.read()

    def rows(self, bucket, scope, region="", zone=""):
        db = sqlite3.connect(self.store, timeout=5)
        try:
            db.row_factory = sqlite3.Row
            return [dict(r) for r in db.execute(
                "SELECT s.* FROM samples s JOIN instances i ON i.id = s.instance "
                "WHERE i.bucket = ? AND i.scope = ? AND i.region = ? AND i.zone = ? "
                "ORDER BY s.start_s", (bucket, scope, region, zone))]
        finally:
            db.close()


@pytest.fixture
def recs():
    """Record() for one test; their directories are removed at teardown."""
    made = []

    def make(*a, **kw):
        r = Record(*a, **kw)
        made.append(r)
        return r
    yield make
    for r in made:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait(5)
        shutil.rmtree(r.dir, ignore_errors=True)


def full_intervals(rows, t0, t1):
    """The rows whose whole interval lies in [t0, t1] (wall seconds)."""
    return [r for r in rows if r["start_s"] >= t0 and r["start_s"] + r["length_s"] <= t1]


def test_records_every_instance_with_means_and_peaks_near_the_load(fleet, recs):
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl])
    ns = [fleet.nginx("h1", "z1", col, BUCKETS), fleet.nginx("h2", "z1", col, BUCKETS)]
    fleet.wait_hosts(ctl, 2)
    rec = recs([ctl])
    try:
        t_load = time.time()
        loads = [f.Load([(ns[0], 2), (ns[1], 1)], "150:10", "/g/x"),
                 f.Load([(ns[0], 1), (ns[1], 1)], "80:10", "/z/x"),
                 f.Load([(ns[0], 1), (ns[1], 1)], "100:10", "/s/x")]
        for ld in loads:
            ld.result()
        t_end = t_load + 10  # the load ran at least over [t_load, t_load + 10 s]
        time.sleep(0.5)
        t_stop = time.time()
        assert rec.stop() == 0, rec.log()
    finally:
        if rec.proc.poll() is None:
            rec.proc.kill()
    print(rec.log())
    assert "stopped:" in rec.log()

    g = rec.rows("g", "global")
    steady = full_intervals(g, t_load + 3, t_end - 1)
    print("g:", g)
    assert len(steady) >= 2, g
    for r in steady:
        assert abs(r["offered_mean_mrps"] / 1000 - 150) <= 0.15 * 150, r
        assert r["offered_peak_mrps"] >= r["offered_mean_mrps"], r
        assert r["offered_peak_mrps"] <= 2 * r["offered_mean_mrps"], r
        assert r["admitted_mean_mrps"] <= r["offered_mean_mrps"], r
        assert r["limit_mrps"] == 200000 and r["mode"] == 0, r
        # 2 s of 250 ms controller ticks: 8, give or take the poll's phase; never the
        # same tick twice.
        assert 5 <= r["ticks"] <= 9, r
    # The interval open at SIGTERM was flushed, not lost.
    assert g[-1]["start_s"] + g[-1]["length_s"] >= t_stop - 0.5, (g[-1], t_stop)
    # No load before or after: the rows outside it show (close to) nothing, so the
    # figures above come from the traffic driven.
    assert max(r["offered_peak_mrps"] for r in g) < 400 * 1000, g

    zb = rec.rows("zb", "zone", "r1", "z1")  # the region comes from grl_controller_info
    steady = full_intervals(zb, t_load + 3, t_end - 1)
    assert len(steady) >= 2, zb
    for r in steady:
        assert abs(r["offered_mean_mrps"] / 1000 - 80) <= 0.15 * 80, r
        assert r["dropped_mean_mrps"] == 0 and r["limit_mrps"] == 1000000, r

    sh = rec.rows("sh", "global")
    steady = full_intervals(sh, t_load + 3, t_end - 1)
    assert len(steady) >= 2, sh
    for r in steady:
        assert r["mode"] == 1, r  # shadow
        assert r["dropped_mean_mrps"] < 5000, r  # a shadow bucket admits everything
        # would-be drops: offered - limit = 50 r/s
        assert abs(r["shadow_mean_mrps"] / 1000 - 50) <= 0.4 * 50, r
        assert r["shadow_peak_mrps"] >= r["shadow_mean_mrps"], r


def test_active_active_counted_once_and_dead_controllers_logged_once(fleet, recs):
    a = f.Controller(name="ctl-a")
    b = f.Controller(name="ctl-b", peers=[a.publish])
    a.args += ["--peer", b.publish]
    fleet.add(a)
    fleet.add(b)
    col = fleet.collector("z1", [a, b])
    ns = [fleet.nginx("h1", "z1", col, BUCKETS), fleet.nginx("h2", "z1", col, BUCKETS)]
    fleet.wait_hosts(a, 2)
    fleet.wait_hosts(b, 2)
    # Another region whose two controllers' hosts are gone; listed first: they must delay
    # nobody (each fetch waits up to a poll period for its timeout).
    silent = [Silent(), Silent()]
    rec = recs(silent + [a, b])
    try:
        t_load = time.time()
        load = f.Load([(ns[0], 1), (ns[1], 1)], "150:16", "/g/x")
        time.sleep(8)
        b.kill()
        t_kill = time.time()
        load.result()
        t_end = t_load + 16
        assert rec.stop() == 0, rec.log()
    finally:
        if rec.proc.poll() is None:
            rec.proc.kill()
        for sl in silent:
            sl.sock.close()
    log = rec.log()
    print(log)
    b_addr = b.endpoints["metrics"]
    assert log.count("controller %s not answering" % b_addr) == 1, log
    for sl in silent:
        assert log.count("controller %s not answering" % sl.endpoints["metrics"]) == 1, log
    assert "controller %s not answering" % a.endpoints["metrics"] not in log, log

    g = rec.rows("g", "global")
    print("g:", g)
    before = full_intervals(g, t_load + 3, t_kill)
    after = full_intervals(g, t_kill + 0.5, t_end - 1)
    assert before and len(after) >= 2, (before, after, g)
    for r in before + after:
        # Both controllers showed the instance until one died: still one count per tick,
        # and the mean of 150 r/s, not the sum of two views of it. Every tick is seen
        # although one controller never answers (it is polled beside, not before, them).
        assert 5 <= r["ticks"] <= 9, r
        assert abs(r["offered_mean_mrps"] / 1000 - 150) <= 0.15 * 150, r


def test_a_restart_within_an_interval_merges_into_one_row(fleet, recs):
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl])
    ns = [fleet.nginx("h1", "z1", col, BUCKETS), fleet.nginx("h2", "z1", col, BUCKETS)]
    fleet.wait_hosts(ctl, 2)
    # Both runs must fall in one 5-minute interval, and the load must cover both: wait for
    # the interval's room *before* starting the load (waiting after it once outlasted the
    # load, and both runs recorded 0 offered).
    while time.time() % 300 > 270:
        time.sleep(0.5)
    load = f.Load([(ns[0], 1), (ns[1], 1)], "120:12", "/g/x")
    try:
        time.sleep(2)
        first = recs([ctl], interval=300)
        time.sleep(3)
        assert first.stop() == 0, first.log()
        one = first.rows("g", "global")
        assert len(one) == 1, one
        second = recs([ctl], interval=300, store=first.store)
        time.sleep(3)
        assert second.stop() == 0, second.log()
    finally:
        load.result()
    both = second.rows("g", "global")
    print(one, both)
    assert len(both) == 1 and both[0]["start_s"] == one[0]["start_s"], both
    # The second run's partial interval was folded into the first's, not written over it.
    assert both[0]["ticks"] >= one[0]["ticks"] + 6, (one, both)
    assert abs(both[0]["offered_mean_mrps"] / 1000 - 120) <= 0.15 * 120, both
    assert both[0]["offered_peak_mrps"] >= both[0]["offered_mean_mrps"], both


def test_serve_with_controllers_records_and_cycles_when_a_bucket_appears(fleet, tmp_path):
    """`grl-rlc serve --controller ...` is the whole configurator in one process: it records
    the live fleet into its store and runs a cycle as soon as a bucket appears in the
    history; SIGTERM flushes the open interval and stops both."""
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl])
    ns = [fleet.nginx("h1", "z1", col, BUCKETS)]
    fleet.wait_hosts(ctl, 1)
    (tmp_path / "limits.yaml").write_text("buckets: {}\n")
    (tmp_path / "rlc.yaml").write_text("store: rlc.db\nlimits_file: limits.yaml\nwindow: 4w\n")
    log_path = str(tmp_path / "serve.log")
    log = open(log_path, "wb")
    proc = subprocess.Popen([RLC_BIN, "serve", "--config", str(tmp_path / "rlc.yaml"),
                             "--every", "1h", "--poll", "1s", "--controller",
                             ctl.endpoints["metrics"], "--record-interval", "1s",
                             "--record-poll", "250ms"], stdout=log, stderr=log)
    log.close()

    def log_text():
        with open(log_path, errors="replace") as fh:
            return fh.read()

    load = f.Load([(ns[0], 1)], "120:8", "/g/x")
    try:
        f.h.wait_until(lambda: re.search(r"cycle \(new bucket (g|zb|sh)\)", log_text()), 15,
                       what="a cycle for the bucket the recorder saw")
    finally:
        load.result()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
    text = log_text()
    print(text)
    assert rc == 0, text
    assert "cycle (start): 0 proposals" in text and "recording 1 controller(s)" in text, text
    assert "error" not in text, text
    assert "stopped: " in text  # the recorder's own last line: it flushed and stopped
    db = sqlite3.connect(str(tmp_path / "rlc.db"), timeout=5)
    try:
        rows = db.execute("SELECT s.offered_mean_mrps FROM samples s JOIN instances i "
                          "ON i.id = s.instance WHERE i.bucket = 'g'").fetchall()
    finally:
        db.close()
    assert len(rows) >= 3, rows
    assert max(r[0] for r in rows) >= 0.8 * 120 * 1000, rows
