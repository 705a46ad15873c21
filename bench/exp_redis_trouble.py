#!/usr/bin/python3
"""Experiment 2: Redis trouble (bench/README.md).

The request path of experiment 1 (10 buckets never reached, proxy to a local backend, open
loop at --fixed-rate r/s), with Redis in trouble:
  delayed  Redis across the network: --delay-ms added each way by a user-space proxy
           (grl_delay_proxy; this kernel has no netem), e.g. another availability zone
  stalled  Redis stops answering for --stall s out of every --period s (DEBUG SLEEP), as
           during a slow command, a fork for persistence or a busy neighbour
  down     Redis stopped after the limiter connected
The Redis limiter runs with redis_limit_timeout 50ms, failing open (requests pass unlimited)
or closed (requests are rejected with 429). grl and plain nginx run in the same rounds, with
no Redis in their path. Interleaved rounds, pinned as in experiment 1.
Results: bench/results/raw/redis_trouble.json (rendered by bench/report.py).

Usage: bench/exp_redis_trouble.py [--rounds 3] [--fixed-rate 5000] [--seconds 5]
       [--delay-ms 0.5] [--stall 0.1] [--period 1.0] [--conditions delayed,stalled,down]
"""
import argparse
import subprocess
import sys
import time

import benchlib as bl


def one(variant, condition, fail, backend, args, rnd):
    redis = None
    if variant == "redis":
        redis = bl.Redis().start()
        if condition == "delayed":
            try:
                redis = bl.DelayedRedis(redis, int(args.delay_ms * 1000)).start()
            except BaseException:
                redis.stop()
                raise
    staller = None
    fleet = None
    try:
        fleet = bl.start_fleet(variant, backend, bl.ten_buckets(), allow_publisher=True,
                               redis_fail=fail or "open", redis=redis)
        if condition == "down":
            redis.stop()
            time.sleep(0.3)
        elif condition == "stalled":
            staller = bl.RedisStaller(redis, args.stall, args.period)
            staller.start()
        lg = bl.run_loadgen([(fleet.ports[0], 1)], [(args.fixed_rate, args.warmup),
                                                    (args.fixed_rate, args.seconds)],
                            timeout_ms=5000, max_connections=1024)
        ph = lg["phases"][1]
        r = dict(ph["latency_us"])
        r.update(offered=ph["offered"], ok=ph["ok"], r429=ph["r429"], other=ph["other"],
                 errors=ph["errors"], send_lag_p99=ph["send_lag_us"]["p99"])
        warnings = sum(log.count("failing") for log in fleet.error_logs())
        label = fleet.label if variant != "redis" else f"redis, fail {fail}"
        bl.log(f"round {rnd + 1} {label:22s} {condition or 'no redis':8s}: p50 {r['p50']} p99 "
               f"{r['p99']} p99.5 {r['p995']} p99.9 {r['p999']} max {r['max']} us; "
               f"2xx {r['ok']} 429 {r['r429']} other {r['other']} errors {r['errors']}")
        return {"variant": variant, "label": label, "condition": condition, "fail": fail,
                "round": rnd + 1, "result": r, "fail_warnings": warnings,
                "stalls": staller.stalls if staller else 0, "notes": fleet.notes,
                "config": fleet.config}
    finally:
        if staller:
            staller.stop()
        if fleet:
            fleet.stop()
        if redis:
            redis.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fixed-rate", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--stall", type=float, default=0.1)
    ap.add_argument("--period", type=float, default=1.0)
    ap.add_argument("--delay-ms", type=float, default=0.5,
                    help="delayed: added one-way delay between nginx and Redis")
    ap.add_argument("--conditions", default="delayed,stalled,down")
    args = ap.parse_args(argv)
    bl.pin_harness()
    bl.cleanup_stale()
    started = time.time()
    cases = [("plain", None, None), ("grl", None, None)]
    for c in args.conditions.split(","):
        cases.append(("redis", c, "open"))
        if c != "delayed":  # with no timeout reached, failing closed changes nothing
            cases.append(("redis", c, "closed"))
    backend = bl.Backend().start()
    runs, skipped, failures = [], {}, []
    try:
        for rnd in range(args.rounds):
            order = cases[rnd % len(cases):] + cases[:rnd % len(cases)]
            for v, c, f in order:
                if v in skipped:
                    continue
                try:
                    runs.append(one(v, c, f, backend, args, rnd))
                except bl.Unavailable as e:
                    skipped[v] = str(e)
                    bl.log(f"{v}: skipped: {e}")
                except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                    # One failed run must not lose the others: it is reported as failed.
                    failures.append(f"round {rnd + 1} {(v, c, f)}: {e}"[:2000])
                    bl.log(f"FAILED: {failures[-1]}")
    finally:
        backend.stop()
    bl.save_result("redis_trouble", {
        "experiment": "redis_trouble",
        "command": bl.command_line(sys.argv if argv is None else
                                   ["bench/exp_redis_trouble.py"] + argv),
        "machine": bl.machine_info(), "params": vars(args), "runs": runs, "skipped": skipped,
        "failures": failures,
        "seconds": round(time.time() - started, 1)})


if __name__ == "__main__":
    main()
