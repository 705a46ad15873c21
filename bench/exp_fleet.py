#!/usr/bin/python3
"""Experiments 3 and 4: accuracy across hosts, convergence and surge (bench/README.md).

A fleet of --hosts nginx frontends (1 worker each) proxies to one backend nginx. One bucket,
"api" (every request), with a global limit L = --limit r/s, configured for each limiter:
  limit_req  L/hosts per host: the usual way to approximate a global limit with a local one
  redis      one Redis shared by the hosts, limit L per 1-s window
  grl        the grl module on every host, limit L, with its real control plane
             (grl-collector + grl-controller) at their shipped default intervals; never a
             test publisher here
  grl:250ms  the same with 250 ms intervals (nginx reports, collector, controller)
  grl:nodamp, grl:250ms:nodamp   the same with surge damping off (grl_surge_damping off;)
Open-loop load (grl_loadgen) spread unevenly over the hosts (--weights, default 70/10/10/10),
following one schedule per run:
  base     0.5 L    (the control plane learns the fleet)
  step     1.5 L    -> experiment 3 (accuracy: admitted rate over the step's last
                       --accuracy-window s) and experiment 4 (settling after a step)
  recover  0.5 L    -> experiment 4 (does legitimate traffic pass again, and how soon)
  surge    7.5 L = 15x the base rate -> experiment 4 (settling, overshoot, backend load)
  after    0.5 L    -> experiment 4 (recovery after the surge)
Counts every 100 ms: offered, admitted (2xx), rejected (429) per host from the load generator,
and the backend's own request counter (stub_status) sampled every 100 ms.
Variants interleaved round by round; everything under test pinned to core 0, the load
generator to core 1. Results: bench/results/raw/fleet.json (rendered by bench/report.py).

Usage: bench/exp_fleet.py [--rounds 3] [--limit 1000] [--hosts 4] [--weights 70,10,10,10]
       [--variants limit_req,redis,grl,grl:250ms] [--phases base:0.5:3,step:1.5:12,...]
       [--accuracy-window 5] [--grl-interval DURATION] [--grl-window N]
"""
import argparse
import subprocess
import sys
import time

import benchlib as bl

DEFAULT_PHASES = "base:0.5:3,step:1.5:12,recover:0.5:4,surge:7.5:8,after:0.5:4"
TOLERANCE = 0.10  # "within 10% of L"


def parse_phases(s, limit):
    out = []
    for item in s.split(","):
        name, mult, secs = item.split(":")
        out.append({"name": name, "mult": float(mult), "rate": float(mult) * limit,
                    "seconds": float(secs)})
    return out


def window_rates(series, dt, window):
    """Rate (r/s) over the trailing `window` s at the end of every interval of `dt` s."""
    k = max(1, round(window / dt))
    out, acc = [], 0
    for i, v in enumerate(series):
        acc += v
        if i >= k:
            acc -= series[i - k]
        out.append(acc / (min(i + 1, k) * dt))
    return out


def settle_time(rates, start, end, dt, target, limit):
    """Seconds from `start` (interval index) until the rate stays within TOLERANCE x limit of
    target to the phase's end; None if it never does."""
    last_bad = None
    for i in range(start, end):
        if abs(rates[i] - target) > TOLERANCE * limit:
            last_bad = i
    if last_bad is None:
        return 0.0 + dt
    if last_bad >= end - 1:
        return None
    return (last_bad + 1 - start + 1) * dt


def analyse(lg, backend_series, phases, limit, accuracy_window):
    dt = lg["interval_ms"] / 1000.0
    iv = lg["intervals"]
    ok = [x["ok"] for x in iv]
    offered = [x["offered"] for x in iv]
    n = len(iv)
    r1 = window_rates(ok, dt, 1.0)
    out = {}
    t = 0.0
    for ph in phases:
        s = round(t / dt)
        e = min(n, round((t + ph["seconds"]) / dt))
        t += ph["seconds"]
        if s >= e:
            continue
        secs = (e - s) * dt
        a = {
            "offered_rps": sum(offered[s:e]) / secs,
            "admitted_rps": sum(ok[s:e]) / secs,
            # The right answer: everything below the limit, the limit above it.
            "target_rps": min(ph["rate"], limit),
            "settle_s": settle_time(r1, s, e, dt, min(ph["rate"], limit), limit),
            "peak_1s_rps": max(r1[s:e]),
            "peak_100ms_rps": max(ok[s:e]) / dt,
            # The phase's first second (a surge's: what passed before the control plane knew).
            "first_1s_admitted_rps": sum(ok[s:min(e, s + round(1.0 / dt))]) / min(secs, 1.0),
            # Until the last interval with a 429 (0: none); below the limit, how long
            # legitimate requests were still rejected after a fall.
            "rejecting_s": max((i - s + 1 for i in range(s, e) if iv[i]["r429"]), default=0) * dt,
            "r429": sum(x["r429"] for x in iv[s:e]),
            "other": sum(x["other"] for x in iv[s:e]),
            "errors": sum(x["errors"] for x in iv[s:e]),
        }
        # Steady state: the phase's last accuracy_window seconds.
        w = min(e - s, round(accuracy_window / dt))
        a["steady_admitted_rps"] = sum(ok[e - w:e]) / (w * dt)
        a["steady_by_host_rps"] = [sum(x["ok_by_target"][h] for x in iv[e - w:e]) / (w * dt)
                                   for h in range(len(lg["targets"]))]
        a["steady_offered_by_host_rps"] = [
            sum(x["offered_by_target"][h] for x in iv[e - w:e]) / (w * dt)
            for h in range(len(lg["targets"]))]
        if backend_series:
            b = backend_series[s:e]
            a["backend_mean_rps"] = sum(b) / secs
            a["backend_peak_1s_rps"] = max(window_rates(backend_series, dt, 1.0)[s:e])
            a["backend_peak_100ms_rps"] = max(b) / dt
        out[ph["name"]] = a
    return out


def backend_per_interval(samples, t0, dt, n):
    """Backend requests per load-generator interval, from cumulative samples taken at
    monotonic times; t0 is the load generator's start on the same clock."""
    out = [0] * n
    for (ta, ca), (tb, cb) in zip(samples, samples[1:]):
        i = int(((ta + tb) / 2 - t0) / dt)
        if 0 <= i < n:
            out[i] += cb - ca
    return out


def one(spec, backend, args, phases, rnd):
    """spec: a variant, or grl:INTERVAL for grl with that interval everywhere (nginx reports,
    collector, controller); a final :nodamp runs grl with `grl_surge_damping off;`."""
    variant, *rest = spec.split(":")
    nodamp = rest[-1:] == ["nodamp"]
    interval = ":".join(rest[:-1] if nodamp else rest)
    per_host = args.limit / args.hosts if variant == "limit_req" else None
    bucket = bl.Bucket("api", "/api/", args.limit)
    fleet = bl.start_fleet(variant, backend, [bucket], hosts=args.hosts, per_host_rate=per_host,
                           grl_interval=interval or args.grl_interval,
                           grl_window=args.grl_window,
                           grl_extra="grl_surge_damping off;" if nodamp else "")
    if interval:
        fleet.label = f"grl, {interval} intervals"
    if nodamp:
        fleet.label += ", surge damping off"
    try:
        weights = [float(w) for w in args.weights.split(",")]
        poller = bl.BackendPoller(backend, 0.1)
        poller.start()
        # grl_loadgen starts its schedule 20 ms after it is launched.
        t0 = time.monotonic() + 0.02
        lg = bl.run_loadgen(list(zip(fleet.ports, weights)),
                            [(p["rate"], p["seconds"]) for p in phases],
                            timeout_ms=2000, max_connections=512)
        samples = poller.stop()
        dt = lg["interval_ms"] / 1000.0
        bseries = backend_per_interval(samples, t0, dt, len(lg["intervals"]))
        metrics = analyse(lg, bseries, phases, args.limit, args.accuracy_window)
        st = metrics.get("step", {})
        su = metrics.get("surge", {})
        bl.log(f"round {rnd + 1} {fleet.label:10s} step: admitted {st.get('steady_admitted_rps', 0):.0f}"
               f" r/s (L={args.limit}) settle {st.get('settle_s')} s | surge: admitted "
               f"{su.get('steady_admitted_rps', 0):.0f} r/s settle {su.get('settle_s')} s peak 1s "
               f"{su.get('peak_1s_rps', 0):.0f} backend peak 100ms "
               f"{su.get('backend_peak_100ms_rps', 0):.0f} r/s")
        series = {
            "dt": dt,
            "offered": [x["offered"] for x in lg["intervals"]],
            "ok": [x["ok"] for x in lg["intervals"]],
            "r429": [x["r429"] for x in lg["intervals"]],
            "backend": bseries,
        }
        lag = max(ph["send_lag_us"]["p99"] for ph in lg["phases"])
        # 100-ms intervals in which requests were offered but nothing at all was answered: the
        # machine stalled the system under test (nothing any limiter does answers nothing).
        stalled = sum(1 for x in lg["intervals"][:-1]
                      if x["offered"] and not (x["ok"] or x["r429"] or x["other"]))
        return {"variant": spec, "label": fleet.label, "send_lag_p99": lag,
                "stalled_intervals": stalled, "round": rnd + 1, "metrics": metrics,
                "series": series, "targets": lg["targets"], "notes": fleet.notes,
                "config": fleet.config}
    finally:
        fleet.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=float, default=1000, help="global limit L, r/s")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--weights", default="70,10,10,10")
    ap.add_argument("--variants", default="limit_req,redis,grl,grl:250ms",
                    help="limit_req, redis, grl, grl:INTERVAL (grl with that interval); "
                         "a final :nodamp turns surge damping off (grl:nodamp, grl:250ms:nodamp)")
    ap.add_argument("--phases", default=DEFAULT_PHASES,
                    help="NAME:MULTIPLE_OF_L:SECONDS,... (names step and surge are analysed)")
    ap.add_argument("--accuracy-window", type=float, default=5)
    ap.add_argument("--grl-interval", default=None,
                    help="grl: nginx report interval and collector/controller interval "
                         "(default: the shipped defaults)")
    ap.add_argument("--grl-window", type=int, default=None,
                    help="grl: controller smoothing window, intervals (default: shipped default)")
    args = ap.parse_args(argv)
    if len(args.weights.split(",")) != args.hosts:
        ap.error("--weights needs one weight per host")
    phases = parse_phases(args.phases, args.limit)
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
                    runs.append(one(v, backend, args, phases, rnd))
                except bl.Unavailable as e:
                    skipped[v] = str(e)
                    bl.log(f"{v}: skipped: {e}")
                except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                    # One failed run must not lose the others: it is reported as failed.
                    failures.append(f"round {rnd + 1} {v}: {e}"[:2000])
                    bl.log(f"FAILED: {failures[-1]}")
    finally:
        backend.stop()
    bl.save_result("fleet", {
        "experiment": "fleet",
        "command": bl.command_line(sys.argv if argv is None else ["bench/exp_fleet.py"] + argv),
        "machine": bl.machine_info(), "params": vars(args), "phases": phases,
        "tolerance": TOLERANCE, "variants": variants, "runs": runs, "skipped": skipped,
        "failures": failures,
        "seconds": round(time.time() - started, 1)})


if __name__ == "__main__":
    main()
