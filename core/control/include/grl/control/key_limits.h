// Per-key ratios of one keyed bucket instance (docs/per-key.md "Ratios per key"): the
// controller's state for the keys of a bucket defined with `key=`.
//
// Every tick the instance's keys, summed by hash over its scope (sum_keys), go in; each key's
// offered rate is smoothed exactly as a bucket's (Controller::smooth: the mean of the last
// `window` samples, a provisional sample replaced by the next, a newest sample above the mean
// by more than `fast_attack` used alone), and its ratio is (offered - limit) / offered. A key
// absent from a tick's sums (under the reporters' threshold everywhere) samples 0. A key whose
// ratio falls to 0 is sent with ratio 0 for one TTL (which clears it on nginx), then, once its
// samples are all 0, forgotten. Pure logic: time is a number passed in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "grl/wire/wire.h"

namespace grl::control {

// Keys held per instance: a key beyond this is refused (counted) until one is forgotten.
// Four times what one usage entry carries, so that several zones' distinct busiest keys fit.
inline constexpr std::size_t kMaxInstanceKeys = 4 * wire::kMaxUsageKeys;

// Sums key lists by hash (offered, dropped and hosts added, saturating; the text from the
// first list that has one), busiest first, at most `max`.
std::vector<wire::KeyRate> sum_keys(const std::vector<const std::vector<wire::KeyRate>*>& lists,
                                    std::size_t max);

struct KeyState {
    std::uint64_t hash = 0;
    std::string text;                // "" when the hosts send hashes only
    std::deque<double> samples;      // offered mrps, newest last
    bool last_provisional = false;   // the newest sample summed only part of the hosts
    double offered_mrps = 0;         // smoothed
    std::uint64_t dropped_mrps = 0;  // the last sum (not smoothed: what nginx dropped)
    std::uint64_t hosts = 0;         // hosts that named the key in the last sum
    std::uint32_t ratio_ppm = 0;
    std::uint64_t clear_until_ms = 0;  // sending ratio 0 until then (monotonic); 0: not
};

struct KeyOptions {
    std::uint32_t window = 2;
    double fast_attack = 0.2;
    std::uint64_t ttl_ms = 3000;  // how long a cleared key's ratio 0 is sent
    std::size_t max_keys = kMaxInstanceKeys;
};

class KeyTable {
  public:
    // One tick. `sum`: the instance's keys this tick; `hold`: part of the usage is unknown,
    // keep the samples; `provisional`: some hosts have no rate yet. Returns how many keys of
    // `sum` were refused because the table is full.
    std::size_t update(const std::vector<wire::KeyRate>& sum, bool hold, bool provisional,
                       std::uint64_t limit_mrps, const KeyOptions& o, std::uint64_t now_ms);

    // What to publish: the keys over their limit and the ones being cleared (ratio 0), highest
    // offered first, at most wire::kMaxInstructionKeys.
    std::vector<wire::KeyRatio> ratios() const;
    // The `n` keys of the highest smoothed offered rate, busiest first.
    std::vector<const KeyState*> busiest(std::size_t n) const;
    std::size_t limited() const { return limited_; }  // keys with a ratio > 0
    std::size_t size() const { return keys_.size(); }
    const KeyState* find(std::uint64_t hash) const;

  private:
    std::unordered_map<std::uint64_t, KeyState> keys_;
    std::unordered_map<std::uint64_t, bool> seen_;  // scratch of update()
    std::size_t limited_ = 0;
    std::uint64_t now_ms_ = 0;  // of the last update
};

}  // namespace grl::control
