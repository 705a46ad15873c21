"""Helpers for the fleet tests (test_fleet_*.py): the real grl-collector and
grl-controller daemons, real nginx with the module (grl_harness.Nginx), grlctl,
and the open-loop load generator (bench/loadgen), all on 127.0.0.1 with ports
chosen at run time.

Binaries are found in GRL_BUILD_DIR (set by ctest): collector/grl-collector,
controller/grl-controller, controller/grlctl, bench/grl_loadgen, bench/grl_keyflood.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

import zmq

import grl_harness as h

BUILD_DIR = os.environ.get("GRL_BUILD_DIR", "/work/build")
COLLECTOR_BIN = os.path.join(BUILD_DIR, "collector", "grl-collector")
CONTROLLER_BIN = os.path.join(BUILD_DIR, "controller", "grl-controller")
GRLCTL_BIN = os.path.join(BUILD_DIR, "controller", "grlctl")
LOADGEN_BIN = os.path.join(BUILD_DIR, "bench", "grl_loadgen")
KEYFLOOD_BIN = os.path.join(BUILD_DIR, "bench", "grl_keyflood")


def endpoint():
    """An explicit tcp:// endpoint on a free port (explicit, so that a restarted
    daemon binds the same one and nginx, which connects, finds it again)."""
    return "tcp://127.0.0.1:%d" % h.free_port()


# ---------------------------------------------------------------------------
# Daemons


class Daemon(h.Health):
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
        mark = len(self.log())
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary] + self.args, stdout=log, stderr=log)
        log.close()
        self.watch(mark)

        def ready():
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None  # the test is told here, not again
                h._running.remove(self)
                raise AssertionError("%s exited with %s:\n%s" % (self.name, code, self.log()[-3000:]))
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
        """SIGTERM and wait (a clean shutdown); returns the exit code. An exit other than 0
        fails the test at its end (grl_harness.Health) unless the test expected it."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                self.proc = None
                self.check_health("did not stop on SIGTERM within %ss" % timeout)
                raise AssertionError("%s did not stop on SIGTERM within %ss" % (self.name, timeout))
        rc = self.proc.returncode
        self.proc = None
        if rc not in getattr(self, "expected_exit", ()):
            self.check_health(rc)
        else:
            self.check_health()
        return rc

    def kill(self):
        """SIGKILL: a crash on purpose, nothing is cleaned up. A daemon that had already
        exited by itself is checked as by stop()."""
        if self.proc is None:
            return
        rc = self.proc.poll()
        if rc is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None
        self.check_health(rc if rc not in getattr(self, "expected_exit", ()) else None)

    def expect_exit(self, *codes):
        """The test makes this daemon exit with one of `codes` on purpose."""
        self.expected_exit = codes

    def log_text(self):
        return self.log()

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def metrics(self):
        return metrics("http://%s/metrics" % self.endpoints["metrics"])


class Controller(Daemon):
    """The grl-controller process (grl::controller::Daemon)."""

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


# zone_usage and region_usage carry "v" 2: their entries are positional (docs/protocol.md
# "Usage entry"); every other message "v" 1.
USAGE_VERSION = 2


def definition(limit_mrps, hosts=1, scope="global", mode="deny", keyed=False):
    """One definition of a usage entry: [scope, mode, limit_mrps, hosts(, keyed)]."""
    d = [scope, mode, limit_mrps, hosts]
    if keyed:
        d.append(True)
    return d


def usage_entry(name, offered_mrps=0, admitted_mrps=0, dropped_mrps=0, shadow_dropped_mrps=0,
                hosts=1, rated_hosts=None, definitions=(), host_names=None, keys=None):
    """One usage entry, positional: host_names (a list) in zone_usage only, keys when given."""
    e = [name, offered_mrps, admitted_mrps, dropped_mrps, shadow_dropped_mrps, hosts,
         hosts if rated_hosts is None else rated_hosts, [list(d) for d in definitions]]
    if host_names is not None:
        e.append(list(host_names))
    if keys:
        e.append(list(keys))
    return e


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


def nginx_conf(host, zone, region, collector, buckets, interval="250ms", ttl="2s", extra="",
               report_to=None):
    """grl_* directives of a fleet host; reports go to `report_to` (a ReportTap's endpoint) or
    straight to the collector."""
    return h.grl_conf(buckets, instructions=collector.publish,
                      collector_endpoint=report_to or collector.report,
                      interval=interval, ttl=ttl,
                      host="id=%s zone=%s region=%s" % (host, zone, region), extra=extra)


KEEPALIVE = "keepalive_timeout 60s;"


def start_nginx(host, zone, region, collector, buckets, made, location_extra=KEEPALIVE, **kw):
    n = h.Nginx(http_extra=nginx_conf(host, zone, region, collector, buckets, **kw),
                location_extra=location_extra)
    made.append(n)
    n.start()
    n.host = host
    n.zone = zone
    return n


@contextlib.contextmanager
def two_zones_of_two(buckets, location_extra=KEEPALIVE, taps=False, interval="250ms", ttl="2s",
                     nginx_ttl="2s"):
    """One controller, collectors for zones z1 and z2 of region r1, and nginx h1, h2 (z1) and
    h3, h4 (z2) with `buckets`, once all 4 hosts report; stopped afterwards. With `taps`, each
    zone's reports pass through a ReportTap ("taps": [z1's, z2's]). `interval`: nginx's report
    interval and the collector's and controller's; `ttl`: the controller's --ttl; `nginx_ttl`:
    grl_instruction_ttl (None: nginx's default)."""
    made, daemons, tapped = [], [], []
    try:
        ctl = Controller(interval=interval, ttl=ttl).start()
        daemons.append(ctl)
        z1 = Collector("z1", [ctl], interval=interval).start()
        z2 = Collector("z2", [ctl], interval=interval).start()
        daemons += [z1, z2]
        if taps:
            tapped += [ReportTap(z1), ReportTap(z2)]
        hosts = []
        for host, zone, col in (("h1", "z1", z1), ("h2", "z1", z1), ("h3", "z2", z2), ("h4", "z2", z2)):
            report_to = tapped[col is z2].endpoint if taps else None
            hosts.append(start_nginx(host, zone, "r1", col, buckets, made, location_extra=location_extra,
                                     report_to=report_to, interval=interval, ttl=nginx_ttl))
        h.wait_until(lambda: metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 4,
                     15, what="4 hosts reporting to the controller")
        yield {"ctl": ctl, "collectors": [z1, z2], "nginx": hosts, "taps": tapped}
    finally:
        for n in made:
            n.cleanup()
        for t in tapped:
            t.close()
        for d in daemons:
            d.stop()


class ReportTap:
    """Between nginx and a collector's report endpoint: forwards every report unchanged and
    keeps a copy, so that a test reads the reports a real collector gets (their sizes).
    zmq_proxy forwards in a thread of its own, outside Python's lock: a busy test process does
    not delay the reports. nginx connects to `endpoint`."""

    def __init__(self, collector):
        self.ctx = zmq.Context()
        front = self.ctx.socket(zmq.PULL)
        self.endpoint = "tcp://127.0.0.1:%d" % front.bind_to_random_port("tcp://127.0.0.1")
        back = self.ctx.socket(zmq.PUSH)
        back.connect(collector.report)
        capture = self.ctx.socket(zmq.PUB)
        capture.setsockopt(zmq.SNDHWM, 0)  # copies are never dropped
        capture.bind("inproc://copies")
        self.copies = self.ctx.socket(zmq.SUB)
        self.copies.setsockopt(zmq.RCVHWM, 0)
        self.copies.setsockopt(zmq.SUBSCRIBE, b"")
        self.copies.connect("inproc://copies")
        control = self.ctx.socket(zmq.PAIR)
        control.bind("inproc://control")
        self.control = self.ctx.socket(zmq.PAIR)
        self.control.connect("inproc://control")
        self.bodies = []
        self.thread = threading.Thread(target=zmq.proxy_steerable, args=(front, back, capture, control),
                                       daemon=True)
        self.thread.start()
        self.sockets = [front, back, capture, control]

    def reports(self):
        """Every report body forwarded so far, in order."""
        while self.copies.poll(0):
            self.bodies.append(self.copies.recv())
        return self.bodies

    def close(self):
        self.control.send(b"TERMINATE")
        self.thread.join(5)
        for s in self.sockets + [self.copies, self.control]:
            s.close(0)
        self.ctx.term()


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


class KeyFlood:
    """grl_keyflood in the background: `keys` requests to `path` spread over the nginx, each with
    a key in `header` that no other request carries (one-request keys), pipelined `depth` deep on
    `connections` keep-alive connections per nginx, spread over `seconds` (or as fast as they
    answer). The nginx need
    `keepalive_requests` above what one connection carries. result() waits and returns the
    tool's JSON (keys, ok, r429, other, unanswered, seconds, rate, per_target)."""

    def __init__(self, nginxes, keys, path, header="X-Api-Key", connections=2, depth=64, seconds=None,
                 cpus=None):
        if not os.path.exists(KEYFLOOD_BIN):
            raise AssertionError("%s not built (configure with -DGRL_BUILD_BENCH=ON)" % KEYFLOOD_BIN)
        cmd = [KEYFLOOD_BIN, "--keys", str(keys), "--path", path, "--header", header,
               "--connections", str(connections), "--depth", str(depth)]
        if seconds:
            cmd += ["--seconds", str(seconds)]
        for n in nginxes:
            cmd += ["--target", "127.0.0.1:%d" % n.port]
        if cpus:
            cmd = ["taskset", "-c", cpus] + cmd
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def result(self, timeout=120):
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, "grl_keyflood failed: %s" % err.decode(errors="replace")
        return json.loads(out)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


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

    def host_per_region(self, c1, c2, buckets):
        """A collector and an nginx in zone z1 of region r1 reporting to controller `c1`, and
        in zone z9 of region r2 to `c2`; waits until both controllers have their host.
        Returns the two nginx (h1, h3)."""
        z1 = self.collector("z1", [c1], region="r1")
        z9 = self.collector("z9", [c2], region="r2")
        h1 = self.nginx("h1", "z1", z1, buckets, region="r1")
        h3 = self.nginx("h3", "z9", z9, buckets, region="r2")
        self.wait_hosts(c1, 1)
        self.wait_hosts(c2, 1)
        return h1, h3

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
        """Stops everything; what died or logged a fault fails the test at its end
        (grl_harness.check_processes, conftest.py)."""
        for n in self.nginxes:
            n.cleanup()
        for d in self.daemons:
            try:
                d.stop()
            except AssertionError:  # recorded by check_health; the others still stop
                pass
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
