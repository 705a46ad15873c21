// What a request counts as (docs/directives.md, `grl_bucket ... cost= cost_after=`): its units
// in each matched bucket, read before the decision (cost=), and the units known only after the
// response (cost_after=), added at the log phase. No allocation, lock or syscall: variables are
// read by index, values parsed in place (grl/plane/cost.h).

#include "grl_module.h"

namespace grl::ngx {

namespace {

void count_invalid(const shm::View& shm, std::uint32_t worker) {
    shm.header().worker[worker % shm::kWorkerSlots].cost_invalid.fetch_add(
        1, std::memory_order_relaxed);
}

}  // namespace

void request_costs(ngx_http_request_t* r, const MainConf* m, const shm::View& shm,
                   std::uint32_t worker, const std::uint16_t* idx, std::size_t configured,
                   std::size_t n, std::uint32_t* cost) noexcept {
    for (std::size_t i = 0; i < n; ++i) {
        cost[i] = 1;  // run-time buckets
        if (i >= configured) continue;
        const Config::Cost& c = m->cpp->costs[idx[i]];
        cost[i] = c.units;
        if (c.var.index < 0) continue;
        std::string_view v;
        if (!read_source(r, c.var, v) || !read_cost(v, cost[i])) {
            cost[i] = 1;  // empty or not a number: counted, never an error page
            count_invalid(shm, worker);
        }
    }
}

ngx_int_t cost_after_handler(ngx_http_request_t* r) noexcept {
    auto* m = static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_grl_module));
    if (m->shm_base == nullptr || !m->cpp->any_cost_after) return NGX_OK;
    const RequestCtx* ctx = find_ctx(r);
    // A rejected request was not served: nothing came after it.
    if (ctx == nullptr || ctx->outcome.decision == Decision::Drop) return NGX_OK;
    const shm::View shm(m->shm_base);
    const auto worker = static_cast<std::uint32_t>(ngx_worker);
    const Config& conf = *m->cpp;
    for (std::size_t i = 0; i < ctx->n; ++i) {
        const std::uint16_t slot = ctx->matched[i];
        const int def = slot < conf.def_of_slot.size() ? conf.def_of_slot[slot] : -1;
        if (def < 0 || conf.costs[def].after.index < 0) continue;
        std::string_view v;
        std::uint32_t units = 0;
        if (!read_source(r, conf.costs[def].after, v)) continue;  // nothing known: adds 0
        if (!read_cost(v, units)) {
            count_invalid(shm, worker);
            continue;
        }
        shm.counters(slot, worker).offered.fetch_add(units, std::memory_order_relaxed);
        if (conf.table.keyed_spec(static_cast<std::size_t>(def)) == nullptr) continue;
        // The key's own account: its offered units and its local cap.
        std::string_view key;
        if (!read_source(r, conf.key_sources[def], key)) key = kEmptyKey;
        const keyed::Table t = shm.key_table(slot);
        keyed::Entry* e = t.valid() ? t.find(keyed::hash_key(key)) : nullptr;
        if (e == nullptr) continue;  // evicted meanwhile: the bucket's sum has the units
        const shm::BucketSlot& s = shm.slot(slot);
        const bool active = ngx_current_msec < s.expires_ms.load(std::memory_order_relaxed);
        t.charge(
            *e, ngx_current_msec,
            active ? s.limit_mrps.load(std::memory_order_relaxed) : conf.table.defs[def].limit_mrps,
            units);
    }
    return NGX_OK;
}

}  // namespace grl::ngx
