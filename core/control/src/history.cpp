#include "grl/control/history.h"

#include <algorithm>
#include <limits>

namespace grl::control {

namespace {
constexpr float kAbsent = std::numeric_limits<float>::quiet_NaN();
constexpr HistoryPoint kAbsentPoint{kAbsent, kAbsent, kAbsent, kAbsent, kAbsent};
}  // namespace

History::History(Options o) : o_(o) {
    if (o_.step_ms == 0) o_.step_ms = 1;
    times_.assign(std::max<std::uint64_t>(1, o_.span_ms / o_.step_ms), 0);
}

std::size_t History::points() const {
    return static_cast<std::size_t>(std::min<std::uint64_t>(recorded_, capacity()));
}

std::size_t History::max_bytes() const {
    return capacity() * (o_.max_series * sizeof(HistoryPoint) + sizeof(std::uint64_t));
}

bool History::record(std::uint64_t mono_ms, std::uint64_t wall_ms,
                     const std::vector<std::pair<InstanceKey, HistoryPoint>>& now) {
    if (recorded_ > 0 && mono_ms + o_.step_ms / 10 < last_mono_ + o_.step_ms) return false;
    last_mono_ = mono_ms;
    const std::uint64_t n = recorded_;
    const std::size_t s = slot(n);
    times_[s] = wall_ms;
    refused_ = 0;
    for (auto& [key, ring] : series_) ring.values[s] = kAbsentPoint;
    for (const auto& [key, point] : now) {
        auto it = series_.find(key);
        if (it == series_.end()) {
            if (series_.size() >= o_.max_series) {
                ++refused_;
                continue;
            }
            it = series_.emplace(key, Ring{std::vector<HistoryPoint>(capacity(), kAbsentPoint), 0})
                     .first;
        }
        it->second.values[s] = point;
        it->second.last_seen = n + 1;
    }
    recorded_ = n + 1;
    // A series absent from every point held is all NaN: forget it (and make room).
    for (auto it = series_.begin(); it != series_.end();) {
        if (recorded_ - it->second.last_seen >= capacity()) {
            it = series_.erase(it);
        } else {
            ++it;
        }
    }
    return true;
}

std::vector<std::uint64_t> History::times() const {
    std::vector<std::uint64_t> out;
    out.reserve(points());
    for (std::uint64_t i = recorded_ - points(); i < recorded_; ++i) out.push_back(times_[slot(i)]);
    return out;
}

std::vector<History::Series> History::all() const {
    std::vector<Series> out;
    out.reserve(series_.size());
    for (const auto& [key, ring] : series_) {
        Series se{&key, {}};
        se.points.reserve(points());
        for (std::uint64_t i = recorded_ - points(); i < recorded_; ++i)
            se.points.push_back(ring.values[slot(i)]);
        out.push_back(std::move(se));
    }
    return out;
}

}  // namespace grl::control
