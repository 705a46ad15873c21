#!/usr/bin/python3
"""Convergence benchmark of the control loop (issue #3): a step in offered load from 0.5x to
1.5x the global limit, and a surge from 0.5x to 15x, at report intervals of 1 s and 250 ms.

Fleet on loopback: one grl-controller, two zones each with a grl-collector and two nginx
(grl module, empty_gif), and grl_loadgen (open loop, 100 ms bins) spreading the load 5:2:2:1
over the nginx. Every interval (nginx grl_report_interval, collector and controller
--interval) is the one under test; TTL 3 intervals (at least 2 s).

Per run:
  settle_s      time from the step until the admitted rate (1 s centred window) is within
                10% of the limit and stays there for 3 s
  first_ratio_s time from the step until nginx applies a non-zero ratio (status page polled
                every 20 ms)
  overshoot     requests admitted above the limit between the step and settling, and the
                peak admitted rate over 500 ms relative to the limit
  steady_error  admitted rate over the last 5 s of the step relative to the limit

Usage: python3 bench/control_plane/convergence.py [--build-dir build] [--limit 400]
       [--rounds 3] [--intervals 1s,250ms] [--steps 1.5,15] [--out FILE]
Only the standard library is needed.
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ms(d):
    return int(d[:-2]) if d.endswith("ms") else int(float(d[:-1]) * 1000)


NGINX = """\
load_module {module};
worker_processes 1;
daemon off;
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {dir}/cb; proxy_temp_path {dir}/px; fastcgi_temp_path {dir}/fc;
    uwsgi_temp_path {dir}/uw; scgi_temp_path {dir}/sc;
    keepalive_timeout 60s;
    keepalive_requests 100000;
    grl_zone grl:1m;
    grl_host id={host} zone={zone} region=bench;
    grl_collector {report};
    grl_instructions {publish};
    grl_report_interval {interval};
    grl_instruction_ttl {ttl};
    grl_bucket api procedure_prefix=/ rate={limit}r/s;
    server {{
        listen 127.0.0.1:{port};
        location = /grl {{ grl off; grl_status; }}
        location / {{ grl on; empty_gif; }}
    }}
}}
"""


class Fleet:
    def __init__(self, build, interval, limit, window=None):
        self.dir = tempfile.mkdtemp(prefix="grl-conv-")
        os.chmod(self.dir, 0o777)
        self.procs = []
        self.build = build
        self.interval = interval
        ttl = "%dms" % max(2000, 3 * ms(interval))
        c = {k: "tcp://127.0.0.1:%d" % free_port() for k in ("usage", "publish", "admin")}
        self.spawn("controller", [os.path.join(build, "controller", "grl-controller"), "--region", "bench",
                                  "--name", "ctl", "--usage-bind", c["usage"], "--publish-bind", c["publish"],
                                  "--admin-bind", c["admin"], "--interval", interval, "--ttl", ttl,
                                  "--log-level", "warn"] + (["--window", window] if window else []))
        self.ports = []
        for zone in ("a", "b"):
            report, publish = "tcp://127.0.0.1:%d" % free_port(), "tcp://127.0.0.1:%d" % free_port()
            self.spawn("collector-" + zone, [os.path.join(build, "collector", "grl-collector"), "--zone", zone,
                                             "--region", "bench", "--report-bind", report, "--publish-bind", publish,
                                             "--controller-usage", c["usage"], "--controller-publish", c["publish"],
                                             "--interval", interval, "--log-level", "warn"])
            for i in (1, 2):
                port = free_port()
                d = os.path.join(self.dir, "%s%d" % (zone, i))
                os.makedirs(d)
                os.chmod(d, 0o777)
                with open(os.path.join(d, "nginx.conf"), "w") as f:
                    f.write(NGINX.format(module=os.path.join(build, "ngx_module", "ngx_http_grl_module.so"),
                                         dir=d, host="%s%d" % (zone, i), zone=zone, report=report,
                                         publish=publish, interval=interval, ttl=ttl, limit=limit, port=port))
                self.spawn("nginx-%s%d" % (zone, i), [shutil.which("nginx") or "/usr/sbin/nginx", "-p", d + "/",
                                                      "-e", os.path.join(d, "error.log"),
                                                      "-c", os.path.join(d, "nginx.conf")])
                self.ports.append(port)
        deadline = time.monotonic() + 10
        for port in self.ports:
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        sys.exit("convergence.py: nginx did not start, see %s" % self.dir)
                    time.sleep(0.05)

    def spawn(self, name, cmd):
        log = open(os.path.join(self.dir, name + ".log"), "ab")
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        log.close()

    def applied_ratio(self, port):
        st = json.loads(urllib.request.urlopen("http://127.0.0.1:%d/grl" % port, timeout=2).read())
        b = [x for x in st["buckets"] if x["name"] == "api"][0]
        return b["ratio"] if b["ratio_state"] == "active" else 0.0

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_once(fleet, build, limit, mult, base_s=8, step_s=15):
    # A random phase between the step and the daemons' ticks: back-to-back runs of equal
    # length would otherwise all measure the same phase.
    time.sleep(random.uniform(0, ms(fleet.interval) / 1000.0))
    out = tempfile.mktemp(suffix=".json")
    targets = []
    for port, w in zip(fleet.ports, (5, 2, 2, 1)):
        targets += ["--target", "127.0.0.1:%d=%d" % (port, w)]
    sched = "%g:%g,%g:%g" % (0.5 * limit, base_s, mult * limit, step_s)
    lg = subprocess.Popen([os.path.join(build, "bench", "grl_loadgen"), "--schedule", sched, "--path", "/x",
                           "--interval-ms", "100", "--max-connections", "512", "--out", out] + targets,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    ratios = []  # (seconds since load start, applied ratio on the busiest nginx)
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            try:
                ratios.append((time.monotonic() - t0, fleet.applied_ratio(fleet.ports[0])))
            except OSError:
                pass
            time.sleep(0.02)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    _, err = lg.communicate(timeout=base_s + step_s + 60)
    stop.set()
    th.join()
    if lg.returncode != 0:
        sys.exit("grl_loadgen failed: %s" % err.decode())
    with open(out) as f:
        r = json.load(f)
    os.unlink(out)
    dt = r["interval_ms"] / 1000.0
    ok = [i["ok"] for i in r["intervals"]]
    ts = [i["t"] for i in r["intervals"]]
    step_t = r["phases"][1]["start_s"]

    def window_rate(k, width):  # centred, requests per second
        h = int(round(width / dt / 2))
        lo, hi = max(0, k - h), min(len(ok), k + h)
        return sum(ok[lo:hi]) / ((hi - lo) * dt) if hi > lo else 0.0

    k_step = next(k for k, t in enumerate(ts) if t >= step_t)
    k_end = next((k for k, t in enumerate(ts) if t >= step_t + step_s - 0.5), len(ts))
    settle = None
    for k in range(k_step, k_end):
        stay = int(3 / dt)
        if k + stay > k_end:
            break
        if all(abs(window_rate(j, 1.0) - limit) <= 0.1 * limit for j in range(k, k + stay)):
            settle = ts[k] - step_t
            break
    k_settle = k_step + int((settle if settle is not None else step_s) / dt)
    over = sum(max(0.0, ok[j] - limit * dt) for j in range(k_step, min(k_settle, len(ok))))
    peak = max(window_rate(j, 0.5) for j in range(k_step, k_end)) / limit
    steady = [window_rate(j, 1.0) for j in range(max(k_step, k_end - int(5 / dt)), k_end)]
    first = next((t - step_t for t, x in ratios if t >= step_t and x > 0.0), None)
    target = 1 - 1 / mult
    near = next((t - step_t for t, x in ratios if t >= step_t and abs(x - target) <= 0.05), None)
    return {"settle_s": settle, "first_ratio_s": first, "ratio_within_0.05_s": near,
            "overshoot_requests": round(over), "peak_admitted_x_limit": round(peak, 2),
            "steady_error": round(statistics.mean(steady) / limit - 1, 4) if steady else None,
            "late_sends_p99_us": r["phases"][1].get("send_lag_us", {}).get("p99")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("GRL_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--limit", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--intervals", default="1s,250ms")
    ap.add_argument("--steps", default="1.5,15")
    ap.add_argument("--window", default=None, help="controller --window (default: the controller's)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    results = []
    for iv in a.intervals.split(","):
        for mult in (float(x) for x in a.steps.split(",")):
            runs = []
            for _ in range(a.rounds):
                # A fresh fleet per round: the phases between nginx's report timers and the
                # daemons' ticks are set when they start, and they decide much of the delay.
                fleet = Fleet(a.build_dir, iv, a.limit, a.window)
                try:
                    time.sleep(2)
                    runs.append(run_once(fleet, a.build_dir, a.limit, mult))
                finally:
                    fleet.stop()
                print(json.dumps({"interval": iv, "step": mult, **runs[-1]}), flush=True)

            def med(k):
                vals = [r[k] for r in runs if r[k] is not None]
                return statistics.median(vals) if vals else None

            summary = {"interval": iv, "window": a.window or "default", "step_x_limit": mult,
                       "rounds": a.rounds, "settle_s_median": med("settle_s"),
                       "settle_s_max": max((r["settle_s"] for r in runs if r["settle_s"] is not None),
                                           default=None),
                       "unsettled_runs": sum(r["settle_s"] is None for r in runs),
                       "first_ratio_s_median": med("first_ratio_s"),
                       "ratio_within_0.05_s_median": med("ratio_within_0.05_s"),
                       "overshoot_requests_median": med("overshoot_requests"),
                       "peak_admitted_x_limit_median": med("peak_admitted_x_limit"),
                       "steady_error_median": med("steady_error")}
            results.append(summary)
            print("SUMMARY " + json.dumps(summary), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
