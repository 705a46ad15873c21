"""Integration test of the Redis rate limiter BENCHMARK BASELINE (not part of
grl): a real redis-server and a real nginx with ngx_http_redis_limit_module,
on 127.0.0.1 with ports chosen at run time.

Run with Debian's interpreter (it has pytest):
  REDIS_LIMIT_MODULE=/path/ngx_http_redis_limit_module.so \
      /usr/bin/pytest-3 -q -p no:cacheprovider bench/redis_limiter/test_redis_limiter.py

Environment: REDIS_LIMIT_MODULE (the .so), REDIS_SERVER (redis-server),
NGINX (/usr/sbin/nginx).
"""

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

import pytest

MODULE = os.environ.get(
    "REDIS_LIMIT_MODULE", "/work/build/bench/redis_limiter/ngx_http_redis_limit_module.so")
REDIS_SERVER = os.environ.get("REDIS_SERVER", shutil.which("redis-server") or "/usr/bin/redis-server")
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
NGINX = os.environ.get("NGINX", "/usr/sbin/nginx")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = pred()
            if v:
                return v
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


# ---------------------------------------------------------------------------
# redis-server


class Redis:
    def __init__(self, port=None):
        self.port = port or free_port()
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--enable-debug-command", "local", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: self.cli("PING") == "PONG", 10, "redis-server to answer")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def cli(self, *args):
        out = subprocess.run([REDIS_CLI, "-p", str(self.port), *args], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip()


# ---------------------------------------------------------------------------
# nginx

CONF = """\
load_module {module};
worker_processes 2;
daemon off;
master_process on;
error_log {prefix}/error.log info;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    log_format rl 'status=$status rl=$redis_limit_status bucket=$redis_limit_bucket uri=$uri';
    access_log {prefix}/access.log rl;
    keepalive_timeout 0;

    redis_limit_server 127.0.0.1:{redis_port};
    redis_limit_caller $http_x_caller;
{http_extra}

    server {{
        listen 127.0.0.1:{port} reuseport;
        location / {{
            redis_limit on;
            empty_gif;
        }}
        location /off/ {{
            empty_gif;
        }}
    }}
}}
"""


class Nginx:
    def __init__(self, redis_port, http_extra=""):
        self.prefix = tempfile.mkdtemp(prefix="redis-limit-it-")
        os.chmod(self.prefix, 0o777)  # workers run as nobody when we are root
        self.port = free_port()
        self.conf = os.path.join(self.prefix, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(CONF.format(module=MODULE, prefix=self.prefix, port=self.port,
                                redis_port=redis_port, http_extra=http_extra))
        self.proc = None

    def test_config(self):
        r = subprocess.run([NGINX, "-t", "-p", self.prefix, "-c", self.conf],
                           capture_output=True, text=True, timeout=30)
        return r.returncode, r.stderr

    def start(self):
        self.proc = subprocess.Popen([NGINX, "-p", self.prefix, "-c", self.conf],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: get(self.port, "/off/ping").status == 200, 10, "nginx to answer")
        # Every worker connected and loaded the script.
        wait_until(lambda: self.error_log().count("connected to redis") >= 2, 10,
                   "both workers to connect to redis")
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def error_log(self):
        try:
            with open(os.path.join(self.prefix, "error.log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def access_log(self):
        with open(os.path.join(self.prefix, "access.log")) as f:
            return [dict(kv.split("=", 1) for kv in line.split()) for line in f]

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.prefix, ignore_errors=True)


# ---------------------------------------------------------------------------
# HTTP: a new connection per request, so reuseport spreads them over workers


class Response:
    def __init__(self, status, elapsed):
        self.status = status
        self.elapsed = elapsed


def get(port, path, headers=None, timeout=5.0):
    lines = ["GET %s HTTP/1.0" % path, "Host: localhost"]
    lines += ["%s: %s" % kv for kv in (headers or {}).items()]
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        raw = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            raw += b
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    if not m:
        raise ValueError("bad response %r" % raw[:100])
    return Response(int(m.group(1)), time.monotonic() - t0)


def blast(port, n, path="/api/x", headers=None, threads=8):
    with ThreadPoolExecutor(max_workers=threads) as ex:
        return list(ex.map(lambda _: get(port, path, headers), range(n)))


def burst_in_one_second(port, n, **kw):
    """Sends n requests starting just after a wall-clock second boundary;
    retries (up to 3 times) when the burst spills into the next second."""
    for _ in range(3):
        now = time.time()
        time.sleep(1.0 - (now % 1.0) + 0.02)
        start = time.time()
        rs = blast(port, n, **kw)
        if int(time.time()) == int(start):
            return rs
    pytest.skip("machine too slow to send %d requests within one second" % n)


# ---------------------------------------------------------------------------
# fixtures


@pytest.fixture
def redis():
    r = Redis().start()
    yield r
    r.stop()


@pytest.fixture
def nginx_factory(request):
    made = []

    def make(redis_port, http_extra="", start=True):
        n = Nginx(redis_port, http_extra)
        made.append(n)
        return n.start() if start else n

    yield make
    for n in made:
        log = n.error_log()
        n.cleanup()
        # A crashed worker would silently be replaced by the master.
        assert "exited on signal" not in log, log[-3000:]
        assert "[alert]" not in log, log[-3000:]


def statuses(rs):
    out = {}
    for r in rs:
        out[r.status] = out.get(r.status, 0) + 1
    return out


# ---------------------------------------------------------------------------
# tests


def test_config_errors(redis, nginx_factory):
    bad = [
        ("redis_limit_bucket b rate=10x;", 'invalid rate "10x"'),
        ("redis_limit_bucket b procedure_regex=( rate=10r/s;", 'invalid regex "("'),
        ("redis_limit_bucket b caller=a caller_prefix=b rate=1r/s;", "more than one"),
        ("redis_limit_bucket b scope=zone rate=1r/s;", 'invalid parameter "scope=zone"'),
        ("redis_limit_bucket b procedure=/x;", 'must have "rate" parameter'),
        ("redis_limit_bucket b rate=1r/s; redis_limit_bucket b rate=2r/s;", 'duplicate bucket "b"'),
        ("redis_limit_bucket b caller=x rate=1r/s; redis_limit_caller $x;", "is duplicate"),
        ("redis_limit_bucket b rate=1r/s; redis_limit_server 127.0.0.1:0;", "is duplicate"),
        ("redis_limit_status 200;", 'invalid status "200"'),
        ("redis_limit_fail maybe;", 'invalid value "maybe"'),
    ]
    for extra, msg in bad:
        n = nginx_factory(redis.port, extra, start=False)
        rc, err = n.test_config()
        assert rc != 0 and msg in err, (extra, err)
    n = nginx_factory(redis.port, "redis_limit_bucket ok rate=600r/m; redis_limit_timeout 20ms;",
                      start=False)
    assert n.test_config()[0] == 0


def test_limits_fleet_wide_per_second(redis, nginx_factory):
    n = nginx_factory(redis.port, """
        redis_limit_bucket api procedure_prefix=/api/ rate=100r/s;
        redis_limit_bucket other caller=batch rate=1r/s;
    """)
    rs = burst_in_one_second(n.port, 300)
    st = statuses(rs)
    # One counter in Redis for both workers: exactly the limit passes.
    assert st.get(200, 0) == 100 and st.get(429, 0) == 200, st
    log = [e for e in n.access_log() if e["uri"] == "/api/x"]
    assert sum(e["rl"] == "PASSED" for e in log) == 100
    assert all(e["bucket"] == "api" for e in log if e["rl"] == "REJECTED")
    pids = set(re.findall(r"(\d+)#\d+: \*\d+ redis_limit: request rejected", n.error_log()))
    assert len(pids) == 2, "both workers should have served the burst"
    # Unmatched requests and locations with redis_limit off never ask Redis.
    assert statuses(blast(n.port, 20, path="/free")) == {200: 20}
    assert statuses(blast(n.port, 20, path="/off/api/x")) == {200: 20}


def test_caller_matching_and_multiple_buckets(redis, nginx_factory):
    n = nginx_factory(redis.port, """
        redis_limit_bucket batch caller=batch rate=5r/s;
        redis_limit_bucket all procedure_prefix=/ rate=10r/s;
    """)

    def one_second():
        batch = blast(n.port, 20, headers={"X-Caller": "batch"})
        web = [get(n.port, "/api/x", {"X-Caller": "web"}) for _ in range(6)]
        return batch + web

    for _ in range(3):
        time.sleep(1.0 - (time.time() % 1.0) + 0.02)
        start = time.time()
        rs = one_second()
        if int(time.time()) == int(start):
            break
    else:
        pytest.skip("machine too slow")
    # "batch" lets 5 through; the 15 it rejects do not use up "all", which
    # still has room for 5 of the 6 "web" requests.
    assert statuses(rs[:20]) == {200: 5, 429: 15}
    assert [r.status for r in rs[20:]] == [200] * 5 + [429]
    log = n.access_log()
    assert sorted(e["bucket"] for e in log if e["rl"] == "REJECTED") == ["all"] + ["batch"] * 15


def test_fail_open_when_redis_is_down_then_reconnects(redis, nginx_factory):
    n = nginx_factory(redis.port, """
        redis_limit_bucket api procedure_prefix=/api/ rate=5r/s;
        redis_limit_timeout 100ms;
    """)
    redis.stop()
    rs = blast(n.port, 100)
    assert statuses(rs) == {200: 100}
    assert max(r.elapsed for r in rs) < 1.0
    assert "connection to redis at 127.0.0.1:%d lost" % redis.port in n.error_log()
    assert any(e["rl"] == "FAILED_OPEN" for e in n.access_log())

    # Redis comes back on the same port: both workers reconnect (backoff <= 2s)
    # and limit again.
    redis.start()
    wait_until(lambda: n.error_log().count("reconnected to redis") >= 2, 10, "reconnect")
    rs = burst_in_one_second(n.port, 30)
    assert statuses(rs) == {200: 5, 429: 25}


def test_fail_closed_when_redis_is_down(redis, nginx_factory):
    n = nginx_factory(redis.port, """
        redis_limit_bucket api procedure_prefix=/api/ rate=5r/s;
        redis_limit_fail closed;
    """)
    redis.stop()
    assert statuses(blast(n.port, 50)) == {429: 50}
    assert all(e["rl"] == "FAILED_CLOSED" for e in n.access_log() if e["uri"] == "/api/x")
    assert statuses(blast(n.port, 10, path="/free")) == {200: 10}


def test_slow_redis_times_out_and_late_replies_are_ignored(redis, nginx_factory):
    n = nginx_factory(redis.port, """
        redis_limit_bucket api procedure_prefix=/api/ rate=1000r/s;
        redis_limit_timeout 50ms;
    """)
    sleeper = threading.Thread(target=redis.cli, args=("DEBUG", "SLEEP", "0.8"))
    sleeper.start()
    time.sleep(0.1)
    # Clients that give up while their request waits for Redis: the late
    # reply must find the (freed) request's token cleared.
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", n.port)) as s:
            s.sendall(b"GET /api/gone HTTP/1.0\r\nHost: x\r\n\r\n")
    t0 = time.monotonic()
    rs = blast(n.port, 40)
    during = time.monotonic() - t0
    sleeper.join()
    assert statuses(rs) == {200: 40}
    assert during < 0.7, "requests waited for Redis beyond the timeout"
    assert max(r.elapsed for r in rs) < 0.4
    assert min(r.elapsed for r in rs) >= 0.04
    assert "did not answer within redis_limit_timeout, failing open" in n.error_log()
    # Redis is back: the late replies were dropped, new requests are counted.
    time.sleep(0.2)
    rs = blast(n.port, 20)
    assert statuses(rs) == {200: 20}
    assert [e["rl"] for e in n.access_log()[-20:]] == ["PASSED"] * 20


def test_slow_redis_fail_closed(redis, nginx_factory):
    n = nginx_factory(redis.port, """
        redis_limit_bucket api procedure_prefix=/api/ rate=1000r/s;
        redis_limit_timeout 100ms;
        redis_limit_fail closed;
    """)
    sleeper = threading.Thread(target=redis.cli, args=("DEBUG", "SLEEP", "0.5"))
    sleeper.start()
    time.sleep(0.1)
    rs = blast(n.port, 20)
    sleeper.join()
    assert statuses(rs) == {429: 20}
    assert all(0.09 <= r.elapsed < 0.45 for r in rs), [r.elapsed for r in rs]


def test_script_flush_is_recovered(redis, nginx_factory):
    n = nginx_factory(redis.port, "redis_limit_bucket api procedure_prefix=/api/ rate=1000r/s;")
    assert statuses(blast(n.port, 10)) == {200: 10}
    redis.cli("SCRIPT", "FLUSH")
    blast(n.port, 10)  # NOSCRIPT: these fail open and the script is loaded again
    wait_until(lambda: n.error_log().count("lost the script") >= 1, 5, "NOSCRIPT handling")
    time.sleep(0.1)
    blast(n.port, 20)
    assert n.access_log()[-1]["rl"] == "PASSED"


def test_hung_redis_is_dropped_and_reconnected(redis, nginx_factory):
    n = nginx_factory(redis.port, """
        redis_limit_bucket api procedure_prefix=/api/ rate=100000r/s;
        redis_limit_timeout 50ms;
    """)
    redis.proc.send_signal(signal.SIGSTOP)  # accepts connections, answers nothing
    try:
        rs = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            rs += blast(n.port, 16)
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    assert statuses(rs) == {200: len(rs)}
    assert max(r.elapsed for r in rs) < 0.5
    # After 2s without an answer (max(2s, 4 x timeout)) the connection was dropped.
    assert "has not answered for" in n.error_log()

    def passing():
        blast(n.port, 10)
        return [e["rl"] for e in n.access_log()[-10:]] == ["PASSED"] * 10

    wait_until(passing, 10, "requests to be counted again")
