#include "grl/plane/surge.h"

#include <algorithm>
#include <cmath>

namespace grl::surge {

std::string_view to_string(State s) {
    switch (s) {
        case State::Following: return "following";
        case State::Tightened: return "tightened";
        case State::Eased: return "eased";
        case State::NoBasis: return "no_basis";
    }
    return "no_basis";
}

void Damper::on_report(std::uint64_t wall_ms, std::uint64_t offered) {
    reports_[n_reports_ % kReports] = {wall_ms, offered, 0};
    ++n_reports_;
}

void Damper::on_instruction(const Basis& b) {
    cp_ppm_ = b.ratio_ppm;
    has_basis_ = false;
    fall_ppm_ = kNoFall;
    const double instance = static_cast<double>(b.offered_mrps) / 1000.0;
    // A rise seen over several samples (each host's reports fall before or after the surge's
    // start, so the samples see it in part) stays a rise while O keeps growing: in between,
    // a host whose own part of the sample is still the old rate would otherwise take its
    // rise for a shift and let it through at 1 - L / O, from an O that has not caught up.
    // The same basis again (the controller's tick publishing the sample its early tick took,
    // no usage having come in between) is no news: the rise goes on as it was.
    const bool same_basis =
        b.basis_ms != 0 && b.basis_ms == previous_basis_ms_ && instance == previous_instance_rps_;
    if (!same_basis) {
        total_rising_ =
            previous_instance_rps_ > 0 && (instance > kTotalRising * previous_instance_rps_ ||
                                           (total_rising_ && instance > previous_instance_rps_));
    }
    const double previous_instance = previous_instance_rps_;
    const double previous_own = previous_basis_rps_;
    previous_instance_rps_ = instance;
    previous_basis_ms_ = b.basis_ms;
    previous_basis_rps_ = 0;
    if (b.basis_ms == 0 || b.offered_mrps == 0) {
        total_falling_ = false;
        return;
    }
    // The collector rated this host from its last two reports it had received when it built
    // the usage: the newest report sent kTransitMs before the stamp, and the one before it.
    const std::size_t have = std::min(n_reports_, kReports);
    for (std::size_t i = 0; i + 1 < have; ++i) {
        const Point& p = reports_[(n_reports_ - 1 - i) % kReports];
        if (p.ms + kTransitMs > b.basis_ms) continue;
        const Point& q = reports_[(n_reports_ - 2 - i) % kReports];
        if (p.ms <= q.ms || p.offered < q.offered) break;  // clock step or counter restart
        basis_rps_ =
            static_cast<double>(p.offered - q.offered) * 1000.0 / static_cast<double>(p.ms - q.ms);
        // An idle host has no share to keep: it gets no local rule (the ratio alone).
        if (basis_rps_ <= 0) break;
        limit_rps_ = static_cast<double>(b.limit_mrps) / 1000.0;
        instance_rps_ = instance;
        previous_basis_rps_ = basis_rps_;
        has_basis_ = true;
        if (!same_basis) follow_fall(previous_own, previous_instance);
        if (total_falling_) estimate_fall();
        budget_rps_ = basis_rps_ * limit_rps_ / instance_rps_;
        return;
    }
    total_falling_ = false;
}

// A fall begins when this host's own rate fell by kOwnFalling since the previous basis and O by
// at least half as much as this host's own rate did (a fall of the whole, not a shift that moved
// this host's load elsewhere); it goes on while each next basis's O is kFallGoesOn lower.
void Damper::follow_fall(double previous_own, double previous_instance) {
    if (total_falling_ && instance_rps_ * kFallGoesOn < previous_instance) return;
    total_falling_ = previous_own > 0 && basis_rps_ * kOwnFalling < previous_own &&
                     previous_instance - instance_rps_ >= 0.5 * (previous_own - basis_rps_);
    if (!total_falling_) return;
    own_before_fall_ = previous_own;
    others_before_fall_ = std::max(0.0, previous_instance - previous_own);
}

// Hosts whose part of the sample is still their rate from before the fall are taken to fall as
// this one did: their part is at most what it was, times this host's own fall. An estimate of O
// below the basis's lowers this host's O (its share grows) and the ratio it applies at most to
// the one the estimate implies (1 - L / O, 0 under the limit).
void Damper::estimate_fall() {
    const double fell = std::min(1.0, basis_rps_ / own_before_fall_);
    const double others = std::clamp(instance_rps_ - basis_rps_, 0.0, others_before_fall_ * fell);
    const double estimate = basis_rps_ + others;
    if (estimate >= instance_rps_) return;
    instance_rps_ = estimate;
    const double r = std::clamp(1.0 - limit_rps_ / instance_rps_, 0.0, 1.0);
    fall_ppm_ = static_cast<std::uint32_t>(std::lround(r * 1e6));
}

void Damper::clear() {
    has_basis_ = false;
    cp_ppm_ = 0;
    fall_ppm_ = kNoFall;
    total_falling_ = false;
}

std::uint32_t Damper::check(std::uint64_t now_ms, std::uint64_t offered) {
    // What this host admitted since the last check, at the ratio written then (the request
    // path applies exactly that ratio until this check writes the next one).
    double admitted_total = 0;
    if (n_checks_ > 0) {
        const Point& last = checks_[(n_checks_ - 1) % kChecks];
        admitted_total = last.admitted;
        if (offered >= last.offered) {
            admitted_total += static_cast<double>(offered - last.offered) *
                              (1.0 - static_cast<double>(applied_ppm_) / 1e6);
        }
    }
    checks_[n_checks_ % kChecks] = {now_ms, offered, admitted_total};
    ++n_checks_;
    // The control plane's ratio, or the lower one of a fall it has seen in part.
    const std::uint32_t cp_ppm = has_basis_ ? std::min(cp_ppm_, fall_ppm_) : cp_ppm_;
    applied_ppm_ = cp_ppm;
    state_ = !has_basis_ ? State::NoBasis : cp_ppm < cp_ppm_ ? State::Eased : State::Following;
    const double admit = 1.0 - static_cast<double>(cp_ppm) / 1e6;
    bool first = true;
    bool shorter_not_low = false;
    for (const Window& w : kWindows) {
        const Point* from = window_start(now_ms, w.span_ms);
        if (from == nullptr) return applied_ppm_;
        const double dt_ms = static_cast<double>(now_ms - from->ms);
        const double n = static_cast<double>(offered - from->offered);
        if (first) current_rps_ = n * 1000.0 / dt_ms;
        first = false;
        if (!has_basis_) return applied_ppm_;
        // Requests the control plane's ratio would admit here, against this host's share.
        const double admitted = n * admit;
        const double share = budget_rps_ * dt_ms / 1000.0;
        const double high = w.factor * share;
        const double low = share / w.factor;
        const bool above = admitted > high + w.sigmas * std::sqrt(high) + 3.0;
        // A window "well below" eases only if no shorter one is even at its low bound: a long
        // window that began before a rise reads the old, lower rate.
        const double margin = w.offered_noise ? w.sigmas * std::sqrt(low * admit) + 3.0 * admit
                                              : w.sigmas * std::sqrt(low) + 3.0;
        const bool below = !shorter_not_low && admitted + margin < low;
        if (admitted >= low) shorter_not_low = true;
        if (!above && !below) continue;
        // Nothing to ease under a ratio of 0: the host follows the control plane. (Calling it
        // "eased" flapped the state, and its log line, at every check of a host idling under
        // its share.)
        if (!above && cp_ppm == 0) return applied_ppm_;
        const double rate = n * 1000.0 / dt_ms;
        if (above && !total_rising_ && rate > basis_rps_ && rate <= kShiftMargin * instance_rps_) {
            // Load moved here from other hosts would look the same, and then the total, and
            // the ratio it needs, are unchanged: holding this host at its old share would
            // reject what the others no longer offer. Hold the ratio the basis implies for
            // the whole instance instead (1 - L / O), until the control plane has seen it.
            // Not while O itself is rising from one basis to the next: that is a surge the
            // control plane has begun to see (its basis mixes the old and new rates).
            const double r = std::clamp(1.0 - limit_rps_ / instance_rps_, 0.0, 1.0);
            const auto shift_ppm = static_cast<std::uint32_t>(std::lround(r * 1e6));
            if (shift_ppm <= cp_ppm) continue;
            current_rps_ = rate;
            state_ = State::Tightened;
            applied_ppm_ = shift_ppm;
            return applied_ppm_;
        }
        current_rps_ = rate;
        // The ratio that admits this host's share of the limit at its current rate; when
        // tightening, less while the window has already admitted more than its share: the
        // checks before this one let the surge through at the old ratio (the detection delay)
        // and then at a rate the window, still half before the surge, understated. Paying
        // that back holds the host at its share over the window, not only from now on.
        const double pace = above ? pace_to_share(now_ms, admitted_total, w.span_ms) : 1.0;
        const double r =
            std::clamp(1.0 - pace * budget_rps_ / std::max(current_rps_, 1e-9), 0.0, 1.0);
        const auto share_ppm = static_cast<std::uint32_t>(std::lround(r * 1e6));
        state_ = above ? State::Tightened : State::Eased;
        applied_ppm_ = above ? std::max(cp_ppm, share_ppm) : std::min(cp_ppm, share_ppm);
        return applied_ppm_;
    }
    return applied_ppm_;
}

// The fraction of this host's share to admit from now: 1 while every window up to `span_ms`
// (the one that saw the rise, at least kPaceSpanMs) has admitted at most its share, down to 0
// while one has admitted twice its share or more. Not the longer windows: what they admitted
// before the rise was let through on purpose (the control plane's ratio, or the load-balancer
// shift's), not late.
double Damper::pace_to_share(std::uint64_t now_ms, double admitted_total,
                             std::uint64_t span_ms) const {
    double pace = 1.0;
    for (const Window& w : kWindows) {
        if (w.span_ms > std::max(span_ms, kPaceSpanMs)) break;
        const Point* from = window_start(now_ms, w.span_ms);
        if (from == nullptr) break;
        const double share = budget_rps_ * static_cast<double>(now_ms - from->ms) / 1000.0;
        const double excess = admitted_total - from->admitted - share;
        pace = std::min(pace, std::clamp(1.0 - excess / std::max(share, 1e-9), 0.0, 1.0));
    }
    return pace;
}

// The newest check at least `span_ms` before `now_ms`, else the oldest held; null when there
// is none usable (first check, a clock or counter going back).
const Damper::Point* Damper::window_start(std::uint64_t now_ms, std::uint64_t span_ms) const {
    const std::size_t have = std::min(n_checks_, kChecks);
    const Point* from = nullptr;
    for (std::size_t i = 1; i < have; ++i) {
        from = &checks_[(n_checks_ - 1 - i) % kChecks];
        if (from->ms + span_ms <= now_ms) break;
    }
    const Point& now = checks_[(n_checks_ - 1) % kChecks];
    if (from == nullptr || from->ms >= now_ms || from->offered > now.offered) return nullptr;
    return from;
}

}  // namespace grl::surge
