"""The command lines of grl-collector, grl-controller and grlctl (docs/control-plane.md,
"Command lines"): a bad value exits 2 with a message naming the option and the value, before
anything is bound; --help exits 0; and --batch reaches the collector: one collector taking
reports one by one (--batch 0) and one taking them in 50 ms batches both rate their zone, and a
global bucket holds its limit over the two zones."""

import os
import subprocess

import pytest

import fleet as f
from fleet import fleet  # noqa: F401  (pytest fixture)

LIMIT = 100  # r/s
BUCKETS = ["g procedure_prefix=/g rate=%dr/s" % LIMIT]
EP = "tcp://127.0.0.1:1"
COLLECTOR = ["--zone", "z1", "--region", "r1", "--controller-usage", EP, "--controller-publish", EP]
CONTROLLER = ["--region", "r1", "--name", "ctl"]


def run(binary, args):
    p = subprocess.run([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


@pytest.mark.parametrize("binary,args,message", [
    (f.COLLECTOR_BIN, COLLECTOR + ["--interval", "5x"], '--interval: invalid duration "5x"'),
    (f.COLLECTOR_BIN, COLLECTOR + ["--batch", "2s"], '--batch: "2s" is out of range 0..1s'),
    (f.COLLECTOR_BIN, COLLECTOR + ["--stale-intervals", "-1"], '--stale-intervals: invalid number "-1"'),
    (f.COLLECTOR_BIN, COLLECTOR + ["--bogus"], "--bogus"),
    (f.COLLECTOR_BIN, ["--zone", "z1", "--region", "r1", "--controller-usage", EP], "--controller-publish is required"),
    (f.COLLECTOR_BIN, COLLECTOR + ["--usage-version", "3"], '--usage-version: "3" is out of range 1..2'),
    (f.CONTROLLER_BIN, CONTROLLER + ["--usage-version", "0"], '--usage-version: "0" is out of range 1..2'),
    (f.CONTROLLER_BIN, CONTROLLER + ["--window", "0"], '--window: "0" is out of range 1..100'),
    (f.CONTROLLER_BIN, CONTROLLER + ["--interval", "1s", "--ttl", "100ms"], "--ttl must be at least --interval"),
    (f.CONTROLLER_BIN, CONTROLLER + ["--curve-keypair", "/nonexistent/ctl.key"], "--curve-keypair: /nonexistent/ctl.key"),
    (f.GRLCTL_BIN, ["--controller", EP, "set", "g", "--limit", "5x"], '--limit: invalid rate "5x"'),
    (f.GRLCTL_BIN, ["--controller", EP, "frobnicate"], 'unknown command "frobnicate"'),
    (f.COLLECTOR_BIN, COLLECTOR + ["--report-bind", "tcp://0.0.0.0:1"],
     "--report-bind tcp://0.0.0.0:1 is reachable from other machines without CURVE"),
    (f.CONTROLLER_BIN, CONTROLLER + ["--admin-bind", "tcp://*:1"],
     "--admin-bind tcp://*:1 is reachable from other machines without CURVE"),
])
def test_bad_option_exits_2_naming_it(binary, args, message):
    rc, out, err = run(binary, args)
    assert rc == 2, (rc, out, err)
    assert message in err, err
    assert out == "", out


@pytest.mark.parametrize("binary,args", [
    (f.COLLECTOR_BIN, ["--help"]), (f.CONTROLLER_BIN, ["--help"]), (f.GRLCTL_BIN, ["--help"]),
    (f.GRLCTL_BIN, ["add", "--help"])])
def test_help_exits_0(binary, args):
    rc, out, err = run(binary, args)
    assert rc == 0, (rc, out, err)
    assert out.startswith("usage: "), out
    assert err == "", err


def test_batch_zero_and_50ms_collectors_both_rate_their_zone(fleet):
    ctl = fleet.controller()
    one_by_one = fleet.collector("z1", [ctl], extra=["--batch", "0"])
    batched = fleet.collector("z2", [ctl], extra=["--batch", "50ms"])
    # The value reached the collector (its start line says how it takes reports).
    assert "reports one by one" in one_by_one.log(), one_by_one.log()
    assert "reports in batches every 50 ms" in batched.log(), batched.log()
    n1 = fleet.nginx("h1", "z1", one_by_one, BUCKETS)
    n2 = fleet.nginx("h2", "z2", batched, BUCKETS)
    fleet.wait_hosts(ctl, 2)

    load = f.Load([(n1, 1), (n2, 1)], "%d:14" % (2 * LIMIT), "/g/x")
    w = f.window(load.result(), 6, 14)
    print("global bucket over a --batch 0 zone and a --batch 50ms zone:", w)
    assert w["errors"] == 0 and w["other"] == 0, w
    assert abs(w["ok"] - LIMIT) <= 0.1 * LIMIT, "admitted %.1f r/s, limit %d r/s: %r" % (w["ok"], LIMIT, w)
    for col in (one_by_one, batched):
        accepted = f.metric(col.metrics(), "grl_collector_reports_total", result="accepted")
        assert accepted and accepted > 10, (col.name, accepted)
    assert f.metric(ctl.metrics(), "grl_bucket_hosts", bucket="g", scope="global") == 2


DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "control-plane.md")


@pytest.mark.parametrize("heading,binary", [
    ("### grl-collector", f.COLLECTOR_BIN), ("### grl-controller", f.CONTROLLER_BIN),
    ("### grlctl", f.GRLCTL_BIN)])
def test_docs_show_the_real_help(heading, binary):
    """docs/control-plane.md "Command lines" shows each program's --help as it is."""
    with open(DOC) as fh:
        text = fh.read()
    section = text[text.index(heading + "\n"):]
    block = section[section.index("```\n") + 4:]
    block = block[:block.index("```\n")]
    rc, out, _ = run(binary, ["--help"])
    assert rc == 0
    assert block.rstrip("\n") == out.rstrip("\n"), "update %s in docs/control-plane.md" % heading


def test_insecure_binds_beyond_loopback_and_warns(fleet):
    """--insecure lets a daemon without CURVE bind every interface, and it says so at start;
    on loopback it still warns that CURVE is off."""
    open_ctl = f.Controller(extra=["--insecure"])
    i = open_ctl.args.index("--usage-bind") + 1
    open_ctl.args[i] = open_ctl.args[i].replace("tcp://127.0.0.1:", "tcp://0.0.0.0:")
    fleet.add(open_ctl)
    assert "tcp://0.0.0.0:" in open_ctl.endpoints["usage"], open_ctl.endpoints
    assert "CURVE is off (no --curve-keypair)" in open_ctl.log()
    assert "--insecure: reachable beyond loopback" in open_ctl.log()
    col = fleet.collector("z1", [open_ctl])
    assert "CURVE is off for nginx (no --curve-clients)" in col.log()
    assert "(bound to loopback only)" in col.log()
