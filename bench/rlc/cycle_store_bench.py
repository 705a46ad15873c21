#!/usr/bin/env python3
"""grl-rlc's full cycle through the real SQLite store (docs/rlc.md, "Measured"):

  1. `grl-rlc synth` N buckets x W weeks at a 60 s interval (one global instance
     each, a limit so that drops are non-zero) into a fresh store, timed;
  2. per policy (peak, forecast, fixed), `grl-rlc run` on it as of the end of
     the history, under /usr/bin/time -v: wall and CPU time, peak RSS.

The figures are the process's own (its wall time includes waiting for a core
on a shared machine; CPU is user + system of every thread).

Before/after in one run (--compare OLD_BUILD_DIR): per policy and round, the old grl-rlc
then the new one on the same store, interleaved so that the machine's load falls on both;
medians over --runs rounds and the ratio. The new grl-rlc's first cycle on a store writes
its sample blocks (docs/rlc-history.md): that cold cycle is run and reported first, apart.
--taskset CPUS pins every grl-rlc run (taskset -c CPUS).

Usage: bench/rlc/cycle_store_bench.py [--buckets 2000] [--weeks 5] [--slice 50]
       [--store FILE]   (an existing FILE is reused, not synthesized again)
       [--compare OLD_BUILD_DIR] [--runs 3] [--taskset 0,1] [--policies peak,forecast,fixed]
Binaries from GRL_BUILD_DIR (default build/).
"""
import argparse
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("GRL_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
RLC = os.path.join(BUILD, "rlc", "grl-rlc")
END = 1795996800  # 2026-11-30T00:00:00Z


def timed(cmd):
    """Runs cmd under /usr/bin/time -v; returns (wall s, cpu s, max RSS MB, stdout)."""
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, check=False)
    err = p.stderr.decode(errors="replace")
    if p.returncode != 0:
        sys.exit("%s failed (%d):\n%s" % (" ".join(cmd), p.returncode, err[-3000:]))

    def field(name):
        m = re.search(r"^\s*%s: (.*)$" % re.escape(name), err, re.M)
        if not m:
            sys.exit("no %r in /usr/bin/time's output:\n%s" % (name, err[-2000:]))
        return m.group(1)
    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    rss = int(field("Maximum resident set size (kbytes)")) / 1024
    return wall, cpu, rss, p.stdout.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--buckets", type=int, default=2000)
    ap.add_argument("--weeks", type=int, default=5)
    ap.add_argument("--slice", type=int, default=50)
    ap.add_argument("--store", help="store file; reused when it exists")
    ap.add_argument("--compare", metavar="OLD_BUILD_DIR",
                    help="also run OLD_BUILD_DIR/rlc/grl-rlc, interleaved with this build's")
    ap.add_argument("--runs", type=int, default=3, help="rounds with --compare")
    ap.add_argument("--taskset", help="pin every grl-rlc run to these CPUs (taskset -c)")
    ap.add_argument("--policies", default="peak,forecast,fixed")
    a = ap.parse_args()
    if not os.path.exists(RLC):
        sys.exit("%s not built" % RLC)
    d = tempfile.mkdtemp(prefix="rlc-cycle-store-")
    try:
        store = a.store or os.path.join(d, "h.db")
        names = ["b-%04d" % i for i in range(a.buckets)]
        if os.path.exists(store):
            print("store: %s (reused, %.1f GB)" % (store, os.path.getsize(store) / 1e9))
        else:
            cmd = [RLC, "synth", "--store", store, "--weeks", str(a.weeks), "--interval", "60s",
                   "--end", str(END), "--limit", "400"]
            for n in names:
                cmd += ["--bucket", n]
            wall, cpu, rss, out = timed(cmd)
            print("synth: %d buckets x %d weeks at 60 s: %.1f s wall, %.1f s CPU, %.0f MB RSS, "
                  "store %.1f GB" % (a.buckets, a.weeks, wall, cpu, rss,
                                     os.path.getsize(store) / 1e9))
        with open(os.path.join(d, "quotas.yaml"), "w") as fh:
            fh.write("quotas:\n" + "".join("  %s: %dr/s\n" % (n, 100 + i)
                                           for i, n in enumerate(names)))
        with open(os.path.join(d, "limits.yaml"), "w") as fh:
            fh.write("buckets: {}\n")
        pin = ["taskset", "-c", a.taskset] if a.taskset else []
        policies = a.policies.split(",")
        for policy in policies:
            with open(os.path.join(d, "rlc-%s.yaml" % policy), "w") as fh:
                fh.write("limits_file: limits.yaml\nwindow: %dw\nquota_file: quotas.yaml\n"
                         "default: %s\n" % (a.weeks, policy))

        def run(rlc, policy):
            cmd = pin + [rlc, "run", "--config", os.path.join(d, "rlc-%s.yaml" % policy),
                         "--store", store, "--at", str(END), "--slice", str(a.slice)]
            return cmd, timed(cmd)

        if a.compare:
            old = os.path.join(a.compare, "rlc", "grl-rlc")
            if not os.path.exists(old):
                sys.exit("%s not built" % old)
            print("load average at the start: %s" % open("/proc/loadavg").read().strip())
            # The new grl-rlc's first cycle writes the blocks; later ones read them.
            db = sqlite3.connect(store)
            try:
                db.execute("DELETE FROM sample_blocks")
                db.commit()
                what = "blocks deleted first"
            except sqlite3.OperationalError:
                what = "a store from before blocks"
            db.close()
            _, (wall, cpu, rss, out) = run(RLC, policies[0])
            print("new, first cycle (%s, %s; it writes them): %.1f s wall, %.1f s CPU, %.0f MB"
                  % (policies[0], what, wall, cpu, rss), flush=True)
            print("%-10s %5s %12s %12s %12s %12s" % ("policy", "round", "old wall", "new wall",
                                                     "old CPU", "new CPU"))
            summary = []
            for policy in policies:
                walls = {"old": [], "new": []}
                cpus = {"old": [], "new": []}
                outs = {}
                for i in range(a.runs):
                    for name, rlc in (("old", old), ("new", RLC)):
                        cmd, (wall, cpu, rss, out) = run(rlc, policy)
                        walls[name].append(wall)
                        cpus[name].append(cpu)
                        outs.setdefault(name, out)
                        if out != outs[name]:
                            sys.exit("%s gave another plan in round %d" % (name, i + 1))
                    print("%-10s %5d %12.1f %12.1f %12.1f %12.1f" % (
                        policy, i + 1, walls["old"][-1], walls["new"][-1], cpus["old"][-1],
                        cpus["new"][-1]), flush=True)
                if outs["old"] != outs["new"]:
                    sys.exit("%s: the old and the new grl-rlc proposed differently" % policy)
                summary.append((policy, statistics.median(walls["old"]),
                                statistics.median(walls["new"]), statistics.median(cpus["old"]),
                                statistics.median(cpus["new"])))
            print("medians over %d rounds (plans identical):" % a.runs)
            print("%-10s %12s %12s %8s %12s %12s %8s" % ("policy", "old wall", "new wall", "ratio",
                                                         "old CPU", "new CPU", "ratio"))
            for policy, ow, nw, oc, nc in summary:
                print("%-10s %12.1f %12.1f %8.1f %12.1f %12.1f %8.1f" % (policy, ow, nw, ow / nw,
                                                                         oc, nc, oc / nc))
            print("load average at the end: %s" % open("/proc/loadavg").read().strip())
            print("command: %s" % " ".join(sys.argv))
            return
        print("%-10s %10s %10s %12s %10s %10s" % ("policy", "wall (s)", "CPU (s)", "peak RSS (MB)",
                                                  "proposed", "declined"))
        for policy in policies:
            cmd, (wall, cpu, rss, out) = run(RLC, policy)
            table = out.split("\n\ndeclined:")[0].split("\n\nlimits file changes:")[0]
            proposed = len(re.findall(r"^b-\d{4} ", table, re.M))
            declined = len(re.findall(r"^  b-\d{4} \(", out, re.M))
            print("%-10s %10.1f %10.1f %12.0f %10d %10d" % (policy, wall, cpu, rss, proposed,
                                                           declined), flush=True)
        print("command: %s" % " ".join(cmd).replace(d, "$DIR").replace("rlc-fixed", "rlc-POLICY"))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
