// When the daemons send before their tick (docs/control-plane.md, "Start and restart"): a
// collector that has just started, or sees hosts new to it, sends zone usage as soon as more
// rates exist; a controller publishes at once when a zone usage brings a bucket's first
// rates. Both rate-limited, so that a restart costs a few extra messages, not a storm. The
// controller also ticks at once for a zone usage in which a bucket's summed offered rate rose
// well above, or fell well below, its rate in that zone's last usage: changed_well() is that
// rule. Pure: time (monotonic ms) is passed in.
#pragma once

#include <cmath>
#include <cstdint>

namespace grl {

// A bucket's summed offered rate "rose well above" its last sample: by kRiseFactor at least,
// and beyond the noise of a sample over one interval (Poisson counts: kRiseSigmas standard
// deviations of the last sample's count plus kRiseMinRequests). At 1,000 r/s and 1 s the
// noise is 3%, so the factor decides; at 20 r/s and 250 ms (5 requests a sample) the floor
// asks for 3 x sqrt(5) + 3 = 9.7 more requests, a 3x rise. A 1.5x step seen by its first
// report in part (the step 0.3 s before a 1 s report of the host with 70% of the load:
// 0.5 L -> 0.71 L) passes 1.25; a bucket's counting noise does not. `interval_ms`: the
// sample's.
inline constexpr double kRiseFactor = 1.25;
inline constexpr double kRiseSigmas = 3;
inline constexpr double kRiseMinRequests = 3;
inline bool rose_well_above(double last_mrps, double now_mrps, std::uint64_t interval_ms) {
    if (now_mrps < kRiseFactor * last_mrps) return false;
    const double secs = static_cast<double>(interval_ms) / 1000.0;
    const double last_n = last_mrps / 1000.0 * secs;
    const double gain_n = (now_mrps - last_mrps) / 1000.0 * secs;
    return gain_n >= kRiseSigmas * std::sqrt(last_n) + kRiseMinRequests;
}

// A change of a bucket's summed offered rate that the controller answers at once: a rise well
// above the last sample, or a fall well below it (the last sample rose well above this one:
// the same factor, and the noise of the smaller sample).
enum class Change {
    None,  // within the factor or the noise: the tick answers it
    Rise,  // a step or a surge, or a load-balancer shift's gaining host seen before its
           // losing one (whose report the next usage brings: a Fall)
    Fall,  // the end of a surge, a fall, or that next usage of a shift
};
inline Change changed_well(double last_mrps, double now_mrps, std::uint64_t interval_ms) {
    if (rose_well_above(last_mrps, now_mrps, interval_ms)) return Change::Rise;
    if (rose_well_above(now_mrps, last_mrps, interval_ms)) return Change::Fall;
    return Change::None;
}

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

// The controller's early tick: at most four extra ticks per interval, and at most a 40th of
// the time in early ticks. An early tick costs a whole tick: at fleet scale (a tick of 20-40 ms
// at a 250 ms interval, bench/control_plane) four extra ticks an interval would take most of
// the loop, and a loop that falls behind its usage sees zones fall silent and come back, each
// asking for another early tick.
class EarlyTick {
  public:
    // Early ticks are at least this many times the last tick's duration apart.
    static constexpr std::uint64_t kCostFactor = 40;

    explicit EarlyTick(std::uint64_t interval_ms) : interval_ms_(interval_ms) {}
    // A zone usage brought new rates at `now_ms`: tick now? `last_tick_us`: how long the last
    // tick took. A tick refused only because of that cost counts in deferred().
    bool due(std::uint64_t now_ms, std::uint64_t last_tick_us = 0) {
        if (ticked_once_ && now_ms < last_ms_ + interval_ms_ / 4) return false;
        const std::uint64_t gap_ms = last_tick_us / 1000 * kCostFactor;
        if (ticked_once_ && now_ms < last_ms_ + gap_ms) {
            ++deferred_;
            deferring_ = true;
            return false;
        }
        ticked_once_ = true;
        last_ms_ = now_ms;
        deferring_ = false;
        return true;
    }
    // Early ticks refused for their cost, and whether the last one asked for was.
    std::uint64_t deferred() const { return deferred_; }
    bool deferring() const { return deferring_; }

  private:
    std::uint64_t interval_ms_;
    std::uint64_t last_ms_ = 0;
    std::uint64_t deferred_ = 0;
    bool ticked_once_ = false;
    bool deferring_ = false;
};

}  // namespace grl
