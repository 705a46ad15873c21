// Synthetic histories with known answers for the limits half of grl-rlc, and an in-memory
// HistorySource. Every series has one sample per `step_s` from since_s to until_s, with
// peak offered = mean offered = f(sample start) unless the shape says otherwise.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "history.h"

namespace grl::rlc::fixtures {

constexpr std::int64_t kMin = 60;
constexpr std::int64_t kHour = 3600;
constexpr std::int64_t kDay = 86400;
constexpr std::int64_t kWeek = 7 * kDay;
// A Monday 00:00 UTC, so that day-of-week arithmetic in shapes is simple.
constexpr std::int64_t kEpoch = 1'795'996'800;  // 2026-11-30T00:00:00Z

inline InstanceKey global(const std::string& bucket) {
    return InstanceKey{bucket, Scope::Global, "", ""};
}
inline InstanceKey zone(const std::string& bucket, const std::string& region,
                        const std::string& z) {
    return InstanceKey{bucket, Scope::Zone, region, z};
}

// f(t) -> offered rate; `keep(t)` false leaves a gap.
inline Series make_series(InstanceKey key, std::int64_t since_s, std::int64_t until_s,
                          const std::function<double(std::int64_t)>& f,
                          const std::function<bool(std::int64_t)>& keep = nullptr,
                          std::int32_t step_s = 60) {
    Series s;
    s.key = std::move(key);
    for (std::int64_t t = since_s; t < until_s; t += step_s) {
        if (keep && !keep(t)) continue;
        Sample smp;
        smp.start_s = t;
        smp.length_s = step_s;
        smp.ticks = step_s;
        double v = f(t);
        smp.offered = {v, v};
        smp.admitted = {v, v};
        smp.limit_rps = -1;
        s.samples.push_back(smp);
    }
    return s;
}

inline std::function<double(std::int64_t)> flat(double v) {
    return [v](std::int64_t) { return v; };
}
// `base`, and `base + extra` on weekdays from 12:00 to 14:00 UTC.
inline std::function<double(std::int64_t)> weekly(double base, double extra) {
    return [=](std::int64_t t) {
        std::int64_t rel = t - kEpoch;
        std::int64_t day = ((rel / kDay) % 7 + 7) % 7;  // 0 = Monday
        std::int64_t hour = ((rel % kDay) + kDay) % kDay / kHour;
        return (day < 5 && hour >= 12 && hour < 14) ? base + extra : base;
    };
}
// From `from` at since_s, growing by `per_week` every week.
inline std::function<double(std::int64_t)> ramp(std::int64_t since_s, double from,
                                                double per_week) {
    return
        [=](std::int64_t t) { return from + per_week * static_cast<double>(t - since_s) / kWeek; };
}
// `base`, and `height` during [at_s, at_s + len_s).
inline std::function<double(std::int64_t)> spike(double base, std::int64_t at_s, std::int64_t len_s,
                                                 double height) {
    return [=](std::int64_t t) { return t >= at_s && t < at_s + len_s ? height : base; };
}

// In memory, as the store would answer: instances with a sample in [since, until), in
// InstanceKey order; counts the slice reads so that tests can check how a caller reads.
class MemoryHistory : public HistorySource {
  public:
    explicit MemoryHistory(std::vector<Series> s) : series_(std::move(s)) {
        std::sort(series_.begin(), series_.end(),
                  [](const Series& a, const Series& b) { return a.key < b.key; });
    }
    std::vector<std::string> buckets(std::int64_t since_s, std::int64_t until_s) override {
        std::set<std::string> names;
        for (const auto& s : series_)
            for (const auto& smp : s.samples)
                if (smp.start_s >= since_s && smp.start_s < until_s) {
                    names.insert(s.key.bucket);
                    break;
                }
        return {names.begin(), names.end()};
    }
    std::vector<Series> read(std::int64_t since_s, std::int64_t until_s,
                             const std::vector<std::string>& buckets) override {
        reads.push_back(buckets);
        std::set<std::string> wanted(buckets.begin(), buckets.end());
        std::vector<Series> out;
        for (const auto& s : series_) {
            if (!wanted.count(s.key.bucket)) continue;
            Series r;
            r.key = s.key;
            for (const auto& smp : s.samples)
                if (smp.start_s >= since_s && smp.start_s < until_s) r.samples.push_back(smp);
            if (!r.samples.empty()) out.push_back(std::move(r));
        }
        return out;
    }
    using HistorySource::read;

    std::vector<std::vector<std::string>> reads;  // the names of every read(), in order

  private:
    std::vector<Series> series_;
};

}  // namespace grl::rlc::fixtures
