"""Limits without reloads: the controller's limits file (changed, broken,
SIGHUP), grlctl overrides with expiry, and run-time (emergency) buckets that
reach every nginx at once. Nothing is reloaded or restarted: the nginx workers
and the controller keep their pids throughout."""

import os
import signal
import time

import pytest

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)

BUCKETS = ["g procedure_prefix=/g rate=200r/s"]
CALLER = "grl_caller $http_x_caller;"


def write(path, text):
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, str(path))  # how config management replaces a file


def near(a, b, tol=0.05):
    return abs(a - b) <= tol


def pids(nginxes, ctl):
    return [sorted(n.worker_pids()) for n in nginxes] + [ctl.proc.pid]


def two_hosts(fleet, tmp_path, text, ctl_extra=(), buckets=BUCKETS, extra=""):
    limits = tmp_path / "limits.yaml"
    write(limits, text)
    ctl = fleet.controller(limits=str(limits), extra=ctl_extra)
    col = fleet.collector("z1", [ctl])
    ns = [fleet.nginx("h1", "z1", col, buckets, extra=extra),
          fleet.nginx("h2", "z1", col, buckets, extra=extra)]
    fleet.wait_hosts(ctl, 2)
    return limits, ctl, ns


def test_limits_file_changes_apply_and_a_broken_file_is_rejected(fleet, tmp_path):
    limits, ctl, ns = two_hosts(fleet, tmp_path, "buckets:\n  g:\n    limit: 100r/s\n")
    load = f.Load([(ns[0], 2), (ns[1], 1)], "150:30", "/g/x")
    try:
        before = pids(ns, ctl)
        # The file's 100 r/s overrides nginx.conf's 200: ratio 1/3 at 150 r/s offered.
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 100 and near(b["ratio"], 1 / 3), 10)
        write(limits, "buckets:\n  g:\n    limit: 75r/s\n")
        t0 = time.monotonic()
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 75, 5)
        assert time.monotonic() - t0 < 3, "the change took effect without a reload, within 3 s"
        f.wait_nginx_bucket(ns, "g", lambda b: near(b["ratio"], 0.5), 5)

        # A broken file: rejected with the line and the field, the last good limits stay.
        write(limits, "buckets:\n  g:\n    limit: 75/s\n")
        f.h.wait_until(lambda: "limits file rejected" in ctl.log(), 5, what="the rejection log line")
        line = [l for l in ctl.log().splitlines() if "limits file rejected" in l][-1]
        assert 'limits.yaml:3: bucket "g": field "limit": invalid rate "75/s"' in line, line
        assert f.metric(ctl.metrics(), "grl_controller_limits_file_ok") == 0
        st = f.grlctl(ctl, "status")
        assert st["limits"]["ok"] is False and "limits.yaml:3" in st["limits"]["error"], st["limits"]
        time.sleep(1.5)
        for n in ns:
            b = n.bucket("g")
            assert b["limit_rps"] == 75 and b["ratio_state"] == "active", b

        write(limits, "buckets:\n  g:\n    limit: 120r/s\n")
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 120, 5)
        assert f.metric(ctl.metrics(), "grl_controller_limits_file_ok") == 1
        m = ctl.metrics()
        assert f.metric(m, "grl_controller_limits_reloads_total", result="ok") == 2
        assert f.metric(m, "grl_controller_limits_reloads_total", result="rejected") == 1
        assert pids(ns, ctl) == before, "nothing was reloaded or restarted"
    finally:
        load.stop()


def test_limits_file_reloads_on_sighup(fleet, tmp_path):
    limits, ctl, ns = two_hosts(fleet, tmp_path, "buckets:\n  g:\n    limit: 100r/s\n",
                                ctl_extra=["--limits-poll", "0"])
    load = f.Load([(ns[0], 1), (ns[1], 1)], "50:20", "/g/x")
    try:
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 100, 10)
        write(limits, "buckets:\n  g:\n    limit: 40r/s\n    mode: shadow\n")
        time.sleep(1.5)  # polling is off: nothing happens until SIGHUP
        assert all(n.bucket("g")["limit_rps"] == 100 for n in ns)
        ctl.signal(signal.SIGHUP)
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 40 and b["mode"] == "shadow", 3)
        assert "limits file loaded (SIGHUP): 1 buckets" in ctl.log()
    finally:
        load.stop()


@pytest.mark.timing  # asserts how fast a change is published: runs alone
def test_grlctl_overrides_limit_and_mode_with_expiry(fleet, tmp_path):
    limits, ctl, ns = two_hosts(fleet, tmp_path, "buckets:\n  g:\n    limit: 100r/s\n")
    load = f.Load([(ns[0], 2), (ns[1], 1)], "150:30", "/g/x")
    try:
        before = pids(ns, ctl)
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 100 and near(b["ratio"], 1 / 3), 10)

        r = f.grlctl(ctl, "set", "g", "--limit", "50r/s")
        assert r["ok"] and r["buckets"][0]["limit_rps"] == 50 and r["buckets"][0]["limit_source"] == "override"
        # Every change is logged with who made it (no CURVE here: the peer's address).
        assert "bucket=g: admin set limit 50 r/s by 127.0.0.1" in ctl.log(), ctl.log()[-2000:]
        t0 = time.monotonic()
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 50, 2)
        assert time.monotonic() - t0 < 0.5, "an override is published at once"
        f.wait_nginx_bucket(ns, "g", lambda b: near(b["ratio"], 2 / 3), 5)

        # Shadow mode: nothing dropped any more, would-be drops counted.
        f.grlctl(ctl, "set", "g", "--mode", "shadow")
        f.wait_nginx_bucket(ns, "g", lambda b: b["mode"] == "shadow" and b["limit_rps"] == 50, 2)
        time.sleep(0.3)
        d0 = f.bucket_totals(ns, "g")
        time.sleep(2)
        d1 = f.bucket_totals(ns, "g")
        assert d1["dropped"] == d0["dropped"], (d0, d1)
        assert d1["shadow_dropped"] - d0["shadow_dropped"] > 100, (d0, d1)  # ~200 expected

        # Human-readable listing shows where each part comes from.
        rc, out, _ = f.grlctl(ctl, "buckets", json_out=False)
        assert rc == 0 and "override" in out and "shadow" in out, out

        # Clear: back to the file's limit and nginx.conf's mode.
        f.grlctl(ctl, "clear", "g")
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 100 and b["mode"] == "deny", 2)

        # An override with an expiry: in force for 2 s, then the file's limit again.
        f.grlctl(ctl, "set", "g", "--limit", "60r/s", "--for", "2s")
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 60, 2)
        t0 = time.monotonic()
        f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 100, 5)
        assert time.monotonic() - t0 > 1.0
        assert "bucket=g: override expired" in ctl.log()

        # A bucket no host reports (a typo): accepted, but not as if it were published.
        rc, out, err = f.grlctl(ctl, "set", "nope", "--limit", "5r/s", json_out=False)
        assert rc == 0 and "done: set nope" in out and "nothing published yet" in out, out
        assert 'no host reports bucket "nope": the override waits until one does' in err, err
        r = f.grlctl(ctl, "set", "nope", "--limit", "6r/s")
        assert r["ok"] and r["buckets"] == [] and 'no host reports bucket "nope"' in r["error"], r
        r = f.grlctl(ctl, "set", "g", "--limit", "100r/s")  # a reported bucket: no note
        assert r["ok"] and r["error"] == "" and r["buckets"], r
        f.grlctl(ctl, "clear", "g")
        f.grlctl(ctl, "clear", "nope")

        # Refusals are explained and change nothing.
        rc, out, err = f.grlctl(ctl, "clear", "g", check=False, json_out=False)
        assert rc == 1 and 'no override for bucket "g"' in err, (rc, out, err)
        assert pids(ns, ctl) == before
    finally:
        load.stop()


@pytest.mark.timing  # asserts how fast a change is published: runs alone
def test_emergency_bucket_reaches_every_nginx_without_reload(fleet, tmp_path):
    buckets = ["g procedure_prefix=/g rate=1000r/s"]
    limits, ctl, ns = two_hosts(fleet, tmp_path, "buckets: {}\n", buckets=buckets, extra=CALLER)
    before = pids(ns, ctl)
    bots = f.Load([(ns[0], 1), (ns[1], 1)], "100:14", "/g/x", headers=["X-Caller: bot-7"])
    humans = f.Load([(ns[0], 1), (ns[1], 1)], "50:14", "/g/x", headers=["X-Caller: alice"])
    crawl = None
    try:
        time.sleep(3 - (time.monotonic() - bots.started))
        t_add = time.monotonic() - bots.started
        t0 = time.monotonic()
        r = f.grlctl(ctl, "add", "bots", "--caller-prefix", "bot-", "--limit", "0", "--scope", "zone")
        assert r["ok"] and r["buckets"][0]["runtime"], r
        f.wait_nginx_bucket(ns, "bots", lambda b: b["runtime"] and b["ratio"] == 1.0
                            and b["ratio_state"] == "active", 2)
        took = time.monotonic() - t0
        print("run-time bucket on every nginx %.3f s after grlctl add returned" % took)
        assert took < 0.5, "reached every nginx in %.3f s, more than two report intervals" % took

        # A second one with a limit: its usage comes back in reports and it converges.
        crawl = f.Load([(ns[0], 3), (ns[1], 1)], "240:14", "/crawl/x", headers=["X-Caller: crawler"])
        f.grlctl(ctl, "add", "crawl", "--procedure-prefix", "/crawl", "--limit", "120r/s")
        f.wait_nginx_bucket(ns, "crawl", lambda b: b["runtime"], 2)

        time.sleep(8 - (time.monotonic() - bots.started))
        t_remove = time.monotonic() - bots.started
        f.grlctl(ctl, "remove", "bots")
        rc, out, _ = f.grlctl(ctl, "buckets", "bots", json_out=False)
        from_col = out.splitlines()[0].split().index("FROM")
        assert rc == 0 and [l.split()[from_col] for l in out.splitlines()
                            if l.startswith("bots ")] == ["removed"], out  # its instance in z1
        # nginx drops it when its ratio expires (ttl 2 s): the bots pass again. Meanwhile the
        # hosts still report it, and grlctl lists it as removed, never as a bucket of nginx.conf.
        sources = set()

        def expired_everywhere():
            for b in f.grlctl(ctl, "buckets", "bots")["buckets"]:
                sources.add((b["limit_source"], b["mode_source"]))
            return all("bots" not in [b["name"] for b in n.status()["buckets"]] for n in ns)

        f.h.wait_until(expired_everywhere, 5, interval=0.1,
                       what="the removed run-time bucket to expire on every nginx")
        assert sources == {("removed", "removed")}, sources
        rb, rh, rc = bots.result(), humans.result(), crawl.result()
        assert f.window(rb, 1, t_add)["ok"] > 95, "before: the bots pass"
        during = f.window(rb, t_add + 0.5, t_remove)
        assert during["ok"] == 0 and during["r429"] > 95, during
        assert f.window(rh, t_add + 0.5, t_remove)["r429"] == 0, "other callers are not touched"
        assert f.window(rb, t_remove + 3, 14)["ok"] > 95, "after expiry the bots pass again"
        cw = f.window(rc, 5, 14)
        print("run-time bucket crawl, limit 120 r/s, steady window:", cw)
        assert abs(cw["ok"] - 120) < 12, cw
        assert pids(ns, ctl) == before, "no reload, no restart"
    finally:
        for load in (bots, humans, crawl):
            if load:
                load.stop()


def test_hosts_disagreeing_on_a_definition(fleet):
    """Two hosts with different nginx.conf limits for one bucket (a rollout in progress): the
    policy picks the majority, on a tie the lowest limit; it is a metric, a log line and in
    grlctl show."""
    ctl = fleet.controller()
    col = fleet.collector("z1", [ctl])
    ns = [fleet.nginx("h1", "z1", col, ["g procedure_prefix=/g rate=100r/s"]),
          fleet.nginx("h2", "z1", col, ["g procedure_prefix=/g rate=50r/s"])]
    fleet.wait_hosts(ctl, 2)
    # A tie (1 host each): the lower limit is in force, on both hosts.
    f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 50 and b["ratio_state"] == "active", 5)
    m = ctl.metrics()
    assert f.metric(m, "grl_bucket_definitions", bucket="g", scope="global") == 2
    assert f.metric(m, "grl_bucket_disagreeing_hosts", bucket="g", scope="global") == 1
    assert "bucket=g: hosts disagree on the definition in global: 1 of 2 host(s)" in ctl.log()
    shown = f.grlctl(ctl, "show", "g")["buckets"][0]
    assert sorted((d["limit_rps"], d["hosts"]) for d in shown["definitions"]) == [(50, 1), (100, 1)]
    assert shown["host_names"] == ["h1", "h2"]
    # A third host with 100 r/s makes it a majority.
    fleet.nginx("h3", "z1", col, ["g procedure_prefix=/g rate=100r/s"])
    fleet.wait_hosts(ctl, 3)
    f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 100, 5)
    assert f.metric(ctl.metrics(), "grl_bucket_disagreeing_hosts", bucket="g", scope="global") == 1


def test_a_burst_of_admin_changes_does_not_tick_per_request(fleet):
    """40 overrides sent at once are all applied and answered, but the controller publishes
    them in a few admin ticks (at most one per eighth of an interval), not one per request."""
    import msgpack
    import zmq
    ctl = fleet.controller(interval="1s", ttl="3s")
    ctx = zmq.Context()
    try:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(ctl.admin)
        n = 40
        for i in range(n):
            body = msgpack.packb({"v": 1, "type": "admin_request", "seq": i + 1, "ts_ms": int(time.time() * 1000),
                                  "op": "set", "bucket": "b%d" % i, "limit_mrps": 1000 * (i + 1)})
            sock.send_multipart([body])
        oks = 0
        while oks < n and sock.poll(5000):
            reply = msgpack.unpackb(sock.recv_multipart()[-1], raw=False)
            assert reply["ok"], reply
            oks += 1
        assert oks == n
        m = ctl.metrics()
        assert f.metric(m, "grl_controller_admin_requests_total", kind="changes") == n
        # All 40 arrived within well under 1 s: most waited for the next admin tick.
        assert f.metric(m, "grl_controller_admin_ticks_deferred_total") >= 1
        assert ctl.log().count(": admin set limit ") == n
    finally:
        ctx.destroy(linger=0)


def test_overrides_survive_a_controller_restart_with_no_peer(fleet, tmp_path):
    """With --state-file, an override and a run-time bucket come back after the controller is
    killed (SIGKILL) and started again with no peer to learn them from; a state file that
    cannot be read is moved aside, the controller starts without it and says so."""
    state = tmp_path / "controller.state"
    limits, ctl, ns = two_hosts(fleet, tmp_path, "buckets: {}\n", ctl_extra=["--state-file", str(state)],
                                extra=CALLER)
    f.grlctl(ctl, "set", "g", "--limit", "50r/s", "--for", "10m")
    f.grlctl(ctl, "add", "bots", "--caller-prefix", "bot-", "--limit", "0", "--for", "10m")
    f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 50, 3)
    f.h.wait_until(lambda: state.exists(), 3, what="the state file")
    assert (state.stat().st_mode & 0o777) == 0o600
    ctl.kill()
    ctl.start()
    assert "2 of 2 overrides restored" in ctl.log(), ctl.log()[-2000:]
    def buckets():
        return {b["name"]: b for b in f.grlctl(ctl, "buckets")["buckets"]}
    f.h.wait_until(lambda: "g" in buckets(), 5, what="bucket g reported to the restarted controller")
    by_name = buckets()
    assert by_name["g"]["limit_rps"] == 50 and by_name["g"]["limit_source"] == "override", by_name["g"]
    assert "bots" in by_name, by_name.keys()
    f.wait_nginx_bucket(ns, "g", lambda b: b["limit_rps"] == 50 and b["ratio_state"] == "active", 5)
    # The run-time bucket's definition comes in its own instruction, which may follow g's.
    f.h.wait_until(lambda: ns[0].get("/g/x", {"X-Caller": "bot-7"}).status == 429, 3,
                   what="the run-time bucket (limit 0) dropping again after the restart")

    # A damaged state file: moved aside, the controller starts without overrides.
    ctl.stop()
    state.write_bytes(b"\x81\xa1v\x01garbage")
    ctl.start()
    assert "state file rejected, starting without overrides" in ctl.log()
    assert (tmp_path / "controller.state.bad").exists()
    assert f.metric(ctl.metrics(), "grl_controller_state_file_ok") == 0
    assert "g" not in {b["name"] for b in f.grlctl(ctl, "buckets")["buckets"]
                       if b["limit_source"] == "override"}
