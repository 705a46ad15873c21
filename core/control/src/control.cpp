// The controller: its options and the freshness of its inputs (docs/control-plane.md). The
// rest, by what it does: controller_take_usage.cpp (usage in), controller_running_sums.cpp,
// controller_tick.cpp, controller_instances.cpp (one instance per tick),
// controller_publish.cpp (instructions, region usage), controller_overrides.cpp,
// controller_queries.cpp; controller_definitions.cpp (free functions on definitions).
#include "grl/control/control.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <tuple>
#include <utility>

#include "controller_detail.h"
#include "grl/common/bucket.h"
#include "grl/common/ratio.h"
#include "grl/common/saturating.h"

namespace grl::control {

using namespace detail;  // NOLINT(google-build-using-namespace): this library's own helpers

Controller::Controller(Options o)
    : opt_(std::move(o)), quotas_(opt_.region, opt_.max_peers), ids_(opt_.max_bucket_names) {
    if (opt_.window == 0) opt_.window = 1;
    if (opt_.stale_intervals == 0) opt_.stale_intervals = 1;
    if (opt_.forget_intervals < opt_.stale_intervals) opt_.forget_intervals = opt_.stale_intervals;
    if (opt_.interval_ms == 0) opt_.interval_ms = 1000;
}

bool Controller::zone_fresh(const ZoneEntry& z, const Clock& now) const {
    std::uint64_t iv = std::max(z.usage.interval_ms, opt_.interval_ms);
    return now.mono_ms < z.recv_mono + opt_.stale_intervals * iv;
}

bool Controller::short_of_hosts(const ZoneEntry& z, std::uint64_t hosts, const Clock& now) const {
    std::uint64_t iv = std::max(z.usage.interval_ms, opt_.interval_ms);
    return hosts < z.awaited_hosts && now.mono_ms < z.returned_mono + opt_.stale_intervals * iv;
}

bool Controller::peer_fresh(const PeerEntry& p, const Clock& now) const {
    std::uint64_t iv = std::max(p.usage.interval_ms, opt_.interval_ms);
    return now.mono_ms < p.recv_mono + opt_.stale_intervals * iv;
}

std::string_view to_string(Accepted a) {
    switch (a) {
        case Accepted::Yes: return "accepted";
        case Accepted::Older: return "older";
        case Accepted::WrongRegion: return "wrong_region";
        case Accepted::Self: return "self";
        case Accepted::Future: return "future";
        case Accepted::TooManyHosts: return "too_many_hosts";
        case Accepted::Full: return "full";
        case Accepted::TooManyBuckets: return "too_many_buckets";
    }
    return "?";
}

// Clocks of the fleet are synchronised to well within max_skew_ms. A stamp further ahead is a
// broken or forged sender: held, its message would be "newer" than every genuine one (and its
// override would win every later change). A stamp behind our clock pins nothing (any newer
// message wins, and a held message that goes stale never blocks one), so it is not bounded.
bool Controller::from_the_future(std::uint64_t ts_ms, const Clock& now) const {
    return ts_ms > sat_add(now.wall_ms, opt_.max_skew_ms);
}

std::string Controller::ahead(std::uint64_t ts_ms, const Clock& now) const {
    return std::to_string(ts_ms) + " is " + std::to_string(ts_ms - now.wall_ms) +
           " ms ahead of this controller's clock (at most " + std::to_string(opt_.max_skew_ms) +
           " allowed)";
}

}  // namespace grl::control
