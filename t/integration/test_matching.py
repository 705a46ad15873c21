"""Which buckets a request belongs to: caller and procedure, exact / prefix /
regex, several buckets at once, and requests without a caller."""

import pytest

import grl_harness as h
from grl_harness import bucket_entry

BUCKETS = [
    "c_exact caller=alice rate=10r/s",
    "c_prefix caller_prefix=svc- rate=10r/s",
    "c_regex caller_regex=^team[0-9]+$ rate=10r/s",
    "p_exact procedure=/api/users rate=10r/s",
    "p_prefix procedure_prefix=/api/ rate=10r/s",
    "p_regex procedure_regex=^/rx/[0-9]+$ rate=10r/s",
    "both caller=alice procedure_prefix=/api/ rate=10r/s",
]

# (caller or None for no X-Caller header, path, expected $grl_buckets)
CASES = [
    ("alice", "/other", "c_exact"),
    ("alice2", "/other", "-"),
    ("Alice", "/other", "-"),
    ("svc-billing", "/other", "c_prefix"),
    ("svc", "/other", "-"),
    ("team42", "/other", "c_regex"),
    ("team42x", "/other", "-"),
    ("xteam4", "/other", "-"),
    (None, "/api/users", "p_exact,p_prefix"),
    (None, "/api/users/7", "p_prefix"),
    (None, "/api", "-"),
    ("alice", "/api/users", "c_exact,p_exact,p_prefix,both"),
    ("svc-x", "/api/orders", "c_prefix,p_prefix"),
    (None, "/rx/123", "p_regex"),
    (None, "/rx/12a", "-"),
    (None, "/rx/123/x", "-"),
    ("", "/rx/9", "p_regex"),  # an empty caller is a missing caller
]


def run_cases(n, cases):
    for i, (caller, path, _) in enumerate(cases):
        hdr = {} if caller is None else {"X-Caller": caller}
        r = n.get("%s?rid=%d" % (path, i), hdr)
        assert r.status == 200, r
    log = {e["rid"]: e for e in n.access_log() if e["rid"] != "-"}
    for i, (caller, path, want) in enumerate(cases):
        e = log[str(i)]
        assert e["buckets"] == want, "caller=%r path=%s matched %s, expected %s" % (
            caller, path, e["buckets"], want)
        assert e["decision"] == ("none" if want == "-" else "pass"), e


def expected_offered(cases, names):
    return {name: sum(1 for _, _, want in cases if name in want.split(",")) for name in names}


def test_caller_and_procedure_matching(nginx_factory):
    n = nginx_factory(h.grl_conf(BUCKETS, host=None, extra="grl_caller $http_x_caller;\n"
                                 "grl_missing_caller skip;"))
    run_cases(n, CASES)
    st = n.status()
    names = [b.split()[0] for b in BUCKETS]
    got = {b["name"]: b["offered"] for b in st["buckets"]}
    assert got == expected_offered(CASES, names), "a request matching several buckets counts in each"
    missing = sum(1 for c, _, _ in CASES if not c)
    assert st["missing_caller"] == missing, "requests without (or with an empty) caller are counted"


def test_missing_caller_value(nginx_factory):
    n = nginx_factory(h.grl_conf(["anon caller=anonymous rate=10r/s",
                                  "named caller_prefix=a rate=10r/s",
                                  "everything procedure_prefix=/ rate=100r/s"],
                                 host=None, extra="grl_caller $http_x_caller;\n"
                                 "grl_missing_caller value=anonymous;"))
    cases = [(None, "/x", "anon,named,everything"),  # "anonymous" starts with "a"
             ("anonymous", "/x", "anon,named,everything"),
             ("bob", "/x", "everything"),
             ("", "/x", "anon,named,everything")]
    run_cases(n, cases)
    st = n.status()
    assert st["missing_caller"] == 2, "only the requests without a caller count as missing"
    assert {b["name"]: b["offered"] for b in st["buckets"]} == {"anon": 3, "named": 3, "everything": 4}


def test_missing_caller_defaults_to_skip(nginx_factory):
    n = nginx_factory(h.grl_conf(["c caller_prefix=a rate=10r/s", "p procedure=/p rate=10r/s"],
                                 host=None, extra="grl_caller $http_x_caller;"))
    run_cases(n, [(None, "/p", "p"), ("al", "/p", "c,p"), (None, "/q", "-")])
    assert n.status()["missing_caller"] == 2


def test_complex_procedure_and_caller(nginx_factory):
    n = nginx_factory(h.grl_conf(["get_x procedure=GET:/x rate=10r/s",
                                  "t1 caller=acme/alice rate=10r/s"],
                                 host=None, extra="grl_procedure $request_method:$uri;\n"
                                 "grl_caller $http_x_tenant/$http_x_caller;"))
    cases = {"1": ({}, "/x", "get_x"), "2": ({}, "/y", "-"),
             "3": ({"X-Tenant": "acme", "X-Caller": "alice"}, "/y", "t1"),
             "4": ({"X-Tenant": "acme"}, "/y", "-")}
    for rid, (hdr, path, _) in cases.items():
        n.get("%s?rid=%s" % (path, rid), hdr)
    log = {e["rid"]: e["buckets"] for e in n.access_log() if e["rid"] != "-"}
    assert log == {rid: want for rid, (_, _, want) in cases.items()}, log


@pytest.mark.parametrize("http_level,location_level,limited", [
    ("", "grl on;", True),
    ("", "grl off;", False),
    ("", "", False),  # off by default
    ("grl on;", "", True),  # inherited
    ("grl on;", "grl off;", False),
])
def test_grl_switch(nginx_factory, publisher, http_level, location_level, limited):
    n = nginx_factory(h.grl_conf(["all rate=1r/s"], publisher=publisher, extra=http_level), start=False)
    n.location_grl = location_level
    n.write_conf()
    n.start()
    publisher.set([h.bucket_entry("all", 1000000)])
    h.wait_ratio(n, "all", 1.0)
    rs = n.blast("/", 20)
    assert all(r.status == (429 if limited else 200) for r in rs), rs[:2]
    assert n.bucket("all")["offered"] == (20 if limited else 0)
    decisions = {e["decision"] for e in n.access_log() if e["uri"] == "/"}
    assert decisions == ({"drop"} if limited else {"none"})


def test_at_most_16_buckets_per_request(nginx_factory):
    names = ["b%02d" % i for i in range(18)]
    n = nginx_factory(h.grl_conf(["%s rate=1r/s" % b for b in names], host=None))
    n.get("/?rid=1")
    e = [e for e in n.access_log() if e["rid"] == "1"][0]
    assert e["buckets"] == ",".join(names[:16]), e
    got = {b["name"]: b["offered"] for b in n.status()["buckets"]}
    assert got == {b: (1 if i < 16 else 0) for i, b in enumerate(names)}


def test_internal_redirect_is_decided_once(nginx_factory, publisher):
    # error_page redirects the rejected request to /sorry.gif, which the same
    # location (grl on) serves: it must not be counted or decided again.
    n = nginx_factory(h.grl_conf(["api procedure_prefix=/api rate=1r/s", "all rate=1r/s"],
                                 publisher=publisher),
                      location_extra="error_page 429 /sorry.gif;")
    publisher.set([bucket_entry("api", 1000000)])
    h.wait_ratio(n, "api", 1.0)
    rs = n.blast("/api/x", 20)
    assert all(r.status == 429 and r.body.startswith(b"GIF") for r in rs), rs[:2]
    st = {b["name"]: b for b in n.status()["buckets"]}
    assert (st["api"]["offered"], st["api"]["dropped"]) == (20, 20)
    assert (st["all"]["offered"], st["all"]["dropped"]) == (20, 20), "the redirect was counted again"
    log = [e for e in n.access_log() if e["uri"] == "/sorry.gif"]
    assert len(log) == 20 and {(e["decision"], e["bucket"], e["buckets"]) for e in log} == {
        ("drop", "api", "api,all")}, log[:2]


def test_pathological_regex_stops_at_the_match_limit(nginx_factory):
    """`^/(a+)+$` against /aaa...ab backtracks exponentially: the match stops at the match
    limit, counts as no match, is counted on the status page, and the request is served."""
    n = nginx_factory(h.grl_conf(["evil procedure_regex=^/(a+)+$ rate=10r/s",
                                  "p_prefix procedure_prefix=/a rate=10r/s"], host=None))
    r = n.get("/" + "a" * 200 + "b?rid=1")
    assert r.status == 200, r
    r = n.get("/aaaa?rid=2")
    assert r.status == 200, r
    log = {e["rid"]: e for e in n.access_log() if e["rid"] != "-"}
    assert log["1"]["buckets"] == "p_prefix", log["1"]
    assert log["2"]["buckets"] == "evil,p_prefix", log["2"]
    st = n.status()
    assert st["regex_limit_hits"] == 1, st
    prom = n.get("/grl?format=prometheus").body.decode()
    assert "grl_regex_limit_hits_total 1\n" in prom, prom
