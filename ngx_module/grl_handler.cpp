// The request path: find buckets, count, sample, decide, record the decision
// for the $grl_* variables. No lock, no syscall, no logging unless dropping;
// the only memory taken is the per-request record, and only when a $grl_*
// variable or another feature reads it (MainConf::record_needed).

#include <cstring>
#include <vector>

#include "grl/common/ratio.h"
#include "grl_keyed.h"
#include "grl_module.h"

namespace grl::ngx {
namespace {

// A request decided while nothing needs the per-request record points at one of
// these: no allocation, and $grl_decision (read by name, e.g. by SSI) still
// shows the decision; n = 0 marks them.
RequestCtx g_decided[] = {{{Decision::None, 0, 0}, 0, 0, 0, {}, nullptr, 0, 0, 0, 0},
                          {{Decision::Pass, 0, 0}, 0, 0, 0, {}, nullptr, 0, 0, 0, 0},
                          {{Decision::Drop, 0, 0}, 0, 0, 0, {}, nullptr, 0, 0, 0, 0},
                          {{Decision::ShadowDrop, 0, 0}, 0, 0, 0, {}, nullptr, 0, 0, 0, 0}};

// The request's slot of our internal variable (see record_slot_index): it lives
// in r->variables, which internal redirects keep (they clear module contexts)
// and subrequests share with their main request.
ngx_http_variable_value_t& record_slot(ngx_http_request_t* r, const MainConf* m) {
    return r->main->variables[m->record_index];
}

// The request's record, or null when no decision was made; for a request decided
// while the record was not needed, a record holding only the decision.
const RequestCtx* find_record(ngx_http_request_t* r, const MainConf* m) {
    if (m->record_index == NGX_CONF_UNSET_UINT) return nullptr;
    return reinterpret_cast<const RequestCtx*>(record_slot(r, m).data);
}

// At most this many of a complex value's variables are tracked (one bit each in a uint64_t).
constexpr std::size_t kMaxTrackedFlushes = 64;

// Calls f(i, slot) for the request's value of each variable a complex value flushes (`flushes`
// ends at -1), up to kMaxTrackedFlushes; the bound is checked before the array is read.
template <typename F>
void for_each_flushed(ngx_http_request_t* r, const ngx_uint_t* flushes, F&& f) {
    if (flushes == nullptr) return;
    for (std::size_t i = 0; i < kMaxTrackedFlushes && flushes[i] != static_cast<ngx_uint_t>(-1);
         ++i) {
        f(i, r->variables[flushes[i]]);
    }
}

}  // namespace

bool read_complex(ngx_http_request_t* r, const Source& s, std::string_view& out) {
    if (s.cv == nullptr) return false;
    // ngx_http_complex_value() flushes non-cacheable variables before evaluating
    // but leaves cacheable ones cached: remember which of them we evaluate first.
    std::uint64_t cached = 0;
    for_each_flushed(r, s.cv->flushes, [&](std::size_t i, ngx_http_variable_value_t& slot) {
        if (slot.valid || slot.not_found) cached |= std::uint64_t{1} << i;
    });
    ngx_str_t val;
    const bool ok = ngx_http_complex_value(r, s.cv, &val) == NGX_OK && val.len != 0;
    if (ok) out = {reinterpret_cast<const char*>(val.data), val.len};  // a copy in the pool
    for_each_flushed(r, s.cv->flushes, [&](std::size_t i, ngx_http_variable_value_t& slot) {
        if (((cached >> i) & 1) == 0) slot.valid = slot.not_found = 0;
    });
    return ok;
}

namespace {

// This process's copy of the run-time bucket definitions, rebuilt when the
// shm's runtime_gen moves (rare; the only time the request path allocates).
struct RuntimeCache {
    std::uint64_t gen = ~0ULL;
    const void* shm = nullptr;  // the shared memory the definitions were read from
    Matcher matcher;
    std::vector<std::uint16_t> slots;
};
RuntimeCache* g_runtime = nullptr;

const RuntimeCache* runtime_buckets(const MainConf* m, const shm::View& shm) {
    std::uint64_t gen = shm.header().runtime_gen.load(std::memory_order_acquire);
    if (g_runtime && g_runtime->gen == gen && g_runtime->shm == m->shm_base) return g_runtime;
    try {
        auto* c = new RuntimeCache();
        std::vector<RuntimeBucket> rt = load_runtime(shm, c->gen);
        for (const RuntimeBucket& b : rt) {
            if (m->cpp->table.find(b.def.name) >= 0) continue;  // configured wins
            if (c->matcher.add(b.def).empty()) c->slots.push_back(b.slot);
        }
        c->matcher.count_limit_hits_in(
            &shm.header()
                 .worker[static_cast<std::uint32_t>(ngx_worker) % shm::kWorkerSlots]
                 .regex_limit_hits);
        c->shm = m->shm_base;
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
    auto* m = static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_grl_module));
    const RequestCtx* ctx = find_record(r, m);
    // A shared record (n = 0) holds only the decision: no bucket to speak of.
    return ctx != nullptr && ctx->n > 0 ? const_cast<RequestCtx*>(ctx) : nullptr;
}

ngx_int_t preaccess_handler(ngx_http_request_t* r) noexcept {
    auto* l = static_cast<LocConf*>(ngx_http_get_module_loc_conf(r, ngx_http_grl_module));
    if (!l->enable || r != r->main) return NGX_DECLINED;
    auto* m = static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_grl_module));
    if (m->shm_base == nullptr || m->cpp->table.defs.empty()) return NGX_DECLINED;
    ngx_http_variable_value_t& record = record_slot(r, m);
    if (record.data) return NGX_DECLINED;  // decided before an internal redirect: count once

    shm::View shm(m->shm_base);
    std::uint32_t worker = static_cast<std::uint32_t>(ngx_worker);
    RequestKey key;
    // Without grl_caller there is nothing to read.
    const bool caller_set = m->caller.cv != nullptr || m->caller.index >= 0;
    key.has_caller = caller_set && read_source(r, m->caller, key.caller);
    if (!key.has_caller && caller_set) {
        shm.header().worker[worker % shm::kWorkerSlots].missing_caller.fetch_add(
            1, std::memory_order_relaxed);
        if (m->missing_caller == kMissingValue) {
            key.caller = {reinterpret_cast<const char*>(m->missing_caller_value.data),
                          m->missing_caller_value.len};
            key.has_caller = true;
        }
    }
    if (m->procedure_is_uri) {
        // What $uri's handler returns, without a call through the variables table.
        key.procedure = {reinterpret_cast<const char*>(r->uri.data), r->uri.len};
    } else if (!read_source(r, m->procedure, key.procedure)) {
        key.procedure = {};
    }

    std::uint16_t idx[kMaxMatchesPerRequest];
    std::uint16_t slots[kMaxMatchesPerRequest];
    std::size_t n = m->cpp->matcher.match(key, idx, kMaxMatchesPerRequest);
    for (std::size_t i = 0; i < n; ++i) slots[i] = m->cpp->table.slots[idx[i]];
    const std::size_t configured = n;
    const RuntimeCache* rt = runtime_buckets(m, shm);
    if (rt && !rt->slots.empty() && n < kMaxMatchesPerRequest) {
        std::size_t k = rt->matcher.match(key, idx + n, kMaxMatchesPerRequest - n);
        for (std::size_t i = n; i < n + k; ++i) slots[i] = rt->slots[idx[i]];
        n += k;
    }
    if (n == 0) return NGX_DECLINED;

    // What the request counts as in each bucket (grl_bucket cost=); null: 1 in every one.
    std::uint32_t units[kMaxMatchesPerRequest];
    const std::uint32_t* cost = nullptr;
    if (m->cpp->any_cost) {
        request_costs(r, m, shm, worker, idx, configured, n, units);
        cost = units;
    }
    Outcome out = decide(shm, slots, n, worker, ngx_current_msec, g_prng, l->dry_run != 0, cost);
    // Keyed buckets (docs/per-key.md): each key's own verdict, folded into the outcome.
    KeyedRequest keys;
    keys.n = 0;
    keys.dropped = false;
    if (m->cpp->any_keyed)
        admit_keys(r, m, shm, idx, slots, configured, l->dry_run != 0, cost, keys);
    const KeyedVerdict* by_key = nullptr;  // the keyed verdict that decided, if one did
    if (keys.dropped) {
        fold_keyed(shm, slots, n, keys.verdicts, keys.n, worker, out, cost);
        for (std::size_t k = 0; k < keys.n; ++k) {
            if (keys.verdicts[k].at == out.decided_by) by_key = &keys.verdicts[k];
        }
    }
    const KeyedVerdict* shown = by_key ? by_key : keys.n ? &keys.verdicts[0] : nullptr;
    const std::string_view request_key =
        shown ? std::string_view(shown->key, shown->key_len) : std::string_view();

    // The record: read by the $grl_* variables and, where MainConf::record_needed says so, by
    // the RateLimit header fields and problem+json bodies (grl_conventions.cpp).
    RequestCtx* ctx = &g_decided[static_cast<std::size_t>(out.decision)];
    RequestCtx* full = nullptr;
    if (m->record_needed) {
        full = static_cast<RequestCtx*>(ngx_palloc(r->pool, sizeof(RequestCtx)));
        if (full) {
            full->outcome = out;
            full->n = static_cast<std::uint8_t>(n);
            full->dry_run = l->dry_run ? 1 : 0;
            full->retry_after_s = 0;
            for (std::size_t i = 0; i < n; ++i) full->matched[i] = slots[i];
            full->key = request_key.data();
            full->key_len = static_cast<std::uint32_t>(request_key.size());
            full->keyed = full->keyed_over = full->keyed_used_up = 0;
            for (std::size_t k = 0; k < keys.n; ++k) {
                const auto bit = static_cast<std::uint16_t>(1U << keys.verdicts[k].at);
                full->keyed |= bit;
                if (keys.verdicts[k].over) full->keyed_over |= bit;
                if (keys.verdicts[k].threshold >= keyed::kThresholdOne) full->keyed_used_up |= bit;
            }
            ctx = full;
        }
    }
    record.data = reinterpret_cast<u_char*>(ctx);
    record.not_found = 1;  // so that nginx never calls the slot's handler over our pointer

    if (out.decision == Decision::Pass || out.decision == Decision::None) return NGX_DECLINED;
    const char* name = shm.slot(slots[out.decided_by]).name;
    std::uint32_t ppm = threshold_to_ppm(out.threshold);
    if (by_key && by_key->verdict != keyed::Verdict::Pass) {
        // The key as docs/directives.md shows it (escaped, cut, or its hash), formatted only
        // when the line is written (ngx_log_error's own level test).
        const KeyedSpec* spec = m->cpp->table.keyed_spec(idx[by_key->at]);
        char shown_key[keyed::kLogKeyBytes];
        const ngx_str_t k = {
            r->connection->log->log_level >= l->log_level
                ? keyed::key_for_log(request_key, spec && spec->hash_keys, shown_key)
                : 0,
            reinterpret_cast<u_char*>(shown_key)};
        const char* why = by_key->verdict == keyed::Verdict::Ratio ? "ratio" : "local cap";
        if (out.decision == Decision::ShadowDrop) {
            ngx_log_error(l->log_level, r->connection->log, 0,
                          "grl: bucket \"%s\" would drop the request of key \"%V\" (%s, %s), "
                          "ratio %uD.%06uD",
                          name, &k, l->dry_run ? "dry run" : "shadow", why, ppm / kPpmOne,
                          ppm % kPpmOne);
            return NGX_DECLINED;
        }
        ngx_log_error(l->log_level, r->connection->log, 0,
                      "grl: request of key \"%V\" dropped by bucket \"%s\" (%s), ratio %uD.%06uD",
                      &k, name, why, ppm / kPpmOne, ppm % kPpmOne);
    } else if (out.decision == Decision::ShadowDrop) {
        ngx_log_error(l->log_level, r->connection->log, 0,
                      "grl: bucket \"%s\" would drop the request (%s), ratio %uD.%06uD", name,
                      l->dry_run ? "dry run" : "shadow", ppm / kPpmOne, ppm % kPpmOne);
        return NGX_DECLINED;
    } else {
        ngx_log_error(l->log_level, r->connection->log, 0,
                      "grl: request dropped by bucket \"%s\", ratio %uD.%06uD", name, ppm / kPpmOne,
                      ppm % kPpmOne);
    }
    ngx_uint_t secs = 0;
    if (set_retry_after(r, l, secs) != NGX_OK) return NGX_ERROR;
    if (full) full->retry_after_s = static_cast<std::uint32_t>(secs);
    if (l->problem_json && full) return send_problem(r, *full, l->reject_status);
    return static_cast<ngx_int_t>(l->reject_status);
}

// ---- variables -------------------------------------------------------------------

namespace {

enum VarKind : uintptr_t { kVarDecision, kVarBucket, kVarBuckets, kVarRatio, kVarStatus, kVarKey };

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
    auto* m = static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_grl_module));
    const RequestCtx* ctx = find_record(r, m);
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    auto set = [&](std::string_view s) {
        v->data = reinterpret_cast<u_char*>(const_cast<char*>(s.data()));
        v->len = s.size();
        return NGX_OK;
    };
    if (data == kVarDecision) return set(to_string(ctx ? ctx->outcome.decision : Decision::None));
    if (data == kVarStatus) {  // the decision alone: a shared record holds it too
        std::string_view w = status_word(ctx ? ctx->outcome.decision : Decision::None);
        if (w.empty()) {
            v->not_found = 1;
            return NGX_OK;
        }
        return set(w);
    }
    if (ctx == nullptr || ctx->n == 0) {  // no decision, or no record kept
        v->not_found = 1;
        return NGX_OK;
    }
    // Names are read from the shm slots, which serve configured and run-time buckets alike.
    shm::View shm(m->shm_base);
    auto name = [&](std::uint16_t slot) {
        const char* s = shm.slot(slot).name;
        return std::string_view(s, strnlen(s, kMaxNameLen + 1));
    };
    if (data == kVarKey) {  // the key the request was counted under in a keyed bucket
        if (ctx->key_len == 0) {
            v->not_found = 1;
            return NGX_OK;
        }
        return set({ctx->key, ctx->key_len});
    }
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
VarDef var_defs[] = {
    {ngx_string("grl_decision"), kVarDecision}, {ngx_string("grl_bucket"), kVarBucket},
    {ngx_string("grl_buckets"), kVarBuckets},   {ngx_string("grl_ratio"), kVarRatio},
    {ngx_string("grl_status"), kVarStatus},     {ngx_string("grl_key"), kVarKey}};

// The per-request record lives in the request's slot of this variable. It is
// internal (not hashed: a name lookup at run time, e.g. by SSI, never finds it);
// a configuration that names it reads it as not found.
ngx_str_t record_var_name = ngx_string("grl_internal_record");

ngx_int_t record_var_get(ngx_http_request_t*, ngx_http_variable_value_t* v, uintptr_t) noexcept {
    v->not_found = 1;
    return NGX_OK;
}

}  // namespace

ngx_int_t add_variables(ngx_conf_t* cf) noexcept {
    for (VarDef& d : var_defs) {
        ngx_http_variable_t* var = ngx_http_add_variable(cf, &d.name, NGX_HTTP_VAR_NOCACHEABLE);
        if (var == nullptr) return NGX_ERROR;
        var->get_handler = get_variable;
        var->data = d.kind;
    }
    ngx_http_variable_t* var = ngx_http_add_variable(cf, &record_var_name, NGX_HTTP_VAR_NOHASH);
    if (var == nullptr) return NGX_ERROR;
    var->get_handler = record_var_get;
    return NGX_OK;
}

ngx_int_t index_record(ngx_conf_t* cf, MainConf* m) noexcept {
    const ngx_int_t index = ngx_http_get_variable_index(cf, &record_var_name);
    if (index == NGX_ERROR) return NGX_ERROR;
    m->record_index = static_cast<ngx_uint_t>(index);
    return NGX_OK;
}

void settle_request_path(ngx_cycle_t* cycle) noexcept {
    auto* m =
        static_cast<MainConf*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_grl_module));
    auto* cmcf = static_cast<ngx_http_core_main_conf_t*>(
        ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module));
    if (m == nullptr || cmcf == nullptr) return;
    // Every variable named anywhere in the configuration (log formats, headers,
    // maps, scripts) has an index by now.
    auto* vars = static_cast<ngx_http_variable_t*>(cmcf->variables.elts);
    auto named = [](const ngx_str_t& s, std::string_view want) {
        return std::string_view(reinterpret_cast<const char*>(s.data), s.len) == want;
    };
    for (ngx_uint_t i = 0; i < cmcf->variables.nelts; ++i) {
        if (i == m->record_index) continue;
        for (const VarDef& d : var_defs) {
            if (named(vars[i].name, {reinterpret_cast<const char*>(d.name.data), d.name.len})) {
                m->record_needed = 1;
            }
        }
    }
    // Lua reads variables by name at run time (ngx.var.grl_ratio in log_by_lua), which no
    // scan of the configuration sees: with the lua module loaded, keep the full record.
    for (ngx_uint_t i = 0; cycle->modules[i] != nullptr; ++i) {
        const char* name = cycle->modules[i]->name;
        if (name != nullptr && std::strcmp(name, "ngx_http_lua_module") == 0) m->record_needed = 1;
    }
    m->procedure_is_uri = m->procedure.index >= 0 &&
                          static_cast<ngx_uint_t>(m->procedure.index) < cmcf->variables.nelts &&
                          named(vars[m->procedure.index].name, "uri");
}

}  // namespace grl::ngx
