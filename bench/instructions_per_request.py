#!/usr/bin/python3
"""Instructions nginx executes per request, with and without the grl module,
counted by valgrind (callgrind counts instructions, not time, so the figure is
repeatable on a busy machine where req/s is not).

nginx runs as a single process (master_process off) under
`valgrind --tool=callgrind`; a client sends N requests on keep-alive
connections; the count of a run with N requests minus a run with no requests
leaves the instructions spent per request. Variants as in nginx_overhead.py:
plain, grl (10 buckets, ratio-0 instructions in force, the request matches
one), limit_req.

Usage: bench/instructions_per_request.py [--module ...] [--requests 20000] [--save]
       [--variants plain,grl,limit_req]  (--save: the table also to
       bench/results/instructions-DATE.md, the file the docs cite)  (grl_headers: grl with grl_ratelimit_headers on;
       grl_noplane: grl without a control plane, i.e. no ZeroMQ thread, as in workers but 0;
       grl=PATH: grl with the module at PATH, e.g. another branch's build, in the same run;
       grl_keyed: grl with the matched bucket keyed on $binary_remote_addr, docs/per-key.md;
       grl_keyed1: one keyed bucket alone, on $binary_remote_addr, as limit_req is set up)
"""
import argparse
import datetime
import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nginx_overhead as ov  # noqa: E402  (shares the configurations and publisher)


def count(variant, requests, args, pub):
    variant, _, module = variant.partition("=")  # grl=PATH: grl with another build's module
    prefix = tempfile.mkdtemp(prefix="grl-ipr-")
    os.chmod(prefix, 0o755)
    os.makedirs(os.path.join(prefix, "logs"))
    os.makedirs(os.path.join(prefix, "tmp"))
    port = ov.free_port()
    conf = ov.conf(variant, port, os.path.abspath(module) if module else args.module, pub.endpoint)
    conf = "master_process off;\ndaemon off;\n" + conf.replace("worker_cpu_affinity 01;", "")
    path = os.path.join(prefix, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    # One file per process (%p): the reporter process, forked by nginx, runs under valgrind
    # too. Only nginx's own process and thread are counted: the reporter and ZeroMQ's I/O
    # thread (in the reporter since it became a process, in nginx before) work in proportion
    # to time, not to requests.
    out = os.path.join(prefix, "callgrind.out.%p")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--separate-threads=yes",
                             "--keep-debuginfo=yes",  # nginx dlcloses the module at exit: keep its lines
                             "--dump-instr=" + ("yes" if args.instr else "no"),
                             "--callgrind-out-file=" + out,
                             ov.NGINX, "-p", prefix, "-c", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/warmup")
                c.getresponse().read()
                break
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit(f"{variant}: nginx exited: {proc.stderr.read().decode()[-2000:]}")
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        if variant.startswith("grl") and variant != "grl_noplane":  # until ratio 0 is in force
            import json
            deadline = time.time() + 30
            while True:
                pub.kick.set()
                time.sleep(0.5)
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                c.request("GET", "/grl")
                st = json.loads(c.getresponse().read())
                if all(b["ratio_state"] == "active" for b in st["buckets"]):
                    break
                if time.time() > deadline:
                    raise SystemExit("grl: instructions did not arrive")
        per_conn = 1000
        for i in range(0, requests, per_conn):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            for _ in range(min(per_conn, requests - i)):
                c.request("GET", "/api/v7/users/42")
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    raise SystemExit(f"{variant}: status {r.status}")
            c.close()
    finally:
        proc.send_signal(2)  # SIGINT: nginx exits, callgrind writes its file
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            # Seen under valgrind only (its thread scheduling): give up on this
            # run; count() is retried by the caller.
            proc.kill()
            proc.communicate()
            shutil.rmtree(prefix, ignore_errors=True)
            raise RuntimeError(f"{variant}: nginx under valgrind did not exit")
    out = out.replace("%p", str(proc.pid)) + "-01"  # thread 1 of nginx's process (valgrind's pid)
    with open(out) as f:
        m = re.search(r"^totals: (\d+)", f.read(), re.M)
    heap = malloc_instructions(out)
    if args.keep:
        print(f"  {variant} ({requests} requests): {out}")
    else:
        shutil.rmtree(prefix, ignore_errors=True)
    return int(m.group(1)), heap


# glibc's malloc and free (nginx's pool of each request and connection) cost from ~250 to
# ~600 instructions a request depending on the heap's shape, which the module's own start-up
# allocations change: the same build moved +-140 between variants. They are counted
# separately, so that the figure without them compares the request paths themselves.
def malloc_instructions(path):
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    total = 0
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\S*malloc/\S*malloc\.c:", line)
        if m:
            total += int(m.group(1).replace(",", ""))
    return total


def count_retrying(variant, requests, args, pub, attempts=3):
    for attempt in range(attempts):
        try:
            return count(variant, requests, args, pub)
        except RuntimeError as e:
            if attempt == attempts - 1:
                raise
            print(f"  {e}; retrying", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", default=os.path.join(ov.ROOT, "build/ngx_module/ngx_http_grl_module.so"))
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--keep", action="store_true", help="keep the callgrind files")
    ap.add_argument("--save", action="store_true",
                    help="write the table to bench/results/instructions-DATE.md")
    ap.add_argument("--instr", action="store_true",
                    help="count per instruction (--dump-instr=yes), for bench/callgrind_lines.py")
    ap.add_argument("--variants", default="plain,grl,limit_req",
                    help="comma-separated; also grl_headers (grl with grl_ratelimit_headers on) "
                         "grl_keyed (the matched bucket keyed on $binary_remote_addr) and "
                         "grl_keyed1 (one keyed bucket alone, like limit_req's one zone)")
    args = ap.parse_args()
    args.module = os.path.abspath(args.module)
    # Instruction messages cost time-proportional work (decode, apply); send
    # them rarely so that the count reflects requests.
    pub = ov.Publisher(period=10.0)
    pub.start()
    rows = []
    try:
        for v in args.variants.split(","):
            base, base_heap = count_retrying(v, 0, args, pub)
            full, full_heap = count_retrying(v, args.requests, args, pub)
            heap = (full_heap - base_heap) / args.requests
            rows.append((v, (full - base) / args.requests, heap))
            print(f"{v:9s} {rows[-1][1]:8.0f} instructions/request ({heap:.0f} in malloc/free)",
                  flush=True)
    finally:
        pub.stop.set()
        pub.kick.set()
        pub.join()
    plain, plain_heap = rows[0][1], rows[0][2]  # the first variant is the baseline
    cmd = " ".join([os.path.relpath(sys.argv[0], ov.ROOT)] + sys.argv[1:])
    lines = [f"Command: `{cmd}`", "",
             f"| variant | instructions/request | added over {rows[0][0]} | of which malloc/free "
             "| added without malloc/free |",
             "|---|---|---|---|---|"]
    for v, ipr, heap in rows:
        lines.append(f"| {v} | {ipr:.0f} | {ipr - plain:+.0f} ({(ipr - plain) / plain * 100:+.1f}%) "
                     f"| {heap - plain_heap:+.0f} | {ipr - heap - (plain - plain_heap):+.0f} |")
    print("\n" + "\n".join(lines))
    if args.save:
        commit = subprocess.run(["git", "-C", ov.ROOT, "rev-parse", "--short", "HEAD"],
                                stdout=subprocess.PIPE, text=True).stdout.strip()
        now = datetime.datetime.now(datetime.timezone.utc)
        out = os.path.join(ov.ROOT, "bench", "results", f"instructions-{now.date().isoformat()}.md")
        with open(out, "w") as fh:
            fh.write("# Instructions per request (`bench/instructions_per_request.py`)\n\n"
                     f"{now:%Y-%m-%d %H:%M} UTC, commit {commit}, callgrind, {args.requests} "
                     "requests on keep-alive connections, one nginx process; malloc/free apart "
                     "(docs/design/004-request-path-cost.md).\n\n" + "\n".join(lines) + "\n")
        print("written to", os.path.relpath(out, ov.ROOT))

if __name__ == "__main__":
    main()
