// The keyed branch of the per-request decision (docs/per-key.md): a keyed bucket's own ratio
// is always 0, so decide() passes it; its key's verdict (keyed::Table::admit: the control
// plane's ratio for the key, else the local cap) is folded into decide()'s outcome here.
// Header-only, like decision.h; no allocation, lock, syscall or exception.
#pragma once

#include <cstddef>
#include <cstdint>

#include "grl/plane/decision.h"
#include "grl/plane/keyed.h"
#include "grl/plane/shm_layout.h"

namespace grl {

// Burst of the local cap: 100 ms worth of requests (docs/per-key.md, "The local cap").
inline constexpr std::uint64_t kKeyedBurstMs = 100;

// One matched keyed bucket's verdict for the request's key. No default member initializers:
// the request path keeps an array of them on its stack and sets only those it uses.
struct KeyedVerdict {
    std::uint16_t at;  // index into `matched` (decide()'s argument)
    keyed::Verdict verdict;
    bool deny;                // effective mode deny, and not grl_dry_run
    std::uint32_t key_len;    // the request's key (for $grl_key and the log)...
    const char* key;          // ...its bytes, the request's own
    std::uint64_t threshold;  // the key's ratio when verdict is Ratio (for $grl_ratio)
    // The key is over its limit: dropped (ratio or local cap), or passed under a ratio above 0
    // in force (the RateLimit header field's r=0 for a keyed bucket).
    bool over;
};

// Folds the keyed verdicts into `out` (decide()'s result for the same `matched`, which
// counted every bucket's offered request already): a deny bucket's drop rejects the request,
// counted as dropped in every matched bucket, as decide() does; a shadow bucket's drop counts
// as shadow_dropped in that bucket and makes a passing request a shadow drop. `cost` as for
// decide().
inline void fold_keyed(const shm::View& shm, const std::uint16_t* matched, std::size_t n,
                       const KeyedVerdict* kv, std::size_t kn, std::uint32_t worker, Outcome& out,
                       const std::uint32_t* cost = nullptr) {
    bool newly_dropped = false;
    for (std::size_t k = 0; k < kn; ++k) {
        if (kv[k].verdict == keyed::Verdict::Pass) continue;
        if (kv[k].deny) {
            if (out.decision == Decision::Drop) continue;
            out.decision = Decision::Drop;
            out.decided_by = kv[k].at;
            out.threshold = kv[k].threshold;
            newly_dropped = true;
            continue;
        }
        shm.counters(matched[kv[k].at], worker)
            .shadow_dropped.fetch_add(cost ? cost[kv[k].at] : 1, std::memory_order_relaxed);
        if (out.decision == Decision::Pass) {
            out.decision = Decision::ShadowDrop;
            out.decided_by = kv[k].at;
            out.threshold = kv[k].threshold;
        }
    }
    if (!newly_dropped) return;
    for (std::size_t i = 0; i < n; ++i) {
        shm.counters(matched[i], worker)
            .dropped.fetch_add(cost ? cost[i] : 1, std::memory_order_release);
    }
}

}  // namespace grl
