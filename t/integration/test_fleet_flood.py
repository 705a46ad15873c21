"""Floods against the receive high-water marks, with a stated memory bound
(docs/control-plane.md, "Memory under a flood"): several connections send
valid-looking messages to a collector's report endpoint, then to a
controller's usage endpoint, as fast as this process can. The flooded daemon's
resident memory (VmRSS) must stay under

    RSS before the flood + connections x (RCVHWM + 2) x message size x 1.25 + 24 MiB

(its queue holds at most RCVHWM messages per connection, plus one being decoded
by libzmq and one being handled; 1.25 and 24 MiB for the allocator), and the
daemon must go on serving its real fleet meanwhile: both nginx keep the ratio
the controller computes, /metrics answers, and the flood is counted."""

import threading
import time

import msgpack
import zmq

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)

BUCKETS = ["g procedure_prefix=/g rate=100r/s"]
RCVHWM = 64  # collector/collector.cpp kReportQueue; controller/controller_daemon.cpp usage socket
CONNECTIONS = 4
FLOOD_BUCKETS = 2000  # messages of 200-350 KB: the daemons decode them slower than they come
MIB = 1 << 20


def rss(pid):
    with open("/proc/%d/status" % pid) as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for pid %d" % pid)


def bound(before, message_bytes):
    return before + CONNECTIONS * (RCVHWM + 2) * message_bytes * 1.25 + 24 * MIB


def report_for_another_zone():
    """A well-formed report of a host of zone zflood (decoded in full, then dropped)."""
    return msgpack.packb({
        "v": 1, "type": "report", "ts_ms": int(time.time() * 1000), "seq": 1, "host": "flood",
        "zone": "zflood", "region": "r1", "epoch": 1, "interval_ms": 250, "reports_dropped": 0,
        "buckets": [{"name": "flood-%04d" % i, "scope": "global", "mode": "deny",
                     "limit_mrps": 100000, "offered": 1, "admitted": 1, "dropped": 0,
                     "shadow_dropped": 0} for i in range(FLOOD_BUCKETS)]})


# The usage flood: the most entries one message holds, each naming 8 of the zone's 16 hosts.
# Positional entries (usage v 2) decode about 3x faster than the maps before them, and 2,000
# plain entries (82 KB) were handled within the batch's time budget on a quiet machine (CI saw
# no batch cut): the host names make each message slow to decode, as the test needs.
USAGE_FLOOD_BUCKETS = 4096  # kMaxBucketsPerMessage
USAGE_FLOOD_HOSTS = ["flood-h%02d" % i for i in range(16)]


def usage_for_another_region():
    """A well-formed zone usage of region r9 (decoded in full, then refused)."""
    return msgpack.packb({
        "v": f.USAGE_VERSION, "type": "zone_usage", "ts_ms": int(time.time() * 1000), "seq": 1,
        "source": "flood", "region": "r9", "zone": "zflood", "interval_ms": 250,
        "hosts": len(USAGE_FLOOD_HOSTS), "stale_hosts": 0, "host_names": USAGE_FLOOD_HOSTS,
        "buckets": [f.usage_entry("flood-%04d" % i, offered_mrps=1000, hosts=8,
                                  host_names=USAGE_FLOOD_HOSTS[i % 8:i % 8 + 8],
                                  definitions=[f.definition(100000, hosts=8)])
                    for i in range(USAGE_FLOOD_BUCKETS)]}, use_bin_type=True)


def flood_and_watch(daemon, endpoint, message, seconds, check_fleet):
    """Floods `endpoint` from CONNECTIONS threads for `seconds` while checking, every quarter
    second, the daemon's RSS against the bound and the fleet (check_fleet()). Returns the
    number of messages sent, the RSS before and the highest RSS seen."""
    before = rss(daemon.proc.pid)
    limit = bound(before, len(message))
    ctx = zmq.Context()
    stop = threading.Event()
    sent = [0] * CONNECTIONS

    def run(i):
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, 60000)  # what is queued here is delivered after the flood
        s.setsockopt(zmq.SNDTIMEO, 100)  # blocked by the high-water mark: try again
        s.connect(endpoint)
        while not stop.is_set():
            try:
                s.send(message, copy=False)
                sent[i] += 1
            except zmq.Again:
                pass
        s.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CONNECTIONS)]
    for t in threads:
        t.start()
    peak = before
    done = False
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            now = rss(daemon.proc.pid)
            peak = max(peak, now)
            assert now <= limit, ("%s holds %.0f MiB during the flood, over its bound of %.0f "
                                  "MiB (%.0f MiB before, %d connections x (%d + 2) x %d bytes)"
                                  % (daemon.name, now / MIB, limit / MIB, before / MIB,
                                     CONNECTIONS, RCVHWM, len(message)))
            check_fleet()
            time.sleep(0.25)
        done = True
    finally:
        stop.set()
        for t in threads:
            t.join()
        if done:
            # Everything sent reaches the daemon (its queue drains while this waits), so
            # the counts below can be exact; the RSS is watched while it drains too.
            term = threading.Thread(target=ctx.term)
            term.start()
            while term.is_alive():
                now = rss(daemon.proc.pid)
                peak = max(peak, now)
                assert now <= limit, "%s holds %.0f MiB while draining" % (daemon.name, now / MIB)
                term.join(0.25)
        else:
            ctx.destroy(0)
    print("%s: %d messages of %d bytes in %.0f s; RSS %.0f MiB before, peak %.0f MiB, bound "
          "%.0f MiB" % (daemon.name, sum(sent), len(message), seconds, before / MIB, peak / MIB,
                        limit / MIB))
    return sum(sent), before, peak


def test_floods_stay_within_the_high_water_marks_and_the_fleet_goes_on(fleet):
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl])
    ns = [fleet.nginx("h1", "z1", col, BUCKETS), fleet.nginx("h2", "z1", col, BUCKETS)]
    fleet.wait_hosts(ctl, 2)
    load = f.Load([(ns[0], 2), (ns[1], 1)], "150:40", "/g/x")
    try:
        f.wait_nginx_bucket(ns, "g", lambda b: b["ratio_state"] == "active" and
                            abs(b["ratio"] - 1 / 3) < 0.05, 15)

        def fleet_holds():
            # The ratio expires 2 s after the last instruction: a stalled collector or
            # controller would show here as a ratio state other than active.
            for n in ns:
                b = n.bucket("g")
                assert b["ratio_state"] == "active" and abs(b["ratio"] - 1 / 3) < 0.1, (n.host, b)
            col.metrics()
            ctl.metrics()

        # 1. The collector's report endpoint.
        message = report_for_another_zone()
        sent, before, peak = flood_and_watch(col, col.report, message, 6, fleet_holds)
        # Every report of the flood reached the collector and was counted (no real one is).
        f.h.wait_until(lambda: f.metric(col.metrics(), "grl_collector_reports_wrong_zone_total")
                       == sent, 10, what="every report of the flood to be counted")
        assert sent > 1000, sent
        # The degraded mode: batches cut at their time budget, counted and logged.
        assert f.metric(col.metrics(), "grl_collector_report_batches_cut_total") > 0
        assert "reports arrive faster than they are handled: a batch stopped after 50 ms" in col.log()
        assert "host flood reports zone zflood of region r1 to the collector of zone z1" in col.log()
        assert f.metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 2

        # 2. The controller's usage endpoint.
        message = usage_for_another_region()
        sent, before, peak = flood_and_watch(ctl, ctl.usage, message, 6, fleet_holds)
        f.h.wait_until(lambda: f.metric(ctl.metrics(), "grl_controller_messages_ignored_total",
                                        kind="zone_usage", reason="wrong_region")
                       == sent, 10,
                       what="the flood to be taken off the queue and counted")
        assert "zone usage from flood for region r9 ignored" in ctl.log()
        # The degraded mode: usage batches cut at their time budget (50 ms at 250 ms), so that
        # the tick is not held up by 256 queued messages; counted and logged.
        assert f.metric(ctl.metrics(), "grl_controller_batches_cut_total", kind="zone_usage") > 0
        assert "zone_usage arrives faster than it is handled: a batch stopped after 50 ms" in ctl.log()
        m = ctl.metrics()
        assert f.metric(m, "grl_controller_hosts", state="fresh") == 2
        assert f.metric(m, "grl_controller_zones", state="fresh") == 1
        fleet_holds()
    finally:
        load.stop()
