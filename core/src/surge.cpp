#include "grl/surge.h"

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
    reports_[n_reports_ % kReports] = {wall_ms, offered};
    ++n_reports_;
}

void Damper::on_instruction(const Basis& b) {
    cp_ppm_ = b.ratio_ppm;
    has_basis_ = false;
    if (b.basis_ms == 0 || b.offered_mrps == 0) return;
    // The collector rated this host from its last two reports it had received when it built
    // the usage: the newest report sent kTransitMs before the stamp, and the one before it.
    const std::size_t have = std::min(n_reports_, kReports);
    for (std::size_t i = 0; i + 1 < have; ++i) {
        const Point& p = reports_[(n_reports_ - 1 - i) % kReports];
        if (p.ms + kTransitMs > b.basis_ms) continue;
        const Point& q = reports_[(n_reports_ - 2 - i) % kReports];
        if (p.ms <= q.ms || p.offered < q.offered) return;  // clock step or counter restart
        basis_rps_ =
            static_cast<double>(p.offered - q.offered) * 1000.0 / static_cast<double>(p.ms - q.ms);
        // An idle host has no share to keep: it gets no local rule (the ratio alone).
        if (basis_rps_ <= 0) return;
        budget_rps_ =
            basis_rps_ * static_cast<double>(b.limit_mrps) / static_cast<double>(b.offered_mrps);
        has_basis_ = true;
        return;
    }
}

void Damper::clear() {
    has_basis_ = false;
    cp_ppm_ = 0;
}

std::uint32_t Damper::check(std::uint64_t now_ms, std::uint64_t offered) {
    checks_[n_checks_ % kChecks] = {now_ms, offered};
    ++n_checks_;
    applied_ppm_ = cp_ppm_;
    state_ = has_basis_ ? State::Following : State::NoBasis;
    // The newest earlier check at least kShortMs old, else the oldest held.
    const std::size_t have = std::min(n_checks_, kChecks);
    const Point* from = nullptr;
    for (std::size_t i = 1; i < have; ++i) {
        from = &checks_[(n_checks_ - 1 - i) % kChecks];
        if (from->ms + kShortMs <= now_ms) break;
    }
    if (from == nullptr || from->ms >= now_ms || from->offered > offered) return applied_ppm_;
    const double dt_ms = static_cast<double>(now_ms - from->ms);
    const double n = static_cast<double>(offered - from->offered);
    current_rps_ = n * 1000.0 / dt_ms;
    if (!has_basis_) return applied_ppm_;
    const double expected = basis_rps_ * dt_ms / 1000.0;
    const double high = kFactor * expected;
    const double low = expected / kFactor;
    // Admitting this host's share of the limit at the current rate.
    const double share_ratio =
        std::clamp(1.0 - budget_rps_ / std::max(current_rps_, 1e-9), 0.0, 1.0);
    const auto share_ppm = static_cast<std::uint32_t>(std::lround(share_ratio * 1e6));
    if (n > high + 3.0 * std::sqrt(high) + 3.0) {
        state_ = State::Tightened;
        applied_ppm_ = std::max(cp_ppm_, share_ppm);
    } else if (n + 3.0 * std::sqrt(low) + 3.0 < low) {
        state_ = State::Eased;
        applied_ppm_ = std::min(cp_ppm_, share_ppm);
    }
    return applied_ppm_;
}

}  // namespace grl::surge
