#!/usr/bin/python3
"""The load-balancer shift (issue 11 section 2): 4 hosts share one global limit L; the
offered load (1.5 L) is spread 70/10/10/10 and then, at once, 10/10/10/70. The global
load does not change, so the control plane's ratio stays right; only each host's share
moves. Surge damping sees the busy host's rate jump 7x and the idle one's fall 7x, and
holds each at its share of the *old* distribution until the control plane's next answer
has seen the shift: admitted dips. Requirement: admitted never below 0.8 L for more than
one interval.

Each host gets its own grl_loadgen (one schedule per host, started together), so the
weights change at the same instant on all four. Variants, interleaved round by round:
grl (damping on, the default) and grl:nodamp (grl_surge_damping off), at the given
interval (default 1s; nginx, collector and controller alike).

Prints, per run and as medians over rounds: the longest stretch in which admitted
(250 ms bins) stayed below 0.8 L after the shift, the lowest 1-interval admitted rate,
and the mean admitted rate over the 3 s after the shift; then the command.

Usage: bench/exp_lb_shift.py [--rounds 3] [--limit 1000] [--interval 1s]
       [--before 8] [--after 6] [--variants grl,grl:nodamp]
"""
import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

BIN_S = 0.25  # analysis bins: 250 requests at L = 1,000 r/s, about 6% Poisson noise


def run_hosts(ports, schedules):
    """One grl_loadgen per host, started together; returns their results in host order."""
    out = [None] * len(ports)
    errors = []

    def go(i):
        try:
            out[i] = bl.run_loadgen([(ports[i], 1)], schedules[i], interval_ms=int(BIN_S * 1000),
                                    timeout_ms=2000, max_connections=256)
        except Exception as e:  # noqa: BLE001 (reported below, with the host)
            errors.append(f"host {i + 1}: {e}")
    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(ports))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return out


def analyse(results, limit, total, before, interval_s):
    n = min(len(r["intervals"]) for r in results)
    ok = [sum(r["intervals"][k]["ok"] for r in results) / BIN_S for k in range(n)]
    offered = [sum(r["intervals"][k]["offered"] for r in results) / BIN_S for k in range(n)]
    shift = int(round(before / BIN_S))
    # Bins the whole schedule covered: the four generators start and stop a few ms apart, and
    # a bin at the end that one of them did not fill is no measurement (offered is counted by
    # scheduled send time, so a stalled server does not lower it).
    after = [v for v, o in zip(ok[shift:], offered[shift:]) if o >= 0.9 * total]
    # The longest run of bins below 0.8 L after the shift.
    longest = run = 0
    for v in after:
        run = run + 1 if v < 0.8 * limit else 0
        longest = max(longest, run)
    per = max(1, int(round(interval_s / BIN_S)))
    windows = [sum(after[k:k + per]) / per for k in range(0, len(after) - per + 1)]
    settled = ok[shift - int(round(3 / BIN_S)):shift]
    return {
        "below_0.8L_s": longest * BIN_S,
        "min_interval_admitted_L": min(windows) / limit if windows else None,
        "admitted_3s_after_L": statistics.mean(after[:int(round(3 / BIN_S))]) / limit,
        "admitted_3s_before_L": statistics.mean(settled) / limit,
        "offered_after_L": statistics.mean(offered[shift:shift + len(after)]) / limit,
        "series_L": [round(v / limit, 3) for v in ok],
    }


def one(variant, backend, args):
    damp = variant != "grl:nodamp"
    fleet = bl.start_fleet("grl", backend, [bl.Bucket("api", "/api/", args.limit)], hosts=4,
                           grl_interval=args.interval,
                           grl_extra="" if damp else "grl_surge_damping off;")
    try:
        total = args.multiple * args.limit
        first, then = [0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.7]
        schedules = [[(total * a, args.before), (total * b, args.after)]
                     for a, b in zip(first, then)]
        results = run_hosts(fleet.ports, schedules)
        return analyse(results, args.limit, total, args.before, bl.seconds(args.interval))
    finally:
        fleet.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=float, default=1000, help="global limit L, r/s")
    ap.add_argument("--multiple", type=float, default=1.5, help="offered load, multiple of L")
    ap.add_argument("--interval", default="1s", help="nginx, collector and controller interval")
    ap.add_argument("--before", type=float, default=8, help="seconds at 70/10/10/10")
    ap.add_argument("--after", type=float, default=6, help="seconds at 10/10/10/70")
    ap.add_argument("--variants", default="grl,grl:nodamp")
    args = ap.parse_args(argv)
    variants = args.variants.split(",")
    bl.pin_harness()
    bl.cleanup_stale()
    backend = bl.Backend().start()
    runs = {v: [] for v in variants}
    try:
        for rnd in range(args.rounds):
            order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
            for v in order:
                m = one(v, backend, args)
                runs[v].append(m)
                bl.log(f"round {rnd + 1} {v:11s} below 0.8 L for {m['below_0.8L_s']:.2f} s, "
                       f"lowest {args.interval} admitted {m['min_interval_admitted_L']:.2f} L, "
                       f"3 s after the shift {m['admitted_3s_after_L']:.2f} L "
                       f"(before {m['admitted_3s_before_L']:.2f} L)")
                print("   admitted / L per 250 ms after the shift:",
                      m["series_L"][int(round(args.before / BIN_S)) - 2:][:int(4 / BIN_S)])
    finally:
        backend.stop()
    print(f"\nL = {args.limit:g} r/s, offered {args.multiple:g} L, intervals {args.interval}, "
          f"{args.rounds} rounds, medians (min-max):\n")
    print("| | longest stretch below 0.8 L | lowest admitted over one interval | "
          "admitted, 3 s after the shift |")
    print("|---|---|---|---|")

    def cell(v, k, fmt):
        xs = [r[k] for r in runs[v]]
        return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"
    for v in variants:
        label = "grl, surge damping off" if v == "grl:nodamp" else "grl"
        print(f"| {label} | {cell(v, 'below_0.8L_s', '{:.2f} s')} | "
              f"{cell(v, 'min_interval_admitted_L', '{:.2f} L')} | "
              f"{cell(v, 'admitted_3s_after_L', '{:.2f} L')} |")
    print(f"\nCommand: `{bl.command_line(sys.argv if argv is None else ['bench/exp_lb_shift.py'] + argv)}`")


if __name__ == "__main__":
    main()
