// The request path: find buckets, count, sample, decide, record the decision
// for the $grl_* variables. No lock, no syscall, no logging unless dropping;
// the only memory taken is one small request-pool record when a bucket matched.

#include <cstring>
#include <vector>

#include "grl/ratio.h"
#include "grl_module.h"

namespace grl::ngx {
namespace {

// Marks our request record in the pool's cleanup list, where it survives
// internal redirects (which clear module contexts), as the realip module does.
void ctx_marker(void*) noexcept {}

// Reads a request attribute; false when the variable is not found or empty.
bool read_source(ngx_http_request_t* r, const Source& s, std::string_view& out) {
    if (s.index >= 0) {
        ngx_http_variable_value_t* v =
            ngx_http_get_indexed_variable(r, static_cast<ngx_uint_t>(s.index));
        if (v == nullptr || v->not_found || v->len == 0) return false;
        out = {reinterpret_cast<const char*>(v->data), v->len};
        return true;
    }
    if (s.cv == nullptr) return false;
    ngx_str_t val;
    if (ngx_http_complex_value(r, s.cv, &val) != NGX_OK || val.len == 0) return false;
    out = {reinterpret_cast<const char*>(val.data), val.len};
    return true;
}

// This process's copy of the run-time bucket definitions, rebuilt when the
// zone's runtime_gen moves (rare; the only time the request path allocates).
struct RuntimeCache {
    std::uint64_t gen = ~0ULL;
    const void* zone = nullptr;
    Matcher matcher;
    std::vector<std::uint16_t> slots;
};
RuntimeCache* g_runtime = nullptr;

const RuntimeCache* runtime_buckets(const MainConf* m, const zone::View& z) {
    std::uint64_t gen = z.header().runtime_gen.load(std::memory_order_acquire);
    if (g_runtime && g_runtime->gen == gen && g_runtime->zone == m->zone_base) return g_runtime;
    try {
        auto* c = new RuntimeCache();
        std::vector<RuntimeBucket> rt = load_runtime(z, c->gen);
        for (const RuntimeBucket& b : rt) {
            if (m->cpp->table.find(b.def.name) >= 0) continue;  // configured wins
            if (c->matcher.add(b.def).empty()) c->slots.push_back(b.slot);
        }
        c->matcher.count_limit_hits_in(
            &z.header()
                 .worker[static_cast<std::uint32_t>(ngx_worker) % zone::kWorkerSlots]
                 .regex_limit_hits);
        c->zone = m->zone_base;
        delete g_runtime;
        g_runtime = c;
    } catch (const std::exception&) {
        // Out of memory: keep the previous definitions (or none).
    }
    return g_runtime;
}

// Adds Retry-After to a rejection; `secs` receives the delay sent (0: none).
ngx_int_t set_retry_after(ngx_http_request_t* r, const LocConf* l, ngx_uint_t& secs) {
    secs = 0;
    if (l->retry_after == 0) return NGX_OK;
    secs = l->retry_after / 1000;
    ngx_uint_t jitter = l->retry_after_jitter / 1000;
    if (jitter) secs += g_prng.next32() % (jitter + 1);
    auto* h = static_cast<ngx_table_elt_t*>(ngx_list_push(&r->headers_out.headers));
    auto* buf = static_cast<u_char*>(ngx_pnalloc(r->pool, NGX_INT_T_LEN));
    if (h == nullptr || buf == nullptr) return NGX_ERROR;
    h->hash = 1;
    ngx_str_set(&h->key, "Retry-After");
    h->value.data = buf;
    h->value.len = static_cast<size_t>(ngx_sprintf(buf, "%ui", secs) - buf);
    return NGX_OK;
}

}  // namespace

RequestCtx* find_ctx(ngx_http_request_t* r) noexcept {
    auto* ctx = static_cast<RequestCtx*>(ngx_http_get_module_ctx(r, ngx_http_grl_module));
    if (ctx || !r->internal) return ctx;
    for (ngx_pool_cleanup_t* c = r->pool->cleanup; c; c = c->next) {
        if (c->handler == ctx_marker) {
            ctx = static_cast<RequestCtx*>(c->data);
            ngx_http_set_ctx(r, ctx, ngx_http_grl_module);
            return ctx;
        }
    }
    return nullptr;
}

ngx_int_t preaccess_handler(ngx_http_request_t* r) noexcept {
    auto* l = static_cast<LocConf*>(ngx_http_get_module_loc_conf(r, ngx_http_grl_module));
    if (!l->enable || r != r->main) return NGX_DECLINED;
    auto* m = static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_grl_module));
    if (m->zone_base == nullptr || m->cpp->table.defs.empty()) return NGX_DECLINED;
    if (find_ctx(r)) return NGX_DECLINED;  // already decided before an internal redirect

    zone::View z(m->zone_base);
    std::uint32_t worker = static_cast<std::uint32_t>(ngx_worker);
    RequestKey key;
    key.has_caller = read_source(r, m->caller, key.caller);
    if (!key.has_caller && (m->caller.cv || m->caller.index >= 0)) {
        z.header().worker[worker % zone::kWorkerSlots].missing_caller.fetch_add(
            1, std::memory_order_relaxed);
        if (m->missing_caller == kMissingValue) {
            key.caller = {reinterpret_cast<const char*>(m->missing_caller_value.data),
                          m->missing_caller_value.len};
            key.has_caller = true;
        }
    }
    if (!read_source(r, m->procedure, key.procedure)) key.procedure = {};

    std::uint16_t idx[kMaxMatchesPerRequest];
    std::uint16_t slots[kMaxMatchesPerRequest];
    std::size_t n = m->cpp->matcher.match(key, idx, kMaxMatchesPerRequest);
    for (std::size_t i = 0; i < n; ++i) slots[i] = m->cpp->table.slots[idx[i]];
    const RuntimeCache* rt = runtime_buckets(m, z);
    if (rt && !rt->slots.empty() && n < kMaxMatchesPerRequest) {
        std::size_t k = rt->matcher.match(key, idx + n, kMaxMatchesPerRequest - n);
        for (std::size_t i = n; i < n + k; ++i) slots[i] = rt->slots[idx[i]];
        n += k;
    }
    if (n == 0) return NGX_DECLINED;

    Outcome out = decide(z, slots, n, worker, ngx_current_msec, g_prng, l->dry_run != 0);

    // The record: read by the $grl_* variables and, where MainConf::record_needed says so, by
    // the RateLimit header fields and problem+json bodies (grl_conventions.cpp).
    auto* ctx = static_cast<RequestCtx*>(ngx_palloc(r->pool, sizeof(RequestCtx)));
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(r->pool, 0);
    if (ctx && cln) {
        ctx->outcome = out;
        ctx->n = static_cast<std::uint8_t>(n);
        ctx->dry_run = l->dry_run ? 1 : 0;
        ctx->retry_after_s = 0;
        for (std::size_t i = 0; i < n; ++i) ctx->matched[i] = slots[i];
        cln->handler = ctx_marker;
        cln->data = ctx;
        ngx_http_set_ctx(r, ctx, ngx_http_grl_module);
    }

    if (out.decision == Decision::Pass || out.decision == Decision::None) return NGX_DECLINED;
    const char* name = z.slot(slots[out.decided_by]).name;
    std::uint32_t ppm = threshold_to_ppm(out.threshold);
    if (out.decision == Decision::ShadowDrop) {
        ngx_log_error(l->log_level, r->connection->log, 0,
                      "grl: bucket \"%s\" would drop the request (%s), ratio %uD.%06uD", name,
                      l->dry_run ? "dry run" : "shadow", ppm / kPpmOne, ppm % kPpmOne);
        return NGX_DECLINED;
    }
    ngx_log_error(l->log_level, r->connection->log, 0,
                  "grl: request dropped by bucket \"%s\", ratio %uD.%06uD", name, ppm / kPpmOne,
                  ppm % kPpmOne);
    ngx_uint_t secs = 0;
    if (set_retry_after(r, l, secs) != NGX_OK) return NGX_ERROR;
    if (ctx && cln) ctx->retry_after_s = static_cast<std::uint32_t>(secs);
    if (l->problem_json && ctx && cln) return send_problem(r, *ctx, l->reject_status);
    return static_cast<ngx_int_t>(l->reject_status);
}

// ---- variables -------------------------------------------------------------------

namespace {

enum VarKind : uintptr_t { kVarDecision, kVarBucket, kVarBuckets, kVarRatio, kVarStatus };

// $grl_status in limit_req's words ($limit_req_status); a shadow drop, by a mode=shadow bucket
// or under grl_dry_run, is what limit_req calls REJECTED_DRY_RUN.
std::string_view status_word(Decision d) {
    switch (d) {
        case Decision::Pass: return "PASSED";
        case Decision::Drop: return "REJECTED";
        case Decision::ShadowDrop: return "REJECTED_DRY_RUN";
        case Decision::None: break;
    }
    return {};
}

ngx_int_t get_variable(ngx_http_request_t* r, ngx_http_variable_value_t* v,
                       uintptr_t data) noexcept {
    RequestCtx* ctx = find_ctx(r->main);
    auto* m = static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_grl_module));
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    auto set = [&](std::string_view s) {
        v->data = reinterpret_cast<u_char*>(const_cast<char*>(s.data()));
        v->len = s.size();
        return NGX_OK;
    };
    if (data == kVarDecision) return set(to_string(ctx ? ctx->outcome.decision : Decision::None));
    if (ctx == nullptr) {
        v->not_found = 1;
        return NGX_OK;
    }
    if (data == kVarStatus) {
        std::string_view w = status_word(ctx->outcome.decision);
        if (w.empty()) {
            v->not_found = 1;
            return NGX_OK;
        }
        return set(w);
    }
    // Names are read from the zone slots, which serve configured and run-time buckets alike.
    zone::View z(m->zone_base);
    auto name = [&](std::uint16_t slot) {
        const char* s = z.slot(slot).name;
        return std::string_view(s, strnlen(s, kMaxNameLen + 1));
    };
    if (data == kVarBucket) {
        Decision d = ctx->outcome.decision;
        if (d != Decision::Drop && d != Decision::ShadowDrop) {
            v->not_found = 1;
            return NGX_OK;
        }
        return set(name(ctx->matched[ctx->outcome.decided_by]));
    }
    if (data == kVarBuckets) {
        size_t len = 0;
        for (std::uint8_t i = 0; i < ctx->n; ++i) len += name(ctx->matched[i]).size() + 1;
        auto* p = static_cast<u_char*>(ngx_pnalloc(r->pool, len));
        if (p == nullptr) return NGX_ERROR;
        v->data = p;
        for (std::uint8_t i = 0; i < ctx->n; ++i) {
            if (i) *p++ = ',';
            std::string_view s = name(ctx->matched[i]);
            p = ngx_cpymem(p, s.data(), s.size());
        }
        v->len = static_cast<size_t>(p - v->data);
        return NGX_OK;
    }
    // kVarRatio
    auto* p = static_cast<u_char*>(ngx_pnalloc(r->pool, 16));
    if (p == nullptr) return NGX_ERROR;
    std::uint32_t ppm = threshold_to_ppm(ctx->outcome.threshold);
    v->data = p;
    v->len = static_cast<size_t>(ngx_sprintf(p, "%uD.%06uD", ppm / kPpmOne, ppm % kPpmOne) - p);
    return NGX_OK;
}

struct VarDef {
    ngx_str_t name;
    VarKind kind;
};
VarDef var_defs[] = {{ngx_string("grl_decision"), kVarDecision},
                     {ngx_string("grl_bucket"), kVarBucket},
                     {ngx_string("grl_buckets"), kVarBuckets},
                     {ngx_string("grl_ratio"), kVarRatio},
                     {ngx_string("grl_status"), kVarStatus}};

}  // namespace

ngx_int_t add_variables(ngx_conf_t* cf) noexcept {
    for (VarDef& d : var_defs) {
        ngx_http_variable_t* var = ngx_http_add_variable(cf, &d.name, NGX_HTTP_VAR_NOCACHEABLE);
        if (var == nullptr) return NGX_ERROR;
        var->get_handler = get_variable;
        var->data = d.kind;
    }
    return NGX_OK;
}

}  // namespace grl::ngx
