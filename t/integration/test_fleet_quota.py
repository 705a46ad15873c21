"""Quotas over long windows (grl_bucket quota=, docs/design/008-quotas.md), end to end: 4 nginx in
2 zones, a collector per zone, one controller. The fleet admits about N in the window and then
rejects with $grl_status REJECTED and RateLimit fields saying nothing is left, until the window
ends; a controller restart mid-window keeps the window's use (its state file)."""

import os
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
    # The next window admits again.
    wait_for(start + 60)
    f.h.wait_until(lambda: all(h.get("/q/x").status == 200 for h in hosts), 5,
                   what="the next window admitting again")


def test_a_controller_restart_mid_window_keeps_the_use(fleet, tmp_path):
    n = 300
    state = str(tmp_path / "state")
    ctl, hosts, start = start_fleet(fleet, n, 14, ["--state-file", state])
    wait_for(start)
    first, rejected = send(hosts, 6)
    assert rejected is None and first >= 150, first
    time.sleep(0.6)  # a tick or two: the state file has the use
    assert os.path.exists(state)
    ctl.stop()
    ctl.start()
    second, rejected = send(hosts, 30)
    print("admitted %d before and %d after the restart (quota %d)" % (first, second, n))
    assert rejected is not None
    # Forgotten, the fleet would admit another N after the restart.
    assert n - 10 <= first + second <= n + 2 * RPS, (first, second)
    assert rejected.headers["x-grl-status"] == "REJECTED"
