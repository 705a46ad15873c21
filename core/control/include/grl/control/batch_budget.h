// How long the daemons' receive loops may hold their event loop (docs/control-plane.md,
// "Memory under a flood"). A loop takes the messages queued on one socket in a batch; a batch
// stops after `max_messages` or once `max_ms` have passed since it started, whichever comes
// first, and the rest waits in the socket's queue (bounded by its high-water mark) while the
// loop serves its timers (the tick), /metrics and its other sockets. A message budget alone
// let 256 large messages hold the controller's loop for as long as their decoding took,
// whatever the tick's deadline. Pure: time (monotonic ms) is passed in.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace grl {

// The time budget of one batch for a daemon ticking every `interval_ms`: a fifth of the
// interval and at most 50 ms (at least 1 ms), so that a flood delays a tick by at most that
// (plus the message being handled) per flooded socket.
inline std::uint64_t batch_budget_ms(std::uint64_t interval_ms) {
    return std::clamp<std::uint64_t>(interval_ms / 5, 1, 50);
}

class BatchBudget {
  public:
    BatchBudget(std::size_t max_messages, std::uint64_t max_ms)
        : max_messages_(max_messages), max_ms_(max_ms) {}

    // A batch starts at `now_ms`.
    void start(std::uint64_t now_ms) {
        started_ms_ = now_ms;
        taken_ = 0;
        cut_ = false;
    }
    // Whether the batch may take one more message at `now_ms` (counted as taken when true).
    // False once the message budget is spent, or once the time budget is: the latter marks
    // the batch as cut (messages come faster than they are handled: a degraded mode).
    bool more(std::uint64_t now_ms) {
        if (taken_ >= max_messages_) return false;
        if (taken_ > 0 && now_ms >= started_ms_ + max_ms_) {
            // (The first message is always taken: a budget spent before anything was handled
            // would starve the socket.)
            cut_ = true;
            return false;
        }
        ++taken_;
        return true;
    }
    // The batch stopped at its time budget with more to take.
    bool cut() const { return cut_; }
    // Messages taken in this batch so far.
    std::size_t taken() const { return taken_; }
    std::uint64_t max_ms() const { return max_ms_; }

  private:
    std::size_t max_messages_;
    std::uint64_t max_ms_;
    std::uint64_t started_ms_ = 0;
    std::size_t taken_ = 0;
    bool cut_ = false;
};

}  // namespace grl
