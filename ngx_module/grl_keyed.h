// The keyed branch of the request path (docs/per-key.md): for each matched keyed bucket, the
// request's key is read (a single variable by index, no copy), hashed, found or claimed in the
// bucket's key table in the shm, and decided there (the control plane's ratio for the
// key while it holds, else the local cap). No allocation, lock or syscall. Header-only, like
// decision.h, so that it inlines into the request path (grl_handler.cpp) and the Lua API
// (grl_lua.cpp).
#pragma once

#include "grl_module.h"

namespace grl::ngx {

// The verdict of keyed bucket `def` (in shm slot `slot`) for `key`, as admit_key says.
inline __attribute__((always_inline)) bool verdict_for(const BucketDef& def, const shm::View& shm,
                                                       std::uint16_t slot, std::uint16_t at,
                                                       std::string_view key, bool dry_run,
                                                       std::uint32_t cost, std::uint64_t now,
                                                       KeyedVerdict& v) {
    const keyed::Table t = shm.key_table(slot);
    if (!t.valid()) return false;  // never for a configured keyed bucket (init_shm made it)
    // The control plane's mode and limit while its instruction holds, else the configured.
    const shm::BucketSlot& s = shm.slot(slot);
    const bool active = now < s.expires_ms.load(std::memory_order_relaxed);
    const Mode mode = active ? static_cast<Mode>(s.mode.load(std::memory_order_relaxed)) : def.mode;
    const std::uint64_t rate =
        active ? s.limit_mrps.load(std::memory_order_relaxed) : def.limit_mrps;
    keyed::Entry& e = t.touch(keyed::hash_key(key), key, now);
    v.at = at;
    // The key's ratio in force, if any. Most keys have none: then nothing is sampled, and
    // the largest draw keeps a ratio below 1.0 that the reporter sets meanwhile from
    // dropping this request (decided as if it had come a moment earlier).
    const std::uint64_t key_ratio = e.expires_ms.load(std::memory_order_relaxed) > now
                                        ? e.threshold.load(std::memory_order_relaxed)
                                        : 0;
    const std::uint32_t draw = key_ratio > 0 ? g_prng.next32() : ~std::uint32_t{0};
    v.verdict = t.admit(e, now, rate, kKeyedBurstMs, draw, cost);
    v.deny = !dry_run && mode == Mode::Deny;
    v.threshold = v.verdict == keyed::Verdict::Ratio ? key_ratio : 0;
    v.over = v.verdict != keyed::Verdict::Pass || key_ratio > 0;
    v.key = key.data();
    v.key_len = static_cast<std::uint32_t>(key.size());
    return true;
}

// One keyed bucket's verdict for `key` (configured bucket table.defs[idx] in shm slot `slot`,
// `at` its index in the request's matched buckets); false when the bucket has no key table.
inline bool admit_key(const MainConf* m, const shm::View& shm, std::uint16_t idx,
                      std::uint16_t slot, std::uint16_t at, std::string_view key, bool dry_run,
                      std::uint32_t cost, KeyedVerdict& v) noexcept {
    return verdict_for(m->cpp->table.defs[idx], shm, slot, at, key, dry_run, cost, ngx_current_msec,
                       v);
}

// For each matched configured keyed bucket (idx: indices into table.defs; slots: their shm
// slots), reads its key (empty: kEmptyKey), finds or claims the key's entry and decides it
// (keyed::Table::admit). `cost`: the request's units per matched bucket (null: 1 each).
inline void admit_keys(ngx_http_request_t* r, const MainConf* m, const shm::View& shm,
                       const std::uint16_t* idx, const std::uint16_t* slots, std::size_t n,
                       bool dry_run, const std::uint32_t* cost, KeyedRequest& out) noexcept {
    out.n = 0;
    out.dropped = false;
    const Config& c = *m->cpp;
    const std::uint64_t now = ngx_current_msec;
    for (std::size_t i = 0; i < n; ++i) {
        if (c.table.keyed_spec(idx[i]) == nullptr) continue;
        std::string_view key;
        if (!read_source(r, c.key_sources[idx[i]], key)) key = kEmptyKey;
        if (verdict_for(c.table.defs[idx[i]], shm, slots[i], static_cast<std::uint16_t>(i), key,
                        dry_run, cost ? cost[i] : 1, now, out.verdicts[out.n])) {
            out.dropped |= out.verdicts[out.n].verdict != keyed::Verdict::Pass;
            ++out.n;
        }
    }
}

}  // namespace grl::ngx
