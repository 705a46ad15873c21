#!/usr/bin/python3
"""Two builds of the controller at fleet scale, interleaved (A, B, A, B, ...): runs
controller_scale.py once per round and build with the same arguments, and prints the median
of each figure per build. For before/after comparisons on a shared machine, where the load of
other jobs drifts: interleaving spreads the drift over both builds.

Usage: /usr/bin/python3 bench/control_plane/controller_scale_ab.py --a BUILD_DIR_A --b BUILD_DIR_B
       [--rounds 3] [--a-args "..."] [--b-args "..."] [--out results.json] -- [controller_scale.py arguments]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

FIGURES = [
    ("controller CPU (cores)", lambda r: r["controller_cpu_core"]),
    ("controller RSS (MB)", lambda r: r["controller_rss_MB"]),
    ("tick CPU mean (ms)", lambda r: r["tick"]["mean_cpu_ms"]),
    ("tick wall mean (ms)", lambda r: r["tick"]["mean_ms"]),
    ("ticks /s", lambda r: r["tick"]["ticks"] / r["window_s"]),
    ("zone usage msgs /s", lambda r: r["zone_usage_per_s"]),
    ("usage sets complete /s", lambda r: r["usage_sets_complete_per_s"]),
    ("zones fresh", lambda r: r["controller_zones_fresh"]),
    ("collector (relay) CPU (cores)", lambda r: r["collector_relay_cpu_core"]),
    ("propagation p50 via relay (ms)", lambda r: (r["instructions_relay"] or r["instructions_direct"])["propagation_ms"]["p50"]),
    ("propagation p99 via relay (ms)", lambda r: (r["instructions_relay"] or r["instructions_direct"])["propagation_ms"]["p99"]),
    ("propagation p50 direct (ms)", lambda r: r["instructions_direct"]["propagation_ms"]["p50"]),
    ("propagation p99 direct (ms)", lambda r: r["instructions_direct"]["propagation_ms"]["p99"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="build directory A (e.g. main's)")
    ap.add_argument("--b", required=True, help="build directory B (e.g. this branch's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--a-args", default="", help="more controller_scale.py arguments for A only (e.g. \"--thp 0\")")
    ap.add_argument("--b-args", default="", help="more controller_scale.py arguments for B only")
    ap.add_argument("--out", default=None)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    rest = [x for x in a.rest if x != "--"]
    runs = {"A": [], "B": []}
    for rnd in range(a.rounds):
        for name, build, extra in (("A", a.a, a.a_args), ("B", a.b, a.b_args)):
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                path = f.name
            cmd = ["/usr/bin/python3", os.path.join(HERE, "controller_scale.py"), "--build-dir", build,
                   "--out", path] + rest + extra.split()
            p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if p.returncode != 0:
                print("round %d %s failed: %s" % (rnd + 1, name, p.stderr.strip().splitlines()[-1:]), file=sys.stderr)
                continue
            with open(path) as f:
                runs[name].append(json.load(f))
            os.unlink(path)
            print("round %d %s done" % (rnd + 1, name), file=sys.stderr)
    print("| figure | A: %s (median of %d) | B: %s (median of %d) |" % (" ".join([a.a, a.a_args]).strip(), len(runs["A"]),
                                                                   " ".join([a.b, a.b_args]).strip(), len(runs["B"])))
    print("|---|---|---|")
    for label, get in FIGURES:
        cells = []
        for name in ("A", "B"):
            vals = [get(r) for r in runs[name] if get(r) is not None]
            cells.append("%.3g (%s)" % (statistics.median(vals), ", ".join("%.3g" % v for v in vals)) if vals else "-")
        print("| %s | %s | %s |" % (label, cells[0], cells[1]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(runs, f, indent=2)


if __name__ == "__main__":
    main()
