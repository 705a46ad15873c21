// The per-request decision: count, sample, decide. Header-only so that it
// inlines into the nginx handler; no allocation, lock, syscall or exception.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "grl/common/prng.h"
#include "grl/plane/shm_layout.h"

namespace grl {

enum class Decision : std::uint8_t { None = 0, Pass, Drop, ShadowDrop };

inline std::string_view to_string(Decision d) {
    switch (d) {
        case Decision::None: return "none";
        case Decision::Pass: return "pass";
        case Decision::Drop: return "drop";
        case Decision::ShadowDrop: return "shadow_drop";
    }
    return "none";
}

struct Outcome {
    Decision decision = Decision::None;
    std::uint16_t decided_by = 0;  // index into `matched` of the deciding bucket
    std::uint64_t threshold = 0;   // ratio applied (threshold units), see ratio.h
};

// `matched[i]` are shm slot numbers of the buckets the request matched.
// A request is dropped if any bucket whose effective mode is deny samples a
// drop; shadow buckets always sample and count would-be drops. Every matched
// bucket counts the request as offered, and as dropped when it was rejected.
// `dry_run` (grl_dry_run): every bucket is evaluated as if its mode were shadow.
// `cost[i]`: the units the request counts as in matched[i] (grl_bucket cost=); null: 1 each.
inline __attribute__((always_inline)) Outcome decide(const shm::View& shm,
                                                     const std::uint16_t* matched, std::size_t n,
                                                     std::uint32_t worker, std::uint64_t now_ms,
                                                     Prng& rng, bool dry_run = false,
                                                     const std::uint32_t* cost = nullptr) {
    Outcome out;
    if (n == 0) return out;
    out.decision = Decision::Pass;
    for (std::size_t i = 0; i < n; ++i) {
        shm::BucketSlot& s = shm.slot(matched[i]);
        if (now_ms >= s.expires_ms.load(std::memory_order_relaxed)) continue;  // fail open
        std::uint64_t t = s.threshold.load(std::memory_order_relaxed);
        if (t == 0) continue;
        bool deny = !dry_run && s.mode.load(std::memory_order_relaxed) ==
                                    static_cast<std::uint32_t>(Mode::Deny);
        if (deny && out.decision == Decision::Drop) continue;  // already rejected
        if (out.decision == Decision::Pass && t > out.threshold) out.threshold = t;
        if (rng.next32() >= t) continue;
        if (deny) {
            out.decision = Decision::Drop;
            out.decided_by = static_cast<std::uint16_t>(i);
            out.threshold = t;
        } else {
            shm.counters(matched[i], worker)
                .shadow_dropped.fetch_add(cost ? cost[i] : 1, std::memory_order_relaxed);
            if (out.decision == Decision::Pass) {
                out.decision = Decision::ShadowDrop;
                out.decided_by = static_cast<std::uint16_t>(i);
                out.threshold = t;
            }
        }
    }
    bool drop = out.decision == Decision::Drop;
    for (std::size_t i = 0; i < n; ++i) {
        shm::WorkerCounters& c = shm.counters(matched[i], worker);
        const std::uint64_t units = cost ? cost[i] : 1;
        c.offered.fetch_add(units, std::memory_order_relaxed);
        if (drop) c.dropped.fetch_add(units, std::memory_order_release);
    }
    return out;
}

}  // namespace grl
