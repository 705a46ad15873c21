"""Surge damping end to end (docs/design.md "Surge damping"): real nginx, grl-collector and
grl-controller at 1 s intervals, so that the control plane needs one to three seconds to see
a surge. A 15x surge on the hosts is held near the limit by each host's own rule before the
control plane has answered. Counts with generous margins, no timing assertions."""

import pytest

import fleet as f

L = 100  # r/s, global
BUCKETS = ["api procedure_prefix=/api rate=%dr/s" % L]


@pytest.fixture(scope="module")
def fl():
    made, daemons = [], []
    try:
        ctl = f.Controller(interval="1s", ttl="5s").start()
        daemons.append(ctl)
        col = f.Collector("z1", [ctl], interval="1s").start()
        daemons.append(col)
        hosts = [f.start_nginx("h%d" % i, "z1", "r1", col, BUCKETS, made, interval="1s", ttl="5s")
                 for i in (1, 2)]

        def reporting():
            return f.metric(ctl.metrics(), "grl_controller_hosts", state="fresh") == 2
        f.h.wait_until(reporting, 15, what="2 hosts reporting to the controller")
        yield {"ctl": ctl, "nginx": hosts}
    finally:
        for n in made:
            n.cleanup()
        for d in daemons:
            d.stop()


def test_fleet_surge_is_damped_before_the_control_plane_answers(fl):
    n = fl["nginx"]
    # 0.5 L for 8 s (the control plane learns the fleet: ratio 0), then 15x that (7.5 L).
    load = f.Load([(n[0], 3), (n[1], 1)], "%d:8,%d:4" % (L // 2, 15 * L // 2), "/api/x")
    r = load.result()
    base = f.window(r, 5, 8)
    first = f.window(r, 8, 9)  # the surge's first second
    rest = f.window(r, 9, 12)
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
