#!/usr/bin/python3
"""Issue 11 section 2, every target in one interleaved run: surge damping on (grl) and off
(grl:nodamp), at 1 s and 250 ms intervals (nginx, collector and controller alike). Each round
runs, for each of the four variants in turn (rotated round by round), exp_fleet's schedule
(base 0.5 L, step 1.5 L, recover 0.5 L, surge 7.5 L = 15x base, after 0.5 L; 4 hosts
70/10/10/10) and exp_lb_shift's (1.5 L, 70/10/10/10 -> 10/10/10/70). Prints one table of
medians (min-max) over the rounds, the command, and saves bench/results/raw/surge_targets.json.

Targets (docs/design.md "Surge damping", "Measured against the targets"):
  surge, first second admitted <= 1.5 L; surge, any 100 ms <= 2 L; step steady state within
  +-3% of L; step settle time (1-s admitted within 10% of L) <= 2 s at 1 s intervals;
  after 1.5 L -> 0.5 L (recover) and after the surge ends (after): legitimate requests
  rejected for at most one interval; LB shift: below 0.8 L for at most one interval.

With --base DIR, another build of the module and daemons (e.g. main's, built in another
worktree) runs with damping on beside this one's, interleaved the same way ("base" columns);
--no-off leaves the damping-off variants out.

Usage: bench/exp_surge_targets.py [--rounds 3] [--limit 1000] [--intervals 1s,250ms]
                                  [--base BUILD_DIR] [--no-off]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import exp_fleet  # noqa: E402
import exp_lb_shift  # noqa: E402


def fleet_args(limit):
    return argparse.Namespace(
        limit=limit, hosts=4, weights="70,10,10,10", accuracy_window=5, grl_interval=None,
        grl_window=None)


def lb_args(limit, interval):
    return argparse.Namespace(limit=limit, multiple=1.5, interval=interval, before=8, after=6)


ROWS = [
    # (label, source, phase, key, scale, format)
    ("surge: admitted in the first second / L (<= 1.5)", "fleet", "surge",
     "first_1s_admitted_rps", "L", "{:.2f}"),
    ("surge: highest 100 ms admitted / L (<= 2)", "fleet", "surge", "peak_100ms_rps", "L",
     "{:.2f}"),
    ("surge: admitted over its last 5 s / L", "fleet", "surge", "steady_admitted_rps", "L",
     "{:.3f}"),
    ("step 1.5 L: admitted over its last 5 s / L (1 +- 0.03)", "fleet", "step",
     "steady_admitted_rps", "L", "{:.3f}"),
    ("step 1.5 L: settle time, s (<= 2 at 1 s)", "fleet", "step", "settle_s", "", "{:.1f}"),
    ("1.5 L -> 0.5 L: legitimate requests rejected", "fleet", "recover", "r429", "", "{:.0f}"),
    ("1.5 L -> 0.5 L: rejecting for, s (<= 1 interval)", "fleet", "recover", "rejecting_s", "",
     "{:.1f}"),
    ("surge ends: legitimate requests rejected", "fleet", "after", "r429", "", "{:.0f}"),
    ("surge ends: rejecting for, s (<= 1 interval)", "fleet", "after", "rejecting_s", "",
     "{:.1f}"),
    ("LB shift: longest stretch below 0.8 L, s (<= 1 interval)", "lb", None, "below_0.8L_s", "",
     "{:.2f}"),
    ("LB shift: lowest admitted over one interval / L", "lb", None, "min_interval_admitted_L",
     "", "{:.2f}"),
]


def value(run, row, limit):
    _, source, phase, key, scale, _ = row
    m = run[source] if phase is None else run[source]["metrics"].get(phase, {})
    v = m.get(key)
    if v is None:
        return None
    return v / limit if scale == "L" else v


def use_build(build):
    """The module and daemons under test from `build` (the load generator stays this one's)."""
    bl.BUILD = build
    bl.GRL_MODULE = bl.build_path("ngx_module", "ngx_http_grl_module.so")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=float, default=1000, help="global limit L, r/s")
    ap.add_argument("--intervals", default="1s,250ms")
    ap.add_argument("--base", metavar="BUILD_DIR",
                    help="also run this build's module and daemons, damping on")
    ap.add_argument("--no-off", action="store_true", help="leave the damping-off variants out")
    args = ap.parse_args(argv)
    if args.base and not os.path.exists(os.path.join(args.base, "ngx_module",
                                                     "ngx_http_grl_module.so")):
        ap.error(f"--base {args.base}: no ngx_module/ngx_http_grl_module.so in it")
    variants = []
    for iv in args.intervals.split(","):
        variants += [("grl", iv)]
        if args.base:
            variants += [("base", iv)]
        if not args.no_off:
            variants += [("grl:nodamp", iv)]
    builds = {"grl": bl.BUILD, "grl:nodamp": bl.BUILD, "base": os.path.abspath(args.base or ".")}
    phases = exp_fleet.parse_phases(exp_fleet.DEFAULT_PHASES, args.limit)
    bl.pin_harness()
    bl.cleanup_stale()
    started = time.time()
    backend = bl.Backend().start()
    runs = {v: [] for v in variants}
    try:
        for rnd in range(args.rounds):
            order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
            for v in order:
                name, iv = v
                use_build(builds[name])
                spec = f"grl:{iv}" + (":nodamp" if name == "grl:nodamp" else "")
                fl = exp_fleet.one(spec, backend, fleet_args(args.limit), phases, rnd)
                lb = exp_lb_shift.one("grl" if name == "base" else name, backend,
                                      lb_args(args.limit, iv))
                lb.pop("series_L", None)
                runs[v].append({"fleet": fl, "lb": lb})
                bl.log(f"round {rnd + 1} {name} {iv}: " + ", ".join(
                    f"{r[3]}={value(runs[v][-1], r, args.limit)}" for r in ROWS))
    finally:
        backend.stop()

    def cell(v, row):
        xs = [x for x in (value(r, row, args.limit) for r in runs[v]) if x is not None]
        if not xs:
            return "never"
        f = row[5]
        missing = len(runs[v]) - len(xs)
        return (f"{f.format(statistics.median(xs))} ({f.format(min(xs))}-{f.format(max(xs))})"
                + (f", {missing} never" if missing else ""))

    use_build(builds["grl"])
    names = {"grl": "damping", "grl:nodamp": "off", "base": "base, damping"}
    head = [f"{names[n]}, {iv}" for n, iv in variants]
    print(f"\nL = {args.limit:g} r/s, 4 hosts 70/10/10/10, {args.rounds} rounds, "
          "medians (min-max):\n")
    print("| target | " + " | ".join(head) + " |")
    print("|---" * (len(head) + 1) + "|")
    for row in ROWS:
        print(f"| {row[0]} | " + " | ".join(cell(v, row) for v in variants) + " |")
    cmd = bl.command_line(sys.argv if argv is None else ["bench/exp_surge_targets.py"] + argv)
    print(f"\nCommand: `{cmd}`")
    bl.save_result("surge_targets", {
        "experiment": "surge_targets", "command": cmd, "machine": bl.machine_info(),
        "params": vars(args), "seconds": round(time.time() - started, 1),
        "runs": [{"variant": v[0], "interval": v[1], "rounds": [
            {"fleet": r["fleet"]["metrics"], "lb": r["lb"],
             "series": r["fleet"]["series"]} for r in runs[v]]} for v in variants]})


if __name__ == "__main__":
    main()
