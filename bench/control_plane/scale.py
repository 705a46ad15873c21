#!/usr/bin/python3
"""Scale benchmark of the control plane (issue #3): one real grl-collector and one real
grl-controller fed by grl_fleet_sim, which plays N hosts x B buckets reporting every
interval, and times the instructions relayed back to it.

Measured over the steady window (after a warm-up), per daemon: CPU (share of one core,
from /proc/PID/stat), resident memory (VmRSS, and the peak VmHWM); per report: bytes on the
wire; per zone usage message: bytes and the time to sum and encode it; instruction
propagation (controller publish -> collector relay -> subscriber) p50/p99/max.

Targets: one collector ingests 10,000 hosts x 100 buckets at 1 Hz within a quarter of one
core; instruction propagation p99 under 50 ms.

Usage: python3 bench/control_plane/scale.py [--build-dir build] [--hosts 10000] [--buckets 100]
       [--interval 1] [--duration 30] [--warmup 10] [--recent connect|never|always]
       [--out results.json]
Helpers from bench/benchlib.py (Debian's python3; another one re-executes under it).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import ROOT, free_port, wait_until  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ  # utime + stime


def memory_kb(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":")
                out[k] = int(v.split()[0])
    return out


def metrics(addr):
    out = {}
    for line in urllib.request.urlopen("http://%s/metrics" % addr, timeout=5).read().decode().splitlines():
        if line and not line.startswith("#"):
            m = re.match(r'^(\w+)(\{.*\})? (\S+)$', line)
            if m:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.environ.get("GRL_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--hosts", type=int, default=10000)
    ap.add_argument("--buckets", type=int, default=100)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds")
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--batch", default=None, help="collector --batch (default: the collector's)")
    ap.add_argument("--pin", action="store_true",
                    help="daemons on CPU 0, the simulator on CPU 1 (taskset), as on a quiet 2-core box")
    ap.add_argument("--recent", choices=["connect", "never", "always"], default="connect",
                    help="which reports carry their last interval's counts: like nginx (after "
                         "connecting), never, or every one (to measure what they cost)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    b = a.build_dir
    bins = {"collector": os.path.join(b, "collector", "grl-collector"),
            "controller": os.path.join(b, "controller", "grl-controller"),
            "sim": os.path.join(b, "bench", "control_plane", "grl_fleet_sim")}
    for k, v in bins.items():
        if not os.path.exists(v):
            sys.exit("scale.py: %s not built: %s" % (k, v))
    d = tempfile.mkdtemp(prefix="grl-scale-")
    ep = lambda: "tcp://127.0.0.1:%d" % free_port()  # noqa: E731
    usage, publish, admin, report, relay = ep(), ep(), ep(), ep(), ep()
    iv = "%dms" % int(a.interval * 1000)
    procs = []

    def pinned(cmd, cpu):
        return (["taskset", "-c", str(cpu)] + cmd) if a.pin else cmd

    def spawn(name, cmd):
        cmd = pinned(cmd, 0)
        log = open(os.path.join(d, name + ".log"), "ab")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    try:
        ctl = spawn("controller", [bins["controller"], "--region", "r1", "--name", "ctl", "--usage-bind", usage,
                                   "--publish-bind", publish, "--admin-bind", admin, "--interval", iv,
                                   "--metrics-bind", "127.0.0.1:0", "--endpoints-file", os.path.join(d, "ctl.json")])
        col = spawn("collector", [bins["collector"], "--zone", "z1", "--region", "r1", "--report-bind", report,
                                  "--publish-bind", relay, "--controller-usage", usage, "--controller-publish", publish,
                                  "--interval", iv, "--metrics-bind", "127.0.0.1:0",
                                  "--endpoints-file", os.path.join(d, "col.json")]
                    + (["--batch", a.batch] if a.batch else []))
        wait_until(lambda: all(os.path.exists(os.path.join(d, n)) for n in ("ctl.json", "col.json")),
                   10, "the daemons to start (logs in %s)" % d)
        with open(os.path.join(d, "col.json")) as f:
            col_metrics = json.load(f)["metrics"]
        with open(os.path.join(d, "ctl.json")) as f:
            ctl_metrics = json.load(f)["metrics"]
        sim = subprocess.Popen(pinned([bins["sim"], "--hosts", str(a.hosts), "--buckets", str(a.buckets),
                                "--interval", str(a.interval), "--duration", str(a.duration),
                                "--warmup", str(a.warmup), "--connections", str(a.connections),
                                "--report", report, "--publish", relay]
                                       + ["--recent", a.recent], 1),
                               stdout=subprocess.PIPE)
        time.sleep(0.5 + a.warmup)
        t0 = time.monotonic()
        c0 = {n: cpu_seconds(p.pid) for n, p in (("collector", col), ("controller", ctl), ("sim", sim))}
        m0 = metrics(col_metrics)
        time.sleep(a.duration - 1)
        t1 = time.monotonic()
        c1 = {n: cpu_seconds(p.pid) for n, p in (("collector", col), ("controller", ctl), ("sim", sim))}
        m1 = metrics(col_metrics)
        mem = {n: memory_kb(p.pid) for n, p in (("collector", col), ("controller", ctl))}
        km = metrics(ctl_metrics)
        out, _ = sim.communicate(timeout=a.duration + 30)
        simr = json.loads(out)
        dt = t1 - t0
        reports = sum(v for k, v in m1.items() if k.startswith("grl_collector_reports_total")) - \
            sum(v for k, v in m0.items() if k.startswith("grl_collector_reports_total"))
        accepted = m1['grl_collector_reports_total{result="accepted"}'] - m0['grl_collector_reports_total{result="accepted"}']
        res = {
            "hosts": a.hosts, "buckets": a.buckets, "interval_s": a.interval, "window_s": round(dt, 1),
            "reports_per_s": round(reports / dt, 1),
            "accepted_per_s": round(accepted / dt, 1),
            "report_bytes": simr["report_bytes_avg"],
            "report_bandwidth_MBps": round(simr["report_bytes_avg"] * reports / dt / 1e6, 2),
            "collector_cpu_core": round((c1["collector"] - c0["collector"]) / dt, 3),
            "controller_cpu_core": round((c1["controller"] - c0["controller"]) / dt, 3),
            "simulator_cpu_core": round((c1["sim"] - c0["sim"]) / dt, 3),
            "collector_rss_MB": round(mem["collector"]["VmRSS"] / 1024, 1),
            "collector_peak_rss_MB": round(mem["collector"]["VmHWM"] / 1024, 1),
            "controller_rss_MB": round(mem["controller"]["VmRSS"] / 1024, 1),
            "host_bucket_entries": m1.get("grl_collector_host_buckets"),
            "fresh_hosts": m1.get('grl_collector_hosts{state="fresh"}'),
            "malformed": m1.get("grl_collector_reports_malformed_total"),
            "zone_usage_bytes": m1.get("grl_collector_usage_bytes"),
            "zone_usage_build_ms": round(1000 * m1.get("grl_collector_usage_build_seconds", 0), 2),
            "controller_hosts": km.get('grl_controller_hosts{state="fresh"}'),
            "instructions_received": simr["instructions"],
            "instruction_bytes": simr["instruction_bytes_avg"],
            "propagation_ms": simr["propagation_ms"],
            "reports_failed_to_queue": simr["reports_failed"],
        }
        print(json.dumps(res, indent=2))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=2)
        ok_cpu = res["collector_cpu_core"] <= 0.25
        ok_p99 = 0 <= res["propagation_ms"]["p99"] < 50
        print("target: collector <= 0.25 core: %s (%.3f); propagation p99 < 50 ms: %s (%.2f ms)" % (
            "met" if ok_cpu else "NOT MET", res["collector_cpu_core"], "met" if ok_p99 else "NOT MET",
            res["propagation_ms"]["p99"]), file=sys.stderr)
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
