"""What clients and limit_req users expect, against the real nginx: $grl_status in
limit_req's words, grl_dry_run per location, the IETF RateLimit header fields
(grl_ratelimit_headers) and application/problem+json rejections (grl_problem_json).
docs/directives.md, "Conventions"."""

import json
import os

import grl_harness as h
from grl_harness import bucket_entry, count

CONV_LOG = ("log_format conv 'uri=$uri status=$status grl_status=$grl_status "
            "decision=$grl_decision bucket=$grl_bucket';")


def conv_log(n):
    with open(os.path.join(n.prefix, "conv.log")) as f:
        return [dict(kv.split("=", 1) for kv in line.split()) for line in f.read().splitlines()]


def test_grl_status_and_dry_run_in_the_access_log(nginx_factory, publisher):
    buckets = ["deny_all procedure=/drop rate=1r/s",
               "pass_b procedure=/pass rate=1r/s",
               "shadow_b procedure=/shadow rate=1r/s mode=shadow",
               "dry procedure_prefix=/dry rate=1r/s"]
    n = nginx_factory(h.grl_conf(buckets, publisher=publisher, extra=CONV_LOG),
                      location_extra="access_log conv.log conv;\n"
                                     "location /dry { grl_dry_run on; empty_gif; }")
    publisher.set([bucket_entry("deny_all", 1000000), bucket_entry("pass_b", 0),
                   bucket_entry("shadow_b", 1000000, mode="shadow"),
                   bucket_entry("dry", 1000000)])
    for name, ratio in (("deny_all", 1.0), ("pass_b", 0.0), ("shadow_b", 1.0), ("dry", 1.0)):
        h.wait_ratio(n, name, ratio)

    want_status = {"/drop": 429, "/pass": 200, "/shadow": 200, "/dry/x": 200, "/none": 200}
    for path, status in want_status.items():
        rs = n.blast(path, 10)
        assert [r.status for r in rs] == [status] * 10, (path, rs[:2])

    by_uri = {}
    for e in conv_log(n):
        by_uri.setdefault(e["uri"], []).append((e["status"], e["grl_status"], e["decision"],
                                                e["bucket"]))
    expect = {"/drop": ("429", "REJECTED", "drop", "deny_all"),
              "/pass": ("200", "PASSED", "pass", "-"),
              "/shadow": ("200", "REJECTED_DRY_RUN", "shadow_drop", "shadow_b"),
              "/dry/x": ("200", "REJECTED_DRY_RUN", "shadow_drop", "dry"),
              "/none": ("200", "-", "none", "-")}  # no bucket: not found, like $limit_req_status
    for uri, want in expect.items():
        assert by_uri[uri] == [want] * 10, "%s logged %s, expected %s" % (uri, by_uri[uri], want)

    # Dry run counts like shadow: offered and would-be drops, nothing dropped.
    b = n.bucket("dry")
    assert (b["offered"], b["admitted"], b["dropped"], b["shadow_dropped"]) == (10, 10, 0, 10), b
    assert b["mode"] == "deny", b  # the bucket itself still enforces elsewhere
    assert 'bucket "dry" would drop the request (dry run)' in n.error_log()
    assert 'bucket "shadow_b" would drop the request (shadow)' in n.error_log()


def test_dry_run_is_per_location(nginx_factory, publisher):
    """The same bucket enforces in one location and only counts in the dry-run one."""
    n = nginx_factory(h.grl_conf(["api procedure_prefix=/api rate=1r/s"], publisher=publisher),
                      location_extra="location /api/dry { grl_dry_run on; empty_gif; }")
    publisher.set([bucket_entry("api", 1000000)])
    h.wait_ratio(n, "api", 1.0)
    assert {r.status for r in n.blast("/api/enforced", 20)} == {429}
    assert {r.status for r in n.blast("/api/dry", 20)} == {200}
    b = n.bucket("api")
    assert (b["offered"], b["dropped"], b["shadow_dropped"]) == (40, 20, 20), b


HEADER_BUCKETS = ["api procedure_prefix=/api rate=300r/s",
                  "slow procedure_prefix=/api/slow rate=1r/m",
                  "shadowed procedure_prefix=/api rate=5r/s mode=shadow",
                  "half procedure_prefix=/half rate=20r/s"]
HEADER_LOCATIONS = """\
grl_ratelimit_headers on;
grl_retry_after 3s;
location /api/off { grl_ratelimit_headers off; empty_gif; }
location /api/dry { grl_dry_run on; empty_gif; }
location /api/problem { grl_problem_json on; empty_gif; }
location /api/shed { grl_problem_json on; grl_reject_status 503; empty_gif; }
"""


def test_ratelimit_headers(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(HEADER_BUCKETS, publisher=publisher),
                      location_extra=HEADER_LOCATIONS)

    # No instruction yet (fail open): the policy from rate=, no RateLimit (nothing known);
    # shadow buckets enforce nothing and are not advertised.
    r = n.get("/api/x")
    assert r.status == 200
    assert r.headers["ratelimit-policy"] == '"api";q=300;w=1', r.headers
    assert "ratelimit" not in r.headers, r.headers
    # Below 1 r/s: one request over the shortest window that holds it.
    assert n.get("/api/slow").headers["ratelimit-policy"] == '"api";q=300;w=1, "slow";q=1;w=60'
    # Not matched, switched off, or dry run: nothing.
    for path in ("/other", "/api/off", "/api/dry"):
        r = n.get(path)
        assert r.status == 200 and "ratelimit-policy" not in r.headers, (path, r.headers)

    # Under its limit: the limit in force is the control plane's; still no RateLimit.
    publisher.set([bucket_entry("api", 0, limit_mrps=400000),
                   bucket_entry("shadowed", 1000000, mode="shadow", limit_mrps=5000)])
    h.wait_ratio(n, "api", 0.0)
    r = n.get("/api/x")
    assert r.status == 200 and r.headers["ratelimit-policy"] == '"api";q=400;w=1', r.headers
    assert "ratelimit" not in r.headers, r.headers

    # Over its limit: rejected with r=0 and t = the Retry-After sent.
    publisher.set([bucket_entry("api", 1000000, limit_mrps=400000),
                   bucket_entry("half", 500000, limit_mrps=20000)])
    h.wait_ratio(n, "api", 1.0)
    h.wait_ratio(n, "half", 0.5)
    r = n.get("/api/x")
    assert r.status == 429, r
    assert r.headers["retry-after"] == "3"
    assert r.headers["ratelimit-policy"] == '"api";q=400;w=1'
    assert r.headers["ratelimit"] == '"api";r=0;t=3', r.headers
    assert b"<html>" in r.body  # nginx's own error page unless grl_problem_json

    # Dropping at 0.5: passed requests say the quota is used up for the next second too.
    rs = n.blast("/half", 200)
    passed = [r for r in rs if r.status == 200]
    dropped = [r for r in rs if r.status == 429]
    h.assert_binomial(len(dropped), 200, 0.5, "dropped at 0.5", must_exclude=(0.0, 1.0))
    assert {r.headers.get("ratelimit") for r in passed} == {'"half";r=0;t=1'}
    assert {r.headers.get("ratelimit") for r in dropped} == {'"half";r=0;t=3'}
    assert {r.headers.get("ratelimit-policy") for r in rs} == {'"half";q=20;w=1'}


def test_problem_json_rejection(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(HEADER_BUCKETS, publisher=publisher),
                      location_extra=HEADER_LOCATIONS)
    publisher.set([bucket_entry("api", 1000000, limit_mrps=400000)])
    h.wait_ratio(n, "api", 1.0)

    r = n.get("/api/problem")
    assert r.status == 429, r
    assert r.headers["content-type"] == "application/problem+json", r.headers
    assert int(r.headers["content-length"]) == len(r.body)
    assert r.headers["retry-after"] == "3" and r.headers["ratelimit"] == '"api";r=0;t=3'
    body = json.loads(r.body)
    assert body == {"type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
                    "title": "Quota Exceeded", "status": 429,
                    "detail": "rejected by bucket api, which is over its fleet-wide limit",
                    "violated-policies": ["api"]}, body

    r = n.get("/api/shed")
    assert r.status == 503 and r.headers["content-type"] == "application/problem+json"
    body = json.loads(r.body)
    assert body["type"].endswith("#temporary-reduced-capacity") and body["status"] == 503
    assert body["violated-policies"] == ["api"]

    # Passed requests are untouched: the content handler answers.
    publisher.set([bucket_entry("api", 0, limit_mrps=400000)])
    h.wait_ratio(n, "api", 0.0)
    r = n.get("/api/problem")
    assert r.status == 200 and r.headers["content-type"] == "image/gif", r.headers
    log = [e for e in n.access_log() if e["uri"].startswith("/api/")]
    assert count(log, lambda e: e["status"] == "429" and e["decision"] == "drop") == 1
    assert count(log, lambda e: e["status"] == "503" and e["decision"] == "drop") == 1
