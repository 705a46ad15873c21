"""The $grl_* log variables for every decision, and the status page as JSON
and as Prometheus text."""

import re
import socket

import grl_harness as h
from grl_harness import bucket_entry, count

BUCKETS = ["deny_all procedure=/drop rate=1r/s",
           "pass_b procedure=/pass rate=1r/s scope=region",
           "shadow_b procedure=/shadow rate=1r/s mode=shadow scope=zone",
           "half procedure=/half rate=20r/s"]


def parse_prometheus(text):
    """{(name, frozenset(labels)): float} plus the set of families with HELP and TYPE."""
    samples, helped, typed = {}, set(), {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            typed[name] = kind
        elif line:
            m = re.fullmatch(r'([a-z_]+)(?:\{(.*)\})? (\S+)', line)
            assert m, "bad Prometheus line %r" % line
            labels = frozenset(re.findall(r'([a-z_]+)="([^"]*)"', m.group(2) or ""))
            samples[(m.group(1), labels)] = float(m.group(3))
    return samples, helped, typed


def lab(**kw):
    return frozenset(kw.items())


def test_log_variables_and_status_outputs(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(BUCKETS, publisher=publisher))
    publisher.set([bucket_entry("deny_all", 1000000, limit_mrps=2500),
                   bucket_entry("pass_b", 0),
                   bucket_entry("shadow_b", 1000000, mode="shadow"),
                   bucket_entry("half", 500000, limit_mrps=20000)])
    for name, ratio in (("deny_all", 1.0), ("pass_b", 0.0), ("shadow_b", 1.0), ("half", 0.5)):
        h.wait_ratio(n, name, ratio)

    for path in ("/drop", "/pass", "/shadow", "/none"):
        rs = n.blast(path, 10)
        assert all(r.status == (429 if path == "/drop" else 200) for r in rs), (path, rs[:2])
    half = n.blast("/half", 400)
    half_dropped = count(half, lambda r: r.status == 429)
    h.assert_binomial(half_dropped, 400, 0.5, "dropped at ratio 0.5", must_exclude=(0.0, 1.0))

    # -- access log ---------------------------------------------------------
    log = [e for e in n.access_log() if e["uri"] != "/grl"]
    by_uri = {}
    for e in log:
        by_uri.setdefault(e["uri"], []).append(e)

    def fields(e):
        return e["status"], e["decision"], e["bucket"], e["buckets"], e["ratio"]

    expect = {"/drop": ("429", "drop", "deny_all", "deny_all", "1.000000"),
              "/pass": ("200", "pass", "-", "pass_b", "0.000000"),
              "/shadow": ("200", "shadow_drop", "shadow_b", "shadow_b", "1.000000"),
              "/none": ("200", "none", "-", "-", "-")}
    for uri, want in expect.items():
        got = {fields(e) for e in by_uri[uri]}
        assert got == {want}, "%s logged %s, expected %s" % (uri, got, want)
        assert len(by_uri[uri]) == 10
    got = {fields(e) for e in by_uri["/half"]}
    assert got == {("429", "drop", "half", "half", "0.500000"),
                   ("200", "pass", "-", "half", "0.500000")}, got
    assert count(by_uri["/half"], lambda e: e["decision"] == "drop") == half_dropped

    # -- JSON -----------------------------------------------------------------
    r = n.get("/grl")
    assert r.headers["content-type"] == "application/json"
    st = n.status()
    assert st["version"] == 1 and st["shared_zone"] == "grl" and re.fullmatch(r"[0-9a-f]{16}", st["epoch"])
    cp = st["control_plane"]
    assert cp["state"] == "active" and cp["reporting"] is False and cp["instructions_received"] > 0, cp
    assert 0 <= cp["last_instruction_age_ms"] < 1000, cp
    want = {  # name: (scope, mode, offered, admitted, dropped, shadow_dropped, ratio, limit_rps)
        "deny_all": ("global", "deny", 10, 0, 10, 0, 1.0, 2.5),
        "pass_b": ("region", "deny", 10, 10, 0, 0, 0.0, 1.0),
        "shadow_b": ("zone", "shadow", 10, 10, 0, 10, 1.0, 1.0),
        "half": ("global", "deny", 400, 400 - half_dropped, half_dropped, 0, 0.5, 20.0),
    }
    got = {b["name"]: (b["scope"], b["mode"], b["offered"], b["admitted"], b["dropped"],
                       b["shadow_dropped"], b["ratio"], b["limit_rps"]) for b in st["buckets"]}
    assert got == want
    assert all(b["ratio_state"] == "active" and 0 <= b["ratio_age_ms"] < 1000 for b in st["buckets"])

    # -- Prometheus -----------------------------------------------------------
    r = n.get("/grl?format=prometheus")
    assert r.status == 200 and r.headers["content-type"] == "text/plain; version=0.0.4"
    samples, helped, typed = parse_prometheus(r.body.decode())
    for name, (scope, mode, offered, admitted, dropped, shadow, ratio, limit) in want.items():
        labels = lab(bucket=name, scope=scope, mode=mode)
        assert samples[("grl_bucket_offered_total", labels)] == offered, name
        assert samples[("grl_bucket_admitted_total", labels)] == admitted, name
        assert samples[("grl_bucket_dropped_total", labels)] == dropped, name
        assert samples[("grl_bucket_shadow_dropped_total", labels)] == shadow, name
        assert samples[("grl_bucket_ratio", lab(bucket=name))] == ratio, name
        assert samples[("grl_bucket_limit_rps", lab(bucket=name))] == limit, name
        assert samples[("grl_bucket_ratio_active", lab(bucket=name))] == 1, name
        assert 0 <= samples[("grl_bucket_ratio_age_seconds", lab(bucket=name))] < 1, name
    assert samples[("grl_control_plane_state", lab(state="active"))] == 1
    assert samples[("grl_control_plane_state", lab(state="waiting"))] == 0
    assert samples[("grl_control_plane_state", lab(state="expired"))] == 0
    age = samples[("grl_last_instruction_age_seconds", lab())]
    assert 0 <= age < 1, "grl_last_instruction_age_seconds = %s" % age
    assert samples[("grl_instructions_received_total", lab())] > 0
    assert samples[("grl_instructions_malformed_total", lab())] == 0
    assert samples[("grl_reports_sent_total", lab())] == 0
    assert samples[("grl_missing_caller_total", lab())] == 0
    families = {name for name, _ in samples}
    assert families <= helped and families <= set(typed), "every family needs HELP and TYPE"
    assert all(typed[f] == ("counter" if f.endswith("_total") else "gauge") for f in families), typed


def test_status_page_methods(nginx_factory):
    n = nginx_factory(h.grl_conf(["a rate=1r/s"], host=None))
    with socket.create_connection(("127.0.0.1", n.port), timeout=5) as s:
        s.sendall(b"POST /grl HTTP/1.0\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
        assert s.recv(100).startswith(b"HTTP/1.1 405")
    with socket.create_connection(("127.0.0.1", n.port), timeout=5) as s:
        s.sendall(b"HEAD /grl HTTP/1.0\r\nHost: x\r\n\r\n")
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n"), head
    st = n.status()
    assert st["control_plane"]["state"] == "waiting" and st["control_plane"]["reporting"] is False


def test_status_without_zone_is_404(nginx_factory):
    n = nginx_factory("")
    assert n.get("/grl").status == 404
    assert 'grl_status: no "grl_zone" configured' in n.error_log()
    assert n.get("/x").status == 200
