"""Quotas over long windows (grl_bucket quota=, docs/design/008-quotas.md), end to end: 4 nginx in
2 zones, a collector per zone, one controller. The fleet admits about N in the window and then
rejects with $grl_status REJECTED and RateLimit fields saying nothing is left, until the window
ends; a controller restart mid-window keeps the window's use (its state file)."""

import os
import re
import time

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)

RPS = 30
LOCATION = ("keepalive_timeout 60s; grl_ratelimit_headers on; "
            "add_header X-Grl-Status $grl_status always;")


def window_ahead(lead_s):
    """A window_offset (seconds) whose minute window starts `lead_s` seconds from now, and that
    start (wall clock): the test never straddles a boundary."""
    start = int(time.time()) + lead_s
    return start % 60, start


def start_fleet(fl, quota, lead_s, ctl_extra=()):
    offset, start = window_ahead(lead_s)
    bucket = "q procedure_prefix=/q quota=%d/minute window_offset=%ds" % (quota, offset)
    ctl = fl.controller(extra=list(ctl_extra))
    z1, z2 = fl.collector("z1", [ctl]), fl.collector("z2", [ctl])
    hosts = [fl.nginx(h, z, c, [bucket], location_extra=LOCATION)
             for h, z, c in (("h1", "z1", z1), ("h2", "z1", z1), ("h3", "z2", z2), ("h4", "z2", z2))]
    fl.wait_hosts(ctl, 4)
    return ctl, hosts, start


def send(hosts, seconds, until_rejected=False):
    """RPS requests a second over the 4 hosts for `seconds`: (admitted before the first
    rejection, the first rejected response or None)."""
    admitted, k, t0 = 0, 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        r = hosts[k % 4].get("/q/x")
        k += 1
        if r.status == 200:
            admitted += 1
        else:
            return admitted, r
        time.sleep(max(0.0, t0 + k / RPS - time.monotonic()))
    return admitted, None


def wait_for(start):
    time.sleep(max(0.0, start - time.time() + 0.2))


def test_quota_holds_fleet_wide_then_rejects_until_the_window_ends(fleet):
    n = 300
    ctl, hosts, start = start_fleet(fleet, n, 14)
    wait_for(start)
    admitted, rejected = send(hosts, 40)
    # 250 ms reports and ticks: at most about a second of the fleet's load (30) beyond N.
    print("admitted before the first rejection: %d (quota %d)" % (admitted, n))
    assert rejected is not None, "never rejected after %d requests" % admitted
    assert n - 10 <= admitted <= n + RPS, admitted
    assert rejected.status == 429
    assert rejected.headers["x-grl-status"] == "REJECTED"
    assert rejected.headers["ratelimit-policy"] == '"q.quota";q=%d;w=60' % n
    r, _, t = rejected.headers["ratelimit"].partition(";t=")
    assert r == '"q.quota";r=0', rejected.headers
    left = start + 60 - time.time()
    assert abs(int(t) - left) <= 2, (t, left)
    # Every host rejects (the quota is the instance's, not a host's), for the rest of the window.
    for h in hosts:
        assert h.get("/q/x").status == 429
    m = ctl.metrics()
    assert f.metric(m, "grl_bucket_quota_limit", bucket="q", scope="global") == n
    assert f.metric(m, "grl_bucket_quota_used", bucket="q", scope="global") >= n
    # `grlctl explain` says why: used up, until when.
    rc, text, err = f.grlctl(ctl, "explain", "q", json_out=False)
    print(text)
    m = re.search(r"REJECTING every request: the quota of %d is used up \((\d+) used\); the window "
                  r"ends at \S+Z \(in 0m (\d+)s\)" % n, text)
    assert rc == 0 and m, (text, err)
    assert int(m.group(1)) >= n and abs(int(m.group(2)) - (start + 60 - time.time())) <= 2, text
    # The next window admits again.
    wait_for(start + 60)
    f.h.wait_until(lambda: all(h.get("/q/x").status == 200 for h in hosts), 5,
                   what="the next window admitting again")


def test_a_controller_restart_mid_window_keeps_the_use(fleet, tmp_path):
    n = 300
    state = str(tmp_path / "state")
    ctl, hosts, start = start_fleet(fleet, n, 14, ["--state-file", state])
    wait_for(start)
    writes = f.metric(ctl.metrics(), "grl_controller_state_file_writes_total")
    first, rejected = send(hosts, 6)
    assert rejected is None and first >= 150, first
    rc, text, _ = f.grlctl(ctl, "explain", "q", json_out=False)
    m = re.search(r"quota %d: (\d+) used, (\d+) left; the window ends at" % n, text)
    assert m and int(m.group(1)) + int(m.group(2)) == n and int(m.group(1)) >= 150, text
    assert "no rate limit (quota only)" in text, text
    time.sleep(0.6)  # a tick or two: the state file has the use
    assert os.path.exists(state)
    # The use changes every tick under load; it is written at most every 5 s (and at a stop),
    # not at every tick (about 26 in these 6.6 s).
    writes = f.metric(ctl.metrics(), "grl_controller_state_file_writes_total") - writes
    assert 1 <= writes <= 2, writes
    ctl.stop()
    ctl.start()
    assert ", 1 quota uses" in ctl.log()
    second, rejected = send(hosts, 30)
    print("admitted %d before and %d after the restart (quota %d)" % (first, second, n))
    assert rejected is not None
    # Forgotten, the fleet would admit another N after the restart.
    assert n - 10 <= first + second <= n + 2 * RPS, (first, second)
    assert rejected.headers["x-grl-status"] == "REJECTED"


def test_fleet_hostile_quota_entries_are_refused_counted_and_logged(fleet):
    """A peer (or anyone who reaches the peer port) adds its region's use to the quota
    instances this controller's zones define, in their window, and nothing else: entries for
    made-up buckets, another period, a window start ahead (which would end the window in force
    and zero its use) and regions other than the one the peer first named are refused, counted
    by reason and logged (rate-limited); the instance keeps its N and its use."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    rogue = ctx.socket(zmq.PUB)
    rogue.setsockopt(zmq.LINGER, 0)
    rogue.bind("tcp://127.0.0.1:*")
    offset, start = window_ahead(-5)  # the minute window began 5 s ago
    bucket = "q procedure_prefix=/q quota=1000/minute window_offset=%ds" % offset
    ctl = fleet.controller(peers=[rogue.getsockopt_string(zmq.LAST_ENDPOINT)],
                           extra=["--max-peers", "4"])
    col = fleet.collector("z1", [ctl])
    fleet.nginx("h1", "z1", col, [bucket], location_extra=LOCATION)
    fleet.wait_hosts(ctl, 1)
    f.h.wait_until(lambda: f.metric(ctl.metrics(), "grl_bucket_quota_limit", bucket="q",
                                    scope="global") == 1000, 5, what="the quota instance")
    seq = [0]

    def send_peer(region, quotas):
        seq[0] += 1
        now_ms = int(time.time() * 1000)
        m = {"v": f.USAGE_VERSION, "type": "region_usage", "ts_ms": now_ms, "seq": seq[0],
             "source": "evil", "region": region, "interval_ms": 250, "zones": 1, "hosts": 1,
             "limits_digest": "", "buckets": [], "overrides": [],
             "quotas": [dict(dict(name="q", scope="global", zone="", n=1000, period="minute",
                                  offset_ms=offset * 1000, window_ms=start * 1000, use_mu=0,
                                  at_ms=now_ms), **q) for q in quotas]}
        rogue.send_multipart([b"grl/p/", msgpack.packb(m, use_bin_type=True)])

    def used():
        return f.metric(ctl.metrics(), "grl_bucket_quota_used", bucket="q", scope="global")

    # The genuine path first: region r2's 100 units count (sent until the SUB is connected).
    f.h.wait_until(lambda: send_peer("r2", [{"use_mu": 100000}]) or used() == 100, 5,
                   interval=0.2, what="a peer region's use counted")
    send_peer("r2", [{"name": "made-up-%d" % i, "use_mu": 10 ** 12} for i in range(1000)])
    send_peer("r2", [{"n": 1, "use_mu": 100000}])  # N is ours: the use counts, the N does not
    send_peer("r2", [{"period": "hour", "window_ms": start * 1000 - start * 1000 % 3600000}])
    send_peer("r2", [{"window_ms": (start + 120) * 1000}])  # ahead: would zero our use
    send_peer("r2", [{"window_ms": (start + 60) * 1000}])  # the next: left for later, not refused
    for r in ("r3", "r4", "r5"):  # it spoke for r2: made-up regions would crowd out real ones
        send_peer(r, [{"use_mu": 1000}])

    def counted():
        m = ctl.metrics()
        return [f.metric(m, "grl_controller_quota_entries_refused_total", reason=r)
                for r in ("not_ours", "other_window", "other_region")]
    f.h.wait_until(lambda: counted() == [1000, 2, 3], 5, what="every refused entry counted")
    time.sleep(0.6)  # a tick or two: published
    m = ctl.metrics()
    assert f.metric(m, "grl_bucket_quota_used", bucket="q", scope="global") == 100  # r2's only
    assert f.metric(m, "grl_bucket_quota_limit", bucket="q", scope="global") == 1000
    assert f.metric(m, "grl_controller_quota_entries_refused_total", reason="unlisted") == 0
    log = ctl.log()
    assert 'quota of bucket "made-up-999" (global) from peer evil (region r2) refused: no zone' \
        in log, log[-2000:]
    assert log.count("quota of bucket") <= 2, log.count("quota of bucket")  # rate-limited
    ctx.destroy(0)
