#include "grl/control/accuracy.h"

#include <algorithm>
#include <cmath>

namespace grl::control {

void Accuracy::step(State& s, std::uint64_t mono_ms, const AccuracySample& x) {
    while (!s.over.empty() && s.over.front().mono_ms + kWindowMs <= mono_ms) s.over.pop_front();
    if (!x.enforcing || x.limit_rps <= 0) {  // nothing to hold: start afresh when it enforces
        s = State{};
        return;
    }
    const bool over = x.offered_rps > x.limit_rps;
    if (over) s.over.push_back({mono_ms, x.admitted_rps, x.limit_rps});
    if (!over) {
        s.change_ms = 0;  // demand fell back first: nothing to settle
    } else if (s.change_ms == 0 && (!s.was_over || std::fabs(x.offered_rps - s.level_rps) >
                                                       kDemandStep * s.level_rps)) {
        s.change_ms = mono_ms;
    }
    if (s.change_ms != 0 && std::fabs(x.admitted_rps - x.limit_rps) <= kSettleBand * x.limit_rps) {
        s.settle_s = static_cast<double>(mono_ms - s.change_ms) / 1000.0;
        s.change_ms = 0;
        s.level_rps = x.offered_rps;
    } else if (s.change_ms != 0 || !over) {
        s.level_rps = x.offered_rps;  // a ramp while settling is the same change
    }
    s.was_over = over;
}

void Accuracy::record(std::uint64_t mono_ms,
                      const std::vector<std::pair<InstanceKey, AccuracySample>>& now) {
    auto by_key = [](const auto& a, const auto& b) { return a.first < b.first; };
    if (!std::is_sorted(now.begin(), now.end(), by_key)) {
        auto sorted = now;
        std::sort(sorted.begin(), sorted.end(), by_key);
        record(mono_ms, sorted);
        return;
    }
    // One walk of both in key order: instances that stay keep their node (no allocation a
    // second for each of 10,000 instances), the gone are erased, the new inserted in place.
    auto it = state_.begin();
    for (const auto& [key, sample] : now) {
        while (it != state_.end() && it->first < key) it = state_.erase(it);
        if (it == state_.end() || key < it->first) it = state_.emplace_hint(it, key, State{});
        step(it->second, mono_ms, sample);
        ++it;
    }
    state_.erase(it, state_.end());
}

std::optional<AccuracyResult> Accuracy::result(const InstanceKey& k) const {
    auto it = state_.find(k);
    if (it == state_.end()) return std::nullopt;
    const State& s = it->second;
    AccuracyResult r;
    double admitted = 0;
    double limit = 0;
    for (const Over& o : s.over) {
        admitted += o.admitted_rps;
        limit += o.limit_rps;
    }
    if (limit > 0) r.held = admitted / limit;
    r.settle_seconds = s.settle_s;
    if (s.change_ms != 0) r.settling_since_ms = s.change_ms;
    return r;
}

}  // namespace grl::control
