#!/usr/bin/python3
"""A debugging trace of one fleet schedule (not a benchmark, not part of run_all.sh): what each
host admitted every 100 ms, and when each instruction arrived with which ratio and basis.

Starts exp_fleet's grl fleet (4 hosts 70/10/10/10, L = --limit r/s, everything at --interval),
subscribes to the collector's instruction relay like an nginx does, polls every host's status
page (the ratio it applies, damping included) every 50 ms, and runs --phases. For each round it
prints the settle time of the phase named by --phase and, per 100 ms bin from 1 s before that
phase to --show seconds into it: offered and admitted per host, the 1-s admitted rate, the
instructions received (ratio, basis O, age of the basis at receipt) and the ratios the hosts
applied at the bin's end.

Usage: bench/trace_step.py [--build DIR] [--rounds 3] [--interval 1s] [--limit 1000]
                           [--phases base:0.5:3,step:1.5:8] [--phase step] [--show 4]
"""
import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import exp_fleet  # noqa: E402


class Tap(threading.Thread):
    """Instructions as a host sees them (the collector's relay), stamped on receipt."""

    def __init__(self, endpoint):
        super().__init__(daemon=True)
        import msgpack
        import zmq
        self.msgpack, self.zmq = msgpack, zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(endpoint)
        self.halt = threading.Event()
        self.got = []  # (monotonic, wall ms, ratio, basis O r/s, basis_ms)

    def run(self):
        poller = self.zmq.Poller()
        poller.register(self.sock, self.zmq.POLLIN)
        while not self.halt.is_set():
            if not poller.poll(50):
                continue
            frames = self.sock.recv_multipart()
            mono, wall = time.monotonic(), time.time() * 1000
            try:
                msg = self.msgpack.unpackb(frames[-1], raw=False)
            except ValueError:
                continue
            for b in msg.get("buckets", []):
                if b.get("name") == "api":
                    self.got.append((mono, wall, b["ratio_ppm"] / 1e6,
                                     b.get("basis_offered_mrps", 0) / 1000.0, b.get("basis_ms")))

    def stop(self):
        self.halt.set()
        self.join(2)
        self.sock.close(0)
        self.ctx.term()


class StatusPoller(threading.Thread):
    """Every host's applied ratio (damping included) every `period` s."""

    def __init__(self, ports, period=0.05):
        super().__init__(daemon=True)
        self.ports, self.period = ports, period
        self.halt = threading.Event()
        self.samples = []  # (monotonic, [ratio per host])

    def run(self):
        while not self.halt.is_set():
            t = time.monotonic()
            ratios = []
            for p in self.ports:
                try:
                    _, body = bl.http_get(p, "/grl", timeout=1.0)
                    b = next(x for x in json.loads(body)["buckets"] if x["name"] == "api")
                    ratios.append(float(b["ratio"]))
                except (OSError, ValueError, StopIteration, KeyError):
                    ratios.append(None)
            self.samples.append((t, ratios))
            self.halt.wait(max(0.0, self.period - (time.monotonic() - t)))

    def stop(self):
        self.halt.set()
        self.join(3)


def one(args, backend, phases, rnd):
    bucket = bl.Bucket("api", "/api/", args.limit)
    fleet = bl.start_fleet("grl", backend, [bucket], hosts=4, grl_interval=args.interval)
    tap = Tap(fleet.plane.instructions_endpoint)
    tap.start()
    st = StatusPoller(fleet.ports)
    st.start()
    try:
        weights = [float(w) for w in args.weights.split(",")]
        t0 = time.monotonic() + 0.02
        lg = bl.run_loadgen(list(zip(fleet.ports, weights)),
                            [(p["rate"], p["seconds"]) for p in phases],
                            timeout_ms=2000, max_connections=512)
    finally:
        st.stop()
        tap.stop()
        fleet.stop()
    metrics = exp_fleet.analyse(lg, [], phases, args.limit, 5)
    dt = lg["interval_ms"] / 1000.0
    iv = lg["intervals"]
    start = 0.0
    for ph in phases:
        if ph["name"] == args.phase:
            break
        start += ph["seconds"]
    s = round(start / dt)
    ok = [x["ok"] for x in iv]
    r1 = exp_fleet.window_rates(ok, dt, 1.0)
    m = metrics[args.phase]
    print(f"\n== round {rnd + 1}: {args.phase} settle {m['settle_s']} s, last 5 s "
          f"{m['steady_admitted_rps'] / args.limit:.3f} L, rejecting for {m['rejecting_s']:.1f} s",
          flush=True)
    print("   t(s)  offered/host          admitted/host         sum/L  1s/L   | instructions "
          "(t, ratio, O/L, basis age) | applied ratios")
    for i in range(max(0, s - round(1.0 / dt)), min(len(iv), s + round(args.show / dt))):
        lo, hi = t0 + i * dt, t0 + (i + 1) * dt
        ins = [f"{g[0] - t0 - start:+.2f} r={g[2]:.3f} O={g[3] / args.limit:.2f}"
               f" age={(g[1] - g[4]) / 1000 if g[4] else float('nan'):.2f}"
               for g in tap.got if lo <= g[0] < hi]
        ap = [r for t, r in st.samples if t < hi]
        aps = " ".join("-" if x is None else f"{x:.2f}" for x in ap[-1]) if ap else ""
        x = iv[i]
        print(f"  {(i - s) * dt:+5.1f}  " + " ".join(f"{v:4d}" for v in x["offered_by_target"])
              + "   " + " ".join(f"{v:4d}" for v in x["ok_by_target"])
              + f"   {x['ok'] / dt / args.limit:5.2f} {r1[i] / args.limit:5.2f} "
              + f"{x['r429']:4d} | " + "; ".join(ins) + (" | " + aps if aps else ""),
              flush=True)
    return m


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default=None, help="the module's and daemons' build directory")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", default="1s")
    ap.add_argument("--limit", type=float, default=1000)
    ap.add_argument("--weights", default="70,10,10,10")
    ap.add_argument("--phases", default="base:0.5:3,step:1.5:8")
    ap.add_argument("--phase", default="step")
    ap.add_argument("--show", type=float, default=4.0)
    args = ap.parse_args(argv)
    if args.build:
        bl.BUILD = os.path.abspath(args.build)
        bl.GRL_MODULE = bl.build_path("ngx_module", "ngx_http_grl_module.so")
    phases = exp_fleet.parse_phases(args.phases, args.limit)
    bl.pin_harness()
    backend = bl.Backend().start()
    try:
        for rnd in range(args.rounds):
            one(args, backend, phases, rnd)
    finally:
        backend.stop()


if __name__ == "__main__":
    main()
