"""Keyed buckets through the real control plane (docs/per-key.md): four fake hosts in
two zones send msgpack reports of a keyed bucket (as nginx's reporter will, with their
heavy hitters) to two real collectors and one real controller. Key A offers 150 r/s
spread unevenly, key B 20 r/s, each key's limit is 50 r/s: the controller publishes a
ratio of about 2/3 for A and none for B; `grlctl keys` shows both; A gone quiet is
cleared (ratio 0 sent, then gone). Malformed keyed reports and usage are counted and
ignored, and the daemons keep their last good state."""

import re
import threading
import time

import msgpack
import zmq

import fleet as f
import grl_harness as h
from fleet import fleet  # noqa: F401  (pytest fixture)

KEY_A = 0xA1A1A1A1A1A1A1A1
KEY_B = 0xB2B2B2B2B2B2B2B2
LIMIT_MRPS = 50000
INTERVAL_MS = 250


class FakeHosts:
    """Hosts reporting one keyed global bucket "per-client" every 250 ms: cumulative
    bucket counters, and per key the rate on this host since the previous report.
    `rates[host]` maps a key hash to r/s; changed by the test while running."""

    def __init__(self, ctx, hosts):
        self.hosts = hosts  # name -> (zone, collector)
        self.rates = {name: {} for name in hosts}
        self.sockets = {}
        for name, (zone, col) in hosts.items():
            s = ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(col.report)
            self.sockets[name] = s
        self.seq = 0
        self.offered = {name: 0 for name in hosts}
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def report(self, name):
        zone, _ = self.hosts[name]
        with self.lock:
            rates = dict(self.rates[name])
        total = sum(rates.values())
        self.offered[name] += int(total * INTERVAL_MS / 1000)
        keys = [{"h": k, "k": "key-%x" % (k & 0xff), "offered_mrps": int(r * 1000), "dropped_mrps": 0}
                for k, r in sorted(rates.items(), key=lambda kv: -kv[1])]
        m = {"v": 1, "type": "report", "ts_ms": int(time.time() * 1000), "seq": self.seq,
             "host": name, "zone": zone, "region": "r1", "epoch": 7, "interval_ms": INTERVAL_MS,
             "reports_dropped": 0,
             "buckets": [{"name": "per-client", "scope": "global", "mode": "deny",
                          "limit_mrps": LIMIT_MRPS, "offered": self.offered[name],
                          "admitted": self.offered[name], "dropped": 0, "shadow_dropped": 0,
                          "keyed": True, "keys": keys}]}
        return msgpack.packb(m, use_bin_type=True)

    def _run(self):
        while not self.stop_flag.is_set():
            self.seq += 1
            for name, s in self.sockets.items():
                s.send(self.report(name))
            self.stop_flag.wait(INTERVAL_MS / 1000)

    def set(self, name, rates):
        with self.lock:
            self.rates[name] = dict(rates)

    def close(self):
        self.stop_flag.set()
        self.thread.join(5)
        for s in self.sockets.values():
            s.close()


class Instructions:
    """Subscribes to a collector's relayed global instructions; keeps the latest entry
    of "per-client" and every key ratio seen, in arrival order."""

    def __init__(self, ctx, collector):
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"grl/g/")
        self.sub.connect(collector.publish)
        self.entries = []

    def poll(self, timeout=0.3):
        end = time.time() + timeout
        while time.time() < end:
            if not self.sub.poll(50):
                continue
            frames = self.sub.recv_multipart()
            m = msgpack.unpackb(frames[-1], raw=False)
            for e in m["buckets"]:
                if e["name"] == "per-client":
                    self.entries.append(e)

    def latest(self):
        self.poll()
        return self.entries[-1] if self.entries else None

    def close(self):
        self.sub.close()


def key_ratios(entry):
    return {k: r for k, r in entry.get("keys", [])} if entry else {}


def test_keyed_bucket_per_key_ratios_through_collectors_and_controller(fleet):
    ctx = zmq.Context.instance()
    ctl = fleet.controller(ttl="1s")
    col1 = fleet.collector("z1", [ctl])
    col2 = fleet.collector("z2", [ctl])
    hosts = FakeHosts(ctx, {"h1": ("z1", col1), "h2": ("z1", col1),
                            "h3": ("z2", col2), "h4": ("z2", col2)})
    instr = Instructions(ctx, col1)
    try:
        # A: 150 r/s unevenly (80 + 40 + 20 + 10); B: 20 r/s (5 each).
        for name, a in (("h1", 80), ("h2", 40), ("h3", 20), ("h4", 10)):
            hosts.set(name, {KEY_A: a, KEY_B: 5})
        fleet.wait_hosts(ctl, 4)

        def a_limited():
            e = instr.latest()
            return e is not None and KEY_A in key_ratios(e) and key_ratios(e)[KEY_A] > 0

        h.wait_until(a_limited, 15, what="a ratio for key A")
        e = instr.latest()
        assert e["keyed"] is True
        assert e["ratio_ppm"] == 0, e  # the bucket's own
        assert e["limit_mrps"] == LIMIT_MRPS
        assert "basis_ms" not in e
        ratios = key_ratios(e)
        assert abs(ratios[KEY_A] / 1e6 - 2 / 3) < 0.05, ratios  # (150 - 50) / 150
        assert KEY_B not in ratios, ratios

        keys = f.grlctl(ctl, "keys", "per-client")["keys"]
        by_hash = {int(k["hash"], 16): k for k in keys}
        assert set(by_hash) == {KEY_A, KEY_B}, keys
        assert abs(by_hash[KEY_A]["offered_rps"] - 150) < 8, keys
        assert by_hash[KEY_A]["hosts"] == 4
        assert abs(by_hash[KEY_A]["ratio"] - 2 / 3) < 0.05
        assert abs(by_hash[KEY_B]["offered_rps"] - 20) < 2, keys
        assert by_hash[KEY_B]["ratio"] == 0
        assert by_hash[KEY_A]["key"] == "key-a1"
        assert by_hash[KEY_A]["limit_rps"] == 50
        buckets = f.grlctl(ctl, "buckets", "per-client")["buckets"]
        assert buckets[0]["keyed"] is True and buckets[0]["keys_limited"] == 1, buckets
        rc, table, _ = f.grlctl(ctl, "buckets", json_out=False)
        assert "50.0 per key" in table and "1 key(s) limited" in table, table
        rc, table, _ = f.grlctl(ctl, "keys", "per-client", "--top", "1", json_out=False)
        assert "key-a1" in table and "key-b2" not in table, table
        # explain: the key over its limit is dropped, the one under it is not, with the numbers.
        rc, text, _ = f.grlctl(ctl, "explain", "per-client", "key-a1", json_out=False)
        assert "each key is limited to 50.0 r/s per key" in text and "1 key(s) over it" in text, text
        assert re.search(r'key "key-a1": DROPPING 6\d\.\d% of requests|key "key-a1": DROPPING 6\d\.\d%',
                         text), text
        assert "from 4 host(s)" in text, text
        rc, text, _ = f.grlctl(ctl, "explain", "per-client", "key-b2", json_out=False)
        assert 'key "key-b2": offered' in text and "not dropped" in text, text
        rc, text, _ = f.grlctl(ctl, "explain", "per-client", "nobody", json_out=False)
        assert 'key "nobody": not among the 2 busiest keys' in text, text
        m = ctl.metrics()
        assert f.metric(m, "grl_bucket_keys_limited", bucket="per-client") == 1
        assert f.metric(m, "grl_bucket_keys", bucket="per-client") == 2

        # Malformed keyed reports (a hash of 1; keys without keyed) are counted and
        # ignored: the collector keeps the host's last good keys.
        bad = ctx.socket(zmq.PUSH)
        bad.setsockopt(zmq.LINGER, 0)
        bad.connect(col1.report)
        before = f.metric(col1.metrics(), "grl_collector_reports_malformed_total") or 0
        body = msgpack.unpackb(hosts.report("h1"), raw=False)
        body["seq"] = 10 ** 9  # would be the newest, were it valid
        body["buckets"][0]["keys"][0]["h"] = 1
        bad.send(msgpack.packb(body, use_bin_type=True))
        body["buckets"][0]["keys"][0]["h"] = KEY_A
        body["buckets"][0]["keyed"] = False
        bad.send(msgpack.packb(body, use_bin_type=True))
        h.wait_until(lambda: (f.metric(col1.metrics(), "grl_collector_reports_malformed_total") or 0)
                     >= before + 2, 5, what="the collector to count two malformed reports")
        # The first is logged with its reason (the second falls in the same 10 s: counted only).
        assert "dropped malformed report: " in col1.log() and "bad key hash 1" in col1.log(), \
            col1.log()[-2000:]
        # A malformed zone usage (keys beside no keyed definition) is refused by the
        # controller, whose state stands.
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(ctl.usage)
        m0 = f.metric(ctl.metrics(), "grl_controller_messages_malformed_total", kind="zone_usage") or 0
        push.send(msgpack.packb(
            {"v": f.USAGE_VERSION, "type": "zone_usage", "ts_ms": int(time.time() * 1000), "seq": 10 ** 9,
             "source": "col-z1", "region": "r1", "zone": "z1", "interval_ms": 250, "hosts": 2,
             "stale_hosts": 0, "host_names": ["h1", "h2"],
             "buckets": [f.usage_entry("per-client", hosts=2, host_names=[],
                                       definitions=[f.definition(1, hosts=2)],
                                       keys=[{"h": KEY_A, "offered_mrps": 10 ** 9, "dropped_mrps": 0,
                                              "hosts": 2}])]},
            use_bin_type=True))
        h.wait_until(lambda: (f.metric(ctl.metrics(), "grl_controller_messages_malformed_total",
                                       kind="zone_usage") or 0) > m0, 5,
                     what="the controller to count the malformed zone usage")
        time.sleep(0.6)
        e = instr.latest()
        assert abs(key_ratios(e)[KEY_A] / 1e6 - 2 / 3) < 0.05, e
        assert e["limit_mrps"] == LIMIT_MRPS
        bad.close()
        push.close()

        # A goes quiet: its ratio is sent as 0 (clearing it on nginx), then no more.
        for name in ("h1", "h2", "h3", "h4"):
            hosts.set(name, {KEY_B: 5})
        instr.entries.clear()
        h.wait_until(lambda: key_ratios(instr.latest()).get(KEY_A) == 0, 10,
                     what="key A sent with ratio 0")
        h.wait_until(lambda: KEY_A not in key_ratios(instr.latest()), 10, what="key A gone")
        seen = [key_ratios(x).get(KEY_A) for x in instr.entries]
        first_zero = seen.index(0)
        assert all(r in (0, None) for r in seen[first_zero:]), seen
        h.wait_until(lambda: {int(k["hash"], 16) for k in f.grlctl(ctl, "keys", "per-client")["keys"]}
                     == {KEY_B}, 5, what="grlctl keys to show B only")
        assert f.metric(ctl.metrics(), "grl_bucket_keys_limited", bucket="per-client") == 0
    finally:
        instr.close()
        hosts.close()
