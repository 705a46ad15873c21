"""Surge damping end to end (docs/design.md "Surge damping"): real nginx, grl-collector and
grl-controller at 1 s intervals, so that the control plane needs one to three seconds to see
a surge. A 15x surge on the hosts is held near the limit by each host's own rule before the
control plane has answered. Counts with generous margins, no timing assertions."""

import pytest

import fleet as f

L = 100  # r/s, global
BUCKETS = ["api procedure_prefix=/api rate=%dr/s" % L]


def start(made, daemons, extra="", buckets=BUCKETS):
    ctl = f.Controller(interval="1s", ttl="5s").start()
    daemons.append(ctl)
    col = f.Collector("z1", [ctl], interval="1s").start()
    daemons.append(col)
    hosts = [f.start_nginx("h%d" % i, "z1", "r1", col, buckets, made, interval="1s", ttl="5s",
                           extra=extra)
             for i in (1, 2)]

    def reporting():
        return f.metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 2
    f.h.wait_until(reporting, 15, what="2 hosts reporting to the controller")
    return {"ctl": ctl, "nginx": hosts}


def surge(n):
    """0.5 L for 8 s (the control plane learns the fleet: ratio 0), then 15x that (7.5 L).
    Returns the rates before, in the surge's first second and in the 3 s after it."""
    load = f.Load([(n[0], 3), (n[1], 1)], "%d:8,%d:4" % (L // 2, 15 * L // 2), "/api/x")
    r = load.result()
    return f.window(r, 5, 8), f.window(r, 8, 9), f.window(r, 9, 12)


@pytest.fixture(scope="module")
def fl():
    made, daemons = [], []
    try:
        yield start(made, daemons)
    finally:
        for n in made:
            n.cleanup()
        for d in daemons:
            d.stop()


def test_fleet_surge_is_damped_before_the_control_plane_answers(fl):
    n = fl["nginx"]
    base, first, rest = surge(n)
    print("base:", base, "first second of the surge:", first, "then:", rest)
    assert base["r429"] < 1 and base["errors"] == 0, base
    assert first["offered"] > 5 * L, ("the generator must have surged", first)
    # Without damping every host applies ratio 0 until the control plane has seen the surge
    # (one to three 1 s intervals): the first second admits about 7.5 L. With it each host
    # holds its share of L (2 L allows for the tens of ms the rule needs to see the surge).
    assert first["ok"] < 2 * L, ("admitted in the surge's first second", first)
    assert first["ok"] > 0.5 * L, ("damping must not drop everything", first)
    assert rest["ok"] < 1.5 * L, rest
    logs = [x.error_log() for x in n]
    assert any('surge damping tightened' in log for log in logs), logs[0][-2000:]
    # ...and counted, on the status page and in its Prometheus output.
    assert sum(x.status()["surge_tightened"] for x in n) >= 1
    assert "# TYPE grl_surge_tightened_total counter" in n[0].prometheus()


def test_fleet_surge_damping_off_leaves_the_surge_to_the_control_plane():
    """grl_surge_damping off: the same surge passes at the old ratio (0) until the control
    plane has seen it, nothing is tightened or counted, and the reporter says it is off."""
    made, daemons = [], []
    try:
        n = start(made, daemons, extra="grl_surge_damping off;")["nginx"]
        base, first, rest = surge(n)
        print("damping off: base:", base, "first second of the surge:", first, "then:", rest)
        assert base["r429"] < 1 and base["errors"] == 0, base
        assert first["offered"] > 5 * L, ("the generator must have surged", first)
        # One to three 1 s intervals pass before the control plane answers: with damping the
        # first second admits under 2 L (the test above); without it, several L.
        assert first["ok"] > 3 * L, ("admitted in the surge's first second", first)
        logs = [x.error_log() for x in n]
        assert all("surge damping tightened" not in log for log in logs), logs[0][-2000:]
        assert any("surge damping off" in log for log in logs), logs[0][-2000:]
        assert sum(x.status()["surge_tightened"] for x in n) == 0
    finally:
        for x in made:
            x.cleanup()
        for d in daemons:
            d.stop()


def test_fleet_surge_on_a_runtime_bucket_is_damped():
    """A run-time bucket (grlctl add, no nginx.conf entry) is damped like a configured one: the
    same 15x surge, with the only limit on /api a run-time bucket, admits under 2 L in its
    first second (its ratio alone, 0 until the control plane has seen the surge, would admit
    about 7.5 L), and the host logs the run-time bucket's tightening."""
    made, daemons = [], []
    try:
        fl = start(made, daemons, buckets=["other procedure_prefix=/other rate=1000r/s"])
        n = fl["nginx"]
        r = f.grlctl(fl["ctl"], "add", "emerg", "--procedure-prefix", "/api",
                     "--limit", "%dr/s" % L)
        assert r["ok"] and r["buckets"][0]["runtime"], r
        f.wait_nginx_bucket(n, "emerg", lambda b: b["runtime"] and b["ratio_state"] == "active", 5)
        base, first, rest = surge(n)
        print("run-time bucket: base:", base, "first second of the surge:", first, "then:", rest)
        assert base["r429"] < 1 and base["errors"] == 0, base
        assert first["offered"] > 5 * L, ("the generator must have surged", first)
        assert first["ok"] < 2 * L, ("admitted in the surge's first second", first)
        assert first["ok"] > 0.5 * L, ("damping must not drop everything", first)
        logs = [x.error_log() for x in n]
        assert any('bucket "emerg" surge damping tightened' in log for log in logs), \
            logs[0][-2000:]
    finally:
        for x in made:
            x.cleanup()
        for d in daemons:
            d.stop()


def test_fleet_load_balancer_shift_is_not_held_at_the_old_shares():
    """Issue 11: 4 hosts at 1.5 L loaded 70/10/10/10 switch at once to 10/10/10/70. The total,
    and the ratio it needs, do not change; the host that gains 7x must not be held at its old
    share (which admitted about 0.5 L for 2-3 intervals) while the rise stays within the
    instance's offered rate (docs/design.md, "The load-balancer shift"). Asserted on the mean
    over the 3 s after the shift, which a short stall of the machine does not move much."""
    made, daemons = [], []
    try:
        ctl = f.Controller(interval="1s", ttl="5s").start()
        daemons.append(ctl)
        col = f.Collector("z1", [ctl], interval="1s").start()
        daemons.append(col)
        n = [f.start_nginx("h%d" % i, "z1", "r1", col, BUCKETS, made, interval="1s", ttl="5s")
             for i in (1, 2, 3, 4)]

        def reporting():
            return f.metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 4
        f.h.wait_until(reporting, 15, what="4 hosts reporting to the controller")
        total = 1.5 * L
        loads = [f.Load([(x, 1)], "%g:8,%g:6" % (total * a, total * b), "/api/x")
                 for x, a, b in zip(n, (0.7, 0.1, 0.1, 0.1), (0.1, 0.1, 0.1, 0.7))]
        results = [ld.result() for ld in loads]
        before = sum(f.window(r, 5, 8)["ok"] for r in results)
        after = sum(f.window(r, 8, 11)["ok"] for r in results)
        print("admitted before the shift: %.1f r/s, 3 s after it: %.1f r/s" % (before, after))
        assert 0.8 * L < before < 1.2 * L, before  # the control plane held the limit
        assert after > 0.8 * L, ("admitted after the shift", after)
        assert after < 1.3 * L, ("admitted after the shift", after)
    finally:
        for x in made:
            x.cleanup()
        for d in daemons:
            d.stop()


def test_fleet_step_and_its_end_tick_the_controller_early():
    """A 3x step (0.5 L -> 1.5 L) and back: the controller ticks as soon as a zone usage brings
    the bucket's rate well above, and then well below, its rate in the zone's last usage
    (docs/control-plane.md "Early answers to a change"), counted with reasons "rise" and
    "fall". Counts only, no timing assertions."""
    made, daemons = [], []
    try:
        fl = start(made, daemons)
        ctl, n = fl["ctl"], fl["nginx"]
        load = f.Load([(n[0], 3), (n[1], 1)], "%d:5,%d:4,%d:4" % (L // 2, 3 * L // 2, L // 2),
                      "/api/x")
        r = load.result()
        print("before the step:", f.window(r, 2, 5), "after it:", f.window(r, 7, 9),
              "after the fall:", f.window(r, 11, 13))
        km = ctl.metrics()
        rises = f.metric(km, "grl_controller_early_ticks_total", reason="rise")
        falls = f.metric(km, "grl_controller_early_ticks_total", reason="fall")
        print("early ticks for rises:", rises, "for falls:", falls)
        assert rises is not None and rises >= 1, km.get("grl_controller_early_ticks_total")
        assert falls is not None and falls >= 1, km.get("grl_controller_early_ticks_total")
        # A few (the load's start from nothing, the step and the fall, each seen in part by
        # the first usages: two or three each), not a storm (the bound allows four an
        # interval: 52 here).
        assert rises + falls <= 12, (rises, falls)
        assert f.metric(km, "grl_controller_early_ticks_deferred_total") == 0
    finally:
        for x in made:
            x.cleanup()
        for d in daemons:
            d.stop()
