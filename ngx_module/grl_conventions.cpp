// What clients and limit_req users expect of a rate limiter: the IETF RateLimit header
// fields (grl_ratelimit_headers) and application/problem+json rejections
// (grl_problem_json). The values are formatted by core's grl/plane/ratelimit_fields.h; this file
// only reads the request's record and the shm, and talks to nginx.

#include <algorithm>
#include <cstring>

#include "grl/plane/ratelimit_fields.h"
#include "grl_module.h"

namespace grl::ngx {
namespace {

ngx_http_output_header_filter_pt g_next_header_filter = nullptr;

// One list member per bucket at most: kMaxMatchesPerRequest x (quoted name + parameters).
constexpr std::size_t kFieldMax = kMaxMatchesPerRequest * (kMaxNameLen + 64);

std::string_view slot_name(const shm::View& shm, std::uint16_t slot) {
    const char* s = shm.slot(slot).name;
    return {s, strnlen(s, kMaxNameLen + 1)};
}

ngx_str_t as_ngx_str(std::string_view s) {
    return {s.size(), reinterpret_cast<u_char*>(const_cast<char*>(s.data()))};
}

// Adds the header `key` with a copy of [begin, end) in the request's pool.
ngx_int_t push_header(ngx_http_request_t* r, ngx_str_t key, const char* begin, const char* end) {
    auto len = static_cast<size_t>(end - begin);
    auto* value = static_cast<u_char*>(ngx_pnalloc(r->pool, len));
    auto* h = static_cast<ngx_table_elt_t*>(ngx_list_push(&r->headers_out.headers));
    if (value == nullptr || h == nullptr) return NGX_ERROR;
    ngx_memcpy(value, begin, len);
    h->hash = 1;
    h->key = key;
    h->value.data = value;
    h->value.len = len;
    return NGX_OK;
}

// A quota bucket's members, named "NAME.quota": its policy (q=N, w= the window's length) and,
// while its instruction is live, what is left of it (as of that instruction) and the seconds
// until its window ends. A keyed bucket's quota is each key's: what is left is known only for
// a key that used its quota up (`used_up`: r=0). False when the policy does not fit.
bool add_quota_fields(const shm::BucketSlot& s, bool live, std::uint64_t now, std::string_view name,
                      const QuotaSpec& quota, bool keyed, bool used_up, char* policy, char*& pp,
                      char* limit, char*& lp) {
    constexpr std::string_view kSuffix = ".quota";
    char qname[kMaxNameLen + kSuffix.size()];
    char* q = std::copy_n(name.data(), std::min(name.size(), kMaxNameLen), qname);
    q = std::copy_n(kSuffix.data(), kSuffix.size(), q);
    const std::string_view qn(qname, static_cast<std::size_t>(q - qname));
    const Window w = window_at(quota, static_cast<std::uint64_t>(ngx_time()) * 1000);
    char* np = fields::append_quota_policy(policy, pp, policy + kFieldMax, qn, quota.n,
                                           (w.end_ms - w.start_ms) / 1000);
    if (np == nullptr) return false;
    pp = np;
    const std::uint64_t reset = s.quota_reset_ms.load(std::memory_order_relaxed);
    if (!live || reset == 0 || (keyed && !used_up)) return true;
    const std::uint64_t t = reset > now ? (reset - now + 999) / 1000 : 0;
    np = fields::append_remaining(limit, lp, limit + kFieldMax, qn,
                                  keyed ? 0 : s.quota_left.load(std::memory_order_relaxed), t);
    if (np != nullptr) lp = np;
    return true;
}

// RateLimit-Policy for every matched bucket that enforces (effective mode deny), with its
// limit in force: the control plane's while its instruction is live, else rate=. RateLimit
// only where grl knows the answer: a bucket whose ratio in force is above 0 is over its
// fleet-wide quota, so its available quota is 0; for the bucket that rejected the request the
// effective window is the Retry-After sent, else 1 s (the policy window). Nothing under
// grl_dry_run: nothing is enforced there.
ngx_int_t add_fields(ngx_http_request_t* r, const MainConf* m, const RequestCtx& ctx) {
    shm::View shm(m->shm_base);
    const std::uint64_t now = ngx_current_msec;
    // Composed on the stack, then copied to the pool at their size: the pool's first block
    // (4 KiB) usually has room for that, not for the worst case.
    char policy[kFieldMax];
    char limit[kFieldMax];
    char* pp = policy;
    char* lp = limit;
    for (std::uint8_t i = 0; i < ctx.n; ++i) {
        std::uint16_t slot = ctx.matched[i];
        const shm::BucketSlot& s = shm.slot(slot);
        bool live = bucket_state(s, now) == shm::PlaneState::Active;
        Mode mode;
        std::uint64_t limit_mrps;
        if (live) {
            mode = static_cast<Mode>(s.mode.load(std::memory_order_relaxed));
            limit_mrps = s.limit_mrps.load(std::memory_order_relaxed);
        } else {
            const std::vector<int>& of = m->cpp->def_of_slot;
            int d = slot < of.size() ? of[slot] : -1;
            if (d < 0) continue;  // a run-time bucket without a live instruction
            const BucketDef& def = m->cpp->table.defs[static_cast<std::size_t>(d)];
            mode = def.mode;
            limit_mrps = def.limit_mrps;
        }
        if (mode != Mode::Deny) continue;
        std::string_view name = slot_name(shm, slot);
        const std::vector<int>& of = m->cpp->def_of_slot;
        const int d = slot < of.size() ? of[slot] : -1;
        const QuotaSpec quota =
            d >= 0 ? m->cpp->table.quota(static_cast<std::size_t>(d)) : QuotaSpec{};
        const auto bit = static_cast<std::uint16_t>(1U << i);
        if (quota && !add_quota_fields(s, live, now, name, quota, (ctx.keyed & bit) != 0,
                                       (ctx.keyed_used_up & bit) != 0, policy, pp, limit, lp)) {
            break;
        }
        if (limit_mrps == kNoRateMrps) continue;  // quota= alone: no rate to state
        char* np = fields::append_policy(policy, pp, policy + kFieldMax, name, limit_mrps);
        if (np == nullptr) break;
        pp = np;
        // A keyed bucket's own ratio is always 0: what counts is the request's key, over its
        // limit (a ratio for the key, or this host's local cap, which holds without the
        // control plane too).
        if (ctx.keyed & bit) {
            if ((ctx.keyed_over & bit) == 0) continue;
        } else if (!live || s.threshold.load(std::memory_order_relaxed) == 0) {
            continue;
        }
        bool decider = ctx.outcome.decision == Decision::Drop && ctx.outcome.decided_by == i;
        std::uint64_t t = decider && ctx.retry_after_s ? ctx.retry_after_s : 1;
        np = fields::append_exhausted(limit, lp, limit + kFieldMax, name, t);
        if (np != nullptr) lp = np;
    }
    if (pp != policy && push_header(r, as_ngx_str("RateLimit-Policy"), policy, pp) != NGX_OK)
        return NGX_ERROR;
    if (lp != limit && push_header(r, as_ngx_str("RateLimit"), limit, lp) != NGX_OK)
        return NGX_ERROR;
    return NGX_OK;
}

ngx_int_t header_filter(ngx_http_request_t* r) noexcept {
    if (r != r->main) return g_next_header_filter(r);
    auto* l = static_cast<LocConf*>(ngx_http_get_module_loc_conf(r, ngx_http_grl_module));
    if (!l->ratelimit_headers) return g_next_header_filter(r);
    auto* m = static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_grl_module));
    const RequestCtx* ctx = m->shm_base ? find_ctx(r) : nullptr;
    // Out of memory: the response goes out without the fields rather than failing over a hint.
    if (ctx && !ctx->dry_run) (void)add_fields(r, m, *ctx);
    return g_next_header_filter(r);
}

}  // namespace

ngx_int_t install_header_filter(ngx_conf_t* cf) noexcept {
    auto* m = static_cast<MainConf*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_grl_module));
    if (m == nullptr || !m->ratelimit_headers_used) return NGX_OK;
    g_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = header_filter;
    return NGX_OK;
}

// Answers the rejection itself, as `return` does, so that the body is problem+json rather than
// nginx's HTML error page (error_page does not apply). When the body cannot be built the
// plain rejection is returned instead.
ngx_int_t send_problem(ngx_http_request_t* r, const RequestCtx& ctx, ngx_uint_t status) noexcept {
    auto* m = static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_grl_module));
    shm::View shm(m->shm_base);
    std::string_view name = slot_name(shm, ctx.matched[ctx.outcome.decided_by]);
    auto* buf = static_cast<char*>(ngx_pnalloc(r->pool, fields::kProblemMax));
    const bool per_key = (ctx.keyed >> ctx.outcome.decided_by) & 1;
    char* end = buf ? fields::append_problem(buf, buf + fields::kProblemMax,
                                             static_cast<unsigned>(status), name, per_key)
                    : nullptr;
    if (end == nullptr) return static_cast<ngx_int_t>(status);
    ngx_http_complex_value_t cv;
    ngx_memzero(&cv, sizeof(cv));
    cv.value.data = reinterpret_cast<u_char*>(buf);
    cv.value.len = static_cast<size_t>(end - buf);
    ngx_str_t type = ngx_string("application/problem+json");
    ngx_int_t rc = ngx_http_send_response(r, status, &type, &cv);
    ngx_http_finalize_request(r, rc);
    return NGX_DONE;
}

}  // namespace grl::ngx
