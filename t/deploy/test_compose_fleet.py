#!/usr/bin/env python3
"""docker/compose.yaml run for real, under load, with podman (docs/operations.md, "Containers").

The host is set up by t/deploy/podman-setup.sh (podman, runc, the local base image). The
packages are made from the build directory by packaging/build-debs.sh, and the images are built
from them (docker/Dockerfile, DEBS=given: nothing compiled twice; unchanged packages reuse the
cached layers). Debian's docker-compose brings the file up against podman's API socket (a
`podman system service` of this test's own) while this test runs `podman healthcheck run` on
every container not yet healthy: without systemd nothing else runs them, and compose starts a
service only once its dependencies are healthy. Then, with grl_loadgen sending 1.5x bucket api's
limit to the four published nginx ports (weights 5:2:2:1):

  steady       the admitted rate (2xx) is within 5% of the limit, no error (a status other than
               2xx or 429, or a failed connection); each daemon's /metrics and each nginx's /grl
               answer, controller-a's dashboard answers on its published port, Prometheus has
               every target up == 1 and all of conf/prometheus/grl-alerts.yml's alerts loaded,
               grl-rlc record has written intervals into its store;
  controllers  controller-a killed: the nginx keep their instructions (controller-b publishes);
               controller-b killed too: every nginx fails open within the instruction TTL (3 s)
               and admits what is offered, without an error; both started again: the limit
               holds again;
  nginx        nginx-zone-a-1 (half of the traffic) restarted: once back, the limit holds; errors
               are allowed only while it restarts;

then `docker-compose down -v` must leave no container (podman ps -a --external), network or
volume of the project. When something fails, each service's last log lines are printed under
its name. Prints the wall time of each stage. Needs root (exit 77: skipped).
Usage: test_compose_fleet.py BUILD_DIR
"""
import contextlib
import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPOSE = os.path.join(ROOT, "docker", "compose.yaml")
PROJECT = "grltest"
TTL_S = 3.0  # grl_instruction_ttl and --ttl in docker/compose.yaml
TOLERANCE = 0.05
MULTIPLE = 1.5
WEIGHTS = (("nginx-zone-a-1", 5), ("nginx-zone-a-2", 2), ("nginx-zone-b-1", 2), ("nginx-zone-b-2", 1))
DAEMON_METRICS = {"controller-a": 9201, "controller-b": 9201, "collector-zone-a": 9101,
                  "collector-zone-b": 9101}


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# The loopback fleet's helpers: free ports, the shipped limit, the load generator.
run_fleet = load_module("run_fleet", os.path.join(ROOT, "conf", "fleet", "run-fleet.py"))
failures = []
timings = []


class Failed(Exception):
    pass


def say(msg):
    print("test_compose_fleet: " + msg, flush=True)


def bad(msg):
    failures.append(msg)
    say("FAILED: " + msg)


def run(cmd, what, timeout=600, env=None):
    """Runs cmd; raises Failed naming `what` with its output when it fails."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout, env=env)
    if p.returncode != 0:
        raise Failed("%s failed (exit %d): %s\n%s" % (what, p.returncode, " ".join(cmd),
                                                      p.stdout[-3000:]))
    return p.stdout


@contextlib.contextmanager
def stage(name):
    t0 = time.monotonic()
    say("%s ..." % name)
    try:
        yield
    finally:
        timings.append((name, time.monotonic() - t0))
        say("%s: %.1f s" % (name, time.monotonic() - t0))


def build_images(build, tmp):
    """The packages from the build directory, then the three images from them."""
    debs = os.path.join(tmp, "debs")
    env = dict(os.environ)
    # The same binaries make byte-identical packages, so the images' layers are reused.
    env["SOURCE_DATE_EPOCH"] = run(["git", "-C", ROOT, "log", "-1", "--format=%ct"], "git log").strip()
    run(["bash", os.path.join(ROOT, "packaging", "build-debs.sh"), build, debs], "build-debs.sh", env=env)
    for target in ("nginx", "daemons", "prometheus"):
        run(["podman", "build", "-q", "-f", os.path.join(ROOT, "docker", "Dockerfile"),
             "--build-arg", "DEBS=given", "--target", target, "-t", "grl-%s:latest" % target, debs],
            "podman build of image grl-%s (docker/Dockerfile, target %s)" % (target, target))


class Fleet:
    """docker/compose.yaml up as project PROJECT, host ports chosen at run time."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.ports = {s: run_fleet.free_port() for s, _ in WEIGHTS}
        self.ports["dashboard"] = run_fleet.free_port()
        self.ports["prometheus"] = run_fleet.free_port()
        sock = os.path.join(tmp, "podman.sock")
        self.service = subprocess.Popen(["podman", "system", "service", "--time=0", "unix://" + sock],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        self.env = dict(os.environ, DOCKER_HOST="unix://" + sock, COMPOSE_PROJECT_NAME=PROJECT,
                        GRL_PORT_NGINX_A1=str(self.ports["nginx-zone-a-1"]),
                        GRL_PORT_NGINX_A2=str(self.ports["nginx-zone-a-2"]),
                        GRL_PORT_NGINX_B1=str(self.ports["nginx-zone-b-1"]),
                        GRL_PORT_NGINX_B2=str(self.ports["nginx-zone-b-2"]),
                        GRL_PORT_DASHBOARD=str(self.ports["dashboard"]),
                        GRL_PORT_PROMETHEUS=str(self.ports["prometheus"]),
                        GRL_PORT_GRAFANA=str(run_fleet.free_port()), GRL_RLC_INTERVAL="5s")

    def compose(self, *args, timeout=300):
        return run(["docker-compose", "-f", COMPOSE, "-p", PROJECT] + list(args),
                   "docker-compose " + args[0], timeout=timeout, env=self.env)

    def containers(self):
        """{service: (container id, status)} of the project's containers."""
        out = run(["podman", "ps", "-a", "--filter", "label=com.docker.compose.project=" + PROJECT,
                   "--format", '{{.ID}}\t{{index .Labels "com.docker.compose.service"}}\t{{.Status}}'],
                  "podman ps")
        rows = (line.split("\t") for line in out.splitlines() if line.strip())
        return {r[1]: (r[0], r[2]) for r in rows}

    def id(self, service):
        return self.containers()[service][0]

    def drive_health(self, done):
        """Runs the healthchecks of containers not yet healthy until `done` is set."""
        while not done.is_set():
            for cid, status in self.containers().values():
                if status.startswith("Up") and "(healthy)" not in status:
                    subprocess.run(["podman", "healthcheck", "run", cid], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            done.wait(1.0)

    def up(self):
        self.compose("down", "-v", "--remove-orphans")  # a run killed before its `down`
        done = threading.Event()
        driver = threading.Thread(target=self.drive_health, args=(done,), daemon=True)
        driver.start()
        try:
            self.compose("up", "-d", "--no-build", timeout=300)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                unhealthy = [s for s, (_, st) in self.containers().items() if "(healthy)" not in st]
                if not unhealthy:
                    return
                time.sleep(1)
            raise Failed("services not healthy 60 s after up: %s" % ", ".join(sorted(unhealthy)))
        finally:
            done.set()
            driver.join()

    def print_logs(self):
        for service, (cid, status) in sorted(self.containers().items()):
            p = subprocess.run(["podman", "logs", "--tail", "25", cid], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            print("---- service %s (%s): last log lines ----\n%s" % (service, status, p.stdout.rstrip()))

    def down(self):
        """`down -v`, then checks that nothing of the project is left (and removes it if so)."""
        try:
            self.compose("down", "-v", "--remove-orphans", "-t", "5")
        except Failed as e:
            bad(str(e))
        left = run(["podman", "ps", "-a", "--external", "--format", "{{.ID}} {{.Names}}"], "podman ps")
        left = [line for line in left.splitlines() if PROJECT in line]
        nets = [n for n in run(["podman", "network", "ls", "--format", "{{.Name}}"], "podman network ls").split()
                if n.startswith(PROJECT)]
        vols = [v for v in run(["podman", "volume", "ls", "--format", "{{.Name}}"], "podman volume ls").split()
                if v.startswith(PROJECT)]
        for kind, names, rm in (("container", [x.split()[0] for x in left], ["podman", "rm", "-f"]),
                                ("network", nets, ["podman", "network", "rm", "-f"]),
                                ("volume", vols, ["podman", "volume", "rm", "-f"])):
            if names:
                bad("docker-compose down left %s(s) %s" % (kind, ", ".join(names)))
                subprocess.run(rm + names, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.service.terminate()
        self.service.wait(10)


def nginx_status(fleet, service):
    url = "http://127.0.0.1:%d/grl" % fleet.ports[service]
    st = json.loads(urllib.request.urlopen(url, timeout=2).read())
    return next(b for b in st["buckets"] if b["name"] == "api")


def states(fleet):
    out = {}
    for s, _ in WEIGHTS:
        try:
            out[s] = nginx_status(fleet, s)["ratio_state"]
        except OSError:
            out[s] = "down"
    return out


def wait_states(fleet, want, timeout):
    """Seconds until every nginx's bucket api is in state `want` (None: not within timeout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if all(v == want for v in states(fleet).values()):
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


class Load:
    """1.5x the limit over the four published nginx ports for `seconds` (fleet.Load,
    bench/loadgen), with the counts of any window of it (seconds since it started)."""
    IV = 0.5

    def __init__(self, fleet, limit, seconds):
        import fleet as loopback  # t/integration/fleet.py (sys.path set in main)
        port = type("Target", (), {})
        targets = []
        for service, w in WEIGHTS:
            t = port()
            t.port = fleet.ports[service]
            targets.append((t, w))
        self.load = loopback.Load(targets, "%g:%g" % (MULTIPLE * limit, seconds), "/api/items",
                                  interval_ms=int(self.IV * 1000))
        self.seconds = seconds

    def now(self):
        return time.monotonic() - self.load.started

    def sleep_until(self, t):
        time.sleep(max(0.0, t - self.now()))

    def result(self):
        self.ivs = self.load.result(timeout=self.seconds + 60)["intervals"]

    def window(self, a, b):
        """(admitted r/s, offered r/s, errors) over [a, b) seconds."""
        sel = [i for i in self.ivs if i["t"] - self.IV >= a - 1e-9 and i["t"] <= b + 1e-9]
        span = len(sel) * self.IV or 1
        return (sum(i["ok"] for i in sel) / span, sum(i["offered"] for i in sel) / span,
                sum(i["other"] + i["errors"] for i in sel))

    def judge(self, what, a, b, limit):
        adm, off, errors = self.window(a, b)
        err = adm / limit - 1
        msg = "%s: admitted %.1f r/s of %.1f offered over %.0f s (limit %d, %+.1f%%), %d errors" % (
            what, adm, off, b - a, limit, 100 * err, errors)
        if abs(err) > TOLERANCE:
            bad(msg + ": not within %.0f%% of the limit" % (100 * TOLERANCE))
        else:
            say(msg)
        return adm, errors


def check_daemons(fleet, limit):
    for service, port in DAEMON_METRICS.items():
        p = subprocess.run(["podman", "exec", fleet.id(service), "curl", "-fsS",
                            "http://127.0.0.1:%d/metrics" % port], capture_output=True, text=True)
        if p.returncode != 0 or "grl_build_info" not in p.stdout:
            bad("%s: /metrics on :%d does not answer with grl_build_info: %s" % (service, port, p.stderr))
    for service, _ in WEIGHTS:
        url = "http://127.0.0.1:%d/grl?format=prometheus" % fleet.ports[service]
        if "grl_bucket_offered_total" not in urllib.request.urlopen(url, timeout=5).read().decode():
            bad("%s: /grl?format=prometheus has no grl_bucket_offered_total" % service)
    page = urllib.request.urlopen("http://127.0.0.1:%d/" % fleet.ports["dashboard"], timeout=5).read().decode()
    if "<html" not in page.lower():
        bad("controller-a's dashboard (published port %d) is not an HTML page: %r"
            % (fleet.ports["dashboard"], page[:200]))


def prometheus(fleet, path):
    url = "http://127.0.0.1:%d/api/v1/%s" % (fleet.ports["prometheus"], path)
    return json.loads(urllib.request.urlopen(url, timeout=5).read())["data"]


def check_prometheus(fleet, timeout=30):
    """Every target up == 1 (scraped every 5 s) and every alert of grl-alerts.yml loaded."""
    import yaml
    with open(os.path.join(ROOT, "conf", "prometheus", "grl-alerts.yml")) as fh:
        want = {r["alert"] for g in yaml.safe_load(fh)["groups"] for r in g["rules"] if "alert" in r}
    deadline = time.monotonic() + timeout
    while True:
        up = {(r["metric"]["job"], r["metric"]["instance"]): r["value"][1]
              for r in prometheus(fleet, "query?query=up")["result"]}
        down = sorted("%s/%s" % k for k, v in up.items() if v != "1")
        if len(up) == 8 and not down:
            break
        if time.monotonic() > deadline:
            bad("Prometheus: %d targets, not up: %s" % (len(up), ", ".join(down) or "-"))
            break
        time.sleep(1)
    loaded = {r["name"] for g in prometheus(fleet, "rules")["groups"] for r in g["rules"]
              if r["type"] == "alerting"}
    if want - loaded:
        bad("Prometheus did not load the alerts %s" % ", ".join(sorted(want - loaded)))
    say("Prometheus: %d targets up == 1, %d alerts loaded" % (len(up), len(loaded)))


def check_rlc(fleet):
    """Intervals grl-rlc record wrote into its store (volume rlc-store) from the live fleet."""
    vol = run(["podman", "volume", "inspect", PROJECT + "_rlc-store", "--format", "{{.Mountpoint}}"],
              "podman volume inspect").strip()
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(vol, "rlc.db"), uri=True, timeout=5)
    try:
        n = db.execute("SELECT count(*) FROM samples").fetchone()[0]
    finally:
        db.close()
    if n == 0:
        bad("grl-rlc record wrote no interval into /var/lib/grl/rlc.db")
    else:
        say("grl-rlc record: %d intervals in its store" % n)


def steady(fleet, limit):
    load = Load(fleet, limit, 24)
    load.sleep_until(4)
    check_daemons(fleet, limit)
    check_prometheus(fleet)
    load.result()
    check_rlc(fleet)
    _, errors = load.judge("steady", 8, 24, limit)
    if errors:
        bad("steady: %d errors (statuses other than 2xx and 429, or failed connections)" % errors)


def controllers(fleet, limit):
    """One controller killed: the other keeps the nginx limited; both killed: fail open within
    the TTL; both started: limited again. Returns the fail-open and recovery times."""
    load = Load(fleet, limit, 34)
    load.sleep_until(5)
    run(["podman", "kill", fleet.id("controller-a")], "podman kill controller-a")
    t_a = load.now()
    while load.now() < t_a + 2 * TTL_S:  # past controller-a's instructions' TTL
        left = {s: v for s, v in states(fleet).items() if v != "active"}
        if left:
            bad("controller-a killed, controller-b up: nginx left state active: %s" % left)
            break
        time.sleep(0.2)
    run(["podman", "kill", fleet.id("controller-b")], "podman kill controller-b")
    t_b = load.now()
    fail_open = wait_states(fleet, "expired", 3 * TTL_S)
    if fail_open is None:
        raise Failed("both controllers killed: nginx not all failing open after %.0f s: %s"
                     % (3 * TTL_S, states(fleet)))
    say("both controllers killed: every nginx failed open %.2f s later (TTL %.0f s)" % (fail_open, TTL_S))
    if fail_open > TTL_S + 0.5:
        bad("fail open %.2f s after the kill, more than the TTL %.0f s (+0.5 s)" % (fail_open, TTL_S))
    t_open = t_b + fail_open
    load.sleep_until(t_open + 3)
    t_start = load.now()
    run(["podman", "start", fleet.id("controller-a"), fleet.id("controller-b")], "podman start")
    back = wait_states(fleet, "active", 15)
    if back is None:
        raise Failed("controllers started again: nginx not all limited after 15 s: %s" % states(fleet))
    recovered = load.now() - t_start
    say("controllers started again (podman start took %.2f s): every nginx limited %.2f s after it"
        " began" % (recovered - back, recovered))
    load.result()
    adm, off, errors = load.window(t_open + 0.5, t_start)
    if adm < 0.98 * off:
        bad("failing open: admitted %.1f r/s of %.1f offered" % (adm, off))
    say("failing open: admitted %.1f r/s of %.1f offered" % (adm, off))
    load.judge("controllers back", t_start + recovered + 4, 34, limit)
    _, _, errors = load.window(0, 34)
    if errors:
        bad("controllers killed and started: %d errors" % errors)
    return fail_open, recovered


def nginx_restart(fleet, limit):
    """nginx-zone-a-1 (half of the traffic) restarted under load: once back, the limit holds."""
    load = Load(fleet, limit, 24)
    load.sleep_until(4)
    t0 = load.now()
    run(["podman", "restart", "-t", "5", fleet.id("nginx-zone-a-1")], "podman restart nginx-zone-a-1")
    back = wait_states(fleet, "active", 15)
    if back is None:
        raise Failed("nginx-zone-a-1 restarted: not limited after 15 s: %s" % states(fleet))
    t1 = load.now()
    say("nginx-zone-a-1 restarted and limited again in %.2f s" % (t1 - t0))
    load.result()
    load.judge("nginx-zone-a-1 restarted", t1 + 4, 24, limit)
    # Requests sent to it while it restarts fail when grl_loadgen gives up on them (2 s).
    end = t1 + 2.5
    _, _, during = load.window(t0 - 0.5, end)
    _, _, before = load.window(0, t0 - 0.5)
    _, _, after = load.window(end, 24)
    say("errors while it restarted: %d (allowed), before: %d, after: %d" % (during, before, after))
    if before or after:
        bad("nginx-zone-a-1 restarted at %.1f s, back at %.1f s: %d errors outside the restart: %s"
            % (t0, t1, before + after, [(i["t"], i["other"] + i["errors"]) for i in load.ivs
                                        if i["other"] + i["errors"]]))
    return t1 - t0


def main():
    build = os.path.abspath(sys.argv[1])
    if os.getuid() != 0:
        say("SKIPPED: runs podman and containers, needs root")
        return 77
    for tool in ("docker-compose", "debootstrap"):
        if not shutil.which(tool):
            say("SKIPPED: no %s (bash .ci/install-deps)" % tool)
            return 77
    os.environ["GRL_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(ROOT, "t", "integration"))
    limit = run_fleet.SHIPPED_LIMIT
    t_all = time.monotonic()
    fleet = None
    tmp = tempfile.mkdtemp(prefix="grl-compose-fleet-")
    try:
        with stage("host setup (t/deploy/podman-setup.sh)"):
            run(["bash", os.path.join(ROOT, "t", "deploy", "podman-setup.sh")], "podman-setup.sh")
        with stage("packages and images"):
            build_images(build, tmp)
        fleet = Fleet(tmp)
        with stage("compose up, healthchecks driven"):
            fleet.up()
        with stage("steady load, %g r/s (limit %d)" % (MULTIPLE * limit, limit)):
            steady(fleet, limit)
        with stage("controllers killed and started"):
            controllers(fleet, limit)
        with stage("nginx restarted"):
            nginx_restart(fleet, limit)
    except (Failed, OSError, subprocess.TimeoutExpired, AssertionError) as e:
        bad(str(e))
    finally:
        if fleet:
            if failures:
                fleet.print_logs()
            with stage("compose down"):
                fleet.down()
        shutil.rmtree(tmp, ignore_errors=True)
    total = time.monotonic() - t_all
    say("wall time %.1f s (%s)" % (total, ", ".join("%s %.0f s" % t for t in timings)))
    if failures:
        return 1
    say("docker/compose.yaml ran under load, failed open and recovered, and went down cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
