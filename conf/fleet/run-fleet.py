#!/usr/bin/env python3
"""The main job: a local grl fleet on loopback, limiting real traffic.

Starts a backend (nginx), one grl-controller, two zones each with a
grl-collector and two nginx with the grl module (proxying to the backend), and
the open-loop load generator (bench/loadgen) spreading traffic unevenly over
the four nginx (one of them takes half of it). The load steps from half the
global limit to 1.5x the limit (and, with --surge, to 15x for a while); every
second one line shows the offered and admitted rate (from the nginx status
pages), the ratio the controller publishes and the ratio nginx applies.
Ctrl-C stops everything cleanly.

Beside it runs the Rate Limit Configurator (grl-rlc, docs/rlc.md): five weeks of
synthetic history for the fleet's two buckets go into a SQLite store, `grl-rlc
record` adds the live fleet's traffic to it, and one cycle's proposals (`grl-rlc
run`, not applied, so the limit under test stays put) are printed first.
--no-rlc leaves it out.

Only the Python standard library is needed. Usage:
    python3 conf/fleet/run-fleet.py [--build-dir build] [--limit 300] [--duration 0] [--surge]

With --duration N it runs N seconds, then judges the run: it exits 0 only when
the fleet started and the admitted rate over the last seconds of load above
the limit is within --tolerance (10%) of the limit. CI runs it that way.
When a process fails to start, the last lines of its log are printed and the
run directory is kept.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


_handed_out = set()


def free_port():
    """A port on 127.0.0.1 free a moment ago, never one handed out before in this process: the
    kernel's bind(0) repeats ports often (313 repeats in 3,000 draws measured), and nginx listens
    with reuseport, so two servers given one port would share it silently."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def http_get(url, timeout=2.0):
    return urllib.request.urlopen(url, timeout=timeout).read().decode()


def metrics(addr):
    out = {}
    for line in http_get("http://%s/metrics" % addr).splitlines():
        if line.startswith("#") or not line:
            continue
        m = re.match(r'^(\w+)(\{(.*)\})? (\S+)$', line)
        if m:
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(3) or "")))
            out[(m.group(1), labels)] = float(m.group(4))
    return out


def shipped_limit():
    """Bucket api's rate in grl-buckets.conf: the load steps around it."""
    path = os.path.join(HERE, "grl-buckets.conf")
    with open(path) as fh:
        m = re.search(r"^grl_bucket api .*\brate=(\d+)r/s", fh.read(), re.M)
    if not m:
        sys.exit("run-fleet: %s: no \"grl_bucket api ... rate=Nr/s\" line" % path)
    return int(m.group(1))


SHIPPED_LIMIT = shipped_limit()

# nginx.conf of each nginx with the module: the loopback parts (ports, paths, this host's
# place); its buckets and locations are the shipped files included from conf/fleet/.
NGINX_CONF = """\
load_module {module};
worker_processes 2;
daemon off;
master_process on;
error_log {dir}/error.log notice;
pid {dir}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_timeout 60s;
    upstream backend {{ server 127.0.0.1:{backend}; keepalive 32; }}

    # the buckets and locations docker/compose.yaml and the packages ship (docs/operations.md)
    include {conf}/grl-buckets.conf;
    grl_host id={host} zone={zone} region=local;
    grl_collector {report};
    grl_instructions {publish};
    grl_report_interval {interval};
    grl_instruction_ttl 3s;

    server {{
        listen 127.0.0.1:{port} reuseport;
        include {conf}/grl-locations.conf;
    }}
}}
"""

BACKEND_CONF = """\
worker_processes 1;
daemon off;
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_timeout 60s;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "backend\\n"; }}
    }}
}}
"""


class StartError(Exception):
    """A process of the fleet did not start; the message names it and quotes its log."""

    def __init__(self, what, log):
        tail = ""
        try:
            with open(log, errors="replace") as f:
                tail = "".join(f.readlines()[-15:])
        except OSError as e:
            tail = "(cannot read %s: %s)\n" % (log, e.strerror)
        super().__init__("run-fleet: %s did not start; last lines of %s:\n%s" % (what, log, tail.rstrip()))


class Fleet:
    def __init__(self, args):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="grl-fleet-")
        os.chmod(self.dir, 0o777)  # nginx workers run as nobody when we are root
        self.procs = []  # (name, Popen), stopped in reverse order
        self.failed = False  # keeps the run directory for reading
        b = os.path.abspath(args.build_dir)  # nginx resolves load_module against its own prefix
        self.bin = {
            "controller": os.path.join(b, "controller", "grl-controller"),
            "collector": os.path.join(b, "collector", "grl-collector"),
            "loadgen": os.path.join(b, "bench", "grl_loadgen"),
            "module": os.path.join(b, "ngx_module", "ngx_http_grl_module.so"),
            "rlc": os.path.join(b, "rlc", "grl-rlc"),
        }
        for name, path in self.bin.items():
            if not os.path.exists(path):
                sys.exit("run-fleet: %s not found (%s); build first: cmake -S . -B %s && cmake --build %s -j"
                         % (name, path, b, b))
        self.nginx = shutil.which("nginx") or "/usr/sbin/nginx"

    def log_of(self, proc):
        name = next(n for n, p in self.procs if p is proc)
        return os.path.join(self.dir, name + ".log")

    def spawn(self, name, cmd):
        log = open(os.path.join(self.dir, name + ".log"), "ab")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs.append((name, p))
        return p

    def wait_file(self, path, proc, what, timeout=10):
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise StartError(what, self.log_of(proc))
            time.sleep(0.05)

    def start_nginx(self, name, conf, port):
        d = os.path.join(self.dir, name)
        os.makedirs(d)
        os.chmod(d, 0o777)
        path = os.path.join(d, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf.replace("{dir}", d) if "{dir}" in conf else conf)
        p = self.spawn(name, [self.nginx, "-p", d + "/", "-e", os.path.join(d, "error.log"), "-c", path])
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return p
            except OSError:
                if p.poll() is not None or time.monotonic() > deadline:
                    # nginx writes what stops it before its error_log is open to stderr
                    log = os.path.join(d, "error.log")
                    if not os.path.exists(log) or os.path.getsize(log) == 0:
                        log = self.log_of(p)
                    raise StartError("nginx " + name, log)
                time.sleep(0.05)

    def start(self):
        a = self.args
        iv = a.interval
        backend = free_port()
        self.start_nginx("backend", BACKEND_CONF.format(dir="{dir}", port=backend), backend)

        ctl_ep = {k: "tcp://127.0.0.1:%d" % free_port() for k in ("usage", "publish", "admin")}
        self.ctl_endpoints = os.path.join(self.dir, "controller.json")
        # The limits file grl-rlc proposes changes to (--apply would write it; the controller
        # hot-reloads it): a copy of the shipped one, so that nothing writes into the repository.
        # A --limit other than grl-buckets.conf's goes into it, the way an operator changes a
        # limit without touching nginx.conf.
        self.limits = os.path.join(self.dir, "limits.yaml")
        shutil.copyfile(os.path.join(HERE, "limits.yaml"), self.limits)
        if a.limit != SHIPPED_LIMIT:
            with open(self.limits, "w") as fh:
                fh.write("# run-fleet.py --limit %d (grl-buckets.conf says %d)\nbuckets:\n"
                         "  api:\n    limit: %dr/s\n  api-zone:\n    limit: %dr/s\n"
                         % (a.limit, SHIPPED_LIMIT, a.limit, a.limit // 2))
        p = self.spawn("controller", [self.bin["controller"], "--region", "local", "--name", "ctl-local",
                                      "--usage-bind", ctl_ep["usage"], "--publish-bind", ctl_ep["publish"],
                                      "--admin-bind", ctl_ep["admin"], "--metrics-bind", "127.0.0.1:0",
                                      "--interval", iv, "--ttl", "3s", "--limits", self.limits,
                                      "--endpoints-file", self.ctl_endpoints])
        self.wait_file(self.ctl_endpoints, p, "grl-controller")
        with open(self.ctl_endpoints) as f:
            self.ctl = json.load(f)

        self.hosts = []
        for zone in ("zone-a", "zone-b"):
            report, publish = "tcp://127.0.0.1:%d" % free_port(), "tcp://127.0.0.1:%d" % free_port()
            ep = os.path.join(self.dir, "collector-%s.json" % zone)
            p = self.spawn("collector-" + zone,
                           [self.bin["collector"], "--zone", zone, "--region", "local",
                            "--report-bind", report, "--publish-bind", publish,
                            "--controller-usage", ctl_ep["usage"], "--controller-publish", ctl_ep["publish"],
                            "--interval", iv, "--metrics-bind", "127.0.0.1:0", "--endpoints-file", ep])
            self.wait_file(ep, p, "grl-collector " + zone)
            for i in (1, 2):
                host = "%s-nginx%d" % (zone, i)
                port = free_port()
                conf = NGINX_CONF.format(module=self.bin["module"], dir="{dir}", conf=HERE, host=host,
                                         zone=zone, report=report, publish=publish, interval=iv,
                                         backend=backend, port=port)
                self.start_nginx(host, conf, port)
                self.hosts.append((host, port))

        weights = [5, 2, 2, 1]  # one host takes half of the traffic
        lo, hi = 0.5 * a.limit, a.multiple * a.limit
        duration = a.duration if a.duration > 0 else 24 * 3600
        phases = ["%g:%g" % (lo, 5)]
        if a.surge:
            phases += ["%g:%g" % (hi, 25), "%g:%g" % (15 * a.limit, 10), "%g:%g" % (hi, max(1, duration - 40))]
        else:
            phases += ["%g:%g" % (hi, max(1, duration - 5))]
        targets = []
        for (host, port), w in zip(self.hosts, weights):
            targets += ["--target", "127.0.0.1:%d=%d" % (port, w)]
        self.t_start = time.time()
        if a.rlc:
            self.start_rlc()
        self.load = self.spawn("loadgen", [self.bin["loadgen"], "--schedule", ",".join(phases), "--path", "/api/items",
                                           "--interval-ms", "1000", "--max-connections", "256", "--spin-us", "50",
                                           "--out", os.path.join(self.dir, "loadgen.json")] + targets)
        self.schedule = phases

    def rlc(self, *args, check=True):
        p = subprocess.run([self.bin["rlc"]] + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, cwd=self.dir)
        if check and p.returncode != 0:
            raise StartError("grl-rlc " + args[0], self.write_log("rlc-" + args[0], p.stdout))
        return p.stdout

    def write_log(self, name, text):
        path = os.path.join(self.dir, name + ".log")
        with open(path, "w") as fh:
            fh.write(text)
        return path

    def start_rlc(self):
        """The Rate Limit Configurator beside the fleet: five weeks of synthetic history for
        the fleet's buckets (a one-hour 2.5x spike in one of them), grl-rlc record adding the
        live fleet's traffic to the same store, and one cycle's proposals, not applied."""
        a = self.args
        self.store = os.path.join(self.dir, "rlc.db")
        end = str(int(time.time()) - 60)
        common = ["--store", self.store, "--weeks", "5", "--end", end]
        self.rlc("synth", *common, "--bucket", "api", "--base", str(0.6 * a.limit), "--limit",
                 str(a.limit), "--spike", "10:14:2.5", "--seed", "7")
        for zone, share, seed in (("zone-a", 0.35, "8"), ("zone-b", 0.25, "9")):
            self.rlc("synth", *common, "--bucket", "api-zone", "--scope", "zone", "--region",
                     "local", "--zone", zone, "--base", str(share * a.limit), "--limit",
                     str(a.limit // 2), "--mode", "shadow", "--seed", seed)
        # the shipped rlc.yaml (store and limits file beside it: the run directory's)
        shutil.copyfile(os.path.join(HERE, "rlc.yaml"), os.path.join(self.dir, "rlc.yaml"))
        self.spawn("rlc-record", [self.bin["rlc"], "record", "--store", self.store, "--controller",
                                  self.ctl["metrics"], "--interval", "5s", "--poll", "250ms"])
        self.proposals = self.rlc("run", "--config", os.path.join(self.dir, "rlc.yaml"))

    def recorded(self):
        """Intervals grl-rlc record wrote from the live fleet (the synthetic ones end a minute
        before the fleet started)."""
        import sqlite3
        db = sqlite3.connect("file:%s?mode=ro" % self.store, uri=True, timeout=5)
        try:
            return db.execute("SELECT count(*) FROM samples WHERE start_s >= ?",
                              (int(self.t_start),)).fetchone()[0]
        finally:
            db.close()

    def status(self):
        offered = admitted = shadow = 0
        applied = []
        for host, port in self.hosts:
            st = json.loads(http_get("http://127.0.0.1:%d/grl" % port))
            for b in st["buckets"]:
                if b["name"] == "api":
                    offered += b["offered"]
                    admitted += b["admitted"]
                    applied.append(b["ratio"] if b["ratio_state"] == "active" else None)
                if b["name"] == "api-zone":
                    shadow += b["shadow_dropped"]
        return offered, admitted, shadow, applied

    def watch(self):
        a = self.args
        if a.rlc:
            print("grl-rlc: 5 weeks of synthetic history for api (with a one-hour 2.5x spike) and "
                  "api-zone; its proposals for them (grl-rlc run, not applied):\n")
            print("    " + self.proposals.strip().replace("\n", "\n    ") + "\n")
        print("grl fleet on loopback: backend, controller, 2 zones x (collector + 2 nginx), load generator")
        print("  global bucket \"api\": limit %d r/s; zone bucket \"api-zone\": %d r/s per zone, shadow mode"
              % (a.limit, a.limit // 2))
        print("  load: %s (r/s:seconds), weights 5:2:2:1 over the 4 nginx" % ", ".join(self.schedule))
        print("  logs and configs: %s ; grlctl --controller %s buckets" % (self.dir, self.ctl["admin"]))
        print("  dashboard: http://%s/ ; live table: grlctl --controller %s top"
              % (self.ctl["metrics"], self.ctl["admin"]))
        print("  Ctrl-C to stop\n")
        print("%6s %9s %9s %7s %9s %9s %s" % ("t", "offered", "admitted", "limit", "ratio", "applied",
                                              "zone shadow drops"))
        t0 = time.monotonic()
        prev = None
        self.samples = []  # (t, offered total, admitted total, offered r/s) each second
        end = t0 + a.duration if a.duration > 0 else None
        while end is None or time.monotonic() < end:
            time.sleep(1 - ((time.monotonic() - t0) % 1))
            now = time.monotonic()
            try:
                cur = self.status()
                m = metrics(self.ctl["metrics"])
            except OSError:
                continue
            if self.load.poll() is not None:
                print("load generator finished")
                return
            ratio = m.get(("grl_bucket_ratio", (("bucket", "api"), ("scope", "global"), ("zone", ""))))
            limit = m.get(("grl_bucket_limit_rps", (("bucket", "api"), ("scope", "global"), ("zone", ""))))
            if prev:
                dt = now - prev[0]
                off = (cur[0] - prev[1][0]) / dt
                adm = (cur[1] - prev[1][1]) / dt
                self.samples.append((now, cur[0], cur[1], off))
                shd = (cur[2] - prev[1][2]) / dt
                applied = [r for r in cur[3] if r is not None]
                ap = "%.3f" % (sum(applied) / len(applied)) if applied else "none"
                bar = "#" * int(min(60, 40 * adm / max(1, a.limit)))
                print("%5.0fs %9.1f %9.1f %7.0f %9s %9s %8.1f  %s" % (
                    now - t0, off, adm, limit or 0, "%.3f" % ratio if ratio is not None else "-", ap, shd, bar),
                    flush=True)
            prev = (now, cur)

    def verdict(self):
        """Whether the fleet held the limit: the admitted rate over the last seconds in which
        the offered load stayed above the limit (the last phase, after it settled)."""
        a = self.args
        above = []
        for smp in reversed(self.samples):
            if smp[3] < 1.1 * a.limit:
                break
            above.append(smp)
        above.reverse()
        window = above[-a.judge_seconds - 1:]  # n+1 samples span n seconds
        if len(window) < 3:
            return False, ("run-fleet: FAILED: only %d seconds of load above the limit to judge "
                           "(run longer: --duration)" % max(0, len(window) - 1))
        (t_a, off_a, adm_a, _), (t_b, off_b, adm_b, _) = window[0], window[-1]
        offered = (off_b - off_a) / (t_b - t_a)
        admitted = (adm_b - adm_a) / (t_b - t_a)
        err = admitted / a.limit - 1
        ok = abs(err) <= a.tolerance
        return ok, ("run-fleet: %s: admitted %.1f r/s over the last %.0f s at %.1f r/s offered; "
                    "limit %d r/s (%+.1f%%, tolerance %.0f%%)"
                    % ("held" if ok else "FAILED", admitted, t_b - t_a, offered, a.limit,
                       100 * err, 100 * a.tolerance))

    def stop(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM if name != "loadgen" else signal.SIGINT)
        for name, p in reversed(self.procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if not self.args.keep and not self.failed:
            shutil.rmtree(self.dir, ignore_errors=True)
        elif self.args.keep:
            print("kept %s" % self.dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--limit", type=int, default=SHIPPED_LIMIT,
                    help="global limit of bucket api (r/s; default: grl-buckets.conf's; another "
                         "goes into the limits file)")
    ap.add_argument("--multiple", type=float, default=1.5, help="offered load after the step, x limit")
    ap.add_argument("--surge", action="store_true", help="add a 10 s surge to 15x the limit")
    ap.add_argument("--interval", default="250ms", help="report and control interval")
    ap.add_argument("--duration", type=float, default=0, help="seconds; 0: until Ctrl-C")
    ap.add_argument("--keep", action="store_true", help="keep the logs and configs")
    ap.add_argument("--no-rlc", dest="rlc", action="store_false",
                    help="without grl-rlc (synthetic history, recording, proposals)")
    ap.add_argument("--judge-seconds", type=int, default=8,
                    help="with --duration: judge the admitted rate over this many last seconds")
    ap.add_argument("--tolerance", type=float, default=0.10,
                    help="with --duration: largest accepted |admitted/limit - 1|")
    args = ap.parse_args()
    fleet = Fleet(args)
    stopping = []

    def on_signal(sig, frame):
        if stopping:
            return
        stopping.append(sig)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    rc = 0
    try:
        fleet.start()
        fleet.watch()
        if args.rlc:
            print("grl-rlc record: %d live intervals of 5 s recorded in %s"
                  % (fleet.recorded(), fleet.store))
        if args.duration > 0:
            ok, line = fleet.verdict()
            print(line)
            if not ok:
                fleet.failed, rc = True, 1
    except KeyboardInterrupt:
        print("\nstopping...")
    except StartError as e:
        print(e, file=sys.stderr)
        fleet.failed, rc = True, 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        fleet.stop()
        print("stopped" + ("; logs and configs kept in %s" % fleet.dir if fleet.failed else ""))
    return rc


if __name__ == "__main__":
    sys.exit(main())
