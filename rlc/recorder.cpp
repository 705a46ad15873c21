#include "recorder.h"

#include <algorithm>
#include <limits>
#include <set>

namespace grl::rlc {

Recorder::Recorder(std::int32_t interval_s) : interval_s_(std::max<std::int32_t>(1, interval_s)) {}

void Recorder::poll(std::int64_t now_ms, const std::vector<ControllerReport>& reports) {
    std::int64_t now_s = now_ms >= 0 ? now_ms / 1000 : -((-now_ms + 999) / 1000);
    std::int64_t start = now_s - ((now_s % interval_s_) + interval_s_) % interval_s_;
    std::set<InstanceKey> seen;
    for (const ControllerReport& r : reports) {
        if (r.has_tick_marker) {
            auto it = last_marker_.find(r.source);
            if (it != last_marker_.end() && it->second == r.tick_marker) continue;
            last_marker_[r.source] = r.tick_marker;
        }
        for (const Observation& o : r.observations) {
            if (!seen.insert(o.key).second) continue;
            Acc& a = open_[start][o.key];
            const double v[5] = {o.offered, o.admitted, o.dropped, o.shadow_dropped,
                                 o.candidate_would_drop};
            for (int i = 0; i < 5; ++i) {
                a.sum[i].mean += v[i];
                a.sum[i].peak = a.ticks == 0 ? v[i] : std::max(a.sum[i].peak, v[i]);
            }
            a.ratio_sum += o.ratio;
            a.limit_rps = o.limit_rps;  // the newest: in force at the end of the interval
            a.mode = o.mode;
            a.candidate_limit_rps = o.candidate_limit_rps;
            ++a.ticks;
        }
    }
}

std::vector<Series> Recorder::take_until(std::int64_t end_s) {
    std::map<InstanceKey, Series> by_key;
    for (auto it = open_.begin(); it != open_.end() && it->first + interval_s_ <= end_s;) {
        for (const auto& [key, a] : it->second) {
            Sample s;
            s.start_s = it->first;
            s.length_s = interval_s_;
            s.ticks = a.ticks;
            Rate* out[5] = {&s.offered, &s.admitted, &s.dropped, &s.shadow_dropped,
                            &s.candidate_would_drop};
            for (int i = 0; i < 5; ++i) *out[i] = {a.sum[i].mean / a.ticks, a.sum[i].peak};
            s.limit_rps = a.limit_rps;
            s.mode = a.mode;
            s.candidate_limit_rps = a.candidate_limit_rps;
            s.ratio = a.ratio_sum / a.ticks;
            Series& ser = by_key[key];
            ser.key = key;
            ser.samples.push_back(s);
        }
        it = open_.erase(it);
    }
    std::vector<Series> v;
    v.reserve(by_key.size());
    for (auto& [k, s] : by_key) v.push_back(std::move(s));
    return v;
}

std::vector<Series> Recorder::take_closed(std::int64_t now_ms) {
    return take_until(now_ms / 1000);
}

std::vector<Series> Recorder::take_all() {
    return take_until(std::numeric_limits<std::int64_t>::max() - interval_s_);
}

}  // namespace grl::rlc
