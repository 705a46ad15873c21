"""End to end: 4 nginx in 2 zones, a collector per zone, one controller, real
load (open loop, bench/loadgen). A global bucket holds its limit with most of
the load on one host, a zone bucket holds per zone, a shadow bucket admits
everything while reporting the would-be drops."""

import statistics
import time

import pytest

import fleet as f

L_GLOBAL = 200  # r/s
L_ZONE = 200
L_SHADOW = 100
BUCKETS = [
    "g procedure_prefix=/g rate=%dr/s" % L_GLOBAL,
    "zb procedure_prefix=/z rate=%dr/s scope=zone" % L_ZONE,
    "sh procedure_prefix=/s rate=%dr/s mode=shadow" % L_SHADOW,
]


@pytest.fixture(scope="module")
def fl():
    with f.two_zones_of_two(BUCKETS) as fleet:
        yield fleet


def within(value, target, tolerance):
    return abs(value - target) <= tolerance * target


def test_global_bucket_holds_with_uneven_load(fl):
    n = fl["nginx"]
    # 1.5 L offered, 60% of it on h1: a per-host limit would admit far more than L.
    load = f.Load([(n[0], 6), (n[1], 2), (n[2], 1), (n[3], 1)], "%d:20" % (1.5 * L_GLOBAL), "/g/x")
    r = load.result()
    w = f.window(r, 8, 20)
    print("global bucket, steady window:", w)
    assert within(w["offered"], 1.5 * L_GLOBAL, 0.03), w  # the generator kept its rate
    assert w["errors"] == 0 and w["other"] == 0, w
    assert within(w["ok"], L_GLOBAL, 0.05), "admitted %.1f r/s, limit %d r/s: %r" % (w["ok"], L_GLOBAL, w)
    # One ratio for everyone: each host admits the same share of what it is offered, within
    # 10% or, on the quiet hosts, within the sampling noise of their few requests (each is
    # dropped with the ratio: 360 requests at 30 r/s over the window have a standard deviation
    # of 0.025 around a share of 2/3; 4 of them are 15%).
    p = L_GLOBAL / (1.5 * L_GLOBAL)
    for k in range(4):
        share = w["ok_by_target"][k] / w["offered_by_target"][k]
        n_requests = w["offered_by_target"][k] * 12  # the window: seconds 8 to 20
        noise = 4 * (p * (1 - p) / n_requests) ** 0.5 / p
        assert within(share, p, max(0.10, noise)), (k, share, noise, w)
    m = fl["ctl"].metrics()
    assert f.metric(m, "grl_bucket_hosts", bucket="g", scope="global") == 4


def test_zone_bucket_holds_per_zone(fl):
    n = fl["nginx"]
    # z1 is offered 1.5x its zone limit, z2 well below it: only z1 drops.
    z1 = f.Load([(n[0], 2), (n[1], 1)], "%d:20" % (1.5 * L_ZONE), "/z/x")
    z2 = f.Load([(n[2], 1), (n[3], 1)], "%d:20" % (0.6 * L_ZONE), "/z/x")
    w1 = f.window(z1.result(), 6, 20)
    w2 = f.window(z2.result(), 6, 20)
    print("zone bucket, z1:", w1, "z2:", w2)
    assert within(w1["ok"], L_ZONE, 0.05), ("z1", w1)
    assert within(w2["ok"], 0.6 * L_ZONE, 0.03), ("z2", w2)
    assert w2["r429"] < 1, ("z2 is under its limit and must not drop", w2)
    m = fl["ctl"].metrics()
    r1 = f.metric(m, "grl_bucket_ratio", bucket="zb", scope="zone", zone="z1")
    r2 = f.metric(m, "grl_bucket_ratio", bucket="zb", scope="zone", zone="z2")
    assert r1 is not None and r2 is not None, m.get("grl_bucket_ratio")


def test_shadow_bucket_admits_everything_and_reports_would_be_drops(fl):
    n = fl["nginx"]
    load = f.Load([(n[0], 6), (n[1], 2), (n[2], 1), (n[3], 1)], "%d:16" % (2 * L_SHADOW), "/s/x")
    time.sleep(6)
    t0, before = time.monotonic(), f.bucket_totals(n, "sh")
    # The controller's shadow-drop rate is a per-interval figure (about 25
    # would-be drops per 250 ms here, so +-15% is one binomial sigma): take
    # the median of samples over the window rather than one instant.
    shadow_rps = []
    while time.monotonic() - t0 < 9:
        time.sleep(0.5)
        shadow_rps.append(f.metric(fl["ctl"].metrics(), "grl_bucket_shadow_dropped_rps",
                                   bucket="sh", scope="global"))
    t1, after = time.monotonic(), f.bucket_totals(n, "sh")
    m = fl["ctl"].metrics()
    r = load.result()
    w = f.window(r, 6, 16)
    assert w["r429"] == 0 and w["other"] == 0 and w["errors"] == 0, w
    assert within(w["ok"], 2 * L_SHADOW, 0.03), w  # everything admitted
    shadow_rate = (after["shadow_dropped"] - before["shadow_dropped"]) / (t1 - t0)
    offered_rate = (after["offered"] - before["offered"]) / (t1 - t0)
    print("shadow bucket:", w, "shadow drops %.1f r/s of %.1f offered" % (shadow_rate, offered_rate))
    assert after["dropped"] == before["dropped"], "a shadow bucket never drops"
    # The would-be drops of a deny bucket at this load: offered - limit.
    assert within(shadow_rate, offered_rate - L_SHADOW, 0.10), (shadow_rate, offered_rate)
    assert within(f.metric(m, "grl_bucket_ratio", bucket="sh", scope="global"), 0.5, 0.10)
    assert f.metric(m, "grl_bucket_shadow", bucket="sh", scope="global") == 1
    assert within(statistics.median(shadow_rps), L_SHADOW, 0.15), shadow_rps
