"""Limits from etcd v3 (Debian's real etcd-server, on free loopback ports, in a
temporary data directory): controllers watch a key (--limits etcd://HOST:PORT/KEY)
and enforce what is put there with no nginx reload; a value that does not parse
is rejected whole and the last good limits stay; etcd stopped mid-way: the fleet
keeps enforcing the last good limits, the controller says so (one log line,
grl_controller_limits_store_up, grlctl status), and takes a new value once etcd
is back. grl-rlc pushes its versions to etcd; `grlctl status` shows the version
in force."""

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

import fleet as f
import grl_harness as h
from fleet import fleet  # noqa: F401  (pytest fixture)

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
RLC_BIN = os.path.join(f.BUILD_DIR, "rlc", "grl-rlc")
KEY = "grl/limits"
BUCKETS = ["g procedure_prefix=/g rate=200r/s"]
T0 = 1795996800  # 2026-11-30T00:00:00Z, as in test_rlc_limits.py


class Etcd:
    """One etcd member on 127.0.0.1 (client and peer ports chosen at run time);
    stop() and start() again keep its data directory and ports."""

    def __init__(self):
        assert os.path.exists(ETCD), "etcd not installed (bash .ci/install-deps: etcd-server)"
        self.dir = tempfile.mkdtemp(prefix="grl-etcd-")
        self.port = h.free_port()
        self.peer_port = h.free_port()
        self.log_path = os.path.join(self.dir, "etcd.log")
        self.proc = None

    @property
    def url(self):
        return "etcd://127.0.0.1:%d/%s" % (self.port, KEY)

    def start(self):
        client = "http://127.0.0.1:%d" % self.port
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "grl-test", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", "http://127.0.0.1:%d" % self.peer_port,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % self.peer_port,
             "--initial-cluster", "grl-test=http://127.0.0.1:%d" % self.peer_port],
            stdout=log, stderr=log)
        log.close()

        def ready():
            assert self.proc.poll() is None, "etcd exited:\n" + self.log()[-3000:]
            try:
                self.call("range", {"key": b64(KEY)})
                return True
            except OSError:
                return False
        h.wait_until(ready, 20, interval=0.1, what="etcd to answer")
        return self

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self):
        with open(self.log_path, errors="replace") as fh:
            return fh.read()

    def call(self, op, body):
        req = urllib.request.Request("http://127.0.0.1:%d/v3/kv/%s" % (self.port, op),
                                     data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def put(self, value):
        return int(self.call("put", {"key": b64(KEY), "value": b64(value)})["header"]["revision"])

    def get(self):
        kvs = self.call("range", {"key": b64(KEY)}).get("kvs")
        return base64.b64decode(kvs[0].get("value", "")).decode() if kvs else None


def b64(s):
    return base64.b64encode(s.encode()).decode()


@pytest.fixture
def etcd():
    e = Etcd().start()
    yield e
    e.close()


def limits(version, rate):
    return "version: %s\nbuckets:\n  g:\n    limit: %s\n" % (version, rate)


def near(a, b, tol=0.05):
    return abs(a - b) <= tol


def lines(ctl, text):
    return [line for line in ctl.log().splitlines() if text in line]


def test_fleet_enforces_limits_from_etcd_and_keeps_the_last_good(fleet, etcd):  # noqa: F811
    etcd.put(limits(1, "100r/s"))
    ctl = fleet.controller(limits=etcd.url)
    col = fleet.collector("z1", [ctl])
    ns = [fleet.nginx("h1", "z1", col, BUCKETS), fleet.nginx("h2", "z1", col, BUCKETS)]
    fleet.wait_hosts(ctl, 2)
    load = f.Load([(ns[0], 2), (ns[1], 1)], "150:60", "/g/x")
    try:
        pids = [sorted(n.worker_pids()) for n in ns] + [ctl.proc.pid]
        # etcd's 100 r/s overrides nginx.conf's 200: ratio 1/3 at 150 r/s offered.
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 100 and near(b["ratio"], 1 / 3), 10)
        st = f.grlctl(ctl, "status")["limits"]
        assert st["file"] == etcd.url and st["version"] == "1" and st["ok"], st
        assert st["store_error"] == ""
        m = ctl.metrics()
        assert f.metric(m, "grl_controller_limits_info", version="1", digest=st["digest"]) == 1
        assert f.metric(m, "grl_controller_limits_store_up") == 1
        _, text, _ = f.grlctl(ctl, "status", json_out=False)
        assert re.search(r"limits file: %s: 1 buckets, version 1, digest %s" % (re.escape(etcd.url), st["digest"]), text), text

        # A new version: taken with no reload.
        etcd.put(limits(2, "75r/s"))
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 75 and near(b["ratio"], 0.5), 10)
        assert f.grlctl(ctl, "status")["limits"]["version"] == "2"

        # A value that does not parse: rejected whole (the version label with it), the last
        # good limits stay, the error names the key, its revision, the line and the field.
        rev = etcd.put("version: 3\nbuckets:\n  g:\n    limit: 75/s\n")
        h.wait_until(lambda: lines(ctl, "limits rejected"), 5, what="the rejection log line")
        line = lines(ctl, "limits rejected")[-1]
        assert '%s@%d:4: bucket "g": field "limit": invalid rate "75/s"' % (etcd.url, rev) in line, line
        assert f.metric(ctl.metrics(), "grl_controller_limits_file_ok") == 0
        st = f.grlctl(ctl, "status")["limits"]
        assert not st["ok"] and st["version"] == "2" and "@%d:4" % rev in st["error"], st
        time.sleep(1.5)
        for n in ns:
            b = n.bucket("g")
            assert b["limit_rps"] == 75 and b["ratio_state"] == "active", b

        # etcd stops: one warning line, the state in metrics and status, the fleet keeps
        # enforcing the last good limits (version 2, 75 r/s).
        etcd.stop()
        h.wait_until(lambda: f.metric(ctl.metrics(), "grl_controller_limits_store_up") == 0, 10,
                     what="grl_controller_limits_store_up 0")
        st = f.grlctl(ctl, "status")["limits"]
        assert st["store_error"] and st["version"] == "2", st
        _, text, _ = f.grlctl(ctl, "status", json_out=False)
        assert "LIMITS STORE UNREACHABLE (the limits above stay in force)" in text, text
        time.sleep(3)  # several retries with backoff: still one line
        assert len(lines(ctl, "unreachable, the last good limits stay in force (version 2")) == 1, ctl.log()
        for n in ns:
            b = n.bucket("g")
            assert b["limit_rps"] == 75 and b["ratio_state"] == "active" and near(b["ratio"], 0.5, 0.1), b

        # etcd is back: one line, and the next value is taken.
        etcd.start()
        h.wait_until(lambda: f.metric(ctl.metrics(), "grl_controller_limits_store_up") == 1, 20,
                     what="grl_controller_limits_store_up 1")
        assert len(lines(ctl, "reachable again")) == 1, ctl.log()
        etcd.put(limits(4, "120r/s"))
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 120, 10)
        st = f.grlctl(ctl, "status")["limits"]
        assert st["version"] == "4" and st["ok"] and st["store_error"] == "", st
        m = ctl.metrics()
        assert f.metric(m, "grl_controller_limits_reloads_total", result="ok") == 2
        assert f.metric(m, "grl_controller_limits_reloads_total", result="rejected") == 1
        assert f.metric(m, "grl_controller_limits_store_losses_total") == 1
        assert [sorted(n.worker_pids()) for n in ns] + [ctl.proc.pid] == pids, "nothing was reloaded"
    finally:
        load.stop()


def test_controller_start_with_a_bad_value_or_without_etcd(fleet, etcd, tmp_path):  # noqa: F811
    # A value that does not parse at start is fatal, as a bad file is: no last good one.
    rev = etcd.put("buckets:\n  g:\n    limit: lots\n")
    ctl = f.Controller(name="ctl-bad", limits=etcd.url, workdir=str(tmp_path))
    with pytest.raises(AssertionError, match="exited with 1"):
        ctl.start()
    assert '%s@%d:3: bucket "g": field "limit": invalid rate "lots"' % (etcd.url, rev) in ctl.log(), ctl.log()

    # etcd unreachable at start: the controller starts on nginx.conf's limits, says so, and
    # takes the key once etcd answers.
    down = Etcd()
    try:
        ctl = fleet.controller(name="ctl-wait", limits=down.url)
        assert lines(ctl, "etcd unreachable at start"), ctl.log()
        assert f.metric(ctl.metrics(), "grl_controller_limits_store_up") == 0
        st = f.grlctl(ctl, "status")["limits"]
        assert st["store_error"] and st["buckets"] == 0 and st["version"] == "", st
        down.start()
        down.put(limits("v7", "50r/s"))
        h.wait_until(lambda: f.grlctl(ctl, "status")["limits"]["version"] == "v7", 20,
                     what="the controller to take version v7 once etcd is up")
        assert len(lines(ctl, "reachable again")) == 1, ctl.log()

        # A deleted key keeps the last good limits (a warning), a later value is taken.
        down.call("deleterange", {"key": b64(KEY)})
        h.wait_until(lambda: lines(ctl, "deleted in etcd: the last good limits stay in force"), 10,
                     what="the deleted-key warning")
        st = f.grlctl(ctl, "status")["limits"]
        assert st["version"] == "v7" and st["buckets"] == 1, st
        down.put(limits("v8", "60r/s"))
        h.wait_until(lambda: f.grlctl(ctl, "status")["limits"]["version"] == "v8", 10,
                     what="the controller to take version v8")
    finally:
        down.close()


@pytest.mark.parametrize("target", ["etcd", "file+etcd"])
def test_grl_rlc_pushes_versions_to_etcd(fleet, etcd, tmp_path, target):  # noqa: F811
    original = "buckets:\n  api:\n    limit: 500r/s\n"
    if target == "etcd":  # limits_file: etcd://...: the key is what the cycle reads
        etcd.put(original)
        (tmp_path / "rlc.yaml").write_text("store: rlc.db\nlimits_file: %s\nwindow: 4w\n" % etcd.url)
    else:  # limits_file: a file the cycle reads, etcd: a copy of every version
        (tmp_path / "limits.yaml").write_text(original)
        etcd.put(original)
        (tmp_path / "rlc.yaml").write_text("store: rlc.db\nlimits_file: limits.yaml\netcd: %s\nwindow: 4w\n"
                                           % etcd.url)
    written_to = etcd.url if target == "etcd" else str(tmp_path / "limits.yaml")
    cfg = str(tmp_path / "rlc.yaml")
    store = str(tmp_path / "rlc.db")
    ctl = fleet.controller(limits=etcd.url)

    def rlc(*args):
        p = subprocess.run([RLC_BIN] + [str(a) for a in args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
        assert p.returncode == 0, "grl-rlc %s: %s%s" % (args, p.stdout.decode(), p.stderr.decode())
        return p.stdout.decode()

    rlc("synth", "--store", store, "--bucket", "api", "--base", 100, "--weeks", 5, "--end", T0,
        "--limit", 500, "--seed", 1)
    out = rlc("run", "--config", cfg, "--at", T0, "--apply", "--author", "alice")
    assert "applied: version 2 written to %s" % written_to in out, out
    assert 'version: "2"' in etcd.get()
    if target != "etcd":
        assert (tmp_path / "limits.yaml").read_text() == etcd.get()
    h.wait_until(lambda: f.grlctl(ctl, "status")["limits"]["version"] == "2", 10,
                 what="the controller to run version 2")
    versions = rlc("versions", "--config", cfg)
    digest = re.search(r"^2\s+\S+\s+([0-9a-f]{16})\s", versions, re.M).group(1)
    assert f.grlctl(ctl, "status")["limits"]["digest"] == digest
    # Lowered: it soaks as a candidate beside the enforced 500 r/s (docs/rlc.md, "Rollout").
    pushed = etcd.get()
    assert "limit: 500r/s" in pushed and "mode: deny" in pushed and "candidate: " in pushed, pushed

    # Rollback to the key as found (version 1): written again as version 3, labelled so.
    out = rlc("rollback", 1, "--config", cfg, "--author", "bob")
    assert "rolled back to version 1: version 3 written to %s" % written_to in out, out
    h.wait_until(lambda: f.grlctl(ctl, "status")["limits"]["version"] == "3", 10,
                 what="the controller to run version 3")
    st = f.grlctl(ctl, "status")["limits"]
    v1 = re.search(r"^1\s+\S+\s+([0-9a-f]{16})\s", rlc("versions", "--config", cfg), re.M).group(1)
    assert st["digest"] == v1, (st, v1)
