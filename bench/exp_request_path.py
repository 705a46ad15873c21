#!/usr/bin/python3
"""Experiment 1: the request path, side by side (bench/README.md).

nginx (1 worker) proxies to a local backend nginx (keep-alive upstream) with
  plain      no limiter
  limit_req  nginx's own limit_req (rate never reached)
  grl        the grl module with 10 buckets (rate never reached) and its control plane
  redis      the Redis limiter baseline with the same 10 buckets (one EVALSHA per request)
The request matches one bucket (b7). Two loads per variant and round:
  fixed      grl_loadgen, open loop at --fixed-rate r/s (below saturation): latency from the
             scheduled send time, so queueing is not hidden
  saturation wrk -t1 -c{--connections}, closed loop: the most each variant serves
Variants are interleaved round by round (order rotated); everything under test is pinned to
core 0, the load generator to core 1. Results: bench/results/raw/request_path.json (rendered by
bench/report.py).

Usage: bench/exp_request_path.py [--rounds 3] [--fixed-rate 5000] [--fixed-seconds 6]
       [--sat-seconds 5] [--connections 32] [--variants plain,limit_req,grl,redis]
"""
import argparse
import subprocess
import sys
import time

import benchlib as bl


def one(variant, backend, args, rnd):
    fleet = bl.start_fleet(variant, backend, bl.ten_buckets(), allow_publisher=True)
    try:
        port = fleet.ports[0]
        calls0 = fleet.redis.evalsha_calls() if fleet.redis else 0
        lg = bl.run_loadgen([(port, 1)], [(args.fixed_rate, args.warmup),
                                          (args.fixed_rate, args.fixed_seconds)])
        ph = lg["phases"][1]
        fixed = dict(ph["latency_us"])
        fixed.update(offered=ph["offered"], ok=ph["ok"], non2xx=ph["r429"] + ph["other"],
                     errors=ph["errors"], rps=ph["ok"] / args.fixed_seconds,
                     send_lag_p99=ph["send_lag_us"]["p99"])
        sat = bl.run_wrk(port, args.sat_seconds, args.connections)
        total = lg["phases"][0]["offered"] + ph["offered"] + sat["requests"]
        check = ""
        # Evidence that the limiter really evaluated every request.
        if variant.startswith("grl"):
            st = fleet.grl_status()
            b7 = next(b for b in st["buckets"] if b["name"] == "b7")
            check = f"b7 offered {b7['offered']} of {total} sent, state {b7['ratio_state']}"
            if b7["offered"] < total * 0.999 or b7["ratio_state"] != "active":
                raise RuntimeError(f"{fleet.label} did not evaluate as intended: {b7}")
        elif variant == "redis":
            calls = fleet.redis.evalsha_calls() - calls0
            check = f"{calls} EVALSHA for {total} requests"
            if calls < total * 0.999:
                raise RuntimeError(f"redis variant: only {check}")
        bad = sum(log.count("failing") for log in fleet.error_logs())
        if bad:
            check += f"; {bad} fail-open/closed warnings"
        bl.log(f"round {rnd + 1} {fleet.label:22s} fixed {args.fixed_rate} r/s: p50 {fixed['p50']} "
               f"p99 {fixed['p99']} p99.5 {fixed['p995']} p99.9 {fixed['p999']} us "
               f"(errors {fixed['errors']}, non-2xx {fixed['non2xx']}) | saturation "
               f"{sat['rps']:.0f} r/s p99.5 {sat['p995_us']} us | {check}")
        return {"variant": variant, "label": fleet.label, "round": rnd + 1, "fixed": fixed,
                "saturation": sat, "check": check, "notes": fleet.notes, "config": fleet.config}
    finally:
        fleet.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fixed-rate", type=int, default=5000)
    ap.add_argument("--fixed-seconds", type=float, default=6)
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--sat-seconds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--variants", default="plain,limit_req,grl,redis")
    args = ap.parse_args(argv)
    variants = args.variants.split(",")
    bl.pin_harness()
    bl.cleanup_stale()
    started = time.time()
    backend = bl.Backend().start()
    runs, skipped, failures = [], {}, []
    try:
        for rnd in range(args.rounds):
            order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
            for v in order:
                if v in skipped:
                    continue
                try:
                    runs.append(one(v, backend, args, rnd))
                except bl.Unavailable as e:
                    skipped[v] = str(e)
                    bl.log(f"{v}: skipped: {e}")
                except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                    # One failed run must not lose the others: it is reported as failed.
                    failures.append(f"round {rnd + 1} {v}: {e}"[:2000])
                    bl.log(f"FAILED: {failures[-1]}")
    finally:
        backend.stop()
    bl.save_result("request_path", {
        "experiment": "request_path", "command": bl.command_line(sys.argv if argv is None else
                                                                 ["bench/exp_request_path.py"] + argv),
        "machine": bl.machine_info(), "params": vars(args), "variants": variants,
        "runs": runs, "skipped": skipped, "failures": failures,
        "seconds": round(time.time() - started, 1)})


if __name__ == "__main__":
    main()
