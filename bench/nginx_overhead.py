#!/usr/bin/python3
"""Request-path overhead of the grl module, in one run.

Variants, interleaved round by round, nginx with ONE worker pinned to core 0
and wrk pinned to core 1:
  plain      nginx without the module
  grl        the module loaded, 10 buckets at ratio 0 (a publisher keeps a
             ratio-0 instruction in force for each), the request matches one
  limit_req  nginx's own limit_req with a rate high enough never to reject

Prints a Markdown table of medians (req/s, p50/p99/p99.9 latency) and the
ratio to plain, with the command line; writes it to bench/results/ too.

Usage: bench/nginx_overhead.py [--module build/ngx_module/ngx_http_grl_module.so]
       [--rounds 3] [--duration 10] [--connections 32]
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import debian_python

debian_python.require("msgpack", "zmq")
import msgpack  # noqa: E402
import zmq  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NGINX = "/usr/sbin/nginx"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def conf(variant, port, module, pub_endpoint):
    # Every variant has the same two locations (grl's status page, or an empty_gif in its
    # place): a second location in grl's server alone cost it ~40 instructions a request in
    # nginx's location lookup (instructions_per_request.py), which were not grl's.
    # grl; grl_headers: grl with grl_ratelimit_headers on; grl_noplane: grl without a control
    # plane, so no reporter and no ZeroMQ thread in the worker: what every worker but worker 0
    # pays per request (its buckets stay `waiting`: decide() stops at the expiry check).
    grl = variant.startswith("grl")
    load = f"load_module {module};\n" if grl else ""
    http = ""
    loc = ""
    if grl:
        # grl_keyed: the bucket the requests match (b7) is keyed on the client address, like
        # limit_req's zone below (docs/per-key.md).
        key = "key=$binary_remote_addr keys=10000 " if variant == "grl_keyed" else ""
        buckets = "\n".join(
            f"    grl_bucket b{i} {key if i == 7 else ''}procedure_prefix=/api/v{i}/ "
            "rate=1000000r/s;" for i in range(10))
        if variant == "grl_keyed1":  # limit_req's setup: one bucket, every request, per address
            buckets = ("    grl_bucket b7 key=$binary_remote_addr keys=10000 "
                       "rate=1000000r/s;")
        http = f"""
    grl_zone grl:4m;
{buckets}
{"" if variant == "grl_noplane" else f'''    grl_host id=bench zone=z1 region=r1;
    grl_instructions {pub_endpoint};
    grl_instruction_ttl 60s;'''}
"""
        loc = "grl on; grl_ratelimit_headers on;" if variant == "grl_headers" else "grl on;"
    elif variant == "limit_req":
        http = "    limit_req_zone $binary_remote_addr zone=one:10m rate=10000000r/s;\n"
        loc = "limit_req zone=one burst=1000 nodelay;"
    return f"""{load}
worker_processes 1;
worker_cpu_affinity 01;
error_log logs/error.log warn;
pid logs/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path tmp/body; proxy_temp_path tmp/proxy; fastcgi_temp_path tmp/fcgi;
    uwsgi_temp_path tmp/uwsgi; scgi_temp_path tmp/scgi;
{http}
    server {{
        listen 127.0.0.1:{port};
        location / {{ {loc} empty_gif; }}
        location = /grl {{ {"grl_status;" if grl else "empty_gif;"} }}
    }}
}}
"""


class Publisher(threading.Thread):
    """Keeps a ratio-0 instruction in force for the 10 buckets."""

    def __init__(self, period=0.2):
        super().__init__(daemon=True)
        self.period = period
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUB)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.stop = threading.Event()
        self.kick = threading.Event()  # send now

    def run(self):
        seq = 0
        while not self.stop.is_set():
            seq += 1
            body = msgpack.packb({
                "v": 1, "type": "instructions", "source": "bench", "seq": seq,
                "ts_ms": int(time.time() * 1000), "ttl_ms": 60000, "scope": "global",
                "region": "", "zone": "",
                "buckets": [{"name": f"b{i}", "ratio_ppm": 0, "limit_mrps": 10**9, "mode": "deny"}
                            for i in range(10)]})
            self.sock.send_multipart([b"grl/g/", body])
            self.kick.wait(self.period)
            self.kick.clear()
        self.sock.close(0)
        self.ctx.term()


def run_variant(variant, args, pub):
    prefix = tempfile.mkdtemp(prefix=f"grl-bench-{variant}-")
    os.chmod(prefix, 0o755)
    os.makedirs(os.path.join(prefix, "logs"))
    os.makedirs(os.path.join(prefix, "tmp"))
    port = free_port()
    path = os.path.join(prefix, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf(variant, port, args.module, pub.endpoint))
    subprocess.run([NGINX, "-p", prefix, "-c", path], check=True)
    try:
        url = f"http://127.0.0.1:{port}/api/v7/users/42"
        time.sleep(0.5)
        wrk = ["taskset", "-c", "1", "wrk", "-t1", f"-c{args.connections}",
               "-s", os.path.join(HERE, "wrk_report.lua")]
        subprocess.run(wrk + ["-d2s", url], check=True, capture_output=True)  # warm-up
        out = subprocess.run(wrk + [f"-d{args.duration}s", url], check=True,
                             capture_output=True, text=True).stdout
        m = re.search(r"RESULT (.*)", out)
        r = {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
        if r["non2xx"] or r["errors"]:
            raise SystemExit(f"{variant}: {r['non2xx']} non-2xx, {r['errors']} errors")
        r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
        if variant == "grl":
            # The module really evaluated the requests, with ratio-0 instructions in force.
            import json
            import urllib.request
            st = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/grl"))
            b7 = next(b for b in st["buckets"] if b["name"] == "b7")
            if b7["offered"] < r["requests"] or b7["ratio_state"] != "active":
                raise SystemExit(f"grl variant did not evaluate as intended: {b7}")
        return r
    finally:
        subprocess.run([NGINX, "-p", prefix, "-c", path, "-s", "stop"], capture_output=True)
        time.sleep(0.3)
        shutil.rmtree(prefix, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", default=os.path.join(ROOT, "build/ngx_module/ngx_http_grl_module.so"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "nginx_overhead.md"))
    args = ap.parse_args()
    args.module = os.path.abspath(args.module)
    variants = ["plain", "grl", "limit_req"]
    pub = Publisher()
    pub.start()
    results = {v: [] for v in variants}
    try:
        for rnd in range(args.rounds):
            order = variants[rnd % 3:] + variants[:rnd % 3]  # rotate to spread drift
            for v in order:
                r = run_variant(v, args, pub)
                results[v].append(r)
                print(f"round {rnd + 1} {v:9s} {r['rps']:9.0f} req/s  p50 {r['p50_us']} us  "
                      f"p99 {r['p99_us']} us  p99.9 {r['p999_us']} us", flush=True)
    finally:
        pub.stop.set()
        pub.kick.set()
        pub.join()

    def med(v, k):
        return statistics.median(r[k] for r in results[v])

    cmd = " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    lines = [
        f"Command: `{cmd}`  ",
        f"nginx 1 worker pinned to core 0, wrk -t1 -c{args.connections} pinned to core 1, "
        f"{args.rounds} interleaved rounds of {args.duration} s; medians; "
        f"machine: {os.cpu_count()} cores, {os.uname().release}",
        "",
        "| variant | req/s | ratio to plain | p50 µs | p99 µs | p99.9 µs | req/s spread (min-max) |",
        "|---|---|---|---|---|---|---|",
    ]
    base = med("plain", "rps")
    for v in variants:
        rps = [r["rps"] for r in results[v]]
        lines.append(f"| {v} | {med(v, 'rps'):.0f} | {med(v, 'rps') / base:.3f} | "
                     f"{med(v, 'p50_us'):.0f} | {med(v, 'p99_us'):.0f} | {med(v, 'p999_us'):.0f} | "
                     f"{min(rps):.0f}-{max(rps):.0f} |")
    table = "\n".join(lines) + "\n"
    print()
    print(table)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("# Request-path overhead of the grl module\n\n" + table)


if __name__ == "__main__":
    main()
