// ngx_http_redis_limit_module -- BENCHMARK BASELINE ONLY, not part of grl.
//
// A Redis-backed rate limiter for nginx, built the way a careful team would
// build one, so that grl's benchmarks compare against a fair alternative:
//
//  - the same bucket matching as grl (grl::Matcher from grl_core, the same
//    caller/procedure match forms, procedure = $uri), the same reject status;
//  - non-blocking: hiredis's async API driven by nginx's event loop (see
//    redis_limit_conn.cpp); the request is suspended in the preaccess phase
//    and resumed when Redis answers, the worker never blocks;
//  - one round trip per request: one EVALSHA of a small Lua script that, for
//    every matched bucket, counts the request in a fixed-window key
//    "rl:{bucket}:{window number}" (window 1 s for r/s, 60 s for r/m;
//    INCR, and EXPIRE on the first increment) and answers 0 (allowed) or the
//    1-based index of the first bucket over its limit. All nginx hosts share
//    one Redis, so limits are fleet-wide (the window number comes from each
//    host's clock);
//  - when Redis is slow or down: each request waits at most
//    redis_limit_timeout (default 50ms); on timeout, error, no connection, or
//    too many requests already waiting, redis_limit_fail decides (default
//    open: the request passes; closed: it is rejected). A late reply is
//    ignored safely: the hiredis callback owns a small heap token that the
//    request invalidates when it gives up or is freed.
//
// Directives (http{} unless noted):
//   redis_limit_server 127.0.0.1:6379 | unix:/path;
//   redis_limit_caller $http_x_caller;              (optional)
//   redis_limit_missing_caller skip | value=NAME;   (default skip, as grl)
//   redis_limit_bucket NAME [caller=V|caller_prefix=V|caller_regex=V]
//                           [procedure=V|procedure_prefix=V|procedure_regex=V]
//                           rate=N r/s|r/m;
//   redis_limit_timeout 50ms;
//   redis_limit_fail open | closed;
//   redis_limit_max_pending 10000;                  (per worker)
//   redis_limit on | off;                           (http, server, location)
//   redis_limit_status 429;                         (http, server, location)
// Variables: $redis_limit_status (PASSED, REJECTED, FAILED_OPEN,
// FAILED_CLOSED; empty when no bucket matched), $redis_limit_bucket.

#include <cstdint>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "grl/common/bucket.h"
#include "grl/common/parse.h"
#include "redis_limit.h"

extern "C" {
extern ngx_module_t ngx_http_redis_limit_module;
}

namespace redis_limit {
namespace {

// ---- types ----------------------------------------------------------------------

constexpr std::size_t kMaxMatches = grl::kMaxMatchesPerRequest;
constexpr std::size_t kMaxKeyLen = 3 + grl::kMaxNameLen + 1 + NGX_TIME_T_LEN + 1;

enum MissingCaller : ngx_uint_t { kMissingSkip = 0, kMissingValue = 1 };
enum Fail : ngx_uint_t { kFailOpen = 0, kFailClosed = 1 };

enum class Status : std::uint8_t { Waiting, Passed, Rejected, FailedOpen, FailedClosed };

struct Bucket {
    std::string name;
    std::uint64_t limit = 0;   // requests per window
    std::uint32_t window = 1;  // seconds
    std::string limit_arg;     // the limit and the key's TTL as script arguments
    std::string ttl_arg;
};

// The part of the http{} configuration that needs C++ objects; freed by a pool
// cleanup of the configuration's pool.
struct Config {
    grl::Matcher matcher;
    std::vector<Bucket> buckets;  // bucket i is matcher bucket i
    ConnConf conn;
};

struct MainConf {
    Config* cpp;
    ngx_http_complex_value_t* caller;
    ngx_uint_t missing_caller;  // MissingCaller
    ngx_str_t missing_caller_value;
    ngx_msec_t timeout;
    ngx_uint_t fail;  // Fail
    ngx_int_t max_pending;
    ngx_flag_t has_server;
};

struct LocConf {
    ngx_flag_t enable;
    ngx_uint_t status;
};

struct RequestCtx;

// Privdata of one pending hiredis callback, on the heap: the callback always
// runs exactly once (reply, or null when the connection goes away) and frees
// it. The request clears `ctx` when it stops waiting (timeout, or its pool is
// destroyed), so a late reply never touches freed memory.
struct Token {
    RequestCtx* ctx;
};

// Per request, in the request pool. Also registered as a pool cleanup, which
// survives internal redirects (they clear module contexts), so a request is
// counted once even when error_page sends it through another location.
struct RequestCtx {
    ngx_http_request_t* r;
    Token* token;  // non-null while waiting for Redis
    ngx_event_t timer;
    Status status;
    bool returned;  // the decision was handed to the phase engine
    std::uint8_t n;
    std::uint8_t rejected_by;  // index into matched
    std::uint16_t matched[kMaxMatches];
};

// ---- per-worker state --------------------------------------------------------------

ngx_uint_t g_pending;     // hiredis callbacks not yet run
time_t g_last_warn;       // failures are logged at most once a second
ngx_uint_t g_suppressed;  // failures not logged since

// ---- the Lua script ------------------------------------------------------------

// KEYS[i] = rl:{bucket}:{window number}; ARGV[2i-1] = limit, ARGV[2i] = TTL.
// Returns 0 when the request may pass, else the 1-based index of the first
// bucket at its limit. With one bucket: INCR, then compare. With several,
// nothing is counted unless all have room (a request rejected by one bucket
// does not use up another's allowance).
constexpr const char kScript[] = R"lua(
if #KEYS == 1 then
  local n = redis.call('INCR', KEYS[1])
  if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
  if n > tonumber(ARGV[1]) then return 1 end
  return 0
end
for i = 1, #KEYS do
  local n = tonumber(redis.call('GET', KEYS[i]) or '0')
  if n >= tonumber(ARGV[2 * i - 1]) then return i end
end
for i = 1, #KEYS do
  if redis.call('INCR', KEYS[i]) == 1 then redis.call('EXPIRE', KEYS[i], ARGV[2 * i]) end
end
return 0
)lua";

// ---- helpers --------------------------------------------------------------------

std::string_view sv(const ngx_str_t& s) {
    return {reinterpret_cast<const char*>(s.data), s.len};
}
std::string quoted(std::string_view v) {
    return "\"" + std::string(v) + "\"";
}

char* conf_error(ngx_conf_t* cf, const std::string& msg) {
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", msg.c_str());
    return static_cast<char*>(NGX_CONF_ERROR);
}

template <typename F>
char* guarded(ngx_conf_t* cf, F&& body) noexcept {
    try {
        return body();
    } catch (const std::exception& e) {
        return conf_error(cf, std::string("redis_limit: ") + e.what());
    }
}

MainConf* main_conf(ngx_http_request_t* r) {
    return static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_redis_limit_module));
}

const char* status_name(Status s) {
    switch (s) {
        case Status::Passed: return "PASSED";
        case Status::Rejected: return "REJECTED";
        case Status::FailedOpen: return "FAILED_OPEN";
        case Status::FailedClosed: return "FAILED_CLOSED";
        case Status::Waiting: break;
    }
    return "WAITING";
}

void free_config(void* data) noexcept {
    delete static_cast<Config*>(data);
}

// ---- request context ---------------------------------------------------------------

void ctx_cleanup(void* data) noexcept {
    auto* ctx = static_cast<RequestCtx*>(data);
    if (ctx->token) ctx->token->ctx = nullptr;  // the late reply finds nobody
    ctx->token = nullptr;
    if (ctx->timer.timer_set) ngx_del_timer(&ctx->timer);
}

RequestCtx* find_ctx(ngx_http_request_t* r) {
    auto* ctx = static_cast<RequestCtx*>(ngx_http_get_module_ctx(r, ngx_http_redis_limit_module));
    if (ctx || !r->internal) return ctx;
    for (ngx_pool_cleanup_t* c = r->pool->cleanup; c; c = c->next) {
        if (c->handler == ctx_cleanup) {
            ctx = static_cast<RequestCtx*>(c->data);
            ngx_http_set_ctx(r, ctx, ngx_http_redis_limit_module);
            return ctx;
        }
    }
    return nullptr;
}

RequestCtx* new_ctx(ngx_http_request_t* r) {
    void* mem = ngx_pcalloc(r->pool, sizeof(RequestCtx));
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(r->pool, 0);
    if (mem == nullptr || cln == nullptr) return nullptr;
    auto* ctx = new (mem) RequestCtx();
    ctx->r = r;
    cln->handler = ctx_cleanup;
    cln->data = ctx;
    ngx_http_set_ctx(r, ctx, ngx_http_redis_limit_module);
    return ctx;
}

// ---- decisions ------------------------------------------------------------------

// Applies redis_limit_fail; logs at most once a second per worker.
void fail(RequestCtx* ctx, const MainConf* m, const char* why) {
    ctx->status = m->fail == kFailClosed ? Status::FailedClosed : Status::FailedOpen;
    if (g_last_warn == ngx_time()) {
        ++g_suppressed;
        return;
    }
    g_last_warn = ngx_time();
    const char* policy = m->fail == kFailClosed ? "closed" : "open";
    if (g_suppressed) {
        ngx_log_error(NGX_LOG_WARN, ctx->r->connection->log, 0,
                      "redis_limit: %s, failing %s (%ui more failures since the last message)", why,
                      policy, g_suppressed);
    } else {
        ngx_log_error(NGX_LOG_WARN, ctx->r->connection->log, 0, "redis_limit: %s, failing %s", why,
                      policy);
    }
    g_suppressed = 0;
}

void log_reject(RequestCtx* ctx, const MainConf* m) {
    const Bucket& b = m->cpp->buckets[ctx->matched[ctx->rejected_by]];
    ngx_log_error(NGX_LOG_INFO, ctx->r->connection->log, 0,
                  "redis_limit: request rejected by bucket \"%s\", limit %uL per %uDs",
                  b.name.c_str(), b.limit, b.window);
}

// What the phase handler returns for a decided request.
ngx_int_t verdict(RequestCtx* ctx, ngx_http_request_t* r) {
    if (ctx->returned) return NGX_DECLINED;  // decided once per request
    ctx->returned = true;
    if (ctx->status == Status::Rejected || ctx->status == Status::FailedClosed) {
        auto* l =
            static_cast<LocConf*>(ngx_http_get_module_loc_conf(r, ngx_http_redis_limit_module));
        return static_cast<ngx_int_t>(l->status);
    }
    return NGX_DECLINED;
}

// Write-event handler of a suspended request (as limit_req's delay): does
// nothing until the decision is in, then re-runs the phases, which call the
// preaccess handler again; it returns the verdict.
void resume(ngx_http_request_t* r) noexcept {
    auto* ctx = static_cast<RequestCtx*>(ngx_http_get_module_ctx(r, ngx_http_redis_limit_module));
    if (ctx && ctx->status == Status::Waiting) return;
    if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }
    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}

// The decision is in: stop waiting and let the request continue, from the
// posted-events queue (not from inside hiredis's callback or the timer).
void wake(RequestCtx* ctx) {
    ctx->token = nullptr;
    if (ctx->timer.timer_set) ngx_del_timer(&ctx->timer);
    ngx_post_event(ctx->r->connection->write, &ngx_posted_events);
}

void on_timeout(ngx_event_t* ev) noexcept {
    auto* ctx = static_cast<RequestCtx*>(ev->data);
    if (ctx->token) ctx->token->ctx = nullptr;
    fail(ctx, main_conf(ctx->r), "redis did not answer within redis_limit_timeout");
    wake(ctx);
}

void on_reply(redisAsyncContext*, void* reply, void* privdata) noexcept {
    auto* token = static_cast<Token*>(privdata);
    RequestCtx* ctx = token->ctx;
    delete token;
    --g_pending;
    auto* rep = static_cast<redisReply*>(reply);
    if (rep && rep->type == REDIS_REPLY_ERROR && rep->len >= 8 &&
        ngx_strncmp(rep->str, "NOSCRIPT", 8) == 0) {
        conn_script_missing();
    }
    if (ctx == nullptr) return;  // timed out or freed: ignore the late reply
    MainConf* m = main_conf(ctx->r);
    if (rep == nullptr) {
        fail(ctx, m, "redis connection failed");
    } else if (rep->type != REDIS_REPLY_INTEGER) {
        fail(ctx, m,
             rep->type == REDIS_REPLY_ERROR ? "redis answered an error" : "unexpected reply");
    } else if (rep->integer == 0) {
        ctx->status = Status::Passed;
    } else if (rep->integer > 0 && rep->integer <= ctx->n) {
        ctx->status = Status::Rejected;
        ctx->rejected_by = static_cast<std::uint8_t>(rep->integer - 1);
        log_reject(ctx, m);
    } else {
        fail(ctx, m, "unexpected reply");
    }
    wake(ctx);
}

// ---- the request path -----------------------------------------------------------

bool read_caller(ngx_http_request_t* r, const MainConf* m, std::string_view& out) {
    ngx_str_t v;
    if (ngx_http_complex_value(r, m->caller, &v) != NGX_OK || v.len == 0) return false;
    out = sv(v);
    return true;
}

ngx_int_t preaccess_handler(ngx_http_request_t* r) noexcept {
    auto* l = static_cast<LocConf*>(ngx_http_get_module_loc_conf(r, ngx_http_redis_limit_module));
    if (!l->enable || r != r->main) return NGX_DECLINED;
    MainConf* m = main_conf(r);
    if (m->cpp->buckets.empty()) return NGX_DECLINED;
    if (RequestCtx* ctx = find_ctx(r)) {
        return ctx->status == Status::Waiting ? NGX_AGAIN : verdict(ctx, r);
    }

    // Find the buckets, exactly as grl does.
    grl::RequestKey key;
    if (m->caller) {
        key.has_caller = read_caller(r, m, key.caller);
        if (!key.has_caller && m->missing_caller == kMissingValue) {
            key.caller = sv(m->missing_caller_value);
            key.has_caller = true;
        }
    }
    key.procedure = sv(r->uri);
    std::uint16_t idx[kMaxMatches];
    std::size_t n = m->cpp->matcher.match(key, idx, kMaxMatches);
    if (n == 0) return NGX_DECLINED;

    RequestCtx* ctx = new_ctx(r);
    if (ctx == nullptr) return NGX_ERROR;
    ctx->n = static_cast<std::uint8_t>(n);
    for (std::size_t i = 0; i < n; ++i) ctx->matched[i] = idx[i];

    if (!conn_ready()) {
        fail(ctx, m, "not connected to redis");
        return verdict(ctx, r);
    }
    if (g_pending >= static_cast<ngx_uint_t>(m->max_pending)) {
        fail(ctx, m, "too many requests waiting for redis (redis_limit_max_pending)");
        return verdict(ctx, r);
    }

    // EVALSHA sha numkeys key... (limit ttl)...
    char keys[kMaxMatches][kMaxKeyLen];
    u_char numkeys[NGX_INT_T_LEN];
    const char* argv[3 + 3 * kMaxMatches];
    std::size_t lens[3 + 3 * kMaxMatches];
    argv[2] = reinterpret_cast<const char*>(numkeys);
    lens[2] = static_cast<std::size_t>(ngx_sprintf(numkeys, "%uz", n) - numkeys);
    time_t now = ngx_time();
    for (std::size_t i = 0; i < n; ++i) {
        const Bucket& b = m->cpp->buckets[idx[i]];
        auto* k = reinterpret_cast<u_char*>(keys[i]);
        u_char* e = ngx_snprintf(k, kMaxKeyLen, "rl:%s:%T", b.name.c_str(),
                                 static_cast<time_t>(now / b.window));
        argv[3 + i] = keys[i];
        lens[3 + i] = static_cast<std::size_t>(e - k);
        argv[3 + n + 2 * i] = b.limit_arg.data();
        lens[3 + n + 2 * i] = b.limit_arg.size();
        argv[4 + n + 2 * i] = b.ttl_arg.data();
        lens[4 + n + 2 * i] = b.ttl_arg.size();
    }
    auto* token = new (std::nothrow) Token{ctx};
    if (token == nullptr) return NGX_ERROR;
    if (!conn_eval(static_cast<int>(3 + 3 * n), argv, lens, on_reply, token)) {
        delete token;
        fail(ctx, m, "cannot queue the redis command");
        return verdict(ctx, r);
    }
    ++g_pending;
    ctx->token = token;
    ctx->status = Status::Waiting;
    ctx->timer.handler = on_timeout;
    ctx->timer.data = ctx;
    ctx->timer.log = r->connection->log;
    ngx_add_timer(&ctx->timer, m->timeout);

    // Suspend, as limit_req's delay does: notice a client that goes away
    // meanwhile, and come back through resume() once decided.
    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);
    } else if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = resume;
    return NGX_AGAIN;
}

// ---- variables ------------------------------------------------------------------

enum VarKind : uintptr_t { kVarStatus, kVarBucket };

ngx_int_t get_variable(ngx_http_request_t* r, ngx_http_variable_value_t* v,
                       uintptr_t data) noexcept {
    RequestCtx* ctx = find_ctx(r->main);
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    const char* s = nullptr;
    if (ctx && data == kVarStatus) s = status_name(ctx->status);
    if (ctx && data == kVarBucket && ctx->status == Status::Rejected) {
        s = main_conf(r)->cpp->buckets[ctx->matched[ctx->rejected_by]].name.c_str();
    }
    if (s == nullptr) {
        v->not_found = 1;
        return NGX_OK;
    }
    v->data = reinterpret_cast<u_char*>(const_cast<char*>(s));
    v->len = ngx_strlen(s);
    return NGX_OK;
}

struct VarDef {
    ngx_str_t name;
    VarKind kind;
};
VarDef var_defs[] = {{ngx_string("redis_limit_status"), kVarStatus},
                     {ngx_string("redis_limit_bucket"), kVarBucket}};

// ---- directives --------------------------------------------------------------------

std::string directive(const ngx_command_t* cmd) {
    return "\"" + std::string(sv(cmd->name)) + "\"";
}

// redis_limit_server HOST:PORT | unix:PATH
char* set_server(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* m = static_cast<MainConf*>(conf);
        if (m->has_server) return const_cast<char*>("is duplicate");
        std::string_view arg = sv(static_cast<ngx_str_t*>(cf->args->elts)[1]);
        ConnConf& c = m->cpp->conn;
        if (arg.substr(0, 5) == "unix:" && arg.size() > 5) {
            c.unix_path = std::string(arg.substr(5));
        } else {
            std::size_t colon = arg.rfind(':');
            ngx_int_t port = NGX_ERROR;
            if (colon != std::string_view::npos && colon > 0) {
                port = ngx_atoi(
                    const_cast<u_char*>(reinterpret_cast<const u_char*>(arg.data())) + colon + 1,
                    arg.size() - colon - 1);
            }
            if (port < 1 || port > 65535) {
                return conf_error(cf, directive(cmd) + ": invalid server " + quoted(arg) +
                                          ", expected host:port or unix:/path");
            }
            std::string_view host = arg.substr(0, colon);
            if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
                host = host.substr(1, host.size() - 2);
            }
            c.host = std::string(host);
            c.port = static_cast<int>(port);
        }
        c.display = std::string(arg);
        m->has_server = 1;
        return NGX_CONF_OK;
    });
}

// redis_limit_missing_caller skip | value=NAME
char* set_missing_caller(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    auto* m = static_cast<MainConf*>(conf);
    ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
    if (m->missing_caller != NGX_CONF_UNSET_UINT) return const_cast<char*>("is duplicate");
    std::string_view arg = sv(value[1]);
    if (arg == "skip") {
        m->missing_caller = kMissingSkip;
        return NGX_CONF_OK;
    }
    if (arg.substr(0, 6) == "value=" && arg.size() > 6) {
        m->missing_caller = kMissingValue;
        m->missing_caller_value.data = value[1].data + 6;
        m->missing_caller_value.len = value[1].len - 6;
        return NGX_CONF_OK;
    }
    return conf_error(
        cf, directive(cmd) + ": invalid value " + quoted(arg) + ", expected skip or value=NAME");
}

// One caller/procedure match form ("caller=", "caller_prefix=", ...), as grl_bucket.
bool take_match(std::string_view arg, std::string_view what, grl::MatchSpec& spec, bool& dup) {
    struct Form {
        std::string_view suffix;
        grl::MatchKind kind;
    };
    const Form forms[] = {{"=", grl::MatchKind::Exact},
                          {"_prefix=", grl::MatchKind::Prefix},
                          {"_regex=", grl::MatchKind::Regex}};
    for (const Form& f : forms) {
        std::string k = std::string(what) + std::string(f.suffix);
        if (arg.substr(0, k.size()) == k) {
            dup = spec.kind != grl::MatchKind::Any;
            spec.kind = f.kind;
            spec.value = std::string(arg.substr(k.size()));
            return true;
        }
    }
    return false;
}

// redis_limit_bucket NAME [caller*=V] [procedure*=V] rate=N r/s|r/m
char* set_bucket(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* m = static_cast<MainConf*>(conf);
        ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
        std::string d = directive(cmd);
        grl::BucketDef def;
        def.name = std::string(sv(value[1]));
        if (!grl::valid_name(def.name)) {
            return conf_error(cf, d + ": invalid bucket name " + quoted(def.name) +
                                      ", expected 1-63 of [A-Za-z0-9_.:-]");
        }
        d += " " + quoted(def.name);
        Bucket b;
        b.name = def.name;
        bool has_rate = false;
        for (ngx_uint_t i = 2; i < cf->args->nelts; ++i) {
            std::string_view arg = sv(value[i]);
            bool dup = false;
            if (take_match(arg, "caller", def.caller, dup) ||
                take_match(arg, "procedure", def.procedure, dup)) {
                const grl::MatchSpec& spec =
                    arg.substr(0, 6) == "caller" ? def.caller : def.procedure;
                if (dup) {
                    return conf_error(
                        cf, d + ": more than one caller/procedure match in " + quoted(arg));
                }
                if (spec.value.empty()) {
                    return conf_error(cf, d + ": empty value in " + quoted(arg));
                }
                if (spec.kind == grl::MatchKind::Regex) {
                    std::string err = grl::check_regex(spec.value);
                    if (!err.empty()) return conf_error(cf, d + ": " + err);
                }
                continue;
            }
            if (arg.substr(0, 5) == "rate=" && !has_rate) {
                std::string_view rate = arg.substr(5);
                auto r = grl::parse_rate(rate);
                if (!r) {
                    return conf_error(cf, d + ": " + r.error + ", expected e.g. 100r/s or 600r/m");
                }
                // A fixed window per rate unit: N per second, or N per minute.
                b.window = rate.substr(rate.size() - 3) == "r/m" ? 60 : 1;
                b.limit = 0;
                for (char c : rate.substr(0, rate.size() - 3)) {
                    b.limit = b.limit * 10 + static_cast<std::uint64_t>(c - '0');  // checked above
                }
                has_rate = true;
                continue;
            }
            return conf_error(cf, d + ": invalid parameter " + quoted(arg));
        }
        if (!has_rate) return conf_error(cf, d + " must have \"rate\" parameter");
        if (m->cpp->buckets.size() >= 65535) return conf_error(cf, d + ": too many buckets");
        b.limit_arg = std::to_string(b.limit);
        b.ttl_arg = std::to_string(b.window + 1);  // outlives its window, then goes
        std::string err = m->cpp->matcher.add(def);
        if (!err.empty()) return conf_error(cf, d + ": " + err);
        m->cpp->buckets.push_back(std::move(b));
        return NGX_CONF_OK;
    });
}

// redis_limit_status CODE
char* set_status(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* l = static_cast<LocConf*>(conf);
        ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
        if (l->status != NGX_CONF_UNSET_UINT) return const_cast<char*>("is duplicate");
        ngx_int_t n = ngx_atoi(value[1].data, value[1].len);
        if (n < 400 || n > 599) {
            return conf_error(cf, directive(cmd) + ": invalid status " + quoted(sv(value[1])) +
                                      ", expected 400..599");
        }
        l->status = static_cast<ngx_uint_t>(n);
        return NGX_CONF_OK;
    });
}

ngx_conf_enum_t fail_modes[] = {
    {ngx_string("open"), kFailOpen}, {ngx_string("closed"), kFailClosed}, {ngx_null_string, 0}};

ngx_command_t commands[] = {
    {ngx_string("redis_limit_server"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, set_server,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("redis_limit_caller"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_http_set_complex_value_slot, NGX_HTTP_MAIN_CONF_OFFSET, offsetof(MainConf, caller),
     nullptr},
    {ngx_string("redis_limit_missing_caller"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     set_missing_caller, NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("redis_limit_bucket"), NGX_HTTP_MAIN_CONF | NGX_CONF_2MORE, set_bucket,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("redis_limit_timeout"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, ngx_conf_set_msec_slot,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(MainConf, timeout), nullptr},
    {ngx_string("redis_limit_fail"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, ngx_conf_set_enum_slot,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(MainConf, fail), fail_modes},
    {ngx_string("redis_limit_max_pending"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_num_slot, NGX_HTTP_MAIN_CONF_OFFSET, offsetof(MainConf, max_pending), nullptr},
    {ngx_string("redis_limit"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(LocConf, enable), nullptr},
    {ngx_string("redis_limit_status"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1, set_status,
     NGX_HTTP_LOC_CONF_OFFSET, 0, nullptr},
    ngx_null_command};

// ---- configuration create / init / merge -------------------------------------------

void* create_main_conf(ngx_conf_t* cf) noexcept {
    auto* m = static_cast<MainConf*>(ngx_pcalloc(cf->pool, sizeof(MainConf)));
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (m == nullptr || cln == nullptr) return nullptr;
    m->cpp = new (std::nothrow) Config();
    if (m->cpp == nullptr) return nullptr;
    cln->handler = free_config;
    cln->data = m->cpp;
    m->missing_caller = NGX_CONF_UNSET_UINT;
    m->timeout = NGX_CONF_UNSET_MSEC;
    m->fail = NGX_CONF_UNSET_UINT;
    m->max_pending = NGX_CONF_UNSET;
    return m;
}

char* init_main_conf(ngx_conf_t* cf, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* m = static_cast<MainConf*>(conf);
        ngx_conf_init_uint_value(m->missing_caller, kMissingSkip);
        ngx_conf_init_msec_value(m->timeout, 50);
        ngx_conf_init_uint_value(m->fail, kFailOpen);
        ngx_conf_init_value(m->max_pending, 10000);
        if (m->timeout == 0) return conf_error(cf, "\"redis_limit_timeout\" must be positive");
        if (m->max_pending < 1)
            return conf_error(cf, "\"redis_limit_max_pending\" must be positive");
        if (m->cpp->buckets.empty()) return NGX_CONF_OK;
        if (!m->has_server)
            return conf_error(cf, "\"redis_limit_bucket\" needs \"redis_limit_server\"");
        for (const Bucket& b : m->cpp->buckets) {
            const grl::BucketDef& d = m->cpp->matcher.def(&b - m->cpp->buckets.data());
            if (d.caller.kind != grl::MatchKind::Any && m->caller == nullptr) {
                return conf_error(cf,
                                  "\"redis_limit_bucket\" \"" + b.name +
                                      "\" matches on caller but \"redis_limit_caller\" is not set");
            }
        }
        m->cpp->conn.script = kScript;
        m->cpp->conn.stall_ms = m->timeout * 4 > 2000 ? m->timeout * 4 : 2000;
        return NGX_CONF_OK;
    });
}

void* create_loc_conf(ngx_conf_t* cf) noexcept {
    auto* l = static_cast<LocConf*>(ngx_pcalloc(cf->pool, sizeof(LocConf)));
    if (l == nullptr) return nullptr;
    l->enable = NGX_CONF_UNSET;
    l->status = NGX_CONF_UNSET_UINT;
    return l;
}

char* merge_loc_conf(ngx_conf_t*, void* parent, void* child) noexcept {
    auto* prev = static_cast<LocConf*>(parent);
    auto* conf = static_cast<LocConf*>(child);
    ngx_conf_merge_value(conf->enable, prev->enable, 0);
    ngx_conf_merge_uint_value(conf->status, prev->status, 429);
    return NGX_CONF_OK;
}

// ---- lifecycle ----------------------------------------------------------------------

ngx_int_t preconfiguration(ngx_conf_t* cf) noexcept {
    for (VarDef& d : var_defs) {
        ngx_http_variable_t* var = ngx_http_add_variable(cf, &d.name, NGX_HTTP_VAR_NOCACHEABLE);
        if (var == nullptr) return NGX_ERROR;
        var->get_handler = get_variable;
        var->data = d.kind;
    }
    return NGX_OK;
}

ngx_int_t postconfiguration(ngx_conf_t* cf) noexcept {
    auto* cmcf = static_cast<ngx_http_core_main_conf_t*>(
        ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module));
    // Preaccess, like limit_req and grl: after rewrites have settled $uri.
    auto* h = static_cast<ngx_http_handler_pt*>(
        ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers));
    if (h == nullptr) return NGX_ERROR;
    *h = preaccess_handler;
    return NGX_OK;
}

ngx_int_t init_process(ngx_cycle_t* cycle) noexcept {
    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) return NGX_OK;
    auto* m = static_cast<MainConf*>(
        ngx_http_cycle_get_module_main_conf(cycle, ngx_http_redis_limit_module));
    if (m == nullptr || m->cpp->buckets.empty()) return NGX_OK;
    g_pending = 0;
    conn_start(cycle, &m->cpp->conn);
    return NGX_OK;
}

void exit_process(ngx_cycle_t*) noexcept {
    conn_stop();
}

ngx_http_module_t module_ctx = {
    preconfiguration,   // preconfiguration: register $redis_limit_* variables
    postconfiguration,  // postconfiguration: install the preaccess handler
    create_main_conf,   // create main configuration
    init_main_conf,     // init main configuration: defaults, checks, the script
    nullptr,            // create server configuration
    nullptr,            // merge server configuration
    create_loc_conf,    // create location configuration
    merge_loc_conf      // merge location configuration
};

}  // namespace
}  // namespace redis_limit

extern "C" {
ngx_module_t ngx_http_redis_limit_module = {
    NGX_MODULE_V1,
    &redis_limit::module_ctx,   // module context
    redis_limit::commands,      // module directives
    NGX_HTTP_MODULE,            // module type
    nullptr,                    // init master
    nullptr,                    // init module
    redis_limit::init_process,  // init process: connect to Redis (each worker)
    nullptr,                    // init thread
    nullptr,                    // exit thread
    redis_limit::exit_process,  // exit process: free the connection
    nullptr,                    // exit master
    NGX_MODULE_V1_PADDING};
}
