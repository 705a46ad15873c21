"""Helpers for the fleet tests (test_fleet_*.py): the real grl-collector and
grl-controller daemons, real nginx with the module (grl_harness.Nginx), grlctl,
and the open-loop load generator (bench/loadgen), all on 127.0.0.1 with ports
chosen at run time.

Binaries are found in GRL_BUILD_DIR (set by ctest): collector/grl-collector,
controller/grl-controller, controller/grlctl, bench/grl_loadgen.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import grl_harness as h

BUILD_DIR = os.environ.get("GRL_BUILD_DIR", "/work/build")
COLLECTOR_BIN = os.path.join(BUILD_DIR, "collector", "grl-collector")
CONTROLLER_BIN = os.path.join(BUILD_DIR, "controller", "grl-controller")
GRLCTL_BIN = os.path.join(BUILD_DIR, "controller", "grlctl")
LOADGEN_BIN = os.path.join(BUILD_DIR, "bench", "grl_loadgen")


def endpoint():
    """An explicit tcp:// endpoint on a free port (explicit, so that a restarted
    daemon binds the same one and nginx, which connects, finds it again)."""
    return "tcp://127.0.0.1:%d" % h.free_port()


# ---------------------------------------------------------------------------
# Daemons


class Daemon:
    """One daemon process (our child) with its own directory, log file and
    endpoints file. start() waits until the endpoints file is written (every
    socket is bound by then); kill() and stop() end it; start() again reuses
    the same command line (same endpoints)."""

    name = "daemon"

    def __init__(self, binary, args, workdir=None):
        self.binary = binary
        self.dir = workdir or tempfile.mkdtemp(prefix="grl-fleet-")
        self.endpoints_path = os.path.join(self.dir, "%s.endpoints.json" % self.name)
        self.log_path = os.path.join(self.dir, "%s.log" % self.name)
        self.args = list(args) + ["--endpoints-file", self.endpoints_path]
        self.proc = None
        self.endpoints = {}

    def start(self, timeout=10):
        if os.path.exists(self.endpoints_path):
            os.unlink(self.endpoints_path)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary] + self.args, stdout=log, stderr=log)
        log.close()

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("%s exited with %s:\n%s" % (self.name, self.proc.returncode, self.log()[-3000:]))
            if not os.path.exists(self.endpoints_path):
                return False
            with open(self.endpoints_path) as f:
                self.endpoints = json.load(f)
            return True

        h.wait_until(ready, timeout, what="%s to bind its endpoints" % self.name)
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=10):
        """SIGTERM and wait (a clean shutdown); returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError("%s did not stop on SIGTERM within %ss" % (self.name, timeout))
        rc = self.proc.returncode
        self.proc = None
        return rc

    def kill(self):
        """SIGKILL: a crash, nothing is cleaned up."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def metrics(self):
        return metrics("http://%s/metrics" % self.endpoints["metrics"])


class Controller(Daemon):
    def __init__(self, region="r1", name="ctl-r1", interval="250ms", ttl="2s", peers=(),
                 limits=None, extra=(), workdir=None):
        self.name = name
        self.region = region
        self.usage = endpoint()
        self.publish = endpoint()
        self.admin = endpoint()
        args = ["--region", region, "--name", name, "--usage-bind", self.usage,
                "--publish-bind", self.publish, "--admin-bind", self.admin,
                "--metrics-bind", "127.0.0.1:0", "--interval", interval, "--ttl", ttl]
        for p in peers:
            args += ["--peer", p]
        if limits:
            args += ["--limits", limits]
        args += list(extra)
        super().__init__(CONTROLLER_BIN, args, workdir)


class Collector(Daemon):
    def __init__(self, zone, controllers, region="r1", interval="250ms", extra=(), workdir=None):
        self.name = "col-" + zone
        self.zone = zone
        self.region = region
        self.report = endpoint()
        self.publish = endpoint()
        args = ["--zone", zone, "--region", region, "--name", self.name,
                "--report-bind", self.report, "--publish-bind", self.publish,
                "--metrics-bind", "127.0.0.1:0", "--interval", interval]
        for c in controllers:
            args += ["--controller-usage", c.usage, "--controller-publish", c.publish]
        args += list(extra)
        super().__init__(COLLECTOR_BIN, args, workdir)


# ---------------------------------------------------------------------------
# Observation


def metrics(url):
    """Prometheus text -> {name: [(labels dict, value)]}."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, "bad metrics line %r" % line
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out.setdefault(m.group(1), []).append((labels, float(m.group(4))))
    return out


def metric(ms, name, **labels):
    """The value of the one sample of `name` whose labels include `labels` (None if absent)."""
    found = [v for l, v in ms.get(name, []) if all(l.get(k) == v2 for k, v2 in labels.items())]
    assert len(found) <= 1, "%s%r matches %d samples" % (name, labels, len(found))
    return found[0] if found else None


def nginx_conf(host, zone, region, collector, buckets, interval="250ms", ttl="2s", extra=""):
    return h.grl_conf(buckets, instructions=collector.publish, collector_endpoint=collector.report,
                      interval=interval, ttl=ttl,
                      host="id=%s zone=%s region=%s" % (host, zone, region), extra=extra)


def start_nginx(host, zone, region, collector, buckets, made, **kw):
    n = h.Nginx(http_extra=nginx_conf(host, zone, region, collector, buckets, **kw),
                location_extra="keepalive_timeout 60s;")
    made.append(n)
    n.start()
    n.host = host
    n.zone = zone
    return n


@contextlib.contextmanager
def two_zones_of_two(buckets):
    """One controller, collectors for zones z1 and z2 of region r1, and nginx h1, h2 (z1) and
    h3, h4 (z2) with `buckets`, once all 4 hosts report; stopped afterwards."""
    made, daemons = [], []
    try:
        ctl = Controller().start()
        daemons.append(ctl)
        z1 = Collector("z1", [ctl]).start()
        z2 = Collector("z2", [ctl]).start()
        daemons += [z1, z2]
        hosts = [start_nginx("h1", "z1", "r1", z1, buckets, made),
                 start_nginx("h2", "z1", "r1", z1, buckets, made),
                 start_nginx("h3", "z2", "r1", z2, buckets, made),
                 start_nginx("h4", "z2", "r1", z2, buckets, made)]
        h.wait_until(lambda: metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 4,
                     15, what="4 hosts reporting to the controller")
        yield {"ctl": ctl, "collectors": [z1, z2], "nginx": hosts}
    finally:
        for n in made:
            n.cleanup()
        for d in daemons:
            d.stop()


def bucket_totals(nginxes, name):
    """Sum of a bucket's cumulative counters over nginx status pages."""
    tot = {"offered": 0, "admitted": 0, "dropped": 0, "shadow_dropped": 0}
    for n in nginxes:
        b = n.bucket(name)
        for k in tot:
            tot[k] += b[k]
    return tot


# ---------------------------------------------------------------------------
# Load


class Load:
    """grl_loadgen in the background: an open-loop constant rate spread over
    targets by weight. result() waits for it and returns the parsed JSON."""

    def __init__(self, targets, schedule, path, interval_ms=250, headers=()):
        if not os.path.exists(LOADGEN_BIN):
            raise AssertionError("%s not built (configure with -DGRL_BUILD_BENCH=ON)" % LOADGEN_BIN)
        self.out = tempfile.mktemp(prefix="grl-load-", suffix=".json")
        args = [LOADGEN_BIN, "--schedule", schedule, "--path", path, "--interval-ms", str(interval_ms),
                "--out", self.out, "--max-connections", "32", "--spin-us", "0"]
        for t, w in targets:
            args += ["--target", "127.0.0.1:%d=%g" % (t.port, w)]
        for hd in headers:
            args += ["--header", hd]
        self.targets = [t for t, _ in targets]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def result(self, timeout=120):
        _, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, "grl_loadgen failed: %s" % err.decode(errors="replace")
        with open(self.out) as f:
            r = json.load(f)
        os.unlink(self.out)
        return r

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        if os.path.exists(self.out):
            os.unlink(self.out)


def window(result, t0, t1):
    """Per-second rates over the intervals with t0 <= t < t1: offered, ok, 429,
    other, errors, ok per target."""
    iv = [i for i in result["intervals"] if t0 <= i["t"] < t1]
    assert iv, "no load intervals in [%s, %s)" % (t0, t1)
    secs = len(iv) * result["interval_ms"] / 1000.0
    out = {k: sum(i[k] for i in iv) / secs for k in ("offered", "ok", "r429", "other", "errors")}
    n = len(iv[0]["ok_by_target"])
    out["ok_by_target"] = [sum(i["ok_by_target"][k] for i in iv) / secs for k in range(n)]
    out["offered_by_target"] = [sum(i["offered_by_target"][k] for i in iv) / secs for k in range(n)]
    return out


# ---------------------------------------------------------------------------
# grlctl


def grlctl(controller, *args, check=True, json_out=True, extra=()):
    cmd = [GRLCTL_BIN, "--controller", controller.admin] + list(extra)
    if json_out:
        cmd.append("--json")
    cmd += list(args)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    out, err = p.stdout.decode(), p.stderr.decode()
    if check:
        assert p.returncode == 0, "grlctl %s failed (%d): %s%s" % (" ".join(args), p.returncode, out, err)
    if json_out and p.returncode == 0:
        return json.loads(out)
    return p.returncode, out, err


# ---------------------------------------------------------------------------
# A whole fleet, torn down in one go


class Fleet:
    """Daemons and nginx started through it are stopped by close()."""

    def __init__(self):
        self.daemons = []
        self.nginxes = []

    def controller(self, **kw):
        c = Controller(**kw).start()
        self.daemons.append(c)
        return c

    def add(self, daemon):
        """Starts a daemon built by hand (e.g. controllers peering with each other)."""
        self.daemons.append(daemon)
        return daemon.start()

    def collector(self, zone, controllers, **kw):
        c = Collector(zone, controllers, **kw).start()
        self.daemons.append(c)
        return c

    def nginx(self, host, zone, collector, buckets, region="r1", **kw):
        return start_nginx(host, zone, region, collector, buckets, self.nginxes, **kw)

    def wait_hosts(self, ctl, n, timeout=15):
        h.wait_until(lambda: metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == n,
                     timeout, what="%d hosts reporting to %s" % (n, ctl.name))

    def dump(self):
        for d in self.daemons:
            print("---- %s (tail) ----" % d.log_path)
            print(d.log()[-3000:])
        for n in self.nginxes:
            print("---- %s/error.log (tail) ----" % n.prefix)
            print(n.error_log()[-2000:])

    def close(self):
        for n in self.nginxes:
            n.cleanup()
        for d in self.daemons:
            try:
                d.stop()
            except AssertionError as e:
                print(e)
            shutil.rmtree(d.dir, ignore_errors=True)


try:
    import pytest

    @pytest.fixture
    def fleet(request):
        """A Fleet for one test; on failure the daemons' and nginx's logs are printed."""
        fl = Fleet()
        yield fl
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            fl.dump()
        fl.close()
except ImportError:  # used outside pytest (bench scripts)
    pass


def wait_nginx_bucket(nginxes, name, pred, timeout=5, what=None):
    """Waits until pred(bucket status) holds on every nginx."""
    def ok():
        for n in nginxes:
            try:
                if not pred(n.bucket(name)):
                    return False
            except KeyError:
                return False
        return True
    h.wait_until(ok, timeout, interval=0.02, what=what or "bucket %r on every nginx" % name)
