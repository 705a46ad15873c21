"""Quotas per key (grl_bucket key= quota=, docs/design/009-per-key-quotas.md), end to end: 4 nginx
in 2 zones, a collector per zone, one controller. A key that used its quota fleet-wide is
rejected on every host until the window ends while other keys are admitted; with more keys in
use than reports carry, every admitted unit still reaches the controller, exactly once."""

import os
import re
import time

import msgpack

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)
from test_fleet_quota import wait_for, window_ahead

LOCATION = ("keepalive_timeout 60s; grl_ratelimit_headers on; "
            "add_header X-Grl-Status $grl_status always;")


def start_fleet(fl, bucket, ctl_extra=()):
    ctl = fl.controller(extra=list(ctl_extra))
    z1, z2 = fl.collector("z1", [ctl]), fl.collector("z2", [ctl])
    hosts = [fl.nginx(h, z, c, [bucket], location_extra=LOCATION)
             for h, z, c in (("h1", "z1", z1), ("h2", "z1", z1), ("h3", "z2", z2), ("h4", "z2", z2))]
    fl.wait_hosts(ctl, 4)
    return ctl, hosts


def get(host, key):
    return host.get("/q/x", headers={"X-Api-Key": key})


def test_a_key_that_used_its_quota_is_rejected_everywhere_and_others_are_not(fleet):
    n, rps = 100, 30
    offset, start = window_ahead(14)
    ctl, hosts = start_fleet(fleet, "kq key=$http_x_api_key keys=2048 procedure_prefix=/q "
                                    "quota=%d/minute window_offset=%ds" % (n, offset))
    wait_for(start)
    # Key "alpha" at 30 r/s over the 4 hosts until its first rejection; "beta" now and then.
    admitted, beta, k, t0, rejected = 0, 0, 0, time.monotonic(), None
    while time.monotonic() - t0 < 20 and rejected is None:
        r = get(hosts[k % 4], "alpha")
        k += 1
        if r.status == 200:
            admitted += 1
        else:
            rejected = r
        if k % 10 == 0:
            assert get(hosts[k % 4], "beta").status == 200
            beta += 1
        time.sleep(max(0.0, t0 + k / rps - time.monotonic()))
    print("alpha admitted before its first rejection: %d (quota %d per key)" % (admitted, n))
    assert rejected is not None, "alpha never rejected after %d requests" % admitted
    # 250 ms reports and ticks: about a second of the key's load (30) beyond N at most.
    assert n - 10 <= admitted <= n + rps, admitted
    assert rejected.status == 429
    assert rejected.headers["x-grl-status"] == "REJECTED"
    # The RateLimit fields speak of the key's quota: used up until the window ends.
    assert rejected.headers["ratelimit-policy"] == '"kq.quota";q=%d;w=60' % n
    r, _, t = rejected.headers["ratelimit"].partition(";t=")
    assert r == '"kq.quota";r=0', rejected.headers
    left = start + 60 - time.time()
    assert abs(int(t) - left) <= 2, (t, left)
    # Another key's response: the policy only (a host does not know what is left of it).
    other = get(hosts[0], "beta")
    assert other.status == 200 and "ratelimit" not in other.headers, other.headers
    assert other.headers["ratelimit-policy"] == '"kq.quota";q=%d;w=60' % n
    # Every host rejects alpha (the quota is the key's, fleet-wide); beta is admitted everywhere.
    for h in hosts:
        assert get(h, "alpha").status == 429
        assert get(h, "beta").status == 200
    # `grlctl explain` says why, per key.
    rc, text, err = f.grlctl(ctl, "explain", "kq", "alpha", json_out=False)
    print(text)
    assert rc == 0, err
    assert re.search(r"quota per key: %d each; 1 key\(s\) used theirs up and are rejected until "
                     r"the window ends at \S+Z" % n, text), text
    m = re.search(r'key "alpha": REJECTED until the window ends: used (\d+) of its quota of %d'
                  % n, text)
    assert m and int(m.group(1)) >= n, text
    # beta's every request counted (within a report and a tick), and what is left.
    def beta_use():
        _, text, _ = f.grlctl(ctl, "explain", "kq", "beta", json_out=False)
        m = re.search(r'key "beta": used (\d+) of its quota of %d in the window, (\d+) left' % n,
                      text)
        assert m and int(m.group(1)) + int(m.group(2)) == n, text
        return int(m.group(1))
    f.h.wait_until(lambda: beta_use() == beta + 5, 5, what="beta's %d requests counted" % (beta + 5))


def test_every_admitted_unit_of_a_long_tail_of_keys_is_counted_once(fleet, tmp_path):
    """report_keys=8: each host lists 8 keys a report (4 a second each), far fewer than the keys
    in use, so most keys' use waits for later reports. None of it is lost or counted twice: the
    controller's state file holds each key's use as admitted."""
    keys, per_key = 150, 3
    state = str(tmp_path / "state")
    offset, start = window_ahead(4)
    ctl, hosts = start_fleet(fleet, "kq key=$http_x_api_key keys=2048 procedure_prefix=/q report_keys=8 "
                                    "quota=1000/minute window_offset=%ds" % offset,
                             ["--state-file", state])
    wait_for(start)
    sent = 0
    for j in range(per_key):
        for i in range(keys):
            assert get(hosts[(i + j) % 4], "key-%d" % i).status == 200
            sent += 1
    # Each host holds up to ~110 keys' use, listed 8 a report: drained within ~4 s.
    def counted():
        with open(state, "rb") as fh:
            saved = msgpack.unpackb(fh.read(), raw=False)
        quotas = [q for q in saved.get("quotas", []) if q["name"] == "kq"]
        return {h: used for q in quotas for h, used in q.get("keys", [])}
    f.h.wait_until(lambda: os.path.exists(state) and sum(counted().values()) >= sent, 20,
                   what="every key's use in the controller's state file")
    ctl.stop()  # writes the state file once more
    use = counted()
    print("keys counted: %d, units: %d of %d sent" % (len(use), sum(use.values()), sent))
    assert len(use) == keys, len(use)
    assert sorted(set(use.values())) == [per_key], use
