-- resty.grl: ask ngx_http_grl_module from Lua (docs/directives.md, "OpenResty and Lua").
--
--   local grl = require "resty.grl"
--   local decision, ratio = grl.decide("per-tenant", tenant)  -- "pass" | "drop" | "shadow_drop"
--   local b = grl.bucket("api")           -- offered, admitted, dropped, ratio, limit_rps, ...
--   local k = grl.key("per-tenant", tenant)  -- the key's offered, dropped, ratio; nil if unseen
--
-- Calls the module's exported C functions (ngx_module/grl_lua.cpp) through LuaJIT's FFI,
-- with the request lua-resty-core hands out: any phase from rewrite to log, and timers (whose
-- fake request carries the configuration of the request that made them); not init_by_lua.
-- Errors are Lua errors naming the bucket or the argument.

local ffi = require "ffi"
local base = require "resty.core.base"

local C = ffi.C
local get_request = base.get_request
local error = error
local type = type
local tostring = tostring
local tonumber = tonumber
local format = string.format

local _M = { _VERSION = "1" }

-- Mirrors ngx_module/grl_lua.cpp: change both.
if not pcall(ffi.typeof, "grl_lua_decision_t") then
    ffi.cdef [[
        typedef struct {
            int decision;
            uint32_t ratio_ppm;
        } grl_lua_decision_t;
        typedef struct {
            uint64_t offered, admitted, dropped, shadow_dropped, limit_mrps;
            uint32_t ratio_ppm;
            int state;
            int mode;
            int keyed;
        } grl_lua_bucket_t;
        typedef struct {
            uint64_t offered, dropped;
            uint32_t ratio_ppm;
            int state;
        } grl_lua_key_t;
        int grl_lua_bucket_index(ngx_http_request_t *r, const char *name, size_t len);
        int grl_lua_decide(ngx_http_request_t *r, int bucket, const char *key, size_t key_len,
                           grl_lua_decision_t *out);
        int grl_lua_read_bucket(ngx_http_request_t *r, int bucket, grl_lua_bucket_t *out);
        int grl_lua_read_key(ngx_http_request_t *r, int bucket, const char *key, size_t key_len,
                             grl_lua_key_t *out);
    ]]
end

-- Without the nginx module the symbols are missing: say so once, at require.
if not pcall(function() return C.grl_lua_decide end) then
    error("resty.grl: ngx_http_grl_module is not loaded, or older than this file (no symbol "
          .. "grl_lua_decide): load_module modules/ngx_http_grl_module.so of the same grl", 2)
end

local DECISIONS = { [0] = "none", "pass", "drop", "shadow_drop" }
local STATES = { [0] = "waiting", "active", "expired" }
local MODES = { [0] = "deny", "shadow" }
local ERRORS = {
    [-1] = "needs a request (call it in a request phase or a timer, not in init_by_lua)",
    [-2] = "no grl_zone in this nginx configuration",
    [-4] = "bucket \"%s\" is not keyed (it has no key=): call it without a key",
    [-5] = "bucket \"%s\" is keyed: bad argument #2 (key expected, got nil)",
}

-- One buffer each, reused: a worker runs one Lua call at a time and none yields in between.
local decision_buf = ffi.new("grl_lua_decision_t[1]")
local bucket_buf = ffi.new("grl_lua_bucket_t[1]")
local key_buf = ffi.new("grl_lua_key_t[1]")

-- Bucket name -> index in this configuration. A Lua VM serves one configuration (a reload
-- starts new workers with a new VM), so an index never outlives its configuration.
local index_of = {}

-- Raises the error of return code `rc` at `level` as error() counts it from fail's caller
-- (2: the caller of the function that calls fail), so the message points at the user's call.
local function fail(fn, rc, bucket, level)
    local why = ERRORS[rc]
    if rc == -3 then
        why = format("unknown bucket \"%s\" (no grl_bucket of that name)", bucket)
    elseif why == nil then
        why = format("failed (%d)", rc)
    end
    error(format("grl.%s: %s", fn, format(why, bucket)), level + 1)
end

local function request(fn)
    local r = get_request()
    if r == nil then fail(fn, -1, nil, 3) end
    return r
end

local function bucket_index(fn, r, bucket)
    if type(bucket) ~= "string" then
        error(format("grl.%s: bad argument #1 (bucket name expected, got %s)", fn, type(bucket)), 3)
    end
    local i = index_of[bucket]
    if i then return i end
    i = C.grl_lua_bucket_index(r, bucket, #bucket)
    if i < 0 then fail(fn, i, bucket, 3) end
    index_of[bucket] = i
    return i
end

local function key_string(fn, key)
    local t = type(key)
    if t == "string" then return key end
    if t == "number" then return tostring(key) end
    if t == "nil" then return nil end
    error(format("grl.%s: bad argument #2 (key expected: string or number, got %s)", fn, t), 3)
end

-- Decides one request in `bucket` (counted there, sampled against its ratio; for a keyed
-- bucket, `key` is counted and capped in its key table). Returns the decision and the ratio
-- that decided. A "drop" is counted as dropped: the caller must reject the request.
function _M.decide(bucket, key)
    local r = request("decide")
    local i = bucket_index("decide", r, bucket)
    local k = key_string("decide", key)
    local rc = C.grl_lua_decide(r, i, k, k and #k or 0, decision_buf)
    if rc ~= 0 then fail("decide", rc, bucket, 2) end
    local d = decision_buf[0]
    return DECISIONS[d.decision], d.ratio_ppm / 1e6
end

-- A bucket's counters on this host and the ratio in force, as the status page shows them.
function _M.bucket(bucket)
    local r = request("bucket")
    local i = bucket_index("bucket", r, bucket)
    local rc = C.grl_lua_read_bucket(r, i, bucket_buf)
    if rc ~= 0 then fail("bucket", rc, bucket, 2) end
    local b = bucket_buf[0]
    return {
        offered = tonumber(b.offered),
        admitted = tonumber(b.admitted),
        dropped = tonumber(b.dropped),
        shadow_dropped = tonumber(b.shadow_dropped),
        ratio = b.ratio_ppm / 1e6,
        ratio_state = STATES[b.state],
        limit_rps = tonumber(b.limit_mrps) / 1000,
        mode = MODES[b.mode],
        keyed = b.keyed ~= 0,
    }
end

-- One key of a keyed bucket on this host: its counters since it took its entry and the
-- control plane's ratio for it; nil when the key has no entry (never seen, or evicted).
function _M.key(bucket, key)
    local r = request("key")
    local i = bucket_index("key", r, bucket)
    local k = key_string("key", key)
    if k == nil then fail("key", -5, bucket, 2) end
    local rc = C.grl_lua_read_key(r, i, k, #k, key_buf)
    if rc == -6 then return nil end
    if rc ~= 0 then fail("key", rc, bucket, 2) end
    local e = key_buf[0]
    return {
        offered = tonumber(e.offered),
        dropped = tonumber(e.dropped),
        ratio = e.ratio_ppm / 1e6,
        ratio_state = STATES[e.state],
    }
end

return _M
