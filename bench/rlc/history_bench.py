#!/usr/bin/env python3
"""grl-rlc history benchmarks (docs/rlc-history.md, "Measured"):

  size    store size per bucket-week: `grl-rlc synth` N buckets x W weeks at a
          60 s interval into a fresh store; file size / (N x W).
  record  recording cost: a stand-in controller serves /metrics for K bucket
          instances in grl-controller's format, its values changing every 1 s
          tick; `grl-rlc record --poll 1s --interval 60s` polls it for D seconds;
          its CPU time (utime + stime from /proc) over the wall time is the share
          of one core. The stand-in's own CPU is not counted.

Usage: bench/rlc/history_bench.py [size|record|all] [--buckets 20] [--weeks 5]
       [--instances 10000] [--seconds 70]
Binaries from GRL_BUILD_DIR (default build/).
"""
import argparse
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("GRL_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
RLC = os.path.join(BUILD, "rlc", "grl-rlc")


def bench_size(buckets, weeks):
    d = tempfile.mkdtemp(prefix="rlc-size-")
    try:
        store = os.path.join(d, "h.db")
        names = []
        for i in range(buckets):
            names += ["--bucket", "bucket-%03d" % i]
        t0 = time.monotonic()
        subprocess.run([RLC, "synth", "--store", store, "--weeks", str(weeks), "--limit", "400",
                        "--spike", "10:14:3", "--gap", "12:6:4"] + names,
                       check=True, stdout=subprocess.DEVNULL)
        took = time.monotonic() - t0
        # Fold the WAL into the main file so the size is the store's, not the log's.
        subprocess.run(["sqlite3", store, "PRAGMA wal_checkpoint(TRUNCATE);"], check=True,
                       stdout=subprocess.DEVNULL)
        size = os.path.getsize(store)
        rows = int(subprocess.run(["sqlite3", store, "SELECT count(*) FROM samples"], check=True,
                                  stdout=subprocess.PIPE).stdout)
        print("size: %d buckets x %d weeks at 60 s = %d rows, %.1f MB, %.0f KB per bucket-week, "
              "%.1f bytes per row; synth took %.1f s"
              % (buckets, weeks, rows, size / 1e6, size / 1024 / (buckets * weeks), size / rows, took))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def metrics_texts(instances, variants=4):
    """grl-controller's /metrics for `instances` instances (3/4 zone, 1/4 global), in
    `variants` versions whose rates differ, as the controller's would tick to tick."""
    families = ["grl_bucket_offered_rps", "grl_bucket_admitted_rps", "grl_bucket_shadow_dropped_rps",
                "grl_bucket_limit_rps", "grl_bucket_ratio", "grl_bucket_shadow", "grl_bucket_hosts",
                "grl_bucket_disagreeing_hosts", "grl_bucket_definitions"]
    keys = []
    for i in range(instances):
        if i % 4 == 0:
            keys.append('bucket="b%05d",scope="global",zone=""' % i)
        else:
            keys.append('bucket="b%05d",scope="zone",zone="az%d"' % (i, i % 4))
    out = []
    for v in range(variants):
        lines = []
        for fam in families:
            lines.append("# HELP %s x\n# TYPE %s gauge" % (fam, fam))
            for i, k in enumerate(keys):
                val = {"grl_bucket_offered_rps": 100 + (i * 7 + v * 13) % 50,
                       "grl_bucket_admitted_rps": 100 + (i * 7 + v * 11) % 40,
                       "grl_bucket_limit_rps": 500, "grl_bucket_ratio": 0.0123,
                       }.get(fam, 1)
                lines.append("%s{%s} %s" % (fam, k, val))
        lines.append('grl_controller_info{region="r1",name="bench"} 1')
        out.append("\n".join(lines) + "\n")
    return out


def bench_record(instances, seconds):
    texts = [t.encode() for t in metrics_texts(instances)]
    start = time.time()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            tick = int(time.time() - start)
            body = texts[tick % len(texts)] + (
                "grl_controller_instructions_published_total %d\n" % tick).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    d = tempfile.mkdtemp(prefix="rlc-rec-")
    try:
        store = os.path.join(d, "h.db")
        p = subprocess.Popen([RLC, "record", "--store", store, "--controller",
                              "127.0.0.1:%d" % srv.server_address[1], "--poll", "1s",
                              "--interval", "60s", "--duration", "%ds" % seconds],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        hz = os.sysconf("SC_CLK_TCK")
        cpu = 0.0
        while p.poll() is None:
            try:
                with open("/proc/%d/stat" % p.pid) as fh:
                    f = fh.read().rsplit(")", 1)[1].split()
                cpu = (int(f[11]) + int(f[12])) / hz  # utime, stime
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.2)
        wall = time.monotonic() - t0
        log = p.stdout.read().decode(errors="replace")
        rows = int(subprocess.run(["sqlite3", store, "SELECT count(*) FROM samples"], check=True,
                                  stdout=subprocess.PIPE).stdout)
        size = len(texts[0])
        print("record: %d instances, /metrics %.1f MB, 1 s polls, 60 s intervals, %.0f s: "
              "CPU %.1f s = %.1f%% of one core; %d rows written (exit %s)"
              % (instances, size / 1e6, wall, cpu, 100 * cpu / wall, rows, p.returncode))
        if p.returncode != 0:
            print(log)
    finally:
        srv.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="all", choices=["size", "record", "all"])
    ap.add_argument("--buckets", type=int, default=20)
    ap.add_argument("--weeks", type=int, default=5)
    ap.add_argument("--instances", type=int, default=10000)
    ap.add_argument("--seconds", type=int, default=70)
    a = ap.parse_args()
    if not os.path.exists(RLC):
        sys.exit("%s not built" % RLC)
    if a.what in ("size", "all"):
        bench_size(a.buckets, a.weeks)
    if a.what in ("record", "all"):
        bench_record(a.instances, a.seconds)


if __name__ == "__main__":
    main()
