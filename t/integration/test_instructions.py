"""Instructions from a test publisher (ZMQ PUB bound here, nginx's SUB
connects): drop ratios applied across both workers, shadow mode, TTL expiry
and recovery, topics, malformed messages, several buckets per request."""

import collections
import time

import msgpack

import grl_harness as h
from grl_harness import bucket_entry, count

N = 3000  # requests per statistical test


def traffic(entries):
    return [e for e in entries if e.get("uri") != "/grl"]


def test_deny_ratio_drops_the_instructed_fraction(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(["api procedure_prefix=/api rate=100r/s"], publisher=publisher))
    publisher.set([bucket_entry("api", 330000, limit_mrps=40000)])
    h.wait_ratio(n, "api", 0.33)

    rs = n.blast("/api/v1/x", N)

    statuses = collections.Counter(r.status for r in rs)
    assert set(statuses) <= {200, 429}, statuses
    rejected = statuses[429]
    h.assert_binomial(rejected, N, 0.33, "rejected fraction", must_exclude=(0.0, 0.25, 0.5, 1.0))

    pids = collections.Counter(r.pid for r in rs)
    assert len(pids) >= 2 and set(pids) <= {str(p) for p in n.worker_pids()}, (
        "traffic must reach both workers (reuseport, new connections): %s" % pids)
    # Both workers apply the ratio (the instruction lives in the shared zone).
    for pid in pids:
        mine = [r for r in rs if r.pid == pid]
        h.assert_binomial(count(mine, lambda r: r.status == 429), len(mine), 0.33,
                          "rejected fraction in worker %s" % pid)

    retry = collections.Counter(r.headers.get("retry-after") for r in rs if r.status == 429)
    assert set(retry) == {"1", "2"}, "default Retry-After is 1s + jitter up to 1s: %s" % retry
    assert all("retry-after" not in r.headers for r in rs if r.status == 200)

    b = n.bucket("api")
    assert (b["offered"], b["admitted"], b["dropped"]) == (N, statuses[200], rejected), b
    assert b["shadow_dropped"] == 0
    assert b["limit_rps"] == 40.0 and b["configured_limit_rps"] == 100.0, b

    log = traffic(n.access_log())
    assert len(log) == N
    assert count(log, lambda e: e["decision"] == "drop" and e["bucket"] == "api"
                 and e["status"] == "429" and e["ratio"] == "0.330000") == rejected
    assert count(log, lambda e: e["decision"] == "pass" and e["bucket"] == "-"
                 and e["status"] == "200") == statuses[200]
    assert n.error_log().count('grl: request dropped by bucket "api", ratio 0.330000') == rejected


def test_shadow_mode_passes_everything_and_counts_would_be_drops(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(["api procedure_prefix=/api rate=100r/s mode=shadow"],
                                 publisher=publisher))
    publisher.set([bucket_entry("api", 330000, mode="shadow")])
    h.wait_ratio(n, "api", 0.33)

    rs = n.blast("/api/x", N)

    assert all(r.status == 200 for r in rs), collections.Counter(r.status for r in rs)
    assert all("retry-after" not in r.headers for r in rs)
    b = n.bucket("api")
    assert (b["offered"], b["admitted"], b["dropped"]) == (N, N, 0), b
    assert b["mode"] == "shadow" and b["configured_mode"] == "shadow"
    h.assert_binomial(b["shadow_dropped"], N, 0.33, "shadow_dropped", must_exclude=(0.0, 0.25, 0.5, 1.0))

    log = traffic(n.access_log())
    shadow = [e for e in log if e["decision"] == "shadow_drop"]
    assert len(shadow) == b["shadow_dropped"], "one shadow_drop log entry per counted would-be drop"
    assert all(e["bucket"] == "api" and e["status"] == "200" and e["ratio"] == "0.330000" for e in shadow)
    assert count(log, lambda e: e["decision"] == "pass") == N - len(shadow)
    assert n.error_log().count('grl: bucket "api" would drop the request (shadow), ratio 0.330000') == len(shadow)


def test_control_plane_mode_overrides_configured_mode(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(["was_shadow procedure=/a rate=1r/s mode=shadow",
                                  "was_deny procedure=/b rate=1r/s mode=deny"], publisher=publisher))
    publisher.set([bucket_entry("was_shadow", 1000000, mode="deny"),
                   bucket_entry("was_deny", 1000000, mode="shadow")])
    h.wait_ratio(n, "was_shadow", 1.0)
    h.wait_ratio(n, "was_deny", 1.0)
    assert all(r.status == 429 for r in n.blast("/a", 50))
    assert all(r.status == 200 for r in n.blast("/b", 50))
    st = {b["name"]: b for b in n.status()["buckets"]}
    assert (st["was_shadow"]["mode"], st["was_shadow"]["configured_mode"]) == ("deny", "shadow")
    assert (st["was_deny"]["mode"], st["was_deny"]["configured_mode"]) == ("shadow", "deny")
    assert (st["was_shadow"]["dropped"], st["was_deny"]["shadow_dropped"]) == (50, 50)


def test_reject_status_and_retry_after_are_configurable(nginx_factory, publisher):
    conf = h.grl_conf(["api rate=1r/s"], publisher=publisher, extra="grl_reject_status 503;\n"
                      "grl_retry_after 7s jitter=0s;")
    n = nginx_factory(conf)
    publisher.set([bucket_entry("api", 1000000)])
    h.wait_ratio(n, "api", 1.0)
    rs = n.blast("/", 20)
    assert all(r.status == 503 and r.headers.get("retry-after") == "7" for r in rs), rs[:3]

    n.write_conf(http_extra=h.grl_conf(["api rate=1r/s"], publisher=publisher),
                 location_extra="grl_reject_status 599;\ngrl_retry_after off;")
    n.reload()
    h.wait_ratio(n, "api", 1.0)
    rs = n.blast("/", 20)
    assert all(r.status == 599 and "retry-after" not in r.headers for r in rs), rs[:3]


def test_ttl_expiry_fails_open_and_logs_each_state_change_once(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(["api procedure_prefix=/api rate=1r/s"], publisher=publisher,
                                 ttl="1s", interval="100ms"))
    publisher.set([bucket_entry("api", 1000000)], ttl_ms=60000)  # nginx caps it at 1s
    h.wait_ratio(n, "api", 1.0)
    assert n.status()["control_plane"]["state"] == "active"
    assert all(r.status == 429 for r in n.blast("/api/x", 100))

    publisher.clear()
    stopped = time.monotonic()
    first_pass = None
    while time.monotonic() - stopped < 5:
        if n.get("/api/x").status == 200:
            first_pass = time.monotonic() - stopped
            break
        time.sleep(0.02)
    assert first_pass is not None, "traffic still rejected 5s after the control plane went silent"
    # The last message left at most ~0.1s before clear(); expiry is 1s after receipt.
    assert 0.7 <= first_pass <= 2.5, "expected traffic to pass ~1s (the TTL) after the last " \
        "instruction, it passed after %.2fs" % first_pass

    assert all(r.status == 200 for r in n.blast("/api/x", 200)), "an expired ratio must fail open"
    st = n.status()
    b = st["buckets"][0]
    assert b["ratio_state"] == "expired" and b["ratio"] == 0.0, b
    assert st["control_plane"]["state"] == "expired", st["control_plane"]
    assert "grl_bucket_ratio_active{bucket=\"api\"} 0" in n.prometheus()

    h.wait_until(lambda: "control plane expired" in n.error_log(), 3, what="the expiry log line")
    time.sleep(0.6)  # several more report ticks: the line must not repeat
    log = n.error_log()
    assert log.count("grl: control plane expired, no instruction within the TTL: failing open") == 1, log
    assert log.count("grl: control plane active") == 1
    assert log.count('grl: bucket "api" ratio expired, failing open') == 1
    assert log.count('grl: bucket "api" ratio active') == 1

    # The control plane comes back: the ratio applies again, one more line each.
    publisher.set([bucket_entry("api", 1000000)])
    h.wait_ratio(n, "api", 1.0)
    assert all(r.status == 429 for r in n.blast("/api/x", 50))
    h.wait_until(lambda: n.error_log().count("grl: control plane active") == 2, 3,
                 what="a second 'control plane active' line")
    time.sleep(0.3)
    log = n.error_log()
    assert log.count("grl: control plane active") == 2
    assert log.count("grl: control plane expired") == 1
    assert log.count('grl: bucket "api" ratio active') == 2


def test_region_and_zone_topics(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(["g procedure=/g rate=1r/s",
                                  "r procedure=/r rate=1r/s scope=region",
                                  "z procedure=/z rate=1r/s scope=zone"],
                                 publisher=publisher, host="id=h1 zone=z1 region=r1"))
    publisher.set([bucket_entry("g", 100000), bucket_entry("nosuch", 500000)], scope="global")
    publisher.set([bucket_entry("r", 200000)], scope="region", region="r1")
    publisher.set([bucket_entry("z", 300000)], scope="zone", region="r1", zone="z1")
    h.wait_ratio(n, "g", 0.1)
    h.wait_ratio(n, "r", 0.2)
    h.wait_ratio(n, "z", 0.3)
    assert n.status()["control_plane"]["instructions_unknown_bucket"] > 0

    # Another region's and another zone's messages are not subscribed to.
    publisher.set([bucket_entry("r", 1000000)], scope="region", region="r2")
    publisher.set([bucket_entry("z", 1000000)], scope="zone", region="r1", zone="z2")
    time.sleep(0.5)
    st = {b["name"]: b for b in n.status()["buckets"]}
    assert (st["r"]["ratio"], st["z"]["ratio"]) == (0.2, 0.3), st
    assert n.status()["control_plane"]["instructions_malformed"] == 0


def malformed_messages(pub):
    g = h.instruction_topic("global")
    want = [bucket_entry("api", 1000000)]

    def body(**kw):
        return pub.body(buckets=want, **kw)

    def raw(d):
        return msgpack.packb(d, use_bin_type=True)

    good = msgpack.unpackb(body(), raw=False)
    missing_ttl = dict(good)
    del missing_ttl["ttl_ms"]
    return [
        ("garbage bytes", [g, b"\xc1\x00garbage\xff"]),
        ("truncated msgpack", [g, body()[:-3]]),
        ("wrong version", [g, body(v=2)]),
        ("wrong type", [g, body(type="report")]),
        ("one frame", [g]),
        ("three frames", [g, body(), b"extra"]),
        ("not a map", [g, raw([1, 2, 3])]),
        ("missing ttl_ms", [g, raw(missing_ttl)]),
        ("ratio out of range", [g, pub.body(buckets=[bucket_entry("api", 1000001)])]),
        ("ratio as string", [g, pub.body(buckets=[dict(bucket_entry("api", 0), ratio_ppm="1")])]),
        ("bad mode", [g, pub.body(buckets=[bucket_entry("api", 1000000, mode="maybe")])]),
        ("duplicate bucket", [g, pub.body(buckets=want + want)]),
        ("topic/scope mismatch: region body on global topic", [g, body(scope="region", region="r1")]),
        ("topic/scope mismatch: global body on region topic",
         [h.instruction_topic("region", "r1"), body()]),
        ("topic/scope mismatch: other zone in body",
         [h.instruction_topic("zone", "r1", "z1"), body(scope="zone", region="r1", zone="z2")]),
        ("topic with a suffix", [g + b"x/", body()]),
    ]


def test_malformed_instructions_are_counted_and_change_nothing(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(["api rate=1r/s"], publisher=publisher, ttl="60s"))
    publisher.set([bucket_entry("api", 0)], ttl_ms=60000)
    h.wait_ratio(n, "api", 0.0)
    publisher.clear()  # from here on only the messages below are sent
    time.sleep(0.3)
    before = n.status()["control_plane"]
    assert before["instructions_malformed"] == 0

    bad = malformed_messages(publisher)
    for _, frames in bad:
        publisher.send_frames(frames)
    # A message for another region is filtered by the subscription (not malformed).
    publisher.send_frames([h.instruction_topic("region", "r2"),
                           publisher.body(scope="region", region="r2", buckets=[bucket_entry("api", 1000000)])])
    # Still serving, nothing applied.
    time.sleep(0.5)
    assert all(r.status == 200 for r in n.blast("/", 100))
    st = n.status()["control_plane"]
    assert st["instructions_malformed"] == len(bad), (
        "expected %d malformed messages counted (%s), got %d" % (
            len(bad), ", ".join(w for w, _ in bad), st["instructions_malformed"]))
    assert st["instructions_received"] == before["instructions_received"]
    b = n.bucket("api")
    assert b["ratio"] == 0.0 and b["ratio_state"] == "active", b
    # One warning, not one per message (rate-limited to one per 10 s).
    assert n.error_log().count("grl: dropped malformed instruction message:") == 1, n.error_log()[-2000:]

    # The same channel does deliver a valid message: the checks above had teeth.
    publisher.send_frames([h.instruction_topic("global"), publisher.body(buckets=[bucket_entry("api", 1000000)])])
    h.wait_ratio(n, "api", 1.0, timeout=5)
    assert all(r.status == 429 for r in n.blast("/", 20))


def test_deny_drop_counts_in_every_matched_bucket(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(["quiet procedure_prefix=/ rate=1000r/s",  # deny, ratio 0
                                  "shadow procedure_prefix=/api rate=10r/s mode=shadow",
                                  "hard procedure=/api/x rate=1r/s",
                                  "unset procedure_prefix=/api/ rate=5r/s"],  # deny, no instruction
                                 publisher=publisher))
    publisher.set([bucket_entry("quiet", 0), bucket_entry("shadow", 1000000, mode="shadow"),
                   bucket_entry("hard", 1000000)])
    h.wait_ratio(n, "hard", 1.0)
    h.wait_ratio(n, "shadow", 1.0)

    rs = n.blast("/api/x", 200)
    assert all(r.status == 429 for r in rs)
    rs2 = n.blast("/api/y", 100)  # not "hard": shadow would drop, nobody rejects
    assert all(r.status == 200 for r in rs2)

    st = {b["name"]: b for b in n.status()["buckets"]}
    for name, b in st.items():
        assert b["offered"] == b["admitted"] + b["dropped"], "offered != admitted + dropped in %s" % b
    assert (st["hard"]["offered"], st["hard"]["dropped"]) == (200, 200)
    assert (st["quiet"]["offered"], st["quiet"]["dropped"]) == (300, 200)
    assert (st["unset"]["offered"], st["unset"]["dropped"]) == (300, 200)
    assert (st["shadow"]["offered"], st["shadow"]["dropped"], st["shadow"]["admitted"]) == (300, 200, 100)
    # The shadow bucket samples every request it sees, including those another bucket rejected.
    assert st["shadow"]["shadow_dropped"] == 300
    assert st["unset"]["ratio_state"] == "waiting"

    log = traffic(n.access_log())
    drops = [e for e in log if e["uri"] == "/api/x"]
    assert all(e["decision"] == "drop" and e["bucket"] == "hard" and e["ratio"] == "1.000000"
               and e["buckets"] == "quiet,shadow,hard,unset" for e in drops), drops[:3]
    others = [e for e in log if e["uri"] == "/api/y"]
    assert all(e["decision"] == "shadow_drop" and e["bucket"] == "shadow"
               and e["buckets"] == "quiet,shadow,unset" for e in others), others[:3]


def test_ratio_survives_reload(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(["api rate=1r/s"], publisher=publisher, ttl="60s"))
    publisher.set([bucket_entry("api", 1000000)], ttl_ms=60000)
    h.wait_ratio(n, "api", 1.0)
    publisher.clear()
    time.sleep(0.2)
    received = n.status()["control_plane"]["instructions_received"]
    n.reload()
    assert n.status()["control_plane"]["instructions_received"] == received, "the publisher was silent"
    b = n.bucket("api")
    assert b["ratio"] == 1.0 and b["ratio_state"] == "active", "the zone's ratios survive a reload: %s" % b
    assert all(r.status == 429 for r in n.blast("/", 20))


def test_two_controllers_freshest_wins_until_expiry(nginx_factory, zctx):
    a = h.Publisher(zctx, source="controller-a")
    b = h.Publisher(zctx, source="controller-b")
    b.ts_offset_ms = -60000  # b's computations are a minute older
    try:
        n = nginx_factory(h.grl_conf(["api rate=1r/s"], instructions="%s %s" % (a.endpoint, b.endpoint),
                                     ttl="1s"))
        b.set([bucket_entry("api", 0)])
        h.wait_ratio(n, "api", 0.0)  # b reaches nginx through the second endpoint
        a.set([bucket_entry("api", 1000000)])
        h.wait_ratio(n, "api", 1.0)  # a's newer computation replaces b's
        time.sleep(0.5)  # both keep publishing
        assert n.bucket("api")["ratio"] == 1.0, "an older computation must not replace a newer one"
        assert all(r.status == 429 for r in n.blast("/", 20))

        a.clear()  # the fresher controller dies: its entry expires, then the other one applies
        h.wait_ratio(n, "api", 0.0, timeout=5)
        assert all(r.status == 200 for r in n.blast("/", 20))
        assert n.status()["control_plane"]["state"] == "active"
    finally:
        a.close()
        b.close()
