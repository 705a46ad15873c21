"""Usage in parts (docs/protocol.md "Usage in parts"): a real controller assembles a zone's
usage of 6,000 buckets sent in two parts by a collector and a peer's region usage in two
parts, computes every bucket's ratio from the whole, publishes its own region usage in
parts and its instructions in messages of at most 4,096 entries; a set that never
completes is dropped (counted, logged) and the last whole usage stays in force; parts that
disagree are dropped."""

import threading
import time

import msgpack
import zmq

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)

N = 6000
LAST = "b%05d" % (N - 1)
LIMIT_MRPS = 1000 * 1000  # 1,000 r/s


def usage_bucket(i, offered_mrps, zone=True):
    return f.usage_entry("b%05d" % i, offered_mrps=offered_mrps, admitted_mrps=offered_mrps,
                         definitions=[f.definition(LIMIT_MRPS)], host_names=[] if zone else None)


def offered(i, last_mrps):
    return last_mrps if i == N - 1 else 100 * 1000


def zone_parts(seq, last_mrps=2000 * 1000, parts=2, **over):
    """The zone usage of N buckets as `parts` messages (host names in part 0 only)."""
    buckets = [usage_bucket(i, offered(i, last_mrps)) for i in range(N)]
    ts_ms = int(time.time() * 1000)  # one for the set: every part repeats it
    out = []
    for p in range(parts):
        m = {"v": f.USAGE_VERSION, "type": "zone_usage", "ts_ms": ts_ms, "seq": seq,
             "source": "col-z1", "region": "r1", "zone": "z1", "interval_ms": 250, "hosts": 1,
             "stale_hosts": 0, "host_names": ["h1"] if p == 0 else [],
             "buckets": buckets[N * p // parts:N * (p + 1) // parts], "part": p, "parts": parts}
        m.update(over)
        out.append(msgpack.packb(m, use_bin_type=True))
    return out


def region_parts(seq, last_mrps=1000 * 1000):
    buckets = [usage_bucket(i, offered(i, last_mrps), zone=False) for i in range(N)]
    ts_ms = int(time.time() * 1000)
    out = []
    for p in range(2):
        m = {"v": f.USAGE_VERSION, "type": "region_usage", "ts_ms": ts_ms, "seq": seq,
             "source": "ctl-r2", "region": "r2", "interval_ms": 250, "zones": 1, "hosts": 1,
             "limits_digest": "", "buckets": buckets[N * p // 2:N * (p + 1) // 2],
             "overrides": [], "part": p, "parts": 2}
        out.append(msgpack.packb(m, use_bin_type=True))
    return out


class Feeder:
    """Sends the zone's usage (and a peer's) every 250 ms, as a collector and a peer would."""

    def __init__(self, ctx, ctl, peer):
        self.push = ctx.socket(zmq.PUSH)
        self.push.connect(ctl.usage)
        self.peer = peer
        self.seq = 0
        self.peer_on = False
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_ev.is_set():
            self.seq += 1
            for p in zone_parts(self.seq):
                self.push.send(p)
            if self.peer_on:
                for p in region_parts(self.seq):
                    self.peer.send_multipart([b"grl/p/", p])
            self.stop_ev.wait(0.25)

    def stop(self):
        self.stop_ev.set()
        self.thread.join(5)


def received(sub, seconds):
    """(topic, decoded body) of every message the subscriber receives within `seconds`."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if sub.poll(50):
            topic, body = sub.recv_multipart()
            out.append((topic, msgpack.unpackb(body, raw=False)))
    return out


def test_fleet_usage_in_parts(fleet):
    ctx = zmq.Context()
    peer = ctx.socket(zmq.PUB)  # a peer controller of region r2
    peer.bind("tcp://127.0.0.1:*")
    ctl = fleet.controller(peers=[peer.getsockopt_string(zmq.LAST_ENDPOINT)])
    sub = ctx.socket(zmq.SUB)  # what a collector and a peer controller receive
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"grl/g/")
    sub.setsockopt(zmq.SUBSCRIBE, b"grl/p/")
    sub.connect(ctl.publish)
    feeder = Feeder(ctx, ctl, peer)
    try:
        # The last bucket, in the last part, is rated from the assembled usage: 2,000 r/s
        # offered against 1,000 r/s, ratio 0.5.
        def rated():
            m = ctl.metrics()
            return (f.metric(m, "grl_bucket_offered_rps", bucket=LAST, scope="global") == 2000
                    and abs(f.metric(m, "grl_bucket_ratio", bucket=LAST, scope="global") - 0.5) < 0.01)
        f.h.wait_until(rated, 10, what="the last bucket rated from the assembled usage")
        m = ctl.metrics()
        assert f.metric(m, "grl_controller_usage_parts_total", kind="zone_usage", result="complete") >= 1
        assert f.metric(m, "grl_bucket_offered_rps", bucket="b00000", scope="global") == 100
        assert f.metric(m, "grl_controller_tick_seconds_count") > 0
        assert f.metric(m, "grl_controller_region_usage_parts") == 2

        # What the controller publishes: instructions for all N buckets in messages of at most
        # 4,096 entries, and its region usage in two parts that together list all N buckets.
        msgs = received(sub, 1.5)
        by_seq = {}
        region_by_seq = {}
        for topic, body in msgs:
            if topic == b"grl/g/":
                assert len(body["buckets"]) <= 4096
                by_seq[body["seq"]] = body
            elif body["zones"] == 0:
                # A tick before the zone's first usage (the feeder's first set can come after the
                # controller's first tick on a loaded machine): an empty region usage, one message.
                assert not body["buckets"] and "parts" not in body, body.keys()
            else:
                assert body["parts"] == 2 and body["source"] == "ctl-r1", body.keys()
                region_by_seq.setdefault(body["seq"], {})[body["part"]] = body
        names = {e["name"]: e for b in by_seq.values() for e in b["buckets"]}
        assert len(names) == N
        assert abs(names[LAST]["ratio_ppm"] - 500000) < 10000
        complete = [p for p in region_by_seq.values() if len(p) == 2]
        assert complete, "no complete region usage set received"
        parts = complete[-1]
        assert len(parts[0]["buckets"]) + len(parts[1]["buckets"]) == N
        assert parts[1]["buckets"][-1][0] == LAST  # positional entries: item 0 is the name

        # A peer's region usage in parts adds its region's load to the global sums.
        feeder.peer_on = True
        f.h.wait_until(lambda: f.metric(ctl.metrics(), "grl_bucket_offered_rps", bucket=LAST,
                                        scope="global") == 3000,
                       10, what="the peer's assembled usage in the global sum")
        assert f.metric(ctl.metrics(), "grl_controller_usage_parts_total", kind="region_usage",
                        result="complete") >= 1
    finally:
        feeder.stop()

    push = feeder.push
    seq = feeder.seq + 100
    # A set that never completes: its part is held, then dropped after an interval; the last
    # whole usage stays in force (the bucket keeps its rate until the zone goes stale).
    push.send(zone_parts(seq, last_mrps=9000 * 1000)[0])
    f.h.wait_until(lambda: f.metric(ctl.metrics(), "grl_controller_usage_sets_incomplete_total",
                                    kind="zone_usage") >= 1,
                   5, what="the incomplete set dropped")
    assert "dropped incomplete" in ctl.log()
    # Parts that disagree (another host count in part 1) drop the set.
    bad = zone_parts(seq + 1)[0:1] + zone_parts(seq + 1, hosts=2, host_names=[])[1:]
    for p in bad:
        push.send(p)
    f.h.wait_until(lambda: (f.metric(ctl.metrics(), "grl_controller_usage_parts_total",
                                     kind="zone_usage", result="inconsistent") or 0) >= 1,
                   5, what="the inconsistent set dropped")
    assert "disagrees" in ctl.log()
    # Neither reached the sums: the offered rate is still the last whole usage's (smoothed
    # between 2,000 and 3,000 r/s, never 9,000).
    assert f.metric(ctl.metrics(), "grl_bucket_offered_rps", bucket=LAST, scope="global") <= 3000
    sub.close(0)
    push.close(0)
    peer.close(0)
    ctx.term()


def test_usage_of_protocol_version_1_read_and_named(fleet):
    """A collector of the release before usage version 2 (entries as maps, "v" 1, here as
    that release wrote it): its zone is summed, the controller says which version it sends,
    and says so again when it sends version 2; a "v" neither 1 nor 2 is refused whole,
    counted and logged with the reason (docs/protocol.md "Versions")."""
    ctx = zmq.Context()
    ctl = fleet.controller()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(ctl.usage)
    old = {"v": 1, "type": "zone_usage", "ts_ms": int(time.time() * 1000), "seq": 1,
           "source": "col-old", "region": "r1", "zone": "zold", "interval_ms": 250, "hosts": 1,
           "stale_hosts": 0, "host_names": ["h1"],
           "buckets": [{"name": "g", "offered_mrps": 5000, "admitted_mrps": 5000, "dropped_mrps": 0,
                        "shadow_dropped_mrps": 0, "hosts": 1, "rated_hosts": 1, "host_names": [],
                        "definitions": [{"scope": "global", "mode": "deny", "limit_mrps": 1000,
                                         "hosts": 1}]}]}
    seq = [0]

    def send(m, n=1):
        for _ in range(n):
            seq[0] += 1
            m["seq"] = seq[0]
            m["ts_ms"] = int(time.time() * 1000)
            push.send(msgpack.packb(m, use_bin_type=True))
            time.sleep(0.05)

    try:
        send(old, 3)
        f.h.wait_until(lambda: abs((f.metric(ctl.metrics(), "grl_bucket_offered_rps", bucket="g",
                                             scope="global") or 0) - 5) < 0.1,
                       5, what="the version 1 usage in the sums")
        m = ctl.metrics()
        assert f.metric(m, "grl_controller_usage_received_total", kind="zone_usage", v="1") == 3
        assert f.metric(m, "grl_controller_zone_usage_version", zone="zold") == 1
        assert f.metric(m, "grl_controller_messages_malformed_total", kind="zone_usage") == 0
        assert ("zone zold (col-old) sends zone usage of protocol version 1 (its sender is "
                "older, or runs with --usage-version 1): read as such until it sends version 2"
                in ctl.log())
        new = dict(old, v=2, buckets=[f.usage_entry(
            "g", offered_mrps=5000, admitted_mrps=5000, definitions=[f.definition(1000)],
            host_names=[])])
        send(new)
        f.h.wait_until(lambda: f.metric(ctl.metrics(), "grl_controller_zone_usage_version",
                                        zone="zold") == 2,
                       5, what="the zone's version 2")
        assert "zone zold (col-old) sends zone usage of protocol version 2 again (was 1)" in ctl.log()
        assert "no zone or peer sends usage of a protocol version older than 2 any more" in ctl.log()
        send(dict(old, v=3), 2)
        f.h.wait_until(lambda: (f.metric(ctl.metrics(), "grl_controller_messages_malformed_total",
                                         kind="zone_usage") or 0) >= 2,
                       5, what="the version 3 usages counted as malformed")
        assert 'dropped malformed zone usage: bad "v" 3 (want 1 or 2)' in ctl.log()
        assert f.metric(ctl.metrics(), "grl_controller_zone_usage_version", zone="zold") == 2
        assert ctl.alive()
    finally:
        push.close(0)
        ctx.term()
