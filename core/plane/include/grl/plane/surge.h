// Surge damping: the data plane's local rule that tightens a bucket's ratio at once when
// this host's own offered rate jumps well above the rate its ratio was computed for, and
// eases it when the rate falls well below, until the control plane's next answer has seen
// the change (docs/design.md "Surge damping"). Pure logic with injected clocks: the nginx
// reporter feeds it the bucket's cumulative offered count and the instruction's basis.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace grl::surge {

// A report reaches the collector's usage only if sent this long before the usage's stamp
// (loopback transit plus the collector's 10 ms batch).
inline constexpr std::uint64_t kTransitMs = 10;
// Three windows judge the host's current rate: a short one catches a surge within a few
// checks, longer ones a moderate change (a 1.5x step) that the short one's noise hides.
// "Well above": what the control plane's ratio would admit here over the window is more than
// `factor` times this host's share of the limit, beyond Poisson noise (`sigmas` standard
// deviations + 3 requests); "well below" likewise.
struct Window {
    std::uint64_t span_ms;
    double factor;
    double sigmas;
    // "Well below" judged on the offered count's noise (it is Poisson): sigmas x sqrt(offered
    // at `b / factor`) + 3 offered requests. Else on the admitted count's, a margin up to
    // 1 / sqrt(admit) wider under a ratio: the short windows keep it, since a 20 ms stall of
    // a surging host's arriving load must not read as a fall (its backlog would then come
    // through at the eased ratio).
    bool offered_noise;
};
// The 20 ms window sees a 15x surge on a busy host at the first check after it began, on a
// smaller one (a tenth of the load) within about two; 1.5x there is still beyond any noise
// of a host at its share (3 sigmas + 3 requests of 20 ms).
inline constexpr std::array<Window, 4> kWindows = {
    {{20, 1.5, 3, false}, {50, 1.5, 3, false}, {250, 1.2, 2, true}, {1000, 1.05, 2, true}}};
// Tightening pays back what the windows up to the one that saw the rise, and at least the
// windows up to this span, admitted beyond their share (the checks before it let the rise
// through): the surge's onset, before the 20 ms window saw it, lies within the 50 ms one.
inline constexpr std::uint64_t kPaceSpanMs = 50;
inline constexpr std::size_t kReports = 8;  // report history kept for finding the basis
// A host whose rate rose since the basis but stays within the instance's whole offered rate
// in it (x this margin) may be receiving load the balancer moved from other hosts, the total
// unchanged; only a rate beyond that must be a surge (docs/design.md, "load-balancer shift").
inline constexpr double kShiftMargin = 1.05;
// A basis whose instance rate O is this much above the previous basis's says the total is
// rising: a surge the control plane has begun to see, not a shift; the shares apply, and go
// on applying while each next basis's O is above the one before.
inline constexpr double kTotalRising = 1.25;
// The mirror for a fall (docs/design.md, "Surge damping", a fall seen in part): a basis in
// which this host's own rate fell this much below its own in the previous basis, and O by at
// least half as much as this host's own rate did, is taken for a fall of the whole instance that
// the sample saw in part (the hosts whose reports were still from before it): the other hosts'
// parts are estimated to fall as this host's did, and the ratio that estimate of O implies
// applies when it is below the control plane's. It goes on while each next basis's O is
// kFallGoesOn below the one before.
inline constexpr double kOwnFalling = 1.25;
inline constexpr double kFallGoesOn = 1.05;
inline constexpr std::size_t kChecks = 110;  // check points kept (at 10 ms: 1.09 s)

// The control plane's answer for one bucket, as received (wire::Instruction).
struct Basis {
    std::uint32_t ratio_ppm = 0;
    std::uint64_t limit_mrps = 0;
    std::uint64_t offered_mrps = 0;  // the instance's offered rate in the basis sample
    std::uint64_t basis_ms = 0;      // wall clock of that sample; 0: no basis sent
};

enum class State : std::uint8_t {
    Following,  // the control plane's ratio applies
    Tightened,  // offered well above the basis: admitted held at this host's share of the limit
    Eased,      // offered well below the basis: drops relaxed to this host's share
    NoBasis,    // no usable basis (older controller, idle host, no report history)
};
std::string_view to_string(State s);

class Damper {
  public:
    // After every report: its wall-clock stamp and the bucket's cumulative offered count.
    void on_report(std::uint64_t wall_ms, std::uint64_t offered);
    // A new instruction for the bucket: finds this host's rate in the basis sample (from its
    // own reports) and its share of the limit.
    void on_instruction(const Basis& b);
    // The instruction expired: no damping (nginx fails open anyway).
    void clear();
    // Periodic check at monotonic `now_ms`; returns the ratio to apply in ppm.
    std::uint32_t check(std::uint64_t now_ms, std::uint64_t offered);

    State state() const { return state_; }
    // A usable basis is held: check() may tighten or ease (the reporter checks only then).
    bool has_basis() const { return has_basis_; }
    double basis_rps() const { return basis_rps_; }  // this host's offered rate in the basis
    // O as this host takes it: the basis's, or its estimate during a fall seen in part.
    double instance_rps() const { return instance_rps_; }
    double budget_rps() const { return budget_rps_; }  // its share of the limit
    double current_rps() const { return current_rps_; }
    std::uint32_t ratio_ppm() const { return applied_ppm_; }

  private:
    struct Point {
        std::uint64_t ms = 0;
        std::uint64_t offered = 0;
        double admitted = 0;  // checks only: cumulative, at the ratios this damper applied
    };
    const Point* window_start(std::uint64_t now_ms, std::uint64_t span_ms) const;
    double pace_to_share(std::uint64_t now_ms, double admitted_total, std::uint64_t span_ms) const;
    void follow_fall(double previous_own, double previous_instance);
    void estimate_fall();

    std::array<Point, kReports> reports_{};  // wall clock
    std::size_t n_reports_ = 0;              // total pushed
    std::array<Point, kChecks> checks_{};    // monotonic clock
    std::size_t n_checks_ = 0;
    bool has_basis_ = false;
    std::uint32_t cp_ppm_ = 0;
    double limit_rps_ = 0;                 // L in the basis
    double instance_rps_ = 0;              // O: the instance's offered rate in the basis sample
    double previous_instance_rps_ = 0;     // O of the instruction before (0: none)
    std::uint64_t previous_basis_ms_ = 0;  // and its basis_ms
    bool total_rising_ = false;            // O grew by kTotalRising since then
    double previous_basis_rps_ = 0;        // this host's own rate in the previous basis (0: none)
    // A fall seen in part (kOwnFalling): this host's own rate and the other hosts' part of O
    // in the last basis before it, and the ratio for the estimated O (kNoFall: none).
    bool total_falling_ = false;
    double own_before_fall_ = 0;
    double others_before_fall_ = 0;
    static constexpr std::uint32_t kNoFall = 1'000'001;
    std::uint32_t fall_ppm_ = kNoFall;
    double basis_rps_ = 0;
    double budget_rps_ = 0;
    double current_rps_ = 0;
    std::uint32_t applied_ppm_ = 0;
    State state_ = State::NoBasis;
};

}  // namespace grl::surge
