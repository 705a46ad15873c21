#!/usr/bin/python3
"""Quota overshoot: what the fleet admits beyond quota=N (docs/design/008-quotas.md; issue 31).

Two zones of two nginx each, with the real grl-collector and grl-controller, one global bucket
`q procedure_prefix=/q quota=N/hour window_offset=D` (unkeyed: a quota is per bucket
instance), D chosen at run time so that the hour window started a few seconds before the fleet
did: the whole run sits inside one window, with nothing admitted in it before the load. One
open-loop grl_loadgen sends --rps requests/s (30) over the four hosts in turn, for N/rps seconds
plus --after (12). Run once with every interval (nginx grl_report_interval, collector and
controller --interval) at 250 ms and once at 1 s; controller --ttl 3 x interval (its default),
nginx grl_instruction_ttl its default (5 s).

Counts come from grl_loadgen's 10 ms bins (one request every 33 ms, so a bin holds at most
one): admitted before the first 429, admitted in the window in all (checked against the
buckets' `admitted` on the nginx status pages), the overshoot over N in requests, in % of N
and in reporting intervals' worth at --rps. Prints the table and writes it to
bench/results/quota-DATE.md (the raw figures to bench/results/raw/quota.json, not committed).

With --key K the bucket is keyed (`key=$http_x_api_key`, docs/design/009-per-key-quotas.md)
and every request carries `X-Api-Key: K`: the issue's "one key at 30 r/s for a quota of
600/hour", the quota being the key's; the table goes to bench/results/quota-key-DATE.md.

Usage: bench/exp_quota.py [--quota 600] [--rps 30] [--after 12] [--intervals 250ms,1s] [--key K]
(GRL_BUILD_DIR: the build, default build/; GRL_MODULE: the module, default in it.)
"""
import argparse
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

fl = bl.integration_fleet()

BIN_MS = 10
HOUR = 3600


def hour_window(lead_s=5):
    """A window_offset (whole seconds) whose hour window started `lead_s` seconds ago, and that
    start (wall clock)."""
    start = int(time.time()) - lead_s
    return start % HOUR, start


def count(load, quota):
    """From grl_loadgen's bins: admitted before the first 429, in all, after it; the seconds from
    the first 429 to the last admission; admitted per host after the first 429."""
    iv = load["intervals"]
    first = next((k for k, i in enumerate(iv) if i["r429"]), None)
    before = sum(i["ok"] for i in iv[:first]) if first is not None else sum(i["ok"] for i in iv)
    total = sum(i["ok"] for i in iv)
    out = {"before": before, "total": total, "rejected": sum(i["r429"] for i in iv),
           "errors": sum(i["errors"] + i["other"] for i in iv), "first_429_s": None,
           "last_ok_after_s": None, "after_by_host": None,
           "ok_in_first_429_bin": iv[first]["ok"] if first is not None else 0}
    if first is not None:
        after = iv[first:]
        out["first_429_s"] = iv[first]["t"]
        last = [i["t"] for i in after if i["ok"]]
        out["last_ok_after_s"] = round(last[-1] - iv[first]["t"], 2) if last else 0.0
        out["after_by_host"] = [sum(i["ok_by_target"][h] for i in after)
                                for h in range(len(after[0]["ok_by_target"]))]
    return out


def run(interval, args):
    ival = bl.seconds(interval)
    offset, start = hour_window()
    keyed = "key=$http_x_api_key keys=1024 " if args.key else ""
    bucket = "q %sprocedure_prefix=/q quota=%d/hour window_offset=%ds" % (keyed, args.quota, offset)
    load_s = int(round(args.quota / args.rps + args.after))
    ttl = "%dms" % (3 * ival * 1000)
    with fl.two_zones_of_two([bucket], interval=interval, ttl=ttl, nginx_ttl=None) as f:
        begun = time.time()
        assert begun + load_s + 10 < start + HOUR, "the run would cross the window's end"
        headers = ["X-Api-Key: " + args.key] if args.key else []
        load = fl.Load([(n, 1) for n in f["nginx"]], "%g:%d" % (args.rps, load_s), "/q/x",
                       interval_ms=BIN_MS, headers=headers).result(timeout=load_s + 60)
        time.sleep(2 * ival + 0.2)  # the last admissions reach the controller
        on_pages = fl.bucket_totals(f["nginx"], "q")["admitted"]
        used = fl.metric(f["ctl"].metrics(), "grl_bucket_quota_used", bucket="q", scope="global")
    c = count(load, args.quota)
    over = c["total"] - args.quota
    c.update({"interval": interval, "interval_s": ival, "bucket": bucket,
              "window_start": time.strftime("%H:%M:%S UTC", time.gmtime(start)),
              "load_started_s": round(begun - start, 1), "load_s": load_s,
              "offered": sum(i["offered"] for i in load["intervals"]),
              "on_pages": on_pages, "controller_used": used, "overshoot": over,
              "overshoot_pct": 100.0 * over / args.quota,
              "overshoot_intervals": over / (args.rps * ival)})
    return c


def table(runs, quota, rps):
    rows = ["| interval | N | admitted before the first 429 | admitted in the window | "
            "overshoot over N | %% of N | intervals' worth at %g r/s |" % rps,
            "|---|---|---|---|---|---|---|"]
    for r in runs:
        rows.append("| %s | %d | %d | %d | %+d | %+.1f%% | %.1f |" % (
            r["interval"], quota, r["before"], r["total"], r["overshoot"], r["overshoot_pct"],
            r["overshoot_intervals"]))
    return "\n".join(rows)


def details(r):
    return ("- %s: `grl_bucket %s;` (hour window from %s, load from %.1f s into it, %d s); "
            "offered %d, 429 %d, errors/other %d; first 429 at %.2f s, last admission %s s after "
            "it, admitted after it per host (h1-h4) %s; admitted on the status pages %d, "
            "controller's use (`grl_bucket_quota_used`) %s" % (
                r["interval"], r["bucket"], r["window_start"], r["load_started_s"], r["load_s"],
                r["offered"], r["rejected"], r["errors"], r["first_429_s"] or -1,
                r["last_ok_after_s"], r["after_by_host"], r["on_pages"],
                "%.0f" % r["controller_used"] if r["controller_used"] is not None else "absent"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quota", type=int, default=600, help="N per hour")
    ap.add_argument("--rps", type=float, default=30.0, help="offered requests/s, all hosts")
    ap.add_argument("--after", type=float, default=12.0,
                    help="seconds of load beyond N/rps")
    ap.add_argument("--intervals", default="250ms,1s")
    ap.add_argument("--key", default="", help="a keyed bucket: the requests' one key")
    args = ap.parse_args()
    st = bl.stamp(sys.argv)
    runs = [run(i, args) for i in args.intervals.split(",")]
    bl.save_result("quota-key" if args.key else "quota", dict(st, params=vars(args), runs=runs))
    text = "\n".join([
        "# Quota overshoot (`bench/exp_quota.py`)", "",
        "%s, commit %s, load average %s. Command: `%s`" % (
            st["when"], st["commit"], " ".join(open("/proc/loadavg").read().split()[:3]),
            st["command"]), "",
        "One global bucket `quota=%d/hour` (the issue's 600/hour; not scaled to a minute)%s, "
        "%g r/s over 4 hosts in 2 zones, one run per interval (nginx, collector and controller "
        "alike). Overshoot = admitted in the window - N." % (
            args.quota, ", keyed: one key's quota, every request of key %r" % args.key
            if args.key else "", args.rps), "",
        table(runs, args.quota, args.rps), ""] + [details(r) for r in runs]) + "\n"
    print(text)
    name = "quota-key" if args.key else "quota"
    out = os.path.join(bl.RESULTS, "%s-%s.md" % (name, datetime.datetime.utcnow().date().isoformat()))
    with open(out, "w") as fh:
        fh.write(text)
    print("written to", os.path.relpath(out, bl.ROOT))


if __name__ == "__main__":
    main()
