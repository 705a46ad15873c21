"""grl_bucket cost= and cost_after= (docs/directives.md, "Cost"): a request counts as its units in
every counter of the buckets it matches (offered, dropped, shadow-dropped, a key's sums and
local cap), read from a number or a variable before the decision, and from a variable after the
response at the log phase. A value that is not a number counts as 1 (cost=) or 0
(cost_after=), is counted in cost_invalid, and never changes the answer."""

import pytest

import grl_harness as h


def offered(n, name):
    return n.bucket(name)["offered"]


def test_a_constant_cost_counts_units_in_its_bucket_only(nginx_factory):
    n = nginx_factory(h.grl_conf(["ten rate=100r/s cost=10", "one rate=100r/s",
                                  "free rate=100r/s cost=0"]))
    for _ in range(5):
        assert n.get("/").status == 200
    assert (offered(n, "ten"), offered(n, "one"), offered(n, "free")) == (50, 5, 0)
    assert n.status()["cost_invalid"] == 0


def test_a_variable_cost_is_read_per_request_and_bad_values_count_one(nginx_factory):
    n = nginx_factory(h.grl_conf(["api rate=100r/s cost=$arg_c"]))
    # (query, units counted, counted as invalid)
    cases = [("?c=3", 3, 0), ("?c=0", 0, 0), ("?c=abc", 1, 1), ("", 1, 1), ("?c=-2", 1, 1),
             ("?c=99999999999999999999", 4294967295, 0), ("?c=12", 12, 0)]
    total, invalid = 0, 0
    for query, units, bad in cases:
        assert n.get("/" + query).status == 200, query  # never an error page
        total += units
        invalid += bad
        assert offered(n, "api") == total, query
        assert n.status()["cost_invalid"] == invalid, query
    assert "grl_cost_invalid_total %d" % invalid in n.prometheus()


def test_dropped_and_shadow_dropped_count_units(nginx_factory, publisher):
    n = nginx_factory(h.grl_conf(["deny_api procedure=/d rate=100r/s cost=4",
                                  "shadow_api procedure=/s rate=100r/s cost=$arg_c mode=shadow"],
                                 publisher=publisher))
    publisher.set([h.bucket_entry("deny_api", 1000000), h.bucket_entry("shadow_api", 1000000, "shadow")])
    h.wait_ratio(n, "deny_api", 1.0)
    h.wait_ratio(n, "shadow_api", 1.0)
    assert [n.get("/d").status for _ in range(3)] == [429] * 3
    assert [n.get("/s?c=7").status for _ in range(2)] == [200] * 2
    d, s = n.bucket("deny_api"), n.bucket("shadow_api")
    assert (d["offered"], d["dropped"]) == (12, 12)
    assert (s["offered"], s["shadow_dropped"], s["dropped"]) == (14, 14, 0)


def test_a_keyed_bucket_caps_each_key_in_units(nginx_factory):
    # 10 units/s per key, burst 100 ms: a 10-unit request passes alone, the next ones within the
    # second are over the key's local cap; 1-unit requests of another bucket's key still pass.
    n = nginx_factory(h.grl_conf(["big procedure=/big key=$arg_k rate=10r/s cost=10",
                                  "small procedure=/small key=$arg_k rate=10r/s"], zone="grl:4m"))
    big = [n.get("/big?k=a").status for _ in range(4)]
    small = [n.get("/small?k=a").status for _ in range(2)]
    assert big == [200, 429, 429, 429], big
    assert small == [200, 200], small
    assert offered(n, "big") == 40
    assert n.bucket("big")["dropped"] == 30


def upstream_conf(up_port, front_port, buckets):
    """An upstream that answers with X-Tokens: $arg_t, and a front server proxying to it with
    `grl on` (the template's own server keeps serving the status page)."""
    return h.grl_conf(buckets, zone="grl:4m") + """
server {
    listen 127.0.0.1:%d;
    location / { add_header X-Tokens $arg_t; return 200 "ok"; }
}
server {
    listen 127.0.0.1:%d;
    location / { grl on; proxy_pass http://127.0.0.1:%d; }
}
""" % (up_port, front_port, up_port)


def test_cost_after_adds_the_units_known_after_the_response(nginx_factory):
    up, front = h.free_port(), h.free_port()
    n = nginx_factory(upstream_conf(up, front, [
        "tokens rate=100r/s cost=0 cost_after=$upstream_http_x_tokens",
        "both rate=100r/s cost=1 cost_after=$upstream_http_x_tokens",
        "keyed key=$arg_k rate=10000r/s cost=0 cost_after=$upstream_http_x_tokens"]))
    # (query, units after the response, invalid): no header adds nothing and is not invalid.
    cases = [("?t=7&k=a", 7, 0), ("?t=30&k=a", 30, 0), ("?k=a", 0, 0), ("?t=x1&k=a", 0, 1)]
    total, invalid = 0, 0
    for requests, (query, units, bad) in enumerate(cases, 1):
        r = h.http_get(front, "/" + query)
        assert r.status == 200, (query, r.status)
        total += units
        invalid += bad
        # The log phase runs after the answer is sent: wait for it.
        h.wait_until(lambda: offered(n, "tokens") == total, 5, what="tokens offered %d" % total)
        assert offered(n, "both") == requests + total, query
        # One per bucket with cost_after= that read the bad value.
        assert n.status()["cost_invalid"] == 3 * invalid, query
    keyed = n.bucket("keyed")
    assert keyed["offered"] == total
    assert [k["offered"] for k in keyed["keyed"]["top"] if k["key"] == "a"] == [total]


def test_cost_after_is_not_counted_for_a_rejected_request(nginx_factory, publisher):
    up, front = h.free_port(), h.free_port()
    conf = upstream_conf(up, front, ["api rate=100r/s cost_after=$upstream_http_x_tokens"])
    conf = conf.replace("grl_zone", "grl_instructions %s;\ngrl_zone" % publisher.endpoint, 1)
    n = nginx_factory(conf)
    publisher.set([h.bucket_entry("api", 1000000)])
    h.wait_ratio(n, "api", 1.0)
    assert h.http_get(front, "/?t=50").status == 429
    assert h.http_get(n.port, "/grl").status == 200  # the log phase of the 503 has run
    assert (offered(n, "api"), n.bucket("api")["dropped"]) == (1, 1)
