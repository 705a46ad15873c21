#!/usr/bin/python3
"""Experiment 5: per-request decision cost and memory per bucket (bench/README.md).

  - build/bench/grl_decision_bench (Google Benchmark), pinned to core 0, --repetitions
    repetitions: what grl's nginx handler does per request between reading the caller and
    procedure and returning (match + count + sample), in ns;
  - build/bench/grl_zone_memory: bytes of shared zone per grl bucket, from the zone layout;
  - Redis: bytes per fixed-window counter key of the Redis limiter (MEMORY USAGE of a key
    made as its script makes it: INCR + EXPIRE);
  - limit_req: nginx's documented state size per key (not measured here).
Results: bench/results/raw/micro.json (rendered by bench/report.py).

Usage: bench/exp_micro.py [--repetitions 5] [--min-time 0.3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import benchlib as bl


def decision_bench(args):
    exe = bl.build_path("bench", "grl_decision_bench")
    if not os.access(exe, os.X_OK):
        raise bl.Unavailable(f"decision benchmark not built ({exe})")
    out = subprocess.run(
        bl.sut([exe, f"--benchmark_min_time={args.min_time}",
                f"--benchmark_repetitions={args.repetitions}", "--benchmark_format=json"]),
        check=True, capture_output=True, text=True).stdout
    data = json.loads(out)
    per = {}
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        per.setdefault(b["run_name"], []).append(b["cpu_time"])
    rows = []
    for name, times in per.items():
        rows.append({"name": name, "median_ns": statistics.median(times), "min_ns": min(times),
                     "max_ns": max(times), "repetitions": len(times)})
    return {"rows": rows, "library_build_type": data["context"].get("library_build_type"),
            "mhz_per_cpu": data["context"].get("mhz_per_cpu")}


def zone_memory():
    exe = bl.build_path("bench", "grl_zone_memory")
    if not os.access(exe, os.X_OK):
        raise bl.Unavailable(f"zone memory tool not built ({exe})")
    return json.loads(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)


def redis_key_memory():
    r = bl.Redis().start()
    try:
        key = "rl:{b7}:%d" % int(time.time())
        r.cmd("INCR", key)
        r.cmd("EXPIRE", key, 2)
        return {"key": key, "bytes": r.cmd("MEMORY", "USAGE", key)}
    finally:
        r.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3)
    args = ap.parse_args(argv)
    bl.pin_harness()
    started = time.time()
    res = {"experiment": "micro",
           "command": bl.command_line(sys.argv if argv is None else ["bench/exp_micro.py"] + argv),
           "machine": bl.machine_info(), "params": vars(args), "skipped": {}}
    for key, fn in (("decision", lambda: decision_bench(args)), ("zone", zone_memory),
                    ("redis_key", redis_key_memory)):
        try:
            res[key] = fn()
        except bl.Unavailable as e:
            res["skipped"][key] = str(e)
            bl.log(f"{key}: skipped: {e}")
    res["limit_req_key"] = {
        "bytes": 64, "source": "nginx documentation of limit_req_zone: a state takes 64 bytes "
                               "on 64-bit platforms for $binary_remote_addr keys (1 MiB holds "
                               "about 16,000 states)"}
    res["seconds"] = round(time.time() - started, 1)
    for row in res.get("decision", {}).get("rows", []):
        bl.log(f"{row['name']:34s} {row['median_ns']:8.1f} ns (min {row['min_ns']:.1f}, "
               f"max {row['max_ns']:.1f})")
    if "zone" in res:
        bl.log(f"grl: {res['zone']['bytes_per_bucket']} bytes of shared zone per bucket")
    if "redis_key" in res:
        bl.log(f"redis: {res['redis_key']['bytes']} bytes per counter key")
    bl.save_result("micro", res)


if __name__ == "__main__":
    main()
