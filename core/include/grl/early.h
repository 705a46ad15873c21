// When the daemons send before their tick (docs/control-plane.md, "Start and restart"): a
// collector that has just started, or sees hosts new to it, sends zone usage as soon as more
// rates exist; a controller publishes at once when a zone usage brings a bucket's first
// rates. Both rate-limited, so that a restart costs a few extra messages, not a storm. Pure:
// time (monotonic ms) is passed in.
#pragma once

#include <cstdint>

namespace grl {

// The collector's early zone usage.
class EarlyUsage {
  public:
    EarlyUsage(std::uint64_t interval_ms, std::uint64_t start_ms)
        : interval_ms_(interval_ms), start_ms_(start_ms) {}

    // A usage was sent at `now_ms`; `unrated` when some bucket in it lacked some hosts' rates.
    // Warming lasts the first two intervals whatever the buckets: hosts not heard from yet
    // are not in it.
    void sent(std::uint64_t now_ms, bool unrated) {
        pending_ = false;
        warming_ = unrated || now_ms < start_ms_ + 2 * interval_ms_;
    }
    // Reports were accepted: while warming, they are worth sending before the tick.
    void rates_arrived() {
        if (warming_) pending_ = true;
    }
    // Whether to send now: something is pending, half an interval has passed since the start
    // (hosts reconnect within nginx's 100 ms and report at once: a usage with only some of
    // them would publish a ratio from part of the load), and at most eight an interval.
    bool due(std::uint64_t now_ms) {
        if (!pending_ || now_ms < start_ms_ + interval_ms_ / 2 ||
            (sent_once_ && now_ms < last_ms_ + interval_ms_ / 8)) {
            return false;
        }
        sent_once_ = true;
        last_ms_ = now_ms;
        return true;
    }
    bool warming() const { return warming_; }

  private:
    std::uint64_t interval_ms_;
    std::uint64_t start_ms_;
    std::uint64_t last_ms_ = 0;
    bool sent_once_ = false;
    bool warming_ = true;
    bool pending_ = false;
};

// The controller's early tick: at most four extra ticks per interval.
class EarlyTick {
  public:
    explicit EarlyTick(std::uint64_t interval_ms) : interval_ms_(interval_ms) {}
    // A zone usage brought new rates at `now_ms`: tick now?
    bool due(std::uint64_t now_ms) {
        if (ticked_once_ && now_ms < last_ms_ + interval_ms_ / 4) return false;
        ticked_once_ = true;
        last_ms_ = now_ms;
        return true;
    }

  private:
    std::uint64_t interval_ms_;
    std::uint64_t last_ms_ = 0;
    bool ticked_once_ = false;
};

}  // namespace grl
