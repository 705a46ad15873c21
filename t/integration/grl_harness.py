"""Helpers for the grl integration tests: a real nginx with the built module,
a ZeroMQ instruction publisher, a ZeroMQ report collector, an HTTP client that
opens a new connection per request, and binomial bounds.

Everything runs on 127.0.0.1 with ports chosen at run time. nginx always
connects; the test's PUB and PULL sockets bind (docs/protocol.md, Transport).
"""

import fcntl
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import msgpack
import zmq

NGINX = os.environ.get("GRL_NGINX", "/usr/sbin/nginx")
MODULE = os.environ.get("GRL_MODULE", "/work/build/ngx_module/ngx_http_grl_module.so")

LOG_FORMAT_FIELDS = ("rid", "status", "decision", "bucket", "buckets", "ratio", "pid", "uri", "caller")


# ---------------------------------------------------------------------------
# small utilities


# Ports handed out by free_port(), each with a lock held until this process exits.
PORT_LOCK_DIR = os.path.join(tempfile.gettempdir(), "grl-test-ports")
_held_ports = {}


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago and that no other free_port() has
    handed out, in this process or in another one still running (two test runs side by side).
    nginx listens with `reuseport`, so two servers given one port would share it without an
    error, each getting the other's requests."""
    os.makedirs(PORT_LOCK_DIR, exist_ok=True)
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port in _held_ports:
            continue
        fd = os.open(os.path.join(PORT_LOCK_DIR, str(port)), os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process holds it
            os.close(fd)
            continue
        _held_ports[port] = fd
        return port


def unused_endpoint():
    """A tcp:// endpoint nobody listens on (for fail-open tests)."""
    return "tcp://127.0.0.1:%d" % free_port()


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Polls pred() until it returns a truthy value; returns that value or raises."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except (OSError, ValueError, KeyError) as e:  # nginx restarting, partial output
            last_exc = e
        if time.monotonic() >= deadline:
            raise AssertionError(
                "timed out after %.1fs waiting for %s%s"
                % (timeout, what, " (last error: %r)" % last_exc if last_exc else "")
            )
        time.sleep(interval)


def binomial_bounds(n, p, sigmas=5.0):
    """[lo, hi] for the count of successes in n Bernoulli(p) trials, +/- sigmas
    standard deviations (5 sigma: a false failure about once in 1.7 million runs)."""
    mean = n * p
    sd = math.sqrt(n * p * (1.0 - p))
    return mean - sigmas * sd, mean + sigmas * sd


def assert_binomial(k, n, p, what, sigmas=5.0, must_exclude=()):
    """Asserts k successes out of n are consistent with probability p, and that
    the same bounds would reject every probability in `must_exclude` (so the
    check has teeth: e.g. a ratio that is ignored, 0, or applied as 1.0)."""
    lo, hi = binomial_bounds(n, p, sigmas)
    for q in must_exclude:
        assert not (lo <= n * q <= hi), (
            "test too weak: with n=%d the %.0f-sigma bounds [%.1f, %.1f] for p=%.3f would accept p=%.3f"
            % (n, sigmas, lo, hi, p, q)
        )
    assert lo <= k <= hi, "%s: %d of %d (%.4f), expected %.3f; %.0f-sigma bounds [%.1f, %.1f]" % (
        what, k, n, k / n if n else 0.0, p, sigmas, lo, hi)


# ---------------------------------------------------------------------------
# Process health: a test fails when a process it started died or logged a fault
#
# Every nginx (Nginx.start) and daemon (fleet.Daemon.start) registers here. When it stops, and
# once more at each test's end for those still running (conftest.py, check_processes), its
# exit status and its logs since start-up are checked: an exit other than 0 on SIGTERM, an
# nginx worker that exited on a signal, an `[alert]` or `[emerg]` line, a sanitizer report.
# A test that causes one of these on purpose says so: expect_log(pattern, why) on the process
# (or kill_worker for nginx).

# UBSan's reports are "FILE:LINE:COLUMN: runtime error: ..." (a Lua error's "runtime error" is not).
FAULT_LINE = re.compile(r"\[(alert|emerg)\]|exited on signal|AddressSanitizer|LeakSanitizer|"
                        r"UndefinedBehaviorSanitizer|:\d+:\d+: runtime error:")

_running = []   # registered processes not yet checked at their stop
_faults = []    # faults found since the last take_faults()


class Health:
    """Mixin for a process the harness watches: log_text() and name are the subclass's."""

    def watch(self, log_mark=0):
        self._log_mark = log_mark
        if self not in _running:
            _running.append(self)

    def expect_log(self, pattern, why):
        """A fault line matching `pattern` (a regex) is what the test does on purpose."""
        assert why, "say why the fault is expected"
        self._expected = getattr(self, "_expected", []) + [re.compile(pattern)]

    def check_health(self, exit_code=None, extra_text="", running=False):
        """Records every fault since start-up (or the last check of a running process);
        `exit_code` is the code of a stop by SIGTERM. A process never started is not checked."""
        if self not in _running:
            return
        found = []
        if isinstance(exit_code, str):
            found.append(exit_code)
        elif exit_code:
            found.append("exited with %d%s" % (exit_code, " (signal %d)" % -exit_code if exit_code < 0 else ""))
        log = self.log_text()
        text = log[self._log_mark:] + extra_text
        if running:
            self._log_mark = len(log)
        else:
            _running.remove(self)
        for line in text.splitlines():
            if FAULT_LINE.search(line) and not any(e.search(line) for e in getattr(self, "_expected", [])):
                found.append(line.strip()[:300])
        for f in found[:20]:
            _faults.append("%s: %s" % (self.name, f))


def check_processes():
    """Checks the processes still registered (a running one is left running; one that ended by
    itself is checked with its exit code) and returns every fault found since the last call."""
    for p in list(_running):
        code = p.proc.poll() if p.proc is not None else None
        if code is None:
            p.check_health(running=True)
        else:
            p.check_health("ended by itself, with %d%s" % (code, " (signal %d)" % -code if code < 0 else ""))
    out = list(_faults)
    del _faults[:]
    return out


# ---------------------------------------------------------------------------
# HTTP: one new connection per request, so reuseport spreads requests over workers


class Response:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case name -> value (last wins)
        self.body = body

    @property
    def pid(self):
        return self.headers.get("x-pid")

    def __repr__(self):
        return "Response(%d, %r)" % (self.status, self.headers)


def http_get(port, path, headers=None, timeout=5.0):
    lines = ["GET %s HTTP/1.0" % path, "Host: localhost"]
    for k, v in (headers or {}).items():
        lines.append("%s: %s" % (k, v))
    req = ("\r\n".join(lines) + "\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(req)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    hlines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", hlines[0])
    if not m:
        raise ValueError("bad HTTP response: %r" % raw[:200])
    hdrs = {}
    for line in hlines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return Response(int(m.group(1)), hdrs, body)


def blast(port, requests, threads=4):
    """Sends requests [(path, headers), ...] concurrently, each on a new
    connection; returns the responses in the same order."""
    with ThreadPoolExecutor(max_workers=threads) as ex:
        return list(ex.map(lambda r: http_get(port, r[0], r[1]), requests))


# ---------------------------------------------------------------------------
# nginx

GRL_LOG_FORMAT = """\
    log_format grl 'rid=$arg_rid status=$status decision=$grl_decision bucket=$grl_bucket '
                   'buckets=$grl_buckets ratio=$grl_ratio pid=$pid uri=$uri caller=$http_x_caller';
"""

CONF_TEMPLATE = """\
{modules}load_module {module};
worker_processes {workers};
daemon off;
master_process on;
error_log {prefix}/error.log info;
pid {prefix}/nginx.pid;
{main_extra}
events {{ worker_connections 1024; }}

http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
{log_format}    keepalive_timeout 0;

{http_extra}

    server {{
        listen 127.0.0.1:{port} reuseport;
        {access_log}
        add_header X-Pid $pid always;
        add_header X-Gen {gen} always;

        location = /grl {{
            grl off;  # the status page must answer even with `grl on;` at http level
            grl_status;
        }}
        location / {{
            {location_grl}
{location_extra}
            empty_gif;
        }}
    }}
}}
"""


class NginxError(Exception):
    pass


class Nginx(Health):
    """One nginx master (daemon off, our child) with its own prefix directory.

    `http_extra` goes into http{} (the grl_* directives), `location_extra`
    into `location /`, `main_extra` at the top level, `modules` (paths of other
    dynamic modules) as load_module lines before grl's, as Debian's
    modules-enabled/ includes come first. `grl_log=False` leaves out the access log
    and its format, so that no $grl_* variable is named in the file. write_conf() may change
    any of them; reload() applies the file and waits until only the new
    generation's workers serve (detected by the X-Gen header)."""

    def __init__(self, http_extra="", location_extra="", main_extra="", workers=2, modules=(),
                 grl_log=True):
        self.prefix = tempfile.mkdtemp(prefix="grl-it-")
        # Workers run as nobody when we are root: let them in.
        os.chmod(self.prefix, 0o777)
        self.conf_path = os.path.join(self.prefix, "nginx.conf")
        self.error_log_path = os.path.join(self.prefix, "error.log")
        self.access_log_path = os.path.join(self.prefix, "access.log")
        self.port = free_port()
        self.workers = workers
        self.gen = 1
        self.http_extra = http_extra
        self.location_extra = location_extra
        self.main_extra = main_extra
        self.modules = list(modules)
        self.grl_log = grl_log
        self.location_grl = "grl on;"  # the switch in `location /`
        self.proc = None
        self.name = "nginx " + self.prefix
        self.write_conf()

    # -- configuration ----------------------------------------------------

    def render(self, http_extra=None, location_extra=None, main_extra=None, gen=None):
        return CONF_TEMPLATE.format(
            modules="".join("load_module %s;\n" % m for m in self.modules),
            module=MODULE,
            log_format=GRL_LOG_FORMAT if self.grl_log else "",
            access_log=("access_log %s/access.log grl;" % self.prefix) if self.grl_log else "access_log off;",
            workers=self.workers,
            prefix=self.prefix,
            port=self.port,
            gen=self.gen if gen is None else gen,
            location_grl=self.location_grl,
            main_extra=self.main_extra if main_extra is None else main_extra,
            http_extra=_indent(self.http_extra if http_extra is None else http_extra, 4),
            location_extra=_indent(self.location_extra if location_extra is None else location_extra, 12),
        )

    def write_conf(self, http_extra=None, location_extra=None, main_extra=None):
        if http_extra is not None:
            self.http_extra = http_extra
        if location_extra is not None:
            self.location_extra = location_extra
        if main_extra is not None:
            self.main_extra = main_extra
        with open(self.conf_path, "w") as f:
            f.write(self.render())

    def write_raw_conf(self, text):
        with open(self.conf_path, "w") as f:
            f.write(text)

    def nginx_cmd(self, *args):
        return [NGINX, "-p", self.prefix + "/", "-e", self.error_log_path, "-c", self.conf_path] + list(args)

    def test_config(self):
        """`nginx -t` on the current file: (returncode, combined output)."""
        p = subprocess.run(self.nginx_cmd("-t"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=30)
        return p.returncode, p.stdout.decode(errors="replace")

    # -- lifecycle -----------------------------------------------------------

    def start(self, timeout=10, attempts=3):
        for attempt in range(attempts):
            try:
                return self._start(timeout)
            except NginxError as e:
                # The port picked at run time was taken by someone else meanwhile: pick another.
                if "Address already in use" not in str(e) or attempt == attempts - 1:
                    raise
                self.stop()
                self.port = free_port()
                self.write_conf()

    def _start(self, timeout):
        self.proc = subprocess.Popen(self.nginx_cmd(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def up():
            if self.proc.poll() is not None:
                raise NginxError("nginx exited with %s:\n%s\n%s" % (
                    self.proc.returncode, self.proc.stderr.read().decode(errors="replace"),
                    self.error_log()[-3000:]))
            return len(self.worker_pids()) == self.workers and http_get(self.port, "/grl").status > 0

        wait_until(up, timeout, what="nginx to serve on port %d" % self.port)
        self.watch(len(self.error_log()))
        return self

    def reload(self, use_signaller=True, timeout=15):
        """Bumps the generation (X-Gen header), rewrites the file, reloads and
        waits until the old workers are gone and the new ones serve."""
        old = set(self.worker_pids())
        self.gen += 1
        self.write_conf()
        self.signal_reload(use_signaller)

        def switched():
            pids = set(self.worker_pids())
            if pids & old or len(pids) != self.workers:
                return False
            # A few new connections must all come from the new generation.
            return all(http_get(self.port, "/grl").headers.get("x-gen") == str(self.gen) for _ in range(6))

        wait_until(switched, timeout, what="reload to generation %d" % self.gen)

    def signal_reload(self, use_signaller=True):
        if use_signaller:
            # `nginx -s reload` parses the file itself first (and refuses a bad one).
            p = subprocess.run(self.nginx_cmd("-s", "reload"), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
            if p.returncode != 0:
                raise NginxError("nginx -s reload failed: %s" % p.stdout.decode(errors="replace"))
        else:
            # What `systemctl reload` / `kill -HUP` do: the master re-reads the file.
            os.kill(self.proc.pid, signal.SIGHUP)

    def worker_pids(self):
        if self.proc is None:
            return []
        return children_of(self.proc.pid)

    def stop(self, timeout=10):
        if self.proc is None:
            return
        workers = self.worker_pids()
        code = self.proc.poll()  # a master that had already exited died
        if code is None:
            self.proc.send_signal(signal.SIGTERM)  # what `nginx -s stop` sends
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                code = "no exit within %ss of SIGTERM" % timeout
        for pid in workers:  # never leave a worker behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stderr = ""
        if self.proc.stderr:
            stderr = _read_available(self.proc.stderr)
            self.proc.stderr.close()
        self.proc = None
        self.check_health(code, stderr)

    def kill_worker(self, pid, sig=signal.SIGKILL):
        """Kills a worker (a crash on purpose): its death is expected in the error log."""
        self.expect_log(r"worker process %d exited on signal %d\b" % (pid, sig), "killed by the test")
        os.kill(pid, sig)

    def log_text(self):
        return self.error_log()

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.prefix, ignore_errors=True)

    # -- observation --------------------------------------------------------------

    def get(self, path="/", headers=None):
        return http_get(self.port, path, headers)

    def blast(self, path, n, headers=None, threads=4):
        return blast(self.port, [(path, headers)] * n, threads)

    def status(self):
        r = http_get(self.port, "/grl")
        assert r.status == 200, "status page answered %d: %r" % (r.status, r.body[:300])
        return json.loads(r.body)

    def bucket(self, name):
        for b in self.status()["buckets"]:
            if b["name"] == name:
                return b
        raise KeyError("no bucket %r in the status page" % name)

    def prometheus(self):
        r = http_get(self.port, "/grl?format=prometheus")
        assert r.status == 200, r
        return r.body.decode()

    def error_log(self):
        try:
            with open(self.error_log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def access_log(self):
        """Parsed access-log entries (dicts keyed by LOG_FORMAT_FIELDS)."""
        try:
            with open(self.access_log_path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            e = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
            out.append(e)
        return out


def _read_available(pipe):
    """What a pipe holds now, without waiting for a writer that may still hold it open."""
    fd = pipe.fileno()
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    chunks = []
    try:
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
    except BlockingIOError:
        pass
    return b"".join(chunks).decode(errors="replace")


def _indent(text, n):
    pad = " " * n
    return "\n".join(pad + l if l.strip() else l for l in text.strip("\n").splitlines())


def children_of(ppid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == ppid and fields[0] != "Z":
            out.append(int(d))
    return sorted(out)


def pid_gone(pid):
    """True when the process has ended (gone, or a zombie waiting to be reaped)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# ---------------------------------------------------------------------------
# ZeroMQ peers


def instruction_topic(scope, region="", zone=""):
    return {"global": "grl/g/", "region": "grl/r/%s/" % region,
            "zone": "grl/z/%s/%s/" % (region, zone)}[scope].encode()


def bucket_entry(name, ratio_ppm, mode="deny", limit_mrps=1000):
    return {"name": name, "ratio_ppm": ratio_ppm, "limit_mrps": limit_mrps, "mode": mode}


class Publisher:
    """A controller stand-in: a PUB socket bound on a runtime port. PUB/SUB
    drops messages until the subscription has propagated, so set() makes a
    background thread resend the instruction message(s) every `period`
    seconds (fresh ts_ms and seq each time) until clear() or close()."""

    def __init__(self, ctx, period=0.1, source="test-controller", bind="tcp://127.0.0.1:*"):
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(bind)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.period = period
        self.source = source
        self.ts_offset_ms = 0  # skews this publisher's ts_ms (wall clock) for freshest-wins tests
        self.seq = 0
        self.lock = threading.Lock()
        self.messages = []  # [(scope, region, zone, buckets, ttl_ms)]
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def body(self, scope="global", region="", zone="", buckets=(), ttl_ms=10000, ts_ms=None, **override):
        self.seq += 1
        if ts_ms is None:
            ts_ms = int(time.time() * 1000) + self.ts_offset_ms
        msg = {"v": 1, "type": "instructions", "ts_ms": ts_ms,
               "seq": self.seq, "source": self.source, "ttl_ms": ttl_ms, "scope": scope,
               "region": region, "zone": zone, "buckets": list(buckets)}
        msg.update(override)
        return msgpack.packb(msg, use_bin_type=True)

    def set(self, buckets, scope="global", region="", zone="", ttl_ms=10000):
        """Starts (or replaces) the periodic message for one scope."""
        with self.lock:
            self.messages = [m for m in self.messages if m[0] != scope]
            self.messages.append((scope, region, zone, list(buckets), ttl_ms))

    def clear(self):
        """Stops publishing (the control plane goes silent)."""
        with self.lock:
            self.messages = []

    def send_frames(self, frames):
        """Sends one raw multipart message (for malformed-message tests)."""
        with self.lock:
            self.sock.send_multipart(frames)

    def _run(self):
        while not self.stop_ev.is_set():
            with self.lock:
                for scope, region, zone, buckets, ttl in self.messages:
                    self.sock.send_multipart([instruction_topic(scope, region, zone),
                                              self.body(scope, region, zone, buckets, ttl)])
            self.stop_ev.wait(self.period)

    def close(self):
        self.stop_ev.set()
        self.thread.join(5)
        self.sock.close(0)


class Collector:
    """A collector stand-in: a PULL socket bound on a runtime port; decodes
    reports into self.reports (arrival order)."""

    def __init__(self, ctx, bind="tcp://127.0.0.1:*"):
        self.sock = ctx.socket(zmq.PULL)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(bind)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.reports = []

    def poll(self, timeout=0.0):
        """Receives every pending report (waiting up to `timeout` for the first)."""
        got = 0
        while self.sock.poll(int(timeout * 1000) if got == 0 else 0):
            body = self.sock.recv()
            self.reports.append(msgpack.unpackb(body, raw=False))
            got += 1
        return got

    def wait_for(self, pred, timeout, what="a report"):
        """Waits for a report satisfying pred; returns it."""
        deadline = time.monotonic() + timeout
        start = len(self.reports)
        while True:
            for r in self.reports[start:]:
                if pred(r):
                    return r
            start = len(self.reports)
            left = deadline - time.monotonic()
            if left <= 0:
                last = self.reports[-1] if self.reports else None
                raise AssertionError("timed out after %.1fs waiting for %s; last report: %r"
                                     % (timeout, what, last))
            self.poll(min(left, 0.2))

    def close(self):
        self.sock.close(0)


def report_buckets(report):
    return {b["name"]: b for b in report["buckets"]}


def grl_conf(buckets=(), publisher=None, collector=None, instructions=None, collector_endpoint=None,
             interval="100ms", ttl=None, host="id=h1 zone=z1 region=r1", zone="grl:1m", extra=""):
    """The grl_* part of http{}: zone, identity, endpoints, timing, buckets.
    `buckets` are the arguments of grl_bucket lines, e.g. "api procedure=/api rate=10r/s"."""
    lines = ["grl_zone %s;" % zone]
    if host:
        lines.append("grl_host %s;" % host)
    if publisher is not None or instructions:
        lines.append("grl_instructions %s;" % (instructions or publisher.endpoint))
    if collector is not None or collector_endpoint:
        lines.append("grl_collector %s;" % (collector_endpoint or collector.endpoint))
    if interval:
        lines.append("grl_report_interval %s;" % interval)
    if ttl:
        lines.append("grl_instruction_ttl %s;" % ttl)
    lines += ["grl_bucket %s;" % b for b in buckets]
    if extra:
        lines.append(extra)
    return "\n".join(lines)


def wait_ratio(nginx, name, ratio, timeout=10.0):
    """Waits until the status page shows bucket `name` holding an active `ratio`."""
    def ok():
        b = nginx.bucket(name)
        return b["ratio_state"] == "active" and abs(b["ratio"] - ratio) < 1e-6 and b
    return wait_until(ok, timeout, what="bucket %r to hold ratio %s" % (name, ratio))


def count(items, pred):
    return sum(1 for x in items if pred(x))
