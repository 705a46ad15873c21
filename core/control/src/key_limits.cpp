// See key_limits.h.
#include "grl/control/key_limits.h"

#include <algorithm>
#include <cmath>

#include "grl/control/rates.h"
#include "grl/common/ratio.h"
#include "grl/common/saturating.h"

namespace grl::control {

namespace {

std::uint64_t round_mrps(double v) {
    if (!(v > 0)) return 0;
    if (v >= 1.8e19) return UINT64_MAX;
    return static_cast<std::uint64_t>(std::llround(v));
}

bool busier(const KeyState* a, const KeyState* b) {
    if (a->offered_mrps != b->offered_mrps) return a->offered_mrps > b->offered_mrps;
    return a->hash < b->hash;
}

// Controller::smooth() for one key's offered rate.
double smooth(KeyState& k, double sample, bool hold, bool provisional, const KeyOptions& o) {
    if (!hold || k.samples.empty()) {
        if (k.last_provisional && !k.samples.empty()) k.samples.pop_back();
        k.samples.push_back(sample);
        k.last_provisional = provisional;
    }
    const std::size_t window = std::max<std::uint32_t>(o.window, 1);
    while (k.samples.size() > window) k.samples.pop_front();
    double mean = 0;
    for (double s : k.samples) mean += s;
    mean /= static_cast<double>(k.samples.size());
    const double newest = k.samples.back();
    if (o.fast_attack > 0 && newest > mean * (1.0 + o.fast_attack)) mean = newest;
    return mean;
}

}  // namespace

std::vector<wire::KeyRate> sum_keys(const std::vector<const std::vector<wire::KeyRate>*>& lists,
                                    std::size_t max) {
    std::vector<wire::KeyRate> out;
    std::unordered_map<std::uint64_t, std::size_t> at;
    for (const std::vector<wire::KeyRate>* list : lists) {
        for (const wire::KeyRate& k : *list) {
            // Rates only: a key listed for its quota use alone has none, and its use goes
            // to the quota ledger from the zone's own usage.
            if (k.offered_mrps == 0) continue;
            auto [it, added] = at.emplace(k.hash, out.size());
            if (added) {
                out.push_back(k);
                out.back().used = 0;
                continue;
            }
            wire::KeyRate& s = out[it->second];
            s.offered_mrps = sat_add(s.offered_mrps, k.offered_mrps);
            s.dropped_mrps = sat_add(s.dropped_mrps, k.dropped_mrps);
            s.hosts = sat_add(s.hosts, k.hosts);
            if (s.text.empty()) s.text = k.text;
        }
    }
    rates::keep_busiest_keys(out, max);
    return out;
}

std::size_t KeyTable::update(const std::vector<wire::KeyRate>& sum, bool hold, bool provisional,
                             std::uint64_t limit_mrps, const KeyOptions& o, std::uint64_t now_ms) {
    now_ms_ = now_ms;
    std::size_t refused = 0;
    seen_.clear();
    for (const wire::KeyRate& k : sum) {
        auto it = keys_.find(k.hash);
        if (it == keys_.end()) {
            if (k.offered_mrps == 0) continue;  // nothing to limit (listed for its quota use)
            if (keys_.size() >= o.max_keys) {
                ++refused;
                continue;
            }
            it = keys_.emplace(k.hash, KeyState{}).first;
            it->second.hash = k.hash;
        }
        KeyState& s = it->second;
        if (s.text.empty()) s.text = k.text;
        s.dropped_mrps = k.dropped_mrps;
        s.hosts = k.hosts;
        s.offered_mrps = smooth(s, static_cast<double>(k.offered_mrps), hold, provisional, o);
        seen_[k.hash] = true;
    }
    limited_ = 0;
    for (auto it = keys_.begin(); it != keys_.end();) {
        KeyState& s = it->second;
        if (!seen_.count(s.hash)) {
            // Under the reporters' threshold on every host (or not reported at all): 0.
            s.dropped_mrps = 0;
            s.hosts = 0;
            s.offered_mrps = smooth(s, 0.0, hold, provisional, o);
        }
        const std::uint32_t before = s.ratio_ppm;
        s.ratio_ppm =
            limit_mrps == 0 ? kPpmOne : drop_ratio_ppm(round_mrps(s.offered_mrps), limit_mrps);
        if (s.ratio_ppm > 0) {
            s.clear_until_ms = 0;
            ++limited_;
        } else if (before > 0) {
            s.clear_until_ms = std::max<std::uint64_t>(sat_add(now_ms, o.ttl_ms), 1);
        }
        const bool clearing = s.clear_until_ms != 0 && now_ms < s.clear_until_ms;
        if (!clearing) s.clear_until_ms = 0;
        const bool quiet =
            std::all_of(s.samples.begin(), s.samples.end(), [](double v) { return v <= 0; });
        if (s.ratio_ppm == 0 && !clearing && quiet) {
            it = keys_.erase(it);
        } else {
            ++it;
        }
    }
    return refused;
}

std::vector<wire::KeyRatio> KeyTable::ratios() const {
    std::vector<const KeyState*> out;
    for (const auto& [h, s] : keys_) {
        if (s.ratio_ppm > 0 || s.clear_until_ms != 0) out.push_back(&s);
    }
    std::sort(out.begin(), out.end(), busier);
    if (out.size() > wire::kMaxInstructionKeys) out.resize(wire::kMaxInstructionKeys);
    std::vector<wire::KeyRatio> r;
    r.reserve(out.size());
    for (const KeyState* s : out) r.push_back({s->hash, s->ratio_ppm});
    return r;
}

std::vector<const KeyState*> KeyTable::busiest(std::size_t n) const {
    std::vector<const KeyState*> out;
    out.reserve(keys_.size());
    for (const auto& [h, s] : keys_) out.push_back(&s);
    std::sort(out.begin(), out.end(), busier);
    if (out.size() > n) out.resize(n);
    return out;
}

const KeyState* KeyTable::find(std::uint64_t hash) const {
    auto it = keys_.find(hash);
    return it == keys_.end() ? nullptr : &it->second;
}

}  // namespace grl::control
