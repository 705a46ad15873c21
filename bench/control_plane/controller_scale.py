#!/usr/bin/python3
"""The controller at fleet scale (issue 11 section 4): one real grl-controller at a 250 ms
interval fed by grl_controller_sim, which plays Z zones' collectors (zone_usage of B buckets
each, every interval, spread over the interval, in parts beyond one message) and P peer
regions' controllers (region_usage of B buckets each), and times the instructions the
controller publishes, directly and through one real grl-collector's relay (the hop nginx
subscribes to).

Measured over the steady window (after a warm-up): the controller's CPU (share of one core,
from /proc/PID/stat), resident memory (VmRSS, peak VmHWM), tick time (its
grl_controller_tick_seconds histogram: mean over the window, the bucket holding the p99,
the longest since start), message sizes (zone usage, region usage in and out, instruction
messages) and instruction propagation (ts_ms, the controller's wall clock when its tick
started, to receipt) p50/p99/max.

Targets: tick <= 25 ms, the controller at most 20% of one core, propagation p99 <= 50 ms.

Usage: /usr/bin/python3 bench/control_plane/controller_scale.py [--build-dir build]
       [--zones 50] [--peers 4] [--buckets 10000] [--interval 0.25] [--duration 30]
       [--warmup 10] [--over 0.01] [--pin] [--thp 1] [--out results.json]
The controller runs with its heap in transparent huge pages, as grl-controller.service runs it
(GLIBC_TUNABLES=glibc.malloc.hugetlb=1, docs/operations.md); --thp 0 for 4 KB pages.
Helpers from bench/benchlib.py and scale.py (Debian's python3).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import re  # noqa: E402
import urllib.request  # noqa: E402

from benchlib import ROOT, free_port, wait_until  # noqa: E402
from scale import cpu_seconds, memory_kb  # noqa: E402


def metrics(addr):
    """Like scale.py's, with a long timeout and three tries: a saturated controller answers
    late, or cuts a long answer (http.client.IncompleteRead)."""
    out = {}
    for attempt in range(3):
        try:
            text = urllib.request.urlopen("http://%s/metrics" % addr, timeout=60).read().decode()
            break
        except Exception:  # noqa: BLE001 - retried, then raised
            if attempt == 2:
                raise
            time.sleep(0.5)
    for line in text.splitlines():
        if line and not line.startswith("#") and line.startswith("grl_controller_"):
            m = re.match(r'^(\w+)(\{.*\})? (\S+)$', line)
            if m:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out

TICK_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1]


def tick_stats(m0, m1):
    """Mean and p99 (upper bound of its histogram bucket) of the ticks between two scrapes."""
    n = m1["grl_controller_tick_seconds_count"] - m0["grl_controller_tick_seconds_count"]
    s = m1["grl_controller_tick_seconds_sum"] - m0["grl_controller_tick_seconds_sum"]
    p99 = None
    for le in TICK_BUCKETS:
        key = 'grl_controller_tick_seconds_bucket{le="%g"}' % le
        if m1[key] - m0[key] >= 0.99 * n:
            p99 = le
            break
    cpu = m1["grl_controller_tick_cpu_seconds_total"] - m0["grl_controller_tick_cpu_seconds_total"]
    return {"ticks": int(n), "mean_ms": round(1000 * s / n, 2) if n else None,
            "mean_cpu_ms": round(1000 * cpu / n, 2) if n else None,
            "p99_at_most_ms": round(1000 * p99, 1) if p99 else "> 1000",
            "max_since_start_ms": round(1000 * m1["grl_controller_tick_max_seconds"], 2)}


def controller_env(thp):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if thp:
        env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("GRL_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--zones", type=int, default=50)
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--buckets", type=int, default=10000)
    ap.add_argument("--hosts-per-zone", type=int, default=20)
    ap.add_argument("--interval", type=float, default=0.25, help="seconds")
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--over", type=float, default=0.01, help="share of buckets offered 1.5x their limit")
    ap.add_argument("--pin", action="store_true",
                    help="controller and collector on CPU 0, the simulator on CPU 1 (taskset)")
    ap.add_argument("--thp", type=int, choices=(0, 1), default=1,
                    help="1 (default): the controller's heap in transparent huge pages, as its systemd unit "
                         "runs it (GLIBC_TUNABLES=glibc.malloc.hugetlb=1); 0: 4 KB pages")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    b = a.build_dir
    bins = {"collector": os.path.join(b, "collector", "grl-collector"),
            "controller": os.path.join(b, "controller", "grl-controller"),
            "sim": os.path.join(b, "bench", "control_plane", "grl_controller_sim")}
    for k, v in bins.items():
        if not os.path.exists(v):
            sys.exit("controller_scale.py: %s not built: %s" % (k, v))
    d = tempfile.mkdtemp(prefix="grl-ctl-scale-")
    ep = lambda: "tcp://127.0.0.1:%d" % free_port()  # noqa: E731
    usage, publish, admin, peer, report, relay = ep(), ep(), ep(), ep(), ep(), ep()
    iv = "%dms" % int(a.interval * 1000)
    procs = []

    def pinned(cmd, cpu):
        return (["taskset", "-c", str(cpu)] + cmd) if a.pin else cmd

    def spawn(name, cmd, env=None):
        log = open(os.path.join(d, name + ".log"), "ab")
        p = subprocess.Popen(pinned(cmd, 0), stdout=log, stderr=subprocess.STDOUT, env=env)
        procs.append(p)
        return p

    try:
        ctl = spawn("controller", [bins["controller"], "--region", "r1", "--name", "ctl", "--usage-bind", usage,
                                   "--publish-bind", publish, "--admin-bind", admin, "--interval", iv,
                                   "--ttl", "2s", "--metrics-bind", "127.0.0.1:0",
                                   "--endpoints-file", os.path.join(d, "ctl.json")]
                    + (["--peer", peer] if a.peers else []),
                    env=controller_env(a.thp))
        # The relay nginx would subscribe to; its own zone usage is empty (no hosts).
        col = spawn("collector", [bins["collector"], "--zone", "relay", "--region", "r1", "--report-bind", report,
                                  "--publish-bind", relay, "--controller-usage", usage, "--controller-publish", publish,
                                  "--interval", iv, "--metrics-bind", "127.0.0.1:0",
                                  "--endpoints-file", os.path.join(d, "col.json")])
        wait_until(lambda: all(os.path.exists(os.path.join(d, n)) for n in ("ctl.json", "col.json")),
                   10, "the daemons to start (logs in %s)" % d)
        with open(os.path.join(d, "ctl.json")) as f:
            ctl_metrics = json.load(f)["metrics"]
        sim = subprocess.Popen(pinned([bins["sim"], "--zones", str(a.zones), "--peers", str(a.peers),
                                       "--buckets", str(a.buckets), "--hosts-per-zone", str(a.hosts_per_zone),
                                       "--interval", str(a.interval), "--duration", str(a.duration),
                                       "--warmup", str(a.warmup), "--over", str(a.over),
                                       "--usage", usage, "--publish", publish, "--peer-bind", peer,
                                       "--relay", relay], 1),
                               stdout=subprocess.PIPE)
        time.sleep(1.0 + a.warmup)  # the simulator encodes its messages first (~1 s)
        t0 = time.monotonic()
        c0 = {n: cpu_seconds(p.pid) for n, p in (("controller", ctl), ("collector", col), ("sim", sim))}
        m0 = metrics(ctl_metrics)
        time.sleep(a.duration - 2)
        t1 = time.monotonic()
        c1 = {n: cpu_seconds(p.pid) for n, p in (("controller", ctl), ("collector", col), ("sim", sim))}
        m1 = metrics(ctl_metrics)
        mem = memory_kb(ctl.pid)
        out, _ = sim.communicate(timeout=a.duration + 60)
        simr = json.loads(out)
        dt = t1 - t0

        def delta(k):
            return m1.get(k, 0) - m0.get(k, 0)
        res = {
            "zones": a.zones, "peers": a.peers, "buckets": a.buckets, "interval_s": a.interval,
            "controller_thp": a.thp, "window_s": round(dt, 1),
            "controller_cpu_core": round((c1["controller"] - c0["controller"]) / dt, 3),
            "collector_relay_cpu_core": round((c1["collector"] - c0["collector"]) / dt, 3),
            "simulator_cpu_core": round((c1["sim"] - c0["sim"]) / dt, 3),
            "controller_rss_MB": round(mem["VmRSS"] / 1024, 1),
            "controller_peak_rss_MB": round(mem["VmHWM"] / 1024, 1),
            "tick": tick_stats(m0, m1),
            "zone_usage_per_s": round(delta('grl_controller_messages_total{kind="zone_usage"}') / dt, 1),
            "region_usage_in_per_s": round(delta('grl_controller_messages_total{kind="region_usage"}') / dt, 1),
            "zone_usage_bytes_and_parts": [simr["zone_usage_bytes"], simr["zone_usage_parts"]],
            "region_usage_in_bytes_and_parts": [simr["region_usage_in_bytes"], simr["region_usage_in_parts"]],
            "region_usage_out_bytes_and_parts": [m1.get("grl_controller_region_usage_bytes"),
                                                 m1.get("grl_controller_region_usage_parts")],
            "usage_sets_complete_per_s": round(
                (delta('grl_controller_usage_parts_total{kind="zone_usage",result="complete"}')
                 + delta('grl_controller_usage_parts_total{kind="region_usage",result="complete"}')) / dt, 1),
            "usage_sets_incomplete": delta('grl_controller_usage_sets_incomplete_total{kind="zone_usage"}')
            + delta('grl_controller_usage_sets_incomplete_total{kind="region_usage"}'),
            "controller_zones_fresh": m1.get('grl_controller_zones{state="fresh"}'),
            "messages_dropped": delta("grl_controller_messages_dropped_total"),
            "usage_send_failed": simr["usage_send_failed"],
            "instructions_direct": simr["direct"],
            "instructions_relay": simr.get("relay"),
        }
        print(json.dumps(res, indent=2))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=2)
        mean = res["tick"]["mean_cpu_ms"] or 1e9
        p99 = simr.get("relay", simr["direct"])["propagation_ms"]["p99"]
        print("targets: tick <= 25 ms: %s (mean CPU %.2f ms; wall p99 <= %s ms, max %.2f ms); controller <= 0.20 core: %s "
              "(%.3f); propagation p99 <= 50 ms: %s (%.2f ms through the relay)" % (
                  "met" if mean <= 25 else "NOT MET", mean, res["tick"]["p99_at_most_ms"],
                  res["tick"]["max_since_start_ms"],
                  "met" if res["controller_cpu_core"] <= 0.20 else "NOT MET", res["controller_cpu_core"],
                  "met" if 0 <= p99 <= 50 else "NOT MET", p99), file=sys.stderr)
        print("run directory (logs): %s" % d, file=sys.stderr)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
