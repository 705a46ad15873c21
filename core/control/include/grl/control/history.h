// The controller's short history of every bucket instance, for the dashboard (docs/dashboard.md):
// one point per step (at least one interval) for the last `span`, in a ring, so that memory is
// bounded by max_series x points x sizeof(HistoryPoint) whatever runs for how long. Pure: the
// caller passes the wall clock of each sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "grl/control/control.h"

namespace grl::control {

// What the dashboard charts of one instance at one time (floats: a chart needs no more, and
// the ring is 20 bytes a point). NaN: the instance did not exist at that time.
struct HistoryPoint {
    float offered_rps = 0;
    float admitted_rps = 0;
    float limit_rps = 0;
    float ratio = 0;
    float shadow_dropped_rps = 0;
};

class History {
  public:
    struct Options {
        std::uint64_t span_ms = std::uint64_t{15} * 60 * 1000;  // how far back
        std::uint64_t step_ms = 1000;                           // one point per step at most
        std::size_t max_series = 500;                           // instances charted at most
    };
    explicit History(Options o);

    // Takes the instances' values as the next point, labelled `wall_ms`, unless the last point
    // is less than a step old on the monotonic clock (90% of a step: ticks jitter; monotonic:
    // a wall clock stepped back must not stop the history). Returns whether it took one.
    bool record(std::uint64_t mono_ms, std::uint64_t wall_ms,
                const std::vector<std::pair<InstanceKey, HistoryPoint>>& now);

    std::size_t capacity() const { return times_.size(); }  // points per series
    std::size_t points() const;                             // points held (<= capacity)
    std::uint64_t recorded() const { return recorded_; }    // points taken since start
    // Instances left out of the last point taken because max_series were held.
    std::uint64_t series_refused() const { return refused_; }
    std::size_t series() const { return series_.size(); }
    // The bound on the ring's memory (capacity x max_series points).
    std::size_t max_bytes() const;

    // Oldest first.
    std::vector<std::uint64_t> times() const;
    // The series, in InstanceKeyLess order, each with points() values, oldest first.
    struct Series {
        const InstanceKey* key;
        std::vector<HistoryPoint> points;
    };
    std::vector<Series> all() const;

  private:
    struct Ring {
        std::vector<HistoryPoint> values;  // capacity, indexed like times_
        std::uint64_t last_seen = 0;       // recorded_ when it was last present
    };
    std::size_t slot(std::uint64_t n) const { return static_cast<std::size_t>(n % capacity()); }

    Options o_;
    std::vector<std::uint64_t> times_;  // ring of point times (wall ms)
    std::uint64_t recorded_ = 0;
    std::uint64_t last_mono_ = 0;
    std::uint64_t refused_ = 0;
    std::map<InstanceKey, Ring, InstanceKeyLess> series_;
};

}  // namespace grl::control
