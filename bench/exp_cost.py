#!/usr/bin/python3
"""Cost-weighted requests against a units/s limit (docs/directives.md, "Cost"; issue #31).

Two zones of two nginx each, with the real grl-collector and grl-controller (250 ms
intervals), one bucket `api rate=L cost=$arg_c` (L units/s, global). Two open-loop load
generators spread over the four hosts: requests of cost 1 (`/?c=1`) and of cost 10
(`/?c=10`), together --multiple x L units/s, half the units from each. Prints, per second of
the judged window (the last --judge seconds), the units offered and admitted, and the admitted
units/s against L; writes bench/results/cost-DATE.json.

Usage: bench/exp_cost.py [--limit 300] [--multiple 1.5] [--seconds 20] [--judge 10]
(GRL_BUILD_DIR: the build, default build/; GRL_MODULE: the module, default in it.)
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

fl = bl.integration_fleet()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=300.0, help="units/s")
    ap.add_argument("--multiple", type=float, default=1.5, help="offered units / limit")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--judge", type=int, default=10, help="last seconds judged")
    args = ap.parse_args()
    units = args.multiple * args.limit
    r1, r10 = units / 2, units / 2 / 10  # requests/s of cost 1 and of cost 10
    bucket = "api rate=%dr/s cost=$arg_c" % args.limit
    with fl.two_zones_of_two([bucket]) as f:
        targets = [(n, 1) for n in f["nginx"]]
        sched = lambda r: "%g:%d" % (r, args.seconds)  # noqa: E731
        ones = fl.Load(targets, sched(r1), "/?c=1")
        tens = fl.Load(targets, sched(r10), "/?c=10")
        a, b = ones.result(), tens.result()
    t0, t1 = args.seconds - args.judge, args.seconds
    w1, w10 = fl.window(a, t0, t1), fl.window(b, t0, t1)
    offered = w1["offered"] + 10 * w10["offered"]
    admitted = w1["ok"] + 10 * w10["ok"]
    errors = w1["errors"] + w1["other"] + w10["errors"] + w10["other"]
    res = bl.stamp(sys.argv)
    res.update({
        "limit_units_per_s": args.limit, "offered_units_per_s": round(offered, 1),
        "admitted_units_per_s": round(admitted, 1),
        "admitted_over_limit": round(admitted / args.limit, 4),
        "admitted_requests_per_s": {"cost_1": round(w1["ok"], 1), "cost_10": round(w10["ok"], 1)},
        "offered_requests_per_s": {"cost_1": round(w1["offered"], 1),
                                   "cost_10": round(w10["offered"], 1)},
        "errors_per_s": round(errors, 2), "judged_seconds": [t0, t1],
    })
    print(json.dumps(res, indent=2))
    out = os.path.join(bl.RESULTS, "cost-%s.json" % datetime.date.today().isoformat())
    with open(out, "w") as fh:
        json.dump(res, fh, indent=2)
        fh.write("\n")
    print("written to", os.path.relpath(out, bl.ROOT))


if __name__ == "__main__":
    main()
