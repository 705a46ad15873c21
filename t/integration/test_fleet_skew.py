"""A rolling upgrade across usage protocol version 2 (docs/operations.md "Upgrading"): a
collector and a controller told to send version 1 (--usage-version 1), as they must while
some receiver is of the release before, are read by this release's controllers: the zone
and the peer region stay in the sums, the ratio reaches nginx, and the controllers say
which version each zone and peer sends, and when the last sender of version 1 is gone."""

import time

import msgpack
import zmq

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)

LIMIT = 200
BUCKETS = ["g procedure_prefix=/g rate=%dr/s" % LIMIT]

# The items of a usage entry and of a definition: the keys of their maps in version 1.
ZONE_ENTRY_KEYS = {"name", "offered_mrps", "admitted_mrps", "dropped_mrps",
                   "shadow_dropped_mrps", "hosts", "rated_hosts", "definitions", "host_names"}
REGION_ENTRY_KEYS = ZONE_ENTRY_KEYS - {"host_names"}
DEFINITION_KEYS = {"scope", "mode", "limit_mrps", "hosts"}


def received(ctl, kind, v):
    return f.metric(ctl.metrics(), "grl_controller_usage_received_total", kind=kind,
                    v=str(v)) or 0


def test_a_collector_sending_usage_version_1_is_limited_with(fleet):
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl], extra=["--usage-version", "1"])
    h1 = fleet.nginx("h1", "z1", col, BUCKETS)
    h2 = fleet.nginx("h2", "z1", col, BUCKETS)
    fleet.wait_hosts(ctl, 2)
    load = f.Load([(h1, 3), (h2, 1)], "%d:16" % (1.5 * LIMIT), "/g/x")
    try:
        f.h.wait_until(lambda: abs((f.metric(ctl.metrics(), "grl_bucket_ratio", bucket="g",
                                             scope="global") or 0) - 1 / 3) < 0.05,
                       10, what="the controller's ratio 1/3 from usage of version 1")
        f.wait_nginx_bucket([h1, h2], "g", lambda b: abs(b["ratio"] - 1 / 3) < 0.05, 10)
        w = f.window(load.result(), 8, 16)
    finally:
        load.stop()
    print("admitted with usage of version 1:", w)
    assert abs(w["ok"] - LIMIT) <= 0.07 * LIMIT, w
    m = ctl.metrics()
    assert f.metric(m, "grl_controller_usage_received_total", kind="zone_usage", v="1") > 0
    assert f.metric(m, "grl_controller_usage_received_total", kind="zone_usage", v="2") == 0
    assert f.metric(m, "grl_controller_messages_malformed_total", kind="zone_usage") == 0
    assert f.metric(m, "grl_controller_zone_usage_version", zone="z1") == 1
    assert [(z["zone"], z["usage_v"]) for z in f.grlctl(ctl, "status")["zones"]] == [("z1", 1)]
    rc, out, err = f.grlctl(ctl, "status", json_out=False)
    row = [line.split() for line in out.splitlines() if line.startswith("z1 ")]
    assert row and row[0][-1] == "v1", out
    assert f.metric(m, "grl_bucket_hosts", bucket="g", scope="global") == 2
    assert ("zone z1 (col-z1) sends zone usage of protocol version 1 (its sender is older, or "
            "runs with --usage-version 1): read as such until it sends version 2") in ctl.log()


def test_a_zone_retired_while_it_sent_version_1_does_not_hold_the_upgrade_open(fleet):
    """A zone whose collector sent version 1 is taken out of service instead of upgraded: once
    the controller forgets it (silent for its forget interval, 60 intervals), its version goes
    too, the controller says that no sender of version 1 is left, and the zone's gauge is
    gone."""
    ctl = fleet.controller()
    old = fleet.collector("z1", [ctl], extra=["--usage-version", "1"])
    new = fleet.collector("z2", [ctl])
    fleet.nginx("h1", "z1", old, BUCKETS)
    fleet.nginx("h2", "z2", new, BUCKETS)
    fleet.wait_hosts(ctl, 2)
    m = ctl.metrics()
    assert f.metric(m, "grl_controller_zone_usage_version", zone="z1") == 1
    assert f.metric(m, "grl_controller_zone_usage_version", zone="z2") == 2
    done = ("no zone or peer sends usage of a protocol version older than 2 any more: "
            "--usage-version 1 may go from collectors and controllers")
    assert done not in ctl.log()
    old.stop()
    f.h.wait_until(lambda: "zone z1 forgotten" in ctl.log(), 30, what="the controller to forget z1")
    f.h.wait_until(lambda: done in ctl.log(), 2, what="the line that says the upgrade is done")
    assert f.metric(ctl.metrics(), "grl_controller_zone_usage_version", zone="z1") is None
    assert f.metric(ctl.metrics(), "grl_controller_zone_usage_version", zone="z2") == 2


def region_usage_of(publish, timeout_ms=5000):
    """The first region usage a controller publishes, decoded by an independent reader."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"grl/p/")
    sub.connect(publish)
    try:
        assert sub.poll(timeout_ms), "no region usage from " + publish
        topic, body = sub.recv_multipart()
        return msgpack.unpackb(body, raw=False)
    finally:
        sub.close(0)
        ctx.term()


def test_a_controller_sending_region_usage_version_1_to_a_peer(fleet):
    """r1's controller sends version 1 (as it must while a controller of another region is of
    the release before): r2's controller keeps r1 in the global sums; then r1 sends version 2
    (the upgrade's last step) and r2 says that the last sender of version 1 is gone."""
    c1 = f.Controller(region="r1", name="ctl-r1", extra=["--usage-version", "1"])
    c2 = f.Controller(region="r2", name="ctl-r2", peers=[c1.publish])
    c1.args += ["--peer", c2.publish]
    fleet.add(c1)
    fleet.add(c2)
    h1, h3 = fleet.host_per_region(c1, c2, BUCKETS)

    # What r1 sends is version 1's layout: every entry and definition a map of its items.
    ru = region_usage_of(c1.publish)
    assert ru["v"] == 1 and ru["type"] == "region_usage", ru
    # Global: 240 r/s in r1, 60 in r2. r2 alone (60 < 200) would not limit at all.
    g1 = f.Load([(h1, 1)], "240:40", "/g/x")
    g3 = f.Load([(h3, 1)], "60:40", "/g/x")
    try:
        def ratio(c):
            return f.metric(c.metrics(), "grl_bucket_ratio", bucket="g", scope="global") or 0
        f.h.wait_until(lambda: abs(ratio(c2) - 1 / 3) < 0.05 and abs(ratio(c1) - 1 / 3) < 0.05,
                       10, what="both regions' controllers to compute ratio 1/3")
        f.wait_nginx_bucket([h3], "g", lambda b: abs(b["ratio"] - 1 / 3) < 0.05, 10)
        ru = region_usage_of(c1.publish)
        assert ru["v"] == 1 and ru["buckets"], ru
        for e in ru["buckets"]:
            assert isinstance(e, dict) and set(e) == REGION_ENTRY_KEYS, e
            for d in e["definitions"]:
                assert isinstance(d, dict) and set(d) == DEFINITION_KEYS, d
        m2 = c2.metrics()
        assert f.metric(m2, "grl_bucket_hosts", bucket="g", scope="global") == 2
        assert f.metric(m2, "grl_controller_peer_usage_version", peer="ctl-r1") == 1
        assert f.metric(m2, "grl_controller_usage_received_total", kind="region_usage", v="1") > 0
        assert f.metric(m2, "grl_controller_messages_malformed_total", kind="region_usage") == 0
        assert f.metric(c1.metrics(), "grl_controller_peer_usage_version", peer="ctl-r2") == 2
        assert ("peer ctl-r1 (region r1) sends region usage of protocol version 1"
                in c2.log())

        # The upgrade's last step: r1's controller restarted without --usage-version 1.
        c1.stop()
        c1.args = [a for a in c1.args if a not in ("--usage-version", "1")]
        c1.start()
        f.h.wait_until(lambda: f.metric(c2.metrics(), "grl_controller_peer_usage_version",
                                        peer="ctl-r1") == 2,
                       10, what="r2 to read version 2 from r1")
        before = received(c2, "region_usage", 1)
        f.h.wait_until(lambda: abs(ratio(c2) - 1 / 3) < 0.05, 10, what="ratio 1/3 in r2 again")
        assert received(c2, "region_usage", 1) == before
        assert received(c2, "region_usage", 2) > 0
        log = c2.log()
        assert "peer ctl-r1 (region r1) sends region usage of protocol version 2 again (was 1)" in log
        assert ("no zone or peer sends usage of a protocol version older than 2 any more: "
                "--usage-version 1 may go from collectors and controllers") in log
    finally:
        g1.stop()
        g3.stop()


def test_a_state_file_of_the_release_before_is_read(fleet, tmp_path):
    """A controller's --state-file is a region usage: one written by the release before usage
    version 2 (v 1) is read on the upgraded controller, its overrides kept (main moved it
    aside as bad, and the overrides were lost with it)."""
    state = tmp_path / "controller.state"
    now_ms = int(time.time() * 1000)
    state.write_bytes(msgpack.packb({
        "v": 1, "type": "region_usage", "ts_ms": 1, "seq": 1, "source": "ctl-r1", "region": "r1",
        "interval_ms": 250, "zones": 0, "hosts": 0, "limits_digest": "", "buckets": [],
        "overrides": [{"name": "g", "limit_mrps": 50000, "expires_ms": 0, "set_ms": now_ms,
                       "origin": "ctl-r1"}]}, use_bin_type=True))
    ctl = fleet.controller(extra=["--state-file", str(state)])
    assert "state file %s: 1 of 1 overrides restored" % state in ctl.log(), ctl.log()[-2000:]
    assert not (tmp_path / "controller.state.bad").exists()
    assert f.metric(ctl.metrics(), "grl_controller_state_file_ok") == 1
    # With --usage-version 1 it writes the file so that the release before reads it again.
    ctl.stop()
    state.unlink()
    ctl.args += ["--usage-version", "1"]
    ctl.start()
    f.grlctl(ctl, "set", "g", "--limit", "20r/s")
    f.h.wait_until(lambda: state.exists(), 3, what="the state file")
    saved = msgpack.unpackb(state.read_bytes(), raw=False)
    assert saved["v"] == 1 and saved["overrides"][0]["name"] == "g", saved
