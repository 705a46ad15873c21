"""The control plane's state under hostile input (issue 32): forged epochs cannot silence a
host that keeps reporting; a zone's sender cannot touch another zone's usage sets nor fill the
table they share; the memory a source's sets hold is bounded in bytes and returned when a set
is dropped; the collector's memory is bounded in bytes; override tombstones do not crowd out
live overrides. Each test sends the hostile messages itself, as an attacker who reaches the
ports would, from docs/protocol.md."""

import threading
import time

import msgpack
import zmq

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)

LIMIT_MRPS = 1000 * 1000


def rss_mib(daemon):
    with open("/proc/%d/status" % daemon.proc.pid) as s:
        for line in s:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS")


def pack(m):
    return msgpack.packb(m, use_bin_type=True)


def report(host, epoch, seq, offered, interval_ms=250, recent=None, buckets=("g",)):
    m = {"v": 1, "type": "report", "ts_ms": int(time.time() * 1000), "seq": seq, "host": host,
         "zone": "z1", "region": "r1", "epoch": epoch, "interval_ms": interval_ms,
         "reports_dropped": 0,
         "buckets": [{"name": b, "scope": "global", "mode": "deny", "limit_mrps": LIMIT_MRPS,
                      "offered": offered, "admitted": offered, "dropped": 0, "shadow_dropped": 0}
                     for b in buckets]}
    if recent is not None:
        m["recent_ms"] = interval_ms
        m["recent"] = [list(recent) for _ in buckets]
    return pack(m)


class Reporter:
    """A genuine host: epoch 7, a report every 250 ms, `rps` requests per second."""

    def __init__(self, ctx, collector, host="h1"):
        self.push = ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.connect(collector.report)
        self.host = host
        self.rps = 100
        self.offered = 0
        self.seq = 0
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_ev.is_set():
            self.seq += 1
            self.offered += self.rps // 4
            self.push.send(report(self.host, 7, self.seq, self.offered))
            self.stop_ev.wait(0.25)

    def stop(self):
        self.stop_ev.set()
        self.thread.join(5)
        self.push.close(0)


def offered_rps(ctl, bucket="g"):
    return f.metric(ctl.metrics(), "grl_bucket_offered_rps", bucket=bucket, scope="global")


def test_fleet_forged_epochs_do_not_silence_a_host(fleet):
    """Two forged reports with fresh epochs, a 60 s interval and empty recent counts for a real
    host: its genuine reports (of its own epoch, every 250 ms) keep being rated; the forged
    epochs wait for the host to fall silent, counted (epoch_pending) and never taken."""
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl])
    ctx = zmq.Context()
    genuine = Reporter(ctx, col)
    forger = ctx.socket(zmq.PUSH)
    forger.setsockopt(zmq.LINGER, 0)
    forger.connect(col.report)
    try:
        f.h.wait_until(lambda: (offered_rps(ctl) or 0) >= 90, 10, what="the host rated at 100 r/s")
        for epoch in (1001, 1002):
            forger.send(report("h1", epoch, 1, 0, interval_ms=60000, recent=(0, 0, 0, 0)))
            time.sleep(0.1)
        genuine.rps = 200
        t0 = time.monotonic()
        f.h.wait_until(lambda: (offered_rps(ctl) or 0) >= 180, 8,
                       what="the host's genuine load (200 r/s) rated after two forged epochs")
        print("genuine load rated %.1f s after the forged reports" % (time.monotonic() - t0))
        m = col.metrics()
        assert f.metric(m, "grl_collector_reports_total", result="epoch_pending") >= 2
        assert (f.metric(m, "grl_collector_reports_total", result="restarted") or 0) == 0
    finally:
        genuine.stop()
        forger.close(0)
        ctx.term()


def admin(req, seq, op, bucket, **kw):
    m = {"v": 1, "type": "admin_request", "ts_ms": int(time.time() * 1000), "seq": seq, "op": op,
         "bucket": bucket}
    m.update(kw)
    req.send(pack(m))
    assert req.poll(10000), "no admin reply"
    return msgpack.unpackb(req.recv(), raw=False)


def zone_part(zone, source, seq, part, parts, buckets, host_names=("h1",), ts_ms=None, hosts=1):
    return pack({"v": f.USAGE_VERSION, "type": "zone_usage",
                 "ts_ms": ts_ms or int(time.time() * 1000), "seq": seq, "source": source,
                 "region": "r1", "zone": zone, "interval_ms": 250, "hosts": hosts, "stale_hosts": 0,
                 "host_names": list(host_names) if part == 0 else [], "buckets": buckets,
                 "part": part, "parts": parts})


def small_buckets(prefix, n=4):
    return [f.usage_entry("%s%02d" % (prefix, i), offered_mrps=1000, admitted_mrps=1000,
                          definitions=[f.definition(LIMIT_MRPS)], host_names=[])
            for i in range(n)]


def test_fleet_a_zone_cannot_touch_another_zones_usage_sets(fleet):
    """Zone z1's collector sends its usage in two parts every 250 ms. A sender for zone z2 that
    uses z1's collector's name as its source and a huge seq, and invents 40 more sources, cannot
    make z1's parts stale nor fill the table: sets are held per (zone, source), at most 4
    sources per zone; z1 stays fresh and its sets complete."""
    ctl = fleet.controller(extra=["--max-zones", "16"])
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(ctl.usage)
    evil = ctx.socket(zmq.PUSH)
    evil.setsockopt(zmq.LINGER, 0)
    evil.setsockopt(zmq.SNDHWM, 100000)
    evil.connect(ctl.usage)
    z1 = small_buckets("a") + small_buckets("b")
    seq = [0]

    def genuine():
        seq[0] += 1
        ts = int(time.time() * 1000)
        push.send(zone_part("z1", "col-z1", seq[0], 0, 2, z1[:4], ts_ms=ts))
        push.send(zone_part("z1", "col-z1", seq[0], 1, 2, z1[4:], ts_ms=ts))

    def complete():
        return f.metric(ctl.metrics(), "grl_controller_usage_parts_total", kind="zone_usage",
                        result="complete") or 0

    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(ctl.admin)

    def z1_fresh():
        st = admin(req, 1, "status", "")
        return any(z["zone"] == "z1" and z["fresh"] for z in st["zones"])

    for _ in range(4):
        genuine()
        time.sleep(0.25)
    f.h.wait_until(lambda: complete() >= 2, 5, what="z1's sets complete")
    before = complete()
    end = time.monotonic() + 3
    i = 0
    while time.monotonic() < end:
        for k in range(5):
            i += 1
            evil.send(zone_part("z2", "col-z1", 2 ** 62 + i, 0, 16, small_buckets("x")))
            evil.send(zone_part("z2", "invented-%d" % (i % 40), 2 ** 62 + i, 0, 16,
                                small_buckets("x")))
        genuine()
        time.sleep(0.25)
    done = complete() - before
    fresh = z1_fresh()
    m = ctl.metrics()
    print("z1 sets completed under attack: %d; z1 fresh: %s; full: %s" %
          (done, fresh, f.metric(m, "grl_controller_usage_parts_total", kind="zone_usage",
                                 result="full")))
    assert done >= 8, "z1's sets must keep completing (%d in 3 s)" % done
    assert fresh
    assert f.metric(m, "grl_controller_usage_parts_total", kind="zone_usage", result="full") > 0
    assert "sources of zone z2" in ctl.log()
    push.close(0)
    evil.close(0)
    req.close(0)
    ctx.term()


def heavy_part(zone, seq, part, ts_ms, names_per_bucket=256, buckets=1850):
    """A part of ~1 MiB whose bucket entries carry 256 one-character host names each: the
    shape that costs the most memory per byte received."""
    names = [chr(ord("a") + k % 26) for k in range(names_per_bucket)]
    bs = [f.usage_entry("p%02d-%05d" % (part, i), hosts=names_per_bucket,
                        definitions=[f.definition(1, hosts=names_per_bucket)], host_names=names)
          for i in range(buckets)]
    return zone_part(zone, "col-" + zone, seq, part, 16, bs, hosts=names_per_bucket, ts_ms=ts_ms)


def test_fleet_incomplete_sets_hold_bounded_memory_and_return_it(fleet):
    """Two sources each send 15 parts of 16 of host-name-heavy usage (~1 MiB each) and never the
    last: a set is dropped once it holds more than its byte bound (too_large, counted, logged),
    and the memory of dropped and expired sets is returned."""
    ctl = fleet.controller()
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.setsockopt(zmq.SNDHWM, 1000)
    push.connect(ctl.usage)
    time.sleep(0.5)
    base = rss_mib(ctl)
    ts = int(time.time() * 1000)
    parts = {z: [heavy_part(z, 5, p, ts) for p in range(15)] for z in ("zm1", "zm2")}
    peak = base
    for z in parts:
        for p in parts[z]:
            push.send(p)
            time.sleep(0.05)
            peak = max(peak, rss_mib(ctl))
    f.h.wait_until(lambda: (f.metric(ctl.metrics(), "grl_controller_usage_sets_incomplete_total",
                                     kind="zone_usage") or 0) >= 2 or
                   (f.metric(ctl.metrics(), "grl_controller_usage_parts_total", kind="zone_usage",
                             result="too_large") or 0) >= 2,
                   10, what="the sets dropped")
    time.sleep(2)  # past the sets' timeout (3 intervals) and a few ticks
    after = rss_mib(ctl)
    print("controller RSS: %.0f MiB before, %.0f MiB peak, %.0f MiB after the sets were dropped"
          % (base, peak, after))
    assert after - base < 24, "memory of dropped sets held: %.0f MiB" % (after - base)
    assert peak - base < 200, "peak %.0f MiB over the base" % (peak - base)
    m = ctl.metrics()
    assert f.metric(m, "grl_controller_usage_parts_total", kind="zone_usage", result="too_large") >= 2
    assert "too_large" in ctl.log() or "bytes" in ctl.log()
    push.close(0)
    ctx.term()


def test_fleet_collector_memory_is_bounded_in_bytes(fleet):
    """Invented hosts of 4,096 buckets each: the collector refuses new hosts once its rate
    table holds --max-memory bytes (counted as memory_full, logged); its RSS stays near the
    bound and the hosts it holds keep being rated."""
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl], extra=["--max-memory", "32m"])
    ctx = zmq.Context()
    genuine = Reporter(ctx, col)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.setsockopt(zmq.SNDHWM, 1000)
    push.connect(col.report)
    try:
        f.h.wait_until(lambda: (offered_rps(ctl) or 0) >= 90, 10, what="the host rated")
        base = rss_mib(col)
        names = ["n%04d" % i for i in range(4096)]
        for k in range(200):
            push.send(report("inv-%d" % k, 1, 1, 5, buckets=names))
            if k % 20 == 19:
                time.sleep(0.2)
        time.sleep(1.5)
        after = rss_mib(col)
        m = col.metrics()
        print("collector RSS %.0f MiB -> %.0f MiB after 200 invented hosts of 4,096 buckets; "
              "refused: %s" % (base, after, f.metric(m, "grl_collector_reports_total",
                                                     result="memory_full")))
        assert f.metric(m, "grl_collector_reports_total", result="memory_full") > 0
        # The bound, passed by one report at most; RSS within it and the process's own.
        assert f.metric(m, "grl_collector_memory_bytes") <= 33 * 2 ** 20
        assert after - base < 32 + 40, "collector grew %.0f MiB" % (after - base)
        assert "--max-memory" in col.log()
        genuine.rps = 200
        f.h.wait_until(lambda: (offered_rps(ctl) or 0) >= 180, 8, what="the known host rated")
    finally:
        genuine.stop()
        push.close(0)
        ctx.term()


def test_fleet_tombstones_do_not_crowd_out_live_overrides(fleet):
    """1,024 overrides set and cleared leave 1,024 tombstones (kept 24 h): a new override can
    still be set (the oldest tombstone makes room, counted); live overrides stay bounded."""
    ctl = fleet.controller()
    ctx = zmq.Context()
    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(ctl.admin)
    seq = 0
    for i in range(1024):
        seq += 1
        assert admin(req, seq, "set", "b%04d" % i, limit_mrps=10000)["ok"]
        seq += 1
        assert admin(req, seq, "clear", "b%04d" % i)["ok"]
    seq += 1
    r = admin(req, seq, "set", "fresh", limit_mrps=10000)
    print("set after 1,024 cleared overrides: %s" % (r.get("error") or "ok"))
    assert r["ok"], r.get("error")
    m = ctl.metrics()
    assert f.metric(m, "grl_controller_override_tombstones_dropped_total") >= 1
    # Live overrides are still bounded: 1,024 of them, then one more is refused.
    for i in range(1023):
        seq += 1
        assert admin(req, seq, "set", "live%04d" % i, limit_mrps=10000)["ok"]
    seq += 1
    r = admin(req, seq, "set", "one-more", limit_mrps=10000)
    assert not r["ok"] and "too many overrides" in r["error"]
    req.close(0)
    ctx.term()
