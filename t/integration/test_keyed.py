"""Keyed buckets on one real nginx (docs/per-key.md): `grl_bucket NAME key=VALUE ...` limits
each distinct key. The local cap holds a key near its rate without any control plane; a flood
of one-request keys evicts within fixed memory and spares the busy keys; shadow mode only
counts; $grl_key in the access log; heavy hitters in reports (bounded); per-key instructions;
the key table across reloads; configuration errors named by nginx -t."""

import json
import re
import threading
import time

import msgpack
import pytest

import fleet
import grl_harness as h

KEY_LOG = ("log_format grlkey 'rid=$arg_rid status=$status decision=$grl_decision "
           "bucket=$grl_bucket key=$grl_key';")
KEY_ACCESS = "access_log keys.log grlkey;"


def paced(port, key, rate, seconds, out):
    """Requests of `key` at `rate` per second for `seconds`, each on a new connection; appends
    (status, ...) to out["statuses"] and the elapsed time to out["elapsed"]."""
    statuses = []
    n = int(rate * seconds)
    t0 = time.monotonic()
    for i in range(n):
        wait = t0 + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        statuses.append(h.http_get(port, "/", {"X-Api-Key": key}).status)
    out["statuses"] = statuses
    out["elapsed"] = time.monotonic() - t0


def run_keys(port, plans):
    """plans: {key: (rate, seconds)} run concurrently -> {key: {"statuses", "elapsed"}}."""
    outs = {k: {} for k in plans}
    threads = [threading.Thread(target=paced, args=(port, k, r, s, outs[k]))
               for k, (r, s) in plans.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return outs


def keyed_of(nginx, name):
    return nginx.bucket(name)["keyed"]


def top_key(nginx, bucket, key):
    for k in keyed_of(nginx, bucket)["top"]:
        if k["key"] == key:
            return k
    raise KeyError(key)


def assert_capped(statuses, elapsed, rate, what):
    """The local cap: at most rate x t + the 100 ms burst (+1 for the first request) admitted,
    and, offered well above the rate, not much less than rate x t (pacing may run late: 80%)."""
    admitted = statuses.count(200)
    assert set(statuses) <= {200, 429}, statuses
    assert admitted <= rate * elapsed + rate * 0.1 + 2, (what, admitted, elapsed)
    assert admitted >= 0.8 * rate * elapsed, (what, admitted, elapsed)


# -- (a) one host, no control plane: the local cap -----------------------------------------


def test_keyed_local_cap_holds_a_busy_key_and_spares_a_quiet_one(nginx_factory):
    n = nginx_factory(h.grl_conf(["per-key key=$http_x_api_key rate=50r/s keys=1000"],
                                 host=None, interval=None))
    outs = run_keys(n.port, {"A": (150, 4), "B": (20, 4)})
    a, b = outs["A"], outs["B"]
    assert_capped(a["statuses"], a["elapsed"], 50, "A")
    assert b["statuses"].count(429) == 0, "B at 20 r/s must never be dropped"
    st = n.bucket("per-key")
    # Bucket counters count every request; the key table shows each key's own counts.
    assert st["offered"] == len(a["statuses"]) + len(b["statuses"])
    assert st["dropped"] == a["statuses"].count(429)
    assert st["ratio"] == 0.0
    ka, kb = top_key(n, "per-key", "A"), top_key(n, "per-key", "B")
    assert ka["offered"] == len(a["statuses"]) and ka["dropped"] == a["statuses"].count(429)
    assert kb["dropped"] == 0
    assert keyed_of(n, "per-key")["claims"] == 2
    assert 'request of key "A" dropped by bucket "per-key" (local cap)' in n.error_log()


def test_keyed_drop_logs_a_binary_key_escaped_and_a_hashed_key_as_its_hash(nginx_factory):
    """The error log's drop line never carries a key's raw bytes: $binary_remote_addr's four
    bytes are escaped (they were written raw, NUL bytes and all), and with hash_keys=on the
    line shows the hash the status page shows, not the key."""
    n = nginx_factory(h.grl_conf(["per-addr key=$binary_remote_addr rate=5r/s keys=100 "
                                  "procedure_prefix=/a",
                                  "per-api key=$http_x_api_key rate=5r/s keys=100 hash_keys=on "
                                  "procedure_prefix=/h"],
                                 host=None, interval=None))
    assert 429 in [n.get("/a").status for _ in range(20)]
    assert 429 in [h.http_get(n.port, "/h", {"X-Api-Key": "secret-key-1"}).status
                   for _ in range(20)]
    raw = open(n.error_log_path, "rb").read()
    assert b'request of key "\\x7f\\x00\\x00\\x01" dropped by bucket "per-addr" (local cap)' in raw
    assert b"\x7f\x00\x00\x01" not in raw
    hashed = keyed_of(n, "per-api")["top"][0]["hash"]
    assert ('request of key "hash %s" dropped by bucket "per-api" (local cap)' % hashed
            ).encode() in raw
    assert b"secret-key-1" not in raw


def test_keyed_missing_key_counts_under_dash(nginx_factory):
    n = nginx_factory(h.grl_conf(["per-key key=$http_x_api_key rate=5r/s keys=100"], host=None,
                                 interval=None))
    statuses = [n.get("/").status for _ in range(20)]  # no X-Api-Key: all share the key "-"
    assert statuses.count(429) >= 10, statuses
    k = keyed_of(n, "per-key")
    assert [t["key"] for t in k["top"]] == ["-"]
    assert k["top"][0]["offered"] == 20


# -- (b) a flood of one-request keys --------------------------------------------------------

# grl_keyflood (bench/loadgen/keyflood.cpp) sends exactly this many requests, each with a key no
# other request carries, paced over FLOOD_SECONDS; wrk with a Lua script cost 35 us of CPU a
# request and reached 300,000-480,000 keys in 8 s, uncounted.
FLOOD_KEYS = 300_000
FLOOD_SECONDS = 8


def test_keyed_flood_of_distinct_keys_evicts_in_fixed_memory_and_spares_busy_keys(
        nginx_factory, collector):
    n = nginx_factory(h.grl_conf(
        ["per-key key=$http_x_api_key rate=50r/s keys=1024 report_keys=16"],
        collector=collector, interval="100ms"),
        location_extra="keepalive_timeout 60s; keepalive_requests 100000000;")
    before = n.status()
    cap = keyed_of(n, "per-key")["capacity"]
    assert cap == 1024
    # Raw report sizes, read while the flood runs.
    sizes, bodies, stop = [], [], threading.Event()

    def drain():
        while not stop.is_set():
            if collector.sock.poll(100):
                body = collector.sock.recv()
                sizes.append(len(body))
                bodies.append(body)

    reader = threading.Thread(target=drain)
    reader.start()
    flood = fleet.KeyFlood([n], FLOOD_KEYS, "/", seconds=FLOOD_SECONDS)
    try:
        outs = run_keys(n.port, {"A": (150, 6), "B": (20, 6)})
        out = flood.result()
    finally:
        flood.stop()
        stop.set()
        reader.join(10)
    flooded = out["keys"]
    print("flood: %d distinct one-request keys in %.1f s through %d entries: %r"
          % (flooded, out["seconds"], cap, out))
    # Every key answered (admitted: each is its key's first request), none lost.
    assert flooded == FLOOD_KEYS and out["ok"] == FLOOD_KEYS and out["unanswered"] == 0, out

    a, b = outs["A"], outs["B"]
    assert_capped(a["statuses"], a["elapsed"], 50, "A under the flood")
    assert b["statuses"].count(429) == 0
    k = keyed_of(n, "per-key")
    after = n.status()
    # Memory: the same table and zone; every claim beyond the table's size evicted a key.
    assert k["capacity"] == cap and k["in_use"] <= cap
    assert after["zone_capacity"] == before["zone_capacity"]
    assert after["epoch"] == before["epoch"]
    # Every flood request carries a new key: each claimed an entry (or, contended, counted as a
    # race in a shared one).
    assert k["claims"] + k["races"] >= flooded
    assert k["evictions"] >= k["claims"] - cap
    prom = n.prometheus()
    assert re.search(r'^grl_bucket_key_evictions_total\{bucket="per-key"\} %d$' % k["evictions"],
                     prom, re.M)
    assert "flood-" not in prom  # never a series per key
    # Reports stay bounded: at most report_keys=16 keys, whatever the number of keys.
    reports = [msgpack.unpackb(x, raw=False) for x in bodies]
    keyed = [b for r in reports for b in r["buckets"] if b["name"] == "per-key"]
    assert len(keyed) >= 20 and all(b["keyed"] for b in keyed)
    assert max(len(b.get("keys", [])) for b in keyed) == 16
    print("report sizes: max %d bytes over %d reports" % (max(sizes), len(sizes)))
    assert max(sizes) < 16 * 100 + 1024
    assert k["evictions"] > 100 * cap


# -- (c) shadow mode per key, $grl_key in the access log --------------------------------------


def test_keyed_shadow_counts_would_drops_and_logs_the_key(nginx_factory):
    n = nginx_factory(h.grl_conf(["per-key key=$http_x_api_key rate=50r/s mode=shadow keys=64"],
                                 host=None, interval=None, extra=KEY_LOG),
                      location_extra=KEY_ACCESS)
    outs = run_keys(n.port, {"A": (150, 2), "B": (20, 2)})
    assert set(outs["A"]["statuses"]) == {200} and set(outs["B"]["statuses"]) == {200}
    st = n.bucket("per-key")
    would = st["shadow_dropped"]
    assert st["dropped"] == 0
    assert 0.5 * (150 - 50) * 2 <= would <= 150 * 2 - 50 * 2 + 10, would
    assert top_key(n, "per-key", "A")["dropped"] == would  # all of them A's
    log = n.error_log()
    assert 'bucket "per-key" would drop the request of key "A" (shadow, local cap)' in log
    assert 'of key "B"' not in log
    lines = open(n.prefix + "/keys.log").read().splitlines()
    assert len(lines) == len(outs["A"]["statuses"]) + len(outs["B"]["statuses"])
    a_lines = [l for l in lines if l.endswith(" key=A")]
    assert len(a_lines) == len(outs["A"]["statuses"])
    assert sum(1 for l in a_lines if "decision=shadow_drop bucket=per-key" in l) == would
    assert all("decision=pass" in l for l in lines if l.endswith(" key=B"))


def test_keyed_grl_key_shows_a_composite_key(nginx_factory):
    n = nginx_factory(h.grl_conf(['per-org "key=$http_x_org:$uri" rate=1000r/s keys=64'], host=None,
                                 interval=None, extra=KEY_LOG), location_extra=KEY_ACCESS)
    assert n.get("/x?rid=1", {"X-Org": "acme"}).status == 200
    assert top_key(n, "per-org", "acme:/x")["offered"] == 1
    assert open(n.prefix + "/keys.log").read().strip().endswith("key=acme:/x")


# -- reports and instructions --------------------------------------------------------------


def test_keyed_report_carries_heavy_hitters_and_hash_keys_hides_them(nginx_factory, collector):
    n = nginx_factory(h.grl_conf(["per-key key=$http_x_api_key rate=50r/s keys=64",
                                  "hashed key=$http_x_api_key rate=50r/s hash_keys=on keys=64"],
                                 collector=collector, interval="250ms"))
    # The reporter (a process of its own) may connect after the load began: its first report
    # would then hold a few requests counted over a whole interval (add_key_rates).
    collector.wait_for(lambda r: True, 5, "a first report")
    start = len(collector.reports)
    out = run_keys(n.port, {"A": (100, 2)})["A"]
    sent_rps = len(out["statuses"]) / out["elapsed"]  # pacing may run late on a busy machine
    hash_a = int(top_key(n, "per-key", "A")["hash"], 16)

    def has_a(r):
        b = h.report_buckets(r)
        return "per-key" in b and any(k.get("k") == "A" for k in b["per-key"]["keys"]) and b
    b = h.report_buckets(collector.wait_for(has_a, 10, "a report naming key A"))
    k = [k for k in b["per-key"]["keys"] if k["k"] == "A"][0]
    assert b["per-key"]["keyed"] is True and k["h"] == hash_a
    assert k["dropped_mrps"] <= k["offered_mrps"]
    # Each report rates the key over the ~250 ms since the previous scan: ~25 requests, +/- 1
    # for where the window falls (4%) and the scan's own jitter. The reports of the steady
    # part (not the first and last, which cover the load's start and end) have a median
    # within 25% of the rate sent: a rate off by 2x (or by the interval) fails.
    collector.poll(0.5)
    rates = [[k["offered_mrps"] for k in h.report_buckets(r)["per-key"]["keys"] if k["k"] == "A"][0]
             for r in collector.reports[start:] if has_a(r)]
    steady = sorted(rates[1:-1])
    assert len(steady) >= 3, rates
    median = steady[len(steady) // 2]
    assert abs(median - sent_rps * 1000) <= 0.25 * sent_rps * 1000, (median, sent_rps, rates)
    hashed = [k for k in b["hashed"]["keys"]]
    assert hashed and all("k" not in k for k in hashed) and hashed[0]["h"] == hash_a
    # The status page hides hashed keys too.
    assert all(t["key"] is None for t in keyed_of(n, "hashed")["top"])


def test_keyed_instructions_set_a_keys_ratio_and_zero_clears_it(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(["per-key key=$http_x_api_key rate=1000r/s keys=64"],
                                 publisher=publisher))
    assert n.get("/", {"X-Api-Key": "A"}).status == 200
    assert n.get("/", {"X-Api-Key": "B"}).status == 200
    hash_a = int(top_key(n, "per-key", "A")["hash"], 16)
    entry = {"name": "per-key", "ratio_ppm": 0, "limit_mrps": 1000000, "mode": "deny",
             "keyed": True, "keys": [[hash_a, 1000000]]}
    publisher.set([entry])
    h.wait_until(lambda: top_key(n, "per-key", "A")["ratio_state"] == "active", 10,
                 what="key A's ratio")
    assert [n.get("/", {"X-Api-Key": "A"}).status for _ in range(20)] == [429] * 20
    assert [n.get("/", {"X-Api-Key": "B"}).status for _ in range(20)] == [200] * 20
    assert 'request of key "A" dropped by bucket "per-key" (ratio), ratio 1.000000' in n.error_log()
    assert n.bucket("per-key")["ratio"] == 0.0
    entry["keys"] = [[hash_a, 0]]
    publisher.set([entry])
    h.wait_until(lambda: top_key(n, "per-key", "A")["ratio"] == 0.0, 10, what="A cleared")
    assert [n.get("/", {"X-Api-Key": "A"}).status for _ in range(5)] == [200] * 5


KEYED_CONVENTIONS = """\
grl_ratelimit_headers on;
grl_retry_after 2s;
location /capped/p { grl_problem_json on; empty_gif; }
location /ratio/p { grl_problem_json on; empty_gif; }
"""
PER_KEY_DETAIL = "the request's key is over the bucket's limit for each key"


def test_keyed_ratelimit_fields_and_problem_body_speak_of_the_key(nginx_factory, publisher):
    """For a keyed bucket the RateLimit fields are the key's own: q is each key's limit, and
    r=0 only for a key over it (its local cap here, or its ratio from the control plane),
    never for another key of the same bucket; the problem+json body says the key was over."""
    n = nginx_factory(h.grl_conf(["capped key=$http_x_api_key procedure_prefix=/capped "
                                  "rate=2r/s keys=64",
                                  "ratio key=$http_x_api_key procedure_prefix=/ratio "
                                  "rate=1000r/s keys=64"], publisher=publisher),
                      location_extra=KEYED_CONVENTIONS)
    # The local cap, without any control plane: A's first request passes, its next ones in
    # the same 100 ms are over this host's cap for the key.
    rs = [n.get("/capped/x", {"X-Api-Key": "A"}) for _ in range(6)]
    assert [r.status for r in rs].count(429) >= 4, [r.status for r in rs]
    for r in rs:
        assert r.headers["ratelimit-policy"] == '"capped";q=2;w=1', r.headers
        if r.status == 429:
            assert r.headers["ratelimit"] == '"capped";r=0;t=2', r.headers
    r = n.get("/capped/p", {"X-Api-Key": "A"})
    assert r.status == 429 and r.headers["content-type"] == "application/problem+json"
    body = json.loads(r.body)
    assert body["detail"] == "rejected by bucket capped: " + PER_KEY_DETAIL, body
    assert body["violated-policies"] == ["capped"] and "A" not in r.body.decode()
    # Another key of the same bucket is not over its limit: no RateLimit field.
    r = n.get("/capped/x", {"X-Api-Key": "B"})
    assert r.status == 200 and r.headers["ratelimit-policy"] == '"capped";q=2;w=1'
    assert "ratelimit" not in r.headers, r.headers

    # The control plane's ratio for key C (1.0) and key D (0.5): C rejected, D's passed
    # requests still say r=0 (the key is over its limit), E untouched.
    for key in ("C", "D", "E"):
        assert n.get("/ratio/x", {"X-Api-Key": key}).status == 200
    hashes = {k: int(top_key(n, "ratio", k)["hash"], 16) for k in ("C", "D")}
    publisher.set([{"name": "ratio", "ratio_ppm": 0, "limit_mrps": 1000000, "mode": "deny",
                    "keyed": True, "keys": [[hashes["C"], 1000000], [hashes["D"], 500000]]}])
    h.wait_until(lambda: top_key(n, "ratio", "D")["ratio_state"] == "active", 10,
                 what="key D's ratio")
    r = n.get("/ratio/x", {"X-Api-Key": "C"})
    assert r.status == 429 and r.headers["ratelimit"] == '"ratio";r=0;t=2', r.headers
    assert r.headers["ratelimit-policy"] == '"ratio";q=1000;w=1', r.headers
    r = n.get("/ratio/p", {"X-Api-Key": "C"})
    assert r.status == 429 and json.loads(r.body)["detail"].endswith(PER_KEY_DETAIL)
    rs = [n.get("/ratio/x", {"X-Api-Key": "D"}) for _ in range(60)]
    passed = [r for r in rs if r.status == 200]
    dropped = [r for r in rs if r.status == 429]
    assert passed and dropped, [r.status for r in rs]
    assert {r.headers.get("ratelimit") for r in passed} == {'"ratio";r=0;t=1'}
    assert {r.headers.get("ratelimit") for r in dropped} == {'"ratio";r=0;t=2'}
    r = n.get("/ratio/x", {"X-Api-Key": "E"})
    assert r.status == 200 and "ratelimit" not in r.headers, r.headers
    # The bucket's own ratio stays 0: a bucket-wide field would have told E it was over.
    assert n.bucket("ratio")["ratio"] == 0.0


def test_keyed_start_and_stop_of_limiting_keys_is_logged_once(nginx_factory, publisher):
    """One notice when a keyed bucket's instructions start naming keys over their limit and one
    when they name none any more, however often the instruction is resent (every 0.1 s)."""
    n = nginx_factory(h.grl_conf(["per-key key=$http_x_api_key rate=1000r/s keys=64"],
                                 publisher=publisher, ttl="1s"))
    assert n.get("/", {"X-Api-Key": "A"}).status == 200
    hash_a = int(top_key(n, "per-key", "A")["hash"], 16)
    entry = {"name": "per-key", "ratio_ppm": 0, "limit_mrps": 50000, "mode": "deny",
             "keyed": True, "keys": []}
    started = ('bucket "per-key" started limiting keys: 2 key(s) over its limit of 50.000 r/s '
               'for each key')
    stopped = 'bucket "per-key" stopped limiting keys (no key over its limit)'
    expired = 'bucket "per-key" stopped limiting keys (instruction expired)'
    publisher.set([dict(entry)])  # keyed, no key over: nothing to say
    h.wait_ratio(n, "per-key", 0.0)
    time.sleep(0.5)
    assert "limiting keys" not in n.error_log()
    publisher.set([dict(entry, keys=[[hash_a, 400000], [12345, 900000], [777, 0]])])
    h.wait_until(lambda: started in n.error_log(), 10, what="the started line")
    time.sleep(0.5)  # five resends
    publisher.set([dict(entry, keys=[[hash_a, 0]])])
    h.wait_until(lambda: stopped in n.error_log(), 10, what="the stopped line")
    time.sleep(0.5)
    log = n.error_log()
    assert log.count("started limiting keys") == 1 and log.count(stopped) == 1, log[-3000:]
    # Limiting again, then the control plane goes silent: the instruction expires (ttl 1s).
    publisher.set([dict(entry, keys=[[hash_a, 400000]])])
    h.wait_until(lambda: n.error_log().count("started limiting keys") == 2, 10,
                 what="the second started line")
    publisher.clear()
    h.wait_until(lambda: expired in n.error_log(), 10, what="the expired line")
    assert n.error_log().count("stopped limiting keys") == 2


# -- reloads and configuration errors --------------------------------------------------------


def test_keyed_reload_keeps_the_table_unless_key_or_keys_change(nginx_factory):
    conf = lambda b: h.grl_conf([b], host=None, interval=None)
    n = nginx_factory(conf("per-key key=$http_x_api_key rate=1r/m keys=1000"))
    for _ in range(10):
        n.get("/", {"X-Api-Key": "A"})
    dropped = top_key(n, "per-key", "A")["dropped"]
    assert dropped > 0
    n.write_conf(http_extra=conf("per-key key=$http_x_api_key rate=1r/m keys=1000 "
                                 "report_keys=8"))
    n.reload()
    k = keyed_of(n, "per-key")
    assert k["claims"] == 1 and top_key(n, "per-key", "A")["dropped"] == dropped
    # The local cap's state survives too: A is still over its rate.
    assert n.get("/", {"X-Api-Key": "A"}).status == 429
    n.write_conf(http_extra=conf("per-key key=$http_x_api_key rate=5r/s keys=2000"))
    n.reload()
    k = keyed_of(n, "per-key")
    assert k["capacity"] == 2000 and k["claims"] == 0
    n.write_conf(http_extra=conf("per-key key=$http_x_org rate=5r/s keys=2000"))
    n.reload()
    assert keyed_of(n, "per-key")["key"] == "$http_x_org"


BAD = [
    ("keys=0", 'invalid keys "0", expected 8..16777216 (table entries)'),
    ("keys=lots", 'invalid keys "lots"'),
    ("report_keys=300", 'invalid report_keys "300", expected 1..256'),
    ("hash_keys=yes", 'invalid hash_keys "yes", expected on or off'),
    ("key=$http_x_a key=$http_x_b", 'duplicate "key=$http_x_b"'),
    ("key=", "key=: empty value"),
    ("key=plain", 'key=: "plain" has no variable, so every request would look the same'),
    ("keys=100 keys=200", 'duplicate "keys=200"'),
]


@pytest.mark.parametrize("params,message", BAD, ids=[b[0] for b in BAD])
def test_keyed_bad_parameters_fail_nginx_t_naming_the_value(nginx_factory, params, message):
    key = "" if params.startswith("key=") else "key=$http_x_api_key "
    n = nginx_factory(h.grl_conf(["per-key %s%s rate=10r/s" % (key, params)], host=None,
                                 interval=None), start=False)
    rc, out = n.test_config()
    assert rc != 0
    assert '"grl_bucket" "per-key": ' + message in out, out


def test_keyed_parameters_need_key_and_a_rate(nginx_factory):
    n = nginx_factory(h.grl_conf(["per-key keys=100 rate=10r/s"], host=None, interval=None),
                      start=False)
    rc, out = n.test_config()
    assert rc != 0 and "keys=, report_keys= and hash_keys= need key=" in out, out


def test_keyed_zone_too_small_names_the_size_needed(nginx_factory):
    n = nginx_factory(h.grl_conf(["per-key key=$http_x_api_key rate=10r/s keys=100000"],
                                 host=None, interval=None, zone="grl:1m"), start=False)
    rc, out = n.test_config()
    assert rc != 0
    assert re.search(r'grl_zone "grl" is too small for its buckets and their key tables '
                     r'\(keys=\): it needs at least 1[0-9]m', out), out
