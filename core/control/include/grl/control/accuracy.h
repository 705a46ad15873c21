// How well each bucket instance's limit holds (docs/operations.md "Accuracy"), from one sample
// per instance about every second. Pure: the caller passes the monotonic time.
//
// - held: admitted / limit summed over the last minute's samples in which the instance enforced
//   (deny mode, unkeyed, a limit above 0) and offered exceeded the limit. 1.0 holds exactly,
//   1.1 admits 10% over. None while no such sample.
// - settle: a change in demand starts when offered rises above the limit, or, while above it,
//   moves by more than kDemandStep from where the last change settled; it settles at the first
//   sample with admitted within kSettleBand of the limit. Demand falling back to the limit first
//   ends it unsettled. The rates are the controller's smoothed ones: settle includes smoothing.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "grl/control/instance_key.h"

namespace grl::control {

struct AccuracySample {
    double offered_rps = 0;
    double admitted_rps = 0;
    double limit_rps = 0;
    bool enforcing = false;  // deny mode and unkeyed (a keyed bucket's limit is per key)
};

struct AccuracyResult {
    std::optional<double> held;                      // admitted / limit while over, last minute
    std::optional<double> settle_seconds;            // of the last change in demand that settled
    std::optional<std::uint64_t> settling_since_ms;  // a change not settled yet (monotonic)
};

class Accuracy {
  public:
    static constexpr std::uint64_t kWindowMs = 60000;
    static constexpr double kDemandStep = 0.25;
    static constexpr double kSettleBand = 0.10;

    // The samples of every instance at `mono_ms` (cheapest in key order, as the controller's
    // instances are kept); instances absent are forgotten.
    void record(std::uint64_t mono_ms,
                const std::vector<std::pair<InstanceKey, AccuracySample>>& now);
    // None for an instance not in the last record().
    std::optional<AccuracyResult> result(const InstanceKey& k) const;
    std::size_t instances() const { return state_.size(); }

  private:
    struct Over {  // one sample with offered above the limit
        std::uint64_t mono_ms;
        double admitted_rps;
        double limit_rps;
    };
    struct State {
        std::deque<Over> over;  // the last kWindowMs, oldest first
        bool was_over = false;
        double level_rps = 0;            // offered where the last change started or settled
        std::uint64_t change_ms = 0;     // a change in demand not settled; 0 none
        std::optional<double> settle_s;  // the last that settled
    };
    static void step(State& s, std::uint64_t mono_ms, const AccuracySample& x);

    std::map<InstanceKey, State> state_;
};

}  // namespace grl::control
