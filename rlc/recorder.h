// Recording: what the controllers export at each poll, folded into recording intervals
// (docs/rlc-history.md, "Recording"). Pure logic: the caller passes the time of each poll
// (wall clock, so that intervals line up across restarts) and writes what comes out.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "history.h"

namespace grl::rlc {

// One instance as one controller showed it at one poll: its latest tick's rates.
struct Observation {
    InstanceKey key;
    double offered = 0, admitted = 0, dropped = 0, shadow_dropped = 0;  // r/s
    double limit_rps = -1;
    Mode mode = Mode::Deny;
    double ratio = 0;
    double candidate_limit_rps = -1;  // -1: no candidate
    double candidate_would_drop = 0;  // r/s
};

// What one controller answered to one poll.
struct ControllerReport {
    std::string source;  // the controller, as the operator named it (HOST:PORT)
    // Changes whenever the controller ticks (grl_controller_instructions_published_total):
    // a report whose marker has not changed since the last poll shows the same tick again
    // and is not counted twice. Without a marker every report counts.
    bool has_tick_marker = false;
    double tick_marker = 0;
    std::vector<Observation> observations;
};

class Recorder {
  public:
    // interval_s: length of a recording interval; intervals start at multiples of it in
    // unix time.
    explicit Recorder(std::int32_t interval_s);

    // One poll round at `now_ms` (unix milliseconds): the reports of the controllers that
    // answered. An instance reported by several controllers in one round (active-active
    // partners, or the controllers of every region for a global bucket) counts once.
    void poll(std::int64_t now_ms, const std::vector<ControllerReport>& reports);

    // The rows of every interval that ended at or before `now_ms`, one series per instance.
    // An instance not observed in an interval has no row for it (a gap, not zeros).
    std::vector<Series> take_closed(std::int64_t now_ms);
    // Every row, the open interval's included (shutdown): its ticks are those seen so far;
    // the store merges it with the rest of the interval recorded after a restart.
    std::vector<Series> take_all();

    std::int32_t interval_s() const { return interval_s_; }

  private:
    struct Acc {
        std::int32_t ticks = 0;
        // offered, admitted, dropped, shadow_dropped, candidate would-drop: sum of ticks, max
        Rate sum[5];
        double ratio_sum = 0;
        double limit_rps = -1;
        Mode mode = Mode::Deny;
        double candidate_limit_rps = -1;
    };
    std::vector<Series> take_until(std::int64_t end_s);

    std::int32_t interval_s_;
    std::map<std::int64_t, std::map<InstanceKey, Acc>> open_;  // by interval start
    std::map<std::string, double> last_marker_;                // by source
};

}  // namespace grl::rlc
