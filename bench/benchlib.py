"""Shared machinery of grl's benchmark suite (bench/README.md).

Everything runs on this machine, on 127.0.0.1, with ports chosen at run time:
  - the system under test (nginx frontends, the backend nginx, Redis, the grl control plane)
    is pinned to core SUT_CPU (0); the load generator (wrk or grl_loadgen) to core LOAD_CPU (1),
    and so is this harness, which stays idle while a measurement runs;
  - each limiter variant starts exactly the processes it needs (start_fleet()).

Run with Debian's interpreter (/usr/bin/python3: zmq, msgpack, matplotlib); another
`python3` re-executes the script under it (debian_python.py).
"""
import debian_python

debian_python.require("zmq", "msgpack", "matplotlib")
import glob
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
BUILD = os.path.abspath(os.environ.get("GRL_BUILD_DIR", os.path.join(ROOT, "build")))
NGINX = os.environ.get("NGINX", "/usr/sbin/nginx")
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
SUT_CPU = os.environ.get("GRL_BENCH_SUT_CPU", "0")
LOAD_CPU = os.environ.get("GRL_BENCH_LOAD_CPU", "1")

# The path every benchmark request uses. The 10-bucket configurations match it with b7.
REQUEST_PATH = "/api/v7/users/42"


def build_path(*parts):
    return os.path.join(BUILD, *parts)


GRL_MODULE = build_path("ngx_module", "ngx_http_grl_module.so")
REDIS_MODULE = build_path("bench", "redis_limiter", "ngx_http_redis_limit_module.so")
LOADGEN = build_path("bench", "grl_loadgen")


class Unavailable(Exception):
    """A part of the suite cannot run on this checkout (says what is missing)."""


# ---------------------------------------------------------------------------------------------
# small helpers


_handed_out = set()


def free_port():
    """A port on 127.0.0.1 free a moment ago, never one handed out before in this process: the
    kernel's bind(0) repeats ports often (313 repeats in 3,000 draws measured), and two servers
    given one port clash, or, where nginx listens with reuseport, share it silently."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except (OSError, ValueError) as e:
            last = e
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}" + (f" ({last})" if last else ""))
        time.sleep(0.02)


def http_get(port, path, headers=None, timeout=5.0):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def pin_harness():
    """The harness shares the load generator's core, never the system under test's."""
    try:
        os.sched_setaffinity(0, {int(LOAD_CPU)})
    except (OSError, ValueError):
        pass


def sut(cmd):
    return ["taskset", "-c", SUT_CPU] + cmd


def load(cmd):
    return ["taskset", "-c", LOAD_CPU] + cmd


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


# ---------------------------------------------------------------------------------------------
# nginx


class Nginx:
    """One nginx instance (master + 1 worker) under its own prefix, pinned to SUT_CPU."""

    def __init__(self, name, http_body, modules=(), workers=1, error_level="warn"):
        # GRL_BENCH_NGINX_LOGS=DIR: error logs at notice level (surge damping's state changes,
        # the control plane's) kept in DIR, one file per nginx, for reading a run afterwards.
        self.keep_logs = os.environ.get("GRL_BENCH_NGINX_LOGS")
        if self.keep_logs:
            error_level = "notice"
        self.name = name
        self.prefix = run_dir(f"grl-bench-{name}-")
        os.chmod(self.prefix, 0o755)  # workers run as nobody when we are root
        for d in ("logs", "tmp"):
            os.makedirs(os.path.join(self.prefix, d))
            os.chmod(os.path.join(self.prefix, d), 0o777)
        self.conf_path = os.path.join(self.prefix, "nginx.conf")
        loads = "".join(f"load_module {m};\n" for m in modules)
        self.conf = f"""{loads}
worker_processes {workers};
daemon off;
master_process on;
error_log logs/error.log {error_level};
pid logs/nginx.pid;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path tmp/body; proxy_temp_path tmp/proxy; fastcgi_temp_path tmp/fcgi;
    uwsgi_temp_path tmp/uwsgi; scgi_temp_path tmp/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
{http_body}
}}
"""
        with open(self.conf_path, "w") as f:
            f.write(self.conf)
        self.proc = None

    def start(self, port):
        self.proc = subprocess.Popen(sut([NGINX, "-p", self.prefix, "-c", self.conf_path]),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def up():
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx {self.name} exited: "
                                   + self.proc.stderr.read().decode(errors="replace")
                                   + self.error_log()[-2000:])
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True

        wait_until(up, 10, f"nginx {self.name} on port {port}")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # fast shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def error_log(self):
        try:
            with open(os.path.join(self.prefix, "logs", "error.log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def check_log(self):
        """A crashed worker is replaced silently by the master: fail loudly instead."""
        text = self.error_log()
        for bad in ("exited on signal", "[alert]", "[emerg]", "[crit]"):
            if bad in text:
                raise RuntimeError(f"nginx {self.name}: {bad!r} in error log:\n{text[-3000:]}")
        return text

    def cleanup(self):
        self.stop()
        if self.keep_logs:
            os.makedirs(self.keep_logs, exist_ok=True)
            shutil.copy(os.path.join(self.prefix, "logs", "error.log"),
                        os.path.join(self.keep_logs, f"{os.path.basename(self.prefix)}.log"))
        shutil.rmtree(self.prefix, ignore_errors=True)


class Backend:
    """The upstream every frontend proxies to: a static response (empty_gif, 43 bytes), and
    stub_status for counting its load."""

    def __init__(self):
        self.port = free_port()
        self.nginx = Nginx("backend", f"""
    server {{
        listen 127.0.0.1:{self.port} backlog=4096;
        location / {{ empty_gif; }}
        location = /stub {{ stub_status; }}
    }}""")

    def start(self):
        self.nginx.start(self.port)
        return self

    def requests(self):
        """Requests served so far (stub_status), not counting the stub_status request itself."""
        _, body = http_get(self.port, "/stub")
        m = re.search(rb"\n\s*\d+\s+\d+\s+(\d+)", body)
        return int(m.group(1)) - 1

    def stop(self):
        try:
            self.nginx.check_log()
        finally:
            self.nginx.cleanup()


class BackendPoller(threading.Thread):
    """Samples the backend's request counter every `period` s: backend load over time."""

    def __init__(self, backend, period=0.1):
        super().__init__(daemon=True)
        self.backend = backend
        self.period = period
        self.samples = []  # (monotonic s, cumulative requests)
        self.halt = threading.Event()

    def run(self):
        polls = 0
        nxt = time.monotonic()
        while not self.halt.is_set():
            try:
                # Each poll is a request to the backend too: subtract the earlier polls.
                self.samples.append((time.monotonic(), self.backend.requests() - polls))
                polls += 1
            except OSError:
                pass
            nxt += self.period
            self.halt.wait(max(0.0, nxt - time.monotonic()))

    def stop(self):
        self.halt.set()
        self.join()
        return self.samples


# ---------------------------------------------------------------------------------------------
# Redis


def resp_command(sock, *args):
    """One command over RESP; returns the decoded reply (errors as RuntimeError)."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    sock.sendall(out)
    f = sock.makefile("rb")
    try:
        return _resp_read(f)
    finally:
        f.close()


def _resp_read(f):
    line = f.readline()
    if not line:
        raise OSError("redis closed the connection")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2].decode(errors="replace")
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_resp_read(f) for _ in range(n)]
    raise ValueError(f"bad RESP line {line!r}")


class Redis:
    def __init__(self):
        self.port = free_port()
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            sut([REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--enable-debug-command", "local",
                 "--loglevel", "warning"]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: self.cmd("PING") == "PONG", 10, "redis-server to answer")
        return self

    def cmd(self, *args, timeout=5.0):
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            return resp_command(s, *args)

    def evalsha_calls(self):
        info = self.cmd("INFO", "commandstats")
        m = re.search(r"cmdstat_evalsha:calls=(\d+)", info or "")
        return int(m.group(1)) if m else 0

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None


class DelayedRedis:
    """Redis reached through grl_delay_proxy: every byte delayed by `delay_us` each way, as
    for a Redis across the network (this kernel has no netem). Quacks like Redis for
    start_fleet(); owns the Redis behind it."""

    def __init__(self, redis, delay_us):
        self.redis, self.delay_us = redis, delay_us
        self.port = free_port()
        self.proc = None

    def start(self):
        exe = build_path("bench", "grl_delay_proxy")
        if not os.access(exe, os.X_OK):
            raise Unavailable(f"delay proxy not built ({exe})")
        self.proc = subprocess.Popen(
            sut([exe, "--listen", str(self.port), "--upstream", str(self.redis.port),
                 "--delay-us", str(self.delay_us)]), stdout=subprocess.PIPE)
        if self.proc.stdout.readline().strip() != b"ready":
            raise RuntimeError("grl_delay_proxy did not start")
        return self

    def evalsha_calls(self):
        return self.redis.evalsha_calls()

    @property
    def running(self):
        return self.redis.running

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None
        self.redis.stop()


class RedisStaller(threading.Thread):
    """Makes Redis unresponsive for `stall` s out of every `period` s (DEBUG SLEEP): the
    latency spikes of a busy or swapping Redis, a slow command, or a fork for persistence."""

    def __init__(self, redis, stall=0.1, period=1.0):
        super().__init__(daemon=True)
        self.redis, self.stall, self.period = redis, stall, period
        self.halt = threading.Event()
        self.stalls = 0

    def run(self):
        with socket.create_connection(("127.0.0.1", self.redis.port), timeout=10) as s:
            nxt = time.monotonic()
            while not self.halt.is_set():
                resp_command(s, "DEBUG", "SLEEP", f"{self.stall:g}")
                self.stalls += 1
                nxt += self.period
                self.halt.wait(max(0.0, nxt - time.monotonic()))

    def stop(self):
        self.halt.set()
        self.join()


# ---------------------------------------------------------------------------------------------
# The grl control plane


class ControlPlaneMissing(Unavailable):
    pass


def control_plane_binaries():
    """(collector, controller) executables, or raises ControlPlaneMissing saying what is
    missing. The daemons come with issue #3 (docs/control-plane.md)."""
    found, missing = {}, []
    for k in ("collector", "controller"):
        p = build_path(k, f"grl-{k}")
        if os.access(p, os.X_OK):
            found[k] = p
        else:
            missing.append(p)
    if missing:
        raise ControlPlaneMissing("the grl control plane is not built (missing: "
                                  + ", ".join(missing) + ")")
    return found["collector"], found["controller"]


class ControlPlane:
    """The real grl control plane for one zone of one region: grl-controller and
    grl-collector (docs/control-plane.md), pinned to SUT_CPU, on explicit loopback ports.
    nginx connects to `collector_endpoint` (reports) and `instructions_endpoint` (the
    collector's relay of the controller's drop ratios). `interval`: the controller's and the
    collector's interval (None: the daemons' defaults)."""

    def __init__(self, region="r1", zone="z1", interval=None, window=None):
        self.collector_bin, self.controller_bin = control_plane_binaries()
        self.region, self.zone = region, zone
        self.interval, self.window = interval, window
        self.procs = []
        self.dir = run_dir("grl-bench-cp-")
        ep = lambda: f"tcp://127.0.0.1:{free_port()}"  # noqa: E731
        self.usage_ep, self.ctl_publish_ep, self.admin_ep = ep(), ep(), ep()
        self.collector_endpoint, self.instructions_endpoint = ep(), ep()

    def _spawn(self, name, cmd):
        endpoints = os.path.join(self.dir, f"{name}.endpoints.json")
        logf = open(os.path.join(self.dir, f"{name}.log"), "ab")
        p = subprocess.Popen(sut(cmd + ["--endpoints-file", endpoints, "--log-level", "warn"]),
                             stdout=logf, stderr=logf)
        logf.close()
        self.procs.append(p)

        def ready():
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}: {self.log(name)[-2000:]}")
            return os.path.exists(endpoints)

        wait_until(ready, 10, f"{name} to bind its endpoints")

    def start(self):
        try:
            ctl = [self.controller_bin, "--region", self.region, "--name", f"ctl-{self.region}",
                   "--usage-bind", self.usage_ep, "--publish-bind", self.ctl_publish_ep,
                   "--admin-bind", self.admin_ep]
            col = [self.collector_bin, "--zone", self.zone, "--region", self.region,
                   "--name", f"col-{self.zone}", "--report-bind", self.collector_endpoint,
                   "--publish-bind", self.instructions_endpoint,
                   "--controller-usage", self.usage_ep,
                   "--controller-publish", self.ctl_publish_ep]
            if self.interval:
                ctl += ["--interval", self.interval]
                col += ["--interval", self.interval]
            if self.window:
                ctl += ["--window", str(self.window)]
            self._spawn("controller", ctl)
            self._spawn("collector", col)
            return self
        except BaseException:
            self.stop()
            raise

    def log(self, name):
        try:
            with open(os.path.join(self.dir, f"{name}.log"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def describe(self):
        return (f"grl-controller + grl-collector, interval "
                f"{self.interval or 'default'}, window {self.window or 'default'}")

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)


class TestPublisher(threading.Thread):
    """NOT the control plane: keeps a ratio-0 instruction in force for the named buckets, so
    that the module's request path runs as it does under a quiet control plane. Used only for
    request-path overhead, and labelled so, when the real control plane is not available."""

    def __init__(self, buckets):
        super().__init__(daemon=True)
        import zmq
        self.zmq = zmq
        self.buckets = list(buckets)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUB)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.halt = threading.Event()

    def run(self):
        import msgpack
        seq = 0
        while not self.halt.is_set():
            seq += 1
            body = msgpack.packb({
                "v": 1, "type": "instructions", "source": "bench-publisher", "seq": seq,
                "ts_ms": int(time.time() * 1000), "ttl_ms": 5000, "scope": "global",
                "region": "", "zone": "",
                "buckets": [{"name": b, "ratio_ppm": 0, "limit_mrps": 10**9, "mode": "deny"}
                            for b in self.buckets]})
            self.sock.send_multipart([b"grl/g/", body])
            self.halt.wait(0.2)

    def stop(self):
        self.halt.set()
        self.join()
        self.sock.close(0)
        self.ctx.term()


# ---------------------------------------------------------------------------------------------
# Frontend configurations: the four variants an operator chooses between

VARIANTS = ("plain", "limit_req", "grl", "redis")


class Bucket:
    """One limit, expressed for every limiter: name, matched path prefix, rate (r/s)."""

    def __init__(self, name, prefix, rate):
        self.name, self.prefix, self.rate = name, prefix, rate


def ten_buckets(rate=1_000_000):
    """The request-path configuration: 10 buckets on distinct paths; REQUEST_PATH matches b7."""
    return [Bucket(f"b{i}", f"/api/v{i}/", rate) for i in range(10)]


def frontend_http(variant, port, backend_port, buckets, host_id="h1", per_host_rate=None,
                  redis_port=None, redis_fail="open", redis_timeout="50ms",
                  collector=None, instructions=None, report_interval=None, limit_req_burst=None,
                  grl_extra=""):
    """The http{} body of one frontend nginx: proxy_pass to the backend (keep-alive upstream)
    with the variant's limiter on every request."""
    up = f"""
    upstream backend {{
        server 127.0.0.1:{backend_port};
        keepalive 128;
        keepalive_requests 1000000;
    }}"""
    http, loc, extra = "", "", ""
    if variant == "limit_req":
        # limit_req is per host: each host gets its share of the limit (per_host_rate), the
        # usual configuration. All load comes from 127.0.0.1, so the key is one client; a
        # burst of 20% of the rate absorbs the load generator's send jitter.
        rate = per_host_rate if per_host_rate is not None else buckets[0].rate
        burst = limit_req_burst if limit_req_burst is not None else max(1, int(rate * 0.2))
        http = f"    limit_req_zone $binary_remote_addr zone=one:10m rate={int(rate)}r/s;\n"
        loc = f"limit_req zone=one burst={burst} nodelay; limit_req_status 429;"
    elif variant == "grl":
        defs = "\n".join(f"    grl_bucket {b.name} procedure_prefix={b.prefix} rate={int(b.rate)}r/s;"
                         for b in buckets)
        plane = ""
        if collector:
            plane += f"    grl_collector {collector};\n"
        if instructions:
            plane += f"    grl_instructions {instructions};\n"
        http = f"""    grl_zone grl:1m;
{defs}
    grl_host id={host_id} zone=z1 region=r1;
{plane}{f"    grl_report_interval {report_interval};" if report_interval else ""}
    {grl_extra}
"""
        loc = "grl on;"
        extra = "location = /grl { grl off; grl_status; }"
    elif variant == "redis":
        defs = "\n".join(f"    redis_limit_bucket {b.name} procedure_prefix={b.prefix} "
                         f"rate={int(b.rate)}r/s;" for b in buckets)
        http = f"""    redis_limit_server 127.0.0.1:{redis_port};
{defs}
    redis_limit_timeout {redis_timeout};
    redis_limit_fail {redis_fail};
"""
        loc = "redis_limit on; redis_limit_status 429;"
    elif variant != "plain":
        raise ValueError(variant)
    return f"""{up}
{http}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            {loc}
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
        {extra}
    }}"""


def modules_for(variant):
    if variant == "grl":
        return [GRL_MODULE]
    if variant == "redis":
        return [REDIS_MODULE]
    return []


class Fleet:
    """A running variant: `hosts` frontend nginx (ports in .ports) and what the limiter needs
    (Redis, the grl control plane), all pinned to SUT_CPU. Built by start_fleet()."""

    def __init__(self, variant, label):
        self.variant = variant
        self.label = label  # as shown in reports
        self.nginx = []
        self.ports = []
        self.redis = None
        self.plane = None
        self.publisher = None
        self.notes = []
        self.config = ""

    def stop(self):
        errors = []
        for n in self.nginx:
            try:
                n.check_log()
            except RuntimeError as e:
                errors.append(str(e))
            n.cleanup()
        if self.plane:
            self.plane.stop()
        if self.publisher:
            self.publisher.stop()
        if self.redis:
            self.redis.stop()
        if errors:
            raise RuntimeError("\n".join(errors))

    def error_logs(self):
        return [n.error_log() for n in self.nginx]

    def grl_status(self, i=0):
        _, body = http_get(self.ports[i], "/grl")
        return json.loads(body)


def start_fleet(variant, backend, buckets, hosts=1, per_host_rate=None, redis_fail="open",
                allow_publisher=False, redis=None, grl_interval=None, grl_window=None,
                warm=256, grl_extra=""):
    """Starts one variant: `hosts` nginx frontends proxying to `backend` with the limiter and
    what it needs. grl gets the real control plane (collector + controller); with
    `allow_publisher` and no control plane built, a test publisher keeps ratio-0 instructions
    in force instead, and the variant is labelled so. `redis`: an already running Redis to
    use (the caller owns it); otherwise the Redis variant starts its own. `grl_interval`:
    nginx's report interval and the collector's and controller's intervals (None: defaults);
    `grl_window`: the controller's smoothing window in intervals (None: default). Every host
    is warmed with `warm` concurrent connections (warm_connections()). `grl_extra`: more grl
    directives for every frontend's http{} (e.g. "grl_surge_damping off;")."""
    label = variant
    fleet = Fleet(variant, label)
    try:
        kw = {}
        if variant == "redis":
            if not os.path.exists(REDIS_MODULE):
                raise Unavailable(f"Redis limiter module not built ({REDIS_MODULE})")
            if redis is None:
                fleet.redis = Redis().start()
                redis = fleet.redis
            kw = dict(redis_port=redis.port, redis_fail=redis_fail)
        elif variant == "grl":
            if not os.path.exists(GRL_MODULE):
                raise Unavailable(f"grl module not built ({GRL_MODULE})")
            try:
                fleet.plane = ControlPlane(interval=grl_interval, window=grl_window).start()
                fleet.config = (fleet.plane.describe() + ", nginx grl_report_interval "
                                + (grl_interval or "default"))
                kw = dict(collector=fleet.plane.collector_endpoint,
                          instructions=fleet.plane.instructions_endpoint,
                          report_interval=grl_interval, grl_extra=grl_extra)
            except ControlPlaneMissing:
                if not allow_publisher:
                    raise
                fleet.publisher = TestPublisher([b.name for b in buckets])
                fleet.publisher.start()
                fleet.label = "grl (test publisher)"
                fleet.notes.append("grl ran with a test publisher keeping ratio-0 instructions "
                                   "in force, not with its control plane (not built yet)")
                kw = dict(instructions=fleet.publisher.endpoint)
        for h in range(hosts):
            port = free_port()
            body = frontend_http(variant, port, backend.port, buckets, host_id=f"h{h + 1}",
                                 per_host_rate=per_host_rate, **kw)
            n = Nginx(f"{variant}-h{h + 1}", body, modules=modules_for(variant))
            fleet.nginx.append(n)
            n.start(port)
            fleet.ports.append(port)
        if variant == "grl":
            wait_grl_active(fleet, buckets)
        elif variant == "redis" and redis.running:
            wait_redis_ready(fleet, redis)
        for port in fleet.ports:
            warm_connections(port, warm)
        return fleet
    except BaseException:
        try:
            fleet.stop()
        except RuntimeError:
            pass
        raise


def warm_connections(port, n=256, path="/warm/up"):
    """Opens n client connections at once, each with one request in flight, so that the
    worker opens up to n upstream connections too: its file-descriptor table reaches its
    working size before anything is measured. Growing that table in a multi-threaded process
    (grl's worker runs ZeroMQ's threads) waits for an RCU grace period (expand_fdtable ->
    synchronize_rcu), a stall of ~10-20 ms on this VM that a long-running worker pays only at
    its first peaks; every variant gets the same warm-up. The path matches no bucket, so the
    warm-up counts against no limit."""
    socks = []
    try:
        for _ in range(n):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        req = f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode()
        for s in socks:
            s.sendall(req)
        for s in socks:
            while s.recv(65536):
                pass
    finally:
        for s in socks:
            s.close()


def wait_grl_active(fleet, buckets, timeout=15):
    """Every host has received instructions for its buckets (the control plane is live)."""
    names = {b.name for b in buckets}

    def active():
        for i in range(len(fleet.ports)):
            st = fleet.grl_status(i)
            states = {b["name"]: b["ratio_state"] for b in st["buckets"]}
            if any(states.get(n) != "active" for n in names):
                return False
        return True

    wait_until(active, timeout, f"{fleet.label}: instructions in force on every host")


def wait_redis_ready(fleet, redis, timeout=10):
    """Every host's worker is connected to Redis with its script loaded: a request makes an
    EVALSHA reach Redis."""
    path = REQUEST_PATH
    for port in fleet.ports:
        def evaluated():
            before = redis.evalsha_calls()
            http_get(port, path)
            return redis.evalsha_calls() > before
        wait_until(evaluated, timeout, f"nginx on {port} to use Redis")


# ---------------------------------------------------------------------------------------------
# Load generators


def run_wrk(port, seconds, connections=32, path=REQUEST_PATH):
    """Closed-loop saturation run: wrk -t1 pinned to LOAD_CPU; percentiles up to p99.9."""
    cmd = load(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s",
                "-s", os.path.join(HERE, "wrk_report.lua"), f"http://127.0.0.1:{port}{path}"])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    m = re.search(r"RESULT (.*)", out)
    if not m:
        raise RuntimeError(f"wrk printed no RESULT line:\n{out}")
    r = {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    return r


def run_loadgen(targets, schedule, path=REQUEST_PATH, interval_ms=100, timeout_ms=2000,
                max_connections=256):
    """Open-loop run of grl_loadgen pinned to LOAD_CPU. targets: [(port, weight)];
    schedule: [(rate r/s, seconds)]. Returns the parsed JSON (see bench/loadgen/loadgen.cpp)."""
    if not os.access(LOADGEN, os.X_OK):
        raise Unavailable(f"load generator not built ({LOADGEN})")
    fd, out = tempfile.mkstemp(prefix="grl-loadgen-", suffix=".json")
    os.close(fd)
    try:
        cmd = [LOADGEN, "--path", path, "--interval-ms", str(interval_ms),
               "--timeout-ms", str(timeout_ms), "--max-connections", str(max_connections),
               "--schedule", ",".join(f"{r:g}:{s:g}" for r, s in schedule), "--out", out]
        for port, w in targets:
            cmd += ["--target", f"127.0.0.1:{port}={w:g}"]
        subprocess.run(load(cmd), check=True, capture_output=True, text=True)
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


# ---------------------------------------------------------------------------------------------
# Results


def machine_info():
    def first(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip() \
                or subprocess.run(cmd, capture_output=True, text=True, timeout=10).stderr.strip()
        except (OSError, subprocess.SubprocessError):
            return "?"
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            cpu = m.group(1) if m else "?"
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            kb = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1))
            mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, AttributeError):
        pass
    commit = first(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = first(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory": mem,
        "kernel": platform.release(), "os": first(["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"]),
        "nginx": first([NGINX, "-v"]).replace("nginx version: ", ""),
        "redis": first([REDIS_SERVER, "--version"]).split(" sha=")[0],
        "wrk": first(["sh", "-c", "wrk -v 2>&1 | head -1"]),
        "commit": commit + (" (with uncommitted changes)" if dirty else ""),
        "loadavg_at_start": " ".join(open("/proc/loadavg").read().split()[:3]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "sut_cpu": SUT_CPU, "load_cpu": LOAD_CPU,
    }


RAW = os.path.join(RESULTS, "raw")  # not committed (.gitignore): rounds and time series


def save_result(name, data):
    os.makedirs(RAW, exist_ok=True)
    path = os.path.join(RAW, f"{name}.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
    return path


def load_result(name):
    path = os.path.join(RAW, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def integration_fleet():
    """t/integration/fleet.py, the fleet tests' harness (real grl-controller, grl-collectors and
    nginx with the module, grl_loadgen), set to run this build's binaries (GRL_BUILD_DIR and
    GRL_MODULE, unless already set)."""
    import sys
    os.environ.setdefault("GRL_BUILD_DIR", BUILD)
    os.environ.setdefault("GRL_MODULE", GRL_MODULE)
    sys.path.insert(0, os.path.join(ROOT, "t", "integration"))
    import fleet
    return fleet


def seconds(text):
    """A duration as the daemons and nginx take it ("250ms", "1s"), in seconds."""
    return float(text[:-2]) / 1000 if text.endswith("ms") else float(text.rstrip("s"))


def utc_now():
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def stamp(argv):
    """When (UTC), at which commit and with which command a result was made."""
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            stdout=subprocess.PIPE, text=True).stdout.strip()
    return {"when": utc_now(), "commit": commit, "command": command_line(argv)}


def command_line(argv):
    import sys
    return " ".join([os.path.relpath(os.path.abspath(argv[0]), ROOT)] + argv[1:]) \
        if argv else " ".join(sys.argv)


OWNER = "grl-bench-owner"  # in every run directory: the PID of the benchmark that made it


def run_dir(prefix):
    """A new directory under TMPDIR for one nginx or daemon set, marked with this process's
    PID so that cleanup_stale() in another benchmark running at the same time leaves it alone."""
    d = tempfile.mkdtemp(prefix=prefix)
    with open(os.path.join(d, OWNER), "w") as f:
        f.write(f"{os.getpid()}\n")
    return d


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale(max_age_unowned=3600.0):
    """Removes run directories left by an interrupted earlier run: those whose owning benchmark
    (run_dir's PID file) is gone, and those without an owner file (older releases of this
    library) that hold no nginx.pid and have not changed for max_age_unowned seconds. A
    directory of a benchmark that is still running is kept, whoever started it."""
    now = time.time()
    for d in glob.glob(os.path.join(tempfile.gettempdir(), "grl-bench-*")):
        if not os.path.isdir(d):
            continue
        owner = os.path.join(d, OWNER)
        try:
            with open(owner) as f:
                pid = int(f.read().strip() or "0")
        except (OSError, ValueError):
            pid = None
        if pid is not None:
            if pid > 0 and _alive(pid):
                continue
        else:
            if os.path.exists(os.path.join(d, "logs", "nginx.pid")):
                continue
            try:
                if now - os.path.getmtime(d) < max_age_unowned:
                    continue
            except OSError:
                continue
        shutil.rmtree(d, ignore_errors=True)
