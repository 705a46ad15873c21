"""grl-rlc's limits commands end to end: a bad rlc.yaml or quota file applies
nothing; a cycle over synthetic history proposes, `--apply` writes the limits
file that a real grl-controller hot-reloads (its digest, from `grlctl status`,
is the version's), a lowered limit soaks as a candidate beside the enforced one
and is promoted after its soak, `rollback` restores the first version in the
controller; on a live fleet, the enforced limit keeps dropping during the soak
while the controller exports the candidate's would-drops, which `grl-rlc
record` records and the next cycle judges; what-if replays the history.

The history comes from `grl-rlc synth` (the history half, branch rlc-history):
tests that need it are skipped, saying so, in a build without it.
"""

import json
import os
import re
import subprocess
import time

import pytest

import fleet as f
import grl_harness as h
from fleet import fleet  # noqa: F401  (pytest fixture)

RLC_BIN = os.path.join(f.BUILD_DIR, "rlc", "grl-rlc")
T0 = 1795996800  # 2026-11-30T00:00:00Z, a Monday: the end of the synthetic history
ORIGINAL = "buckets:\n  api:\n    limit: 500r/s\n  bots:\n    caller_prefix: bot-\n    limit: 10r/s\n"


def rlc(*args, check=True):
    p = subprocess.run([RLC_BIN] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    out, err = p.stdout.decode(), p.stderr.decode()
    if check:
        assert p.returncode == 0, "grl-rlc %s failed (%d):\n%s%s" % (" ".join(map(str, args)), p.returncode, out, err)
    return p.returncode, out, err


def setup_dir(tmp_path, rlc_yaml, quotas=None):
    (tmp_path / "limits.yaml").write_text(ORIGINAL)
    (tmp_path / "rlc.yaml").write_text(rlc_yaml)
    if quotas is not None:
        (tmp_path / "quotas.yaml").write_text(quotas)
    return str(tmp_path / "rlc.yaml")


def test_bad_rlc_yaml_applies_nothing(tmp_path):
    cfg = setup_dir(tmp_path, "store: rlc.db\nlimits_file: limits.yaml\nrules:\n"
                              "  - match: \"a*\"\n    policy: peak\n    buffer: much\n")
    rc, out, err = rlc("run", "--config", cfg, "--apply", check=False)
    assert rc == 1
    assert 'rlc.yaml:6: rule 1: field "buffer": invalid value "much"' in err, err
    assert (tmp_path / "limits.yaml").read_text() == ORIGINAL
    assert not (tmp_path / "rlc.db").exists()


def test_bad_quota_file_applies_nothing(tmp_path):
    cfg = setup_dir(tmp_path, "store: rlc.db\nlimits_file: limits.yaml\nquota_file: quotas.yaml\n"
                              "rules:\n  - match: \"partner-*\"\n    policy: fixed\n",
                    quotas="quotas:\n  partner-a: 100r/s\n  partner-b: lots\n")
    rc, out, err = rlc("run", "--config", cfg, "--apply", check=False)
    assert rc == 1
    assert 'quotas.yaml:3: bucket "partner-b": invalid rate "lots"' in err, err
    assert (tmp_path / "limits.yaml").read_text() == ORIGINAL
    assert not (tmp_path / "rlc.db").exists()


def versions(cfg):
    """{version: digest} from `grl-rlc versions` (--config rlc.yaml or --store FILE)."""
    _, out, _ = rlc("versions", "--store" if cfg.endswith(".db") else "--config", cfg)
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^(\d+)\s+\S+\s+([0-9a-f]{16})\s", out, re.M)}


def wait_digest(ctl, digest):
    def ok():
        st = f.grlctl(ctl, "status")
        return st["limits"]["ok"] and st["limits"]["digest"] == digest
    h.wait_until(ok, 10, what="controller to load limits digest %s" % digest)


def test_cycle_apply_promote_rollback_through_a_real_controller(tmp_path, fleet):  # noqa: F811
    cfg = setup_dir(tmp_path, "store: rlc.db\nlimits_file: limits.yaml\nwindow: 4w\n"
                              "rollout:\n  soak: 1h\n  threshold: 0.1%\n")
    store = str(tmp_path / "rlc.db")
    limits = str(tmp_path / "limits.yaml")
    ctl = fleet.controller(limits=limits, extra=["--limits-poll", "200ms"])
    # Five weeks of api at ~100 r/s (limit 500 r/s in force), search at ~300 r/s (200 r/s).
    rlc("synth", "--store", store, "--bucket", "api", "--base", 100, "--weeks", 5, "--end", T0,
        "--limit", 500, "--seed", 1)
    rlc("synth", "--store", store, "--bucket", "search", "--base", 300, "--weeks", 5, "--end", T0,
        "--limit", 200, "--seed", 2)

    # A dry run changes nothing.
    _, out, _ = rlc("run", "--config", cfg, "--at", T0)
    # api enforces 500 r/s: its lowered limit soaks as a candidate beside it, in deny.
    m = re.search(r"^api\s+global\s+500r/s deny\s+(\d+)r/s\s+-[\d.]+%\s+peak\s+"
                  r"shadow -> 500r/s deny, candidate (\d+)r/s", out, re.M)
    assert m, out
    candidate = int(m.group(1))
    assert candidate < 500 and m.group(2) == m.group(1)
    assert re.search(r"^search\s+global\s+200r/s deny\s+300r/s\s+\+50.0%\s+peak\s+raise -> 300r/s deny", out, re.M), out
    assert "step guard +50% of 200r/s" in out
    assert open(limits).read() == ORIGINAL

    # Applied: version 1 is the file as found, version 2 the cycle; the controller loads it.
    _, out, _ = rlc("run", "--config", cfg, "--at", T0, "--apply", "--author", "alice", "--reason", "first cycle")
    assert "applied: version 2" in out, out
    v = versions(cfg)
    assert sorted(v) == [1, 2]
    wait_digest(ctl, v[2])
    text = open(limits).read()
    assert "api:\n    limit: 500r/s\n    mode: deny\n    candidate: %dr/s" % candidate in text, text
    assert "caller_prefix: bot-" in text  # the run-time bucket is kept
    assert f.grlctl(ctl, "status")["limits"]["version"] == "2"

    # Two hours later: api enforced 500 r/s and its candidate would have dropped nothing:
    # promoted.
    rlc("synth", "--store", store, "--bucket", "api", "--base", 100, "--weeks", 1, "--end", T0 + 7200,
        "--limit", 500, "--candidate", candidate, "--seed", 1)
    _, out, _ = rlc("run", "--config", cfg, "--at", T0 + 7200, "--apply")
    assert re.search(r"^api\s.*promote -> %dr/s deny" % candidate, out, re.M), out
    v = versions(cfg)
    assert sorted(v) == [1, 2, 3]
    wait_digest(ctl, v[3])
    assert "api:\n    limit: %dr/s\n    mode: deny" % candidate in open(limits).read()
    _, out, _ = rlc("versions", "--config", cfg)
    assert re.search(r"rollout events: promote=1 raise=2 shadow=1$", out, re.M), out

    # Rollback to the file as found: version 4, same digest as version 1, in the controller.
    _, out, _ = rlc("rollback", 1, "--config", cfg, "--author", "bob")
    assert "rolled back to version 1: version 4" in out, out
    v = versions(cfg)
    assert v[4] == v[1]
    wait_digest(ctl, v[1])
    # Version 1's limits, labelled with the version they now are (grlctl status shows it).
    text = open(limits).read()
    assert 'version: "4"' in text and "api:\n    limit: 500r/s\n" in text, text
    assert f.grlctl(ctl, "status")["limits"]["version"] == "4"
    _, out, _ = rlc("versions", "--config", cfg, "--show", 1)
    assert out == ORIGINAL
    _, out, _ = rlc("diff", 2, 4, "--config", cfg)
    assert "api: mode deny -> (none), candidate %dr/s -> (none)" % candidate in out, out


def test_whatif_replays_history_against_proposed_limits(tmp_path):
    cfg = setup_dir(tmp_path, "store: rlc.db\nlimits_file: limits.yaml\n")
    store = str(tmp_path / "rlc.db")
    rlc("synth", "--store", store, "--bucket", "api", "--base", 100, "--weeks", 3, "--end", T0, "--seed", 1)
    proposed = tmp_path / "proposed.yaml"
    proposed.write_text("buckets:\n  api:\n    limit: 100r/s\n")
    html = tmp_path / "whatif.html"
    _, out, _ = rlc("whatif", "--config", cfg, "--limits", proposed, "--since", "14d", "--at", T0,
                    "--json", "--html", html)
    w = json.loads(out)
    (api,) = [b for b in w["buckets"] if b["bucket"] == "api"]
    assert api["old_limit"] == "500r/s" and api["new_limit"] == "100r/s"
    # Around a mean of 100 r/s with daily and weekly swings: a limit at the mean drops a
    # real share and is over for many minutes; the old limit of 500 r/s drops nothing.
    assert api["old"]["drop_fraction"] == 0
    assert 0.02 < api["new"]["drop_fraction"] < 0.5
    assert api["new"]["minutes_over"] > 60
    assert api["new"]["worst_overshoot"] > 0.1
    assert w["since"] == "2026-11-16T00:00:00Z" and w["until"] == "2026-11-30T00:00:00Z"
    page = html.read_text()
    assert "<svg" in page and "<polyline" in page and "<script" not in page

    # A limit of 0 drops everything.
    proposed.write_text("buckets:\n  api:\n    limit: 0\n")
    _, out, _ = rlc("whatif", "--config", cfg, "--limits", proposed, "--since", "14d", "--at", T0, "--json")
    (api,) = [b for b in json.loads(out)["buckets"] if b["bucket"] == "api"]
    assert api["new"]["drop_fraction"] == 1


def near(a, b, tol):
    return abs(a - b) <= tol * b


def test_a_lowered_limit_soaks_beside_the_enforced_one_on_a_live_fleet(tmp_path, fleet):  # noqa: F811
    """api enforces 100 r/s (limits file) and is offered 120 r/s. grl-rlc lowers it: the
    candidate soaks beside 100 r/s, nginx keeps dropping at 100 r/s, the controller exports
    the candidate's would-drops, `grl-rlc record` records them, and the next cycle holds the
    candidate (it would drop far over the threshold). With the load under the candidate, the
    cycle after promotes it: nginx enforces it and the candidate leaves the file."""
    original = "buckets:\n  api:\n    limit: 100r/s\n"
    cfg = setup_dir(tmp_path, "store: rlc.db\nlimits_file: limits.yaml\nwindow: 4w\n"
                              "rollout:\n  soak: 6s\n  threshold: 1%\n")
    (tmp_path / "limits.yaml").write_text(original)
    store = str(tmp_path / "rlc.db")
    limits = str(tmp_path / "limits.yaml")
    ctl = fleet.controller(limits=limits, extra=["--limits-poll", "200ms"])
    col = fleet.collector("z1", [ctl])
    buckets = ["api procedure_prefix=/api rate=100r/s"]
    ns = [fleet.nginx("h1", "z1", col, buckets), fleet.nginx("h2", "z1", col, buckets)]
    fleet.wait_hosts(ctl, 2)
    # Five weeks of api at ~20 r/s under its 100 r/s, ending now: the policy lowers it.
    rlc("synth", "--store", store, "--bucket", "api", "--base", 20, "--weeks", 5, "--limit", 100,
        "--seed", 1)
    rec = subprocess.Popen([RLC_BIN, "record", "--store", store, "--interval", "2s", "--poll", "250ms",
                            "--controller", ctl.endpoints["metrics"]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    load = f.Load([(ns[0], 1), (ns[1], 1)], "120:600", "/api/x")
    try:
        f.wait_nginx_bucket(ns, "api", lambda b: b["limit_rps"] == 100 and near(b["ratio"], 1 / 6, 0.3), 10)

        _, out, _ = rlc("run", "--config", cfg, "--apply")
        m = re.search(r"^api\s+global\s+100r/s deny\s+(\d+)r/s\s.*shadow -> 100r/s deny, candidate (\d+)r/s",
                      out, re.M)
        assert m and m.group(1) == m.group(2), out
        candidate = int(m.group(1))
        assert candidate < 100
        assert "lowered from 100r/s: candidate beside the enforced limit" in out, out
        wait_digest(ctl, versions(cfg)[2])

        # The soak: the controller evaluates the candidate on the live load...
        def candidate_gauges():
            ms = ctl.metrics()
            lim = f.metric(ms, "grl_bucket_candidate_limit_rps", bucket="api", scope="global", zone="")
            wd = f.metric(ms, "grl_bucket_candidate_would_drop_rps", bucket="api", scope="global", zone="")
            return lim, wd
        f.h.wait_until(lambda: candidate_gauges()[0] == candidate, 5, what="the candidate exported")
        f.h.wait_until(lambda: near(candidate_gauges()[1], 120 - candidate, 0.2), 5,
                       what="would-drops near %d r/s" % (120 - candidate))
        show = f.grlctl(ctl, "show", "api")["buckets"][0]
        assert show["candidate_limit_rps"] == candidate, show
        assert show["limit_rps"] == 100 and show["mode"] == "deny", show
        # The operator's table shows the candidate beside the enforced limit.
        _, table, _ = f.grlctl(ctl, "buckets", json_out=False)
        header, row = table.splitlines()[0], next(x for x in table.splitlines() if x.startswith("api "))
        assert header.split()[-1] == "CANDIDATE", table
        assert re.search(r"\b%d\.0 \(would drop [\d.]+\)\s*$" % candidate, row), table
        # ...while nginx keeps enforcing the old limit, in deny, dropping what is over it.
        for _ in range(3):
            for n in ns:
                b = n.bucket("api")
                assert b["limit_rps"] == 100 and b["mode"] == "deny", b
                assert near(b["ratio"], 1 / 6, 0.3), b
            time.sleep(1)

        # The soak is over: the recorded would-drops are far over 1%: held, 100 r/s stays.
        time.sleep(5)
        _, out, _ = rlc("run", "--config", cfg, "--apply")
        assert re.search(r"^api\s.*hold -> 100r/s deny, candidate %dr/s" % candidate, out, re.M), out
        m = re.search(r"rollout: candidate would-drops ([\d.]+)% over (\d+) samples, threshold 1.000%", out)
        assert m, out
        assert near(float(m.group(1)), 100.0 * (120 - candidate) / 120, 0.3), out
        assert "api:\n    limit: 100r/s\n    mode: deny\n    candidate: %dr/s" % candidate in open(limits).read()
        for n in ns:
            assert n.bucket("api")["limit_rps"] == 100

        # Traffic falls under the candidate: after another soak without would-drops, promoted.
        load.stop()
        load = f.Load([(ns[0], 1), (ns[1], 1)], "%d:600" % (candidate // 3), "/api/x")
        f.h.wait_until(lambda: candidate_gauges()[1] == 0, 10, what="no would-drops")
        time.sleep(10)
        _, out, _ = rlc("run", "--config", cfg, "--apply")
        assert re.search(r"^api\s.*promote -> %dr/s deny" % candidate, out, re.M), out
        text = open(limits).read()
        assert "api:\n    limit: %dr/s\n    mode: deny\n" % candidate in text and "candidate" not in text, text
        f.wait_nginx_bucket(ns, "api", lambda b: b["limit_rps"] == candidate and b["mode"] == "deny", 10)
        f.h.wait_until(lambda: candidate_gauges()[0] is None, 5, what="the candidate gone from /metrics")
        _, out, _ = rlc("versions", "--config", cfg)
        assert re.search(r"rollout events: hold=1 promote=1 shadow=1$", out, re.M), out
    finally:
        load.stop()
        rec.send_signal(15)
        rec.wait(10)


def test_serve_cycles_at_start_and_on_change_and_keeps_the_last_good_config(tmp_path):
    cfg = setup_dir(tmp_path, "store: rlc.db\nlimits_file: limits.yaml\nwindow: 4w\n")
    store = str(tmp_path / "rlc.db")
    limits = str(tmp_path / "limits.yaml")
    rlc("synth", "--store", store, "--bucket", "api", "--base", 100, "--weeks", 5, "--limit", 500, "--seed", 1)
    rlc("synth", "--store", store, "--bucket", "search", "--base", 300, "--weeks", 5, "--limit", 200, "--seed", 2)
    log_path = str(tmp_path / "serve.log")
    log = open(log_path, "wb")
    proc = subprocess.Popen([RLC_BIN, "serve", "--config", cfg, "--every", "1h", "--author", "serve",
                             "--metrics", "127.0.0.1:0"], stdout=log, stderr=log)
    log.close()

    def log_text():
        with open(log_path, errors="replace") as fh:
            return fh.read()

    try:
        h.wait_until(lambda: "cycle (start)" in log_text(), 10, what="the first cycle")
        text = log_text()
        assert re.search(r"info bucket=api: shadow \d+r/s: lowered from 500r/s: candidate beside the "
                         r"enforced limit", text), text
        assert re.search(r"info bucket=search: raise 300r/s: raise from 200r/s goes straight out", text), text
        assert "version 2 written to" in text, text
        assert sorted(versions(cfg)) == [1, 2]
        assert re.search(r"api:\n    limit: 500r/s\n    mode: deny\n    candidate: \d+r/s",
                         open(limits).read())
        # --metrics: the cycle and its rollout events (the store's counts), the version.
        h.wait_until(lambda: "metrics on http://" in log_text(), 5, what="the metrics line")
        url = re.search(r"metrics on (http://\S+/metrics)", log_text()).group(1)
        m = f.metrics(url)
        assert f.metric(m, "grl_rlc_cycles_total", result="ok") == 1, m
        assert f.metric(m, "grl_rlc_cycles_total", result="failed") == 0
        assert f.metric(m, "grl_rlc_rollout_events_total", action="shadow") == 1
        assert f.metric(m, "grl_rlc_rollout_events_total", action="raise") == 1
        assert f.metric(m, "grl_rlc_rollout_events_total", action="promote") == 0
        assert f.metric(m, "grl_rlc_limits_version") == 2
        assert abs(f.metric(m, "grl_rlc_last_cycle_timestamp_seconds") - time.time()) < 30
        assert f.metric(m, "grl_rlc_config_rejected_total") == 0
        assert f.metric(m, "grl_build_info", component="rlc") == 1

        # rlc.yaml changes: a cycle at once (search is raised again, within the step guard).
        with open(cfg, "a") as fh:
            fh.write("step_guard: 20%\n")
        h.wait_until(lambda: "cycle (configuration changed)" in log_text(), 10, what="a cycle on change")
        h.wait_until(lambda: sorted(versions(cfg)) == [1, 2, 3], 5, what="version 3")
        assert re.search(r"info bucket=search: raise 360r/s: raise from 300r/s", log_text()), log_text()

        # A bad rlc.yaml is refused, the last good one stays, nothing is applied.
        before = open(limits).read()
        with open(cfg, "a") as fh:
            fh.write("rollout:\n  soak: forever\n")
        h.wait_until(lambda: "configuration rejected, the last good one stays" in log_text(), 10,
                     what="the bad rlc.yaml refused")
        assert 'field "rollout.soak": invalid duration "forever"' in log_text()
        m = f.metrics(url)
        assert f.metric(m, "grl_rlc_config_rejected_total") == 1
        assert f.metric(m, "grl_rlc_cycles_total", result="ok") == 2
        assert f.metric(m, "grl_rlc_limits_version") == 3
        assert open(limits).read() == before
        assert sorted(versions(store)) == [1, 2, 3]
    finally:
        proc.send_signal(15)
        rc = proc.wait(10)
    assert rc == 0
    assert "info: stopped" in log_text()
