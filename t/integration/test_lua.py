"""grl beside Debian's lua-nginx-module (libnginx-mod-http-lua, LuaJIT), as OpenResty-style
gateways run it (docs/directives.md, "OpenResty and Lua"): the phase order of rewrite_by_lua,
grl and access_by_lua, what ngx.exit() from each does to grl's counts, the $grl_* variables
read by name from log_by_lua, and the Lua API (lua/resty/grl.lua over the module's exported
C functions): decisions on keys computed in Lua, counts read back, checked against grl's
status page; bad input gives a Lua error naming the bucket or argument and nginx keeps
serving. Without the lua module the module loads and works as ever (every other test)."""

import os

import pytest

import grl_harness as h
from grl_harness import bucket_entry

MODULES_DIR = os.environ.get("GRL_NGINX_MODULES_DIR", "/usr/lib/nginx/modules")
LUA_MODULES = [os.path.join(MODULES_DIR, "ndk_http_module.so"),
               os.path.join(MODULES_DIR, "ngx_http_lua_module.so")]
LUA_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "lua"))
LUA_HTTP = 'lua_package_path "%s/?.lua;;";\nlua_shared_dict trace 1m;' % LUA_DIR

# /trace answers the lua_shared_dict `trace` as "name=value" lines.
TRACE = """
location = /trace {
    grl off;
    content_by_lua_block {
        for _, k in ipairs(ngx.shared.trace:get_keys(0)) do
            ngx.say(k, "=", ngx.shared.trace:get(k))
        end
    }
}
"""

pytestmark = pytest.mark.skipif(
    not all(os.path.exists(m) for m in LUA_MODULES),
    reason="Debian's libnginx-mod-http-lua is not installed (bash .ci/install-deps)")


def lua_nginx(nginx_factory, buckets, location_extra, publisher=None, lua_first=True,
              http_extra_lua="", **kw):
    """nginx with ndk + lua loaded (before grl, as Debian's modules-enabled/ does, or after it)
    and `location_extra` (nested locations) inside `location /`."""
    conf = "\n".join([h.grl_conf(buckets, publisher=publisher, host="id=h1 zone=z1 region=r1",
                                  zone="grl:4m"), LUA_HTTP, http_extra_lua])
    if lua_first:
        kw["modules"] = LUA_MODULES
    else:
        kw["main_extra"] = "".join("load_module %s;\n" % m for m in LUA_MODULES)
    return nginx_factory(conf, location_extra=location_extra + TRACE, **kw)


def trace(n):
    r = n.get("/trace")
    assert r.status == 200, r
    return {k: v for k, _, v in (l.partition("=") for l in r.body.decode().splitlines())}


def lua_get(n, path):
    r = n.get(path)
    assert r.status == 200, "%s answered %d: %r\n%s" % (path, r.status, r.body[:300],
                                                        n.error_log()[-2000:])
    return dict(kv.split("=", 1) for kv in r.body.decode().split())


# -- phases -------------------------------------------------------------------------------

PHASES = """
location /p {
    rewrite_by_lua_block {
        ngx.shared.trace:incr("rewrite", 1, 0)
        ngx.shared.trace:incr("rewrite_saw_" .. (ngx.var.grl_status or "nil"), 1, 0)
    }
    access_by_lua_block {
        ngx.shared.trace:incr("access", 1, 0)
        ngx.shared.trace:incr("access_saw_" .. (ngx.var.grl_status or "nil"), 1, 0)
    }
    content_by_lua_block { ngx.say("ok") }
}
"""


@pytest.mark.parametrize("lua_first", [True, False], ids=["lua-loaded-first", "grl-loaded-first"])
def test_phase_order_rewrite_grl_access(nginx_factory, publisher, lua_first):
    """rewrite_by_lua runs before grl (it sees no decision), grl before access_by_lua (it sees
    PASSED), and a request grl drops never reaches access_by_lua; whichever module loads first."""
    n = lua_nginx(nginx_factory, ["p procedure_prefix=/p rate=10r/s"], PHASES, publisher,
                  lua_first=lua_first)
    publisher.set([bucket_entry("p", 500000)])
    h.wait_ratio(n, "p", 0.5)
    base = n.bucket("p")
    N = 200
    statuses = [r.status for r in n.blast("/p", N)]
    assert set(statuses) <= {200, 429}, statuses
    passed, dropped = statuses.count(200), statuses.count(429)
    b = n.bucket("p")
    assert b["offered"] - base["offered"] == N
    assert b["admitted"] - base["admitted"] == passed
    assert b["dropped"] - base["dropped"] == dropped
    h.assert_binomial(dropped, N, 0.5, "dropped at ratio 0.5", must_exclude=(0.0, 1.0))
    t = trace(n)
    assert int(t["rewrite"]) >= N and int(t["rewrite_saw_nil"]) == int(t["rewrite"]), t
    assert int(t["access"]) == int(t["access_saw_PASSED"]) == passed, t
    assert "access_saw_REJECTED" not in t, t


EXITS = """
location /rw {
    rewrite_by_lua_block { if ngx.var.arg_deny then return ngx.exit(403) end }
    content_by_lua_block { ngx.say("ok") }
}
location /ac {
    access_by_lua_block { if ngx.var.arg_deny then return ngx.exit(403) end }
    content_by_lua_block { ngx.say("ok") }
}
"""


def test_exit_from_rewrite_is_not_counted_from_access_is_counted_as_passed(nginx_factory):
    n = lua_nginx(nginx_factory, ["rw procedure_prefix=/rw rate=100r/s",
                                  "ac procedure_prefix=/ac rate=100r/s"], EXITS)
    N = 20
    assert [r.status for r in n.blast("/rw?deny=1", N)] == [403] * N
    assert [r.status for r in n.blast("/ac?deny=1", N)] == [403] * N
    rw, ac = n.bucket("rw"), n.bucket("ac")
    assert rw["offered"] == 0, "a request ended in rewrite_by_lua must not be counted: %r" % rw
    assert (ac["offered"], ac["admitted"], ac["dropped"]) == (N, N, 0), ac
    # The bucket does match /rw: requests that go on are counted.
    assert [r.status for r in n.blast("/rw", N)] == [200] * N
    assert n.bucket("rw")["offered"] == N
    log = n.access_log()
    assert h.count(log, lambda e: e["uri"] == "/rw" and e["decision"] == "none") == N
    assert h.count(log, lambda e: e["uri"] == "/ac" and e["decision"] == "pass"
                   and e["status"] == "403") == N


# -- $grl_* read by name from Lua -----------------------------------------------------------

LOG_BY_LUA = """
location /v {
    log_by_lua_block {
        ngx.shared.trace:incr(table.concat({ngx.var.status, ngx.var.grl_status or "nil",
                                            ngx.var.grl_ratio or "nil",
                                            ngx.var.grl_bucket or "nil"}, ":"), 1, 0)
    }
    empty_gif;
}
"""


def test_grl_variables_in_log_by_lua(nginx_factory, publisher):
    """No $grl_* variable is named in the file (grl_log=False): Lua reads them by name only."""
    n = lua_nginx(nginx_factory, ["v procedure_prefix=/v rate=10r/s"], LOG_BY_LUA, publisher,
                  grl_log=False)
    publisher.set([bucket_entry("v", 250000)])
    h.wait_ratio(n, "v", 0.25)
    base = n.bucket("v")
    N = 200
    statuses = [r.status for r in n.blast("/v", N)]
    b = n.bucket("v")
    t = trace(n)
    passed = int(t.get("200:PASSED:0.250000:nil", 0))
    dropped = int(t.get("429:REJECTED:0.250000:v", 0))
    assert passed + dropped == N, t
    assert (passed, dropped) == (statuses.count(200), statuses.count(429))
    assert b["admitted"] - base["admitted"] == passed and b["dropped"] - base["dropped"] == dropped
    h.assert_binomial(dropped, N, 0.25, "dropped at ratio 0.25", must_exclude=(0.0, 1.0))


# -- the Lua API ----------------------------------------------------------------------------

API = """
location /decide {
    content_by_lua_block {
        local grl = require "resty.grl"
        local n, key = tonumber(ngx.var.arg_n), ngx.var.arg_key
        local got, ratio = {pass = 0, drop = 0, shadow_drop = 0}
        for i = 1, n do
            local d, r = grl.decide(ngx.var.arg_bucket, key)
            got[d] = got[d] + 1
            ratio = r
        end
        ngx.say("pass=", got.pass, " drop=", got.drop, " shadow_drop=", got.shadow_drop,
                " ratio=", ratio)
    }
}
location /read {
    content_by_lua_block {
        local grl = require "resty.grl"
        local b
        if ngx.var.arg_key then b = grl.key(ngx.var.arg_bucket, ngx.var.arg_key)
        else b = grl.bucket(ngx.var.arg_bucket) end
        if b == nil then return ngx.say("found=no") end
        local out = {"found=yes"}
        for k, v in pairs(b) do out[#out + 1] = k .. "=" .. tostring(v) end
        ngx.say(table.concat(out, " "))
    }
}
location /dry/ {
    grl_dry_run on;
    content_by_lua_block {
        local d = require("resty.grl").decide("lua-plain")
        ngx.shared.trace:incr("dry_" .. d, 1, 0)
        ngx.say(d)
    }
}
"""
API_BUCKETS = ["lua-plain procedure=/never rate=10r/s",
               "lua-keyed key=$http_x_never procedure=/never rate=100r/s keys=64"]


def test_lua_decide_on_a_plain_bucket_counts_as_the_status_page_shows(nginx_factory, publisher):
    n = lua_nginx(nginx_factory, API_BUCKETS, API, publisher)
    publisher.set([bucket_entry("lua-plain", 500000)])
    h.wait_ratio(n, "lua-plain", 0.5)
    N = 2000
    got = lua_get(n, "/decide?bucket=lua-plain&n=%d" % N)
    drop = int(got["drop"])
    assert int(got["pass"]) + drop == N and got["shadow_drop"] == "0", got
    assert float(got["ratio"]) == 0.5, got
    h.assert_binomial(drop, N, 0.5, "Lua decisions dropped at ratio 0.5", must_exclude=(0.0, 1.0))
    b = n.bucket("lua-plain")
    assert (b["offered"], b["dropped"], b["admitted"]) == (N, drop, N - drop), b
    # grl.bucket reads what the status page shows.
    lb = lua_get(n, "/read?bucket=lua-plain")
    assert (int(lb["offered"]), int(lb["dropped"]), int(lb["admitted"])) == (N, drop, N - drop)
    assert (float(lb["ratio"]), lb["ratio_state"]) == (b["ratio"], b["ratio_state"]) == (0.5, "active")
    assert (float(lb["limit_rps"]), lb["mode"], lb["keyed"]) == (b["limit_rps"], b["mode"], "false")
    # Under grl_dry_run the same ratio only shadow-drops: counted as shadow_dropped.
    publisher.set([bucket_entry("lua-plain", 1000000)])
    h.wait_ratio(n, "lua-plain", 1.0)
    M = 10
    assert [r.body.strip() for r in n.blast("/dry/x", M)] == [b"shadow_drop"] * M
    after = n.bucket("lua-plain")
    assert after["shadow_dropped"] - b["shadow_dropped"] == M and after["dropped"] == drop, after


def test_lua_decide_on_keys_computed_in_lua(nginx_factory):
    """A keyed bucket limits each key Lua passes (the local cap: rate=100r/s, a 100 ms burst;
    one request's calls share one clock reading), as the status page's key table shows."""
    n = lua_nginx(nginx_factory, API_BUCKETS, API)
    N = 200
    a = lua_get(n, "/decide?bucket=lua-keyed&key=tenant-a&n=%d" % N)
    b = lua_get(n, "/decide?bucket=lua-keyed&key=tenant-b&n=%d" % N)
    pa, pb = int(a["pass"]), int(b["pass"])
    assert 5 <= pa <= 15 and 5 <= pb <= 15, (a, b)  # the burst: 10 requests at 100 r/s
    assert int(a["drop"]) == N - pa and int(b["drop"]) == N - pb
    st = n.bucket("lua-keyed")
    assert (st["offered"], st["dropped"]) == (2 * N, 2 * N - pa - pb), st
    top = {k["key"]: k for k in st["keyed"]["top"]}
    assert (top["tenant-a"]["offered"], top["tenant-a"]["dropped"]) == (N, N - pa), top
    # grl.key reads the key's entry; a key never seen has none.
    ka = lua_get(n, "/read?bucket=lua-keyed&key=tenant-a")
    assert (int(ka["offered"]), int(ka["dropped"])) == (N, N - pa), ka
    assert (float(ka["ratio"]), ka["ratio_state"]) == (0.0, "waiting"), ka
    assert lua_get(n, "/read?bucket=lua-keyed&key=nobody") == {"found": "no"}
    # The handler never counted any of it: nothing matched a request.
    assert n.bucket("lua-plain")["offered"] == 0


# -- bad input ------------------------------------------------------------------------------

BAD = """
location /bad {
    content_by_lua_block {
        local grl = require "resty.grl"
        local case = ngx.var.arg_case
        if case == "unknown" then grl.decide("no-such-bucket")
        elseif case == "bucket_type" then grl.bucket(42)
        elseif case == "key_type" then grl.decide("lua-keyed", {})
        elseif case == "key_missing" then grl.decide("lua-keyed")
        elseif case == "key_unkeyed" then grl.decide("lua-plain", "k")
        elseif case == "read_unknown" then grl.key("no-such-bucket", "k")
        end
        ngx.say("ok")
    }
}
location /timer {
    content_by_lua_block {
        ngx.timer.at(0, function()
            ngx.shared.trace:set("timer", require("resty.grl").decide("lua-plain"))
        end)
        ngx.say("ok")
    }
}
"""
INIT_BY_LUA = """
init_by_lua_block {
    local ok, err = pcall(require("resty.grl").decide, "lua-plain")
    ngx.shared.trace:set("init", err)
}
"""
BAD_CASES = {
    "unknown": 'grl.decide: unknown bucket "no-such-bucket"',
    "bucket_type": "grl.bucket: bad argument #1 (bucket name expected, got number)",
    "key_type": "grl.decide: bad argument #2 (key expected: string or number, got table)",
    "key_missing": 'grl.decide: bucket "lua-keyed" is keyed: bad argument #2 (key expected, got nil)',
    "key_unkeyed": 'grl.decide: bucket "lua-plain" is not keyed',
    "read_unknown": 'grl.key: unknown bucket "no-such-bucket"',
}


def test_lua_bad_input_is_a_lua_error_naming_it_and_nginx_keeps_serving(nginx_factory):
    n = lua_nginx(nginx_factory, API_BUCKETS, API + BAD, http_extra_lua=INIT_BY_LUA)
    for case, message in BAD_CASES.items():
        r = n.get("/bad?case=%s" % case)
        assert r.status == 500, (case, r)
        log = n.error_log()
        # The error points at the caller's line (content_by_lua), not into resty/grl.lua.
        assert "content_by_lua(nginx.conf" in log.split(message)[0].rsplit("\n", 1)[-1], \
            (case, log[-1500:])
        assert message in log, (case, log[-1500:])
        assert n.get("/bad?case=none").status == 200
    # Nothing was counted by the failed calls; the handler still serves and counts.
    assert n.bucket("lua-plain")["offered"] == 0 and n.bucket("lua-keyed")["offered"] == 0
    assert n.get("/").status == 200
    # init_by_lua runs in the master, before any request: no request, a Lua error.
    assert "grl.decide: needs a request" in trace(n)["init"]
    # A timer's fake request carries the configuration of the request that made it: it works.
    assert n.get("/timer").status == 200
    assert h.wait_until(lambda: trace(n).get("timer"), 5, what="the timer's decision") == "pass"
    assert n.bucket("lua-plain")["offered"] == 1


def test_resty_grl_without_the_grl_module_says_so(nginx_factory):
    """The lua module loaded, grl's not: require "resty.grl" is a Lua error naming the missing
    module; the rest of nginx serves."""
    n = nginx_factory(LUA_HTTP, start=False, modules=LUA_MODULES, grl_log=False,
                      location_extra='location /lua { content_by_lua_block { require "resty.grl" } }')
    # The same file without grl: its load_module line and every grl* directive left out.
    n.write_raw_conf("\n".join(l for l in n.render().splitlines()
                               if h.MODULE not in l and not l.strip().startswith("grl")))
    n.start()
    assert n.get("/lua").status == 500
    assert "resty.grl: ngx_http_grl_module is not loaded" in n.error_log(), n.error_log()[-2000:]
    assert n.get("/").status == 200


def test_resty_grl_without_a_zone_says_so(nginx_factory):
    n = nginx_factory(LUA_HTTP, modules=LUA_MODULES, location_extra="""
location /lua { content_by_lua_block { require("resty.grl").decide("x") } }""")
    assert n.get("/lua").status == 500
    assert "grl.decide: no grl_zone in this nginx configuration" in n.error_log()
    assert n.get("/").status == 200
