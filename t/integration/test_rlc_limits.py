"""grl-rlc's limits commands end to end: a bad rlc.yaml or quota file applies
nothing; a cycle over synthetic history proposes, `--apply` writes the limits
file that a real grl-controller hot-reloads (its digest, from `grlctl status`,
is the version's), a shadow candidate is promoted after its soak, `rollback`
restores the first version in the controller; what-if replays the history.

The history comes from `grl-rlc synth` (the history half, branch rlc-history):
tests that need it are skipped, saying so, in a build without it.
"""

import json
import os
import re
import subprocess

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


def has_history_commands():
    if not os.path.exists(RLC_BIN):
        return False
    # `grl-rlc synth --help` exits 0 even without synth (CLI11 prints the app's help).
    p = subprocess.run([RLC_BIN, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return re.search(r"^\s+synth\s", p.stdout.decode(), re.M) is not None


needs_history = pytest.mark.skipif(not has_history_commands(),
                                   reason="grl-rlc built without the history commands (synth)")


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


@needs_history
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
    m = re.search(r"^api\s+global\s+500r/s deny\s+(\d+)r/s\s+-[\d.]+%\s+peak\s+shadow -> (\d+)r/s shadow", out, re.M)
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
    assert "api:\n    limit: %dr/s\n    mode: shadow" % candidate in text, text
    assert "caller_prefix: bot-" in text  # the run-time bucket is kept
    assert f.grlctl(ctl, "status")["limits"]["version"] == "2"

    # Two hours later: api ran in shadow at the candidate without would-drops: promoted.
    rlc("synth", "--store", store, "--bucket", "api", "--base", 100, "--weeks", 1, "--end", T0 + 7200,
        "--limit", candidate, "--mode", "shadow", "--seed", 1)
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
    assert "api: limit %dr/s -> 500r/s, mode shadow -> (none)" % candidate in out, out


@needs_history
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


@needs_history
def test_serve_cycles_at_start_and_on_change_and_keeps_the_last_good_config(tmp_path):
    cfg = setup_dir(tmp_path, "store: rlc.db\nlimits_file: limits.yaml\nwindow: 4w\n")
    store = str(tmp_path / "rlc.db")
    limits = str(tmp_path / "limits.yaml")
    rlc("synth", "--store", store, "--bucket", "api", "--base", 100, "--weeks", 5, "--limit", 500, "--seed", 1)
    rlc("synth", "--store", store, "--bucket", "search", "--base", 300, "--weeks", 5, "--limit", 200, "--seed", 2)
    log_path = str(tmp_path / "serve.log")
    log = open(log_path, "wb")
    proc = subprocess.Popen([RLC_BIN, "serve", "--config", cfg, "--every", "1h", "--author", "serve"],
                            stdout=log, stderr=log)
    log.close()

    def log_text():
        with open(log_path, errors="replace") as fh:
            return fh.read()

    try:
        h.wait_until(lambda: "cycle (start)" in log_text(), 10, what="the first cycle")
        text = log_text()
        assert re.search(r"info bucket=api: shadow \d+r/s: lowered from 500r/s: shadow first", text), text
        assert re.search(r"info bucket=search: raise 300r/s: raise from 200r/s goes straight out", text), text
        assert "version 2 written to" in text, text
        assert sorted(versions(cfg)) == [1, 2]
        assert "mode: shadow" in open(limits).read()

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
        assert open(limits).read() == before
        assert sorted(versions(store)) == [1, 2, 3]
    finally:
        proc.send_signal(15)
        rc = proc.wait(10)
    assert rc == 0
    assert "info: stopped" in log_text()
