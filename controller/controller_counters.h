// The controller's own counters, declared once (daemon/include/grl/daemon/metrics.h): each
// line makes a field of Counters and its family in /metrics. A new counter is one line here
// plus its increment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "grl/daemon/metrics.h"

namespace grl::controller {

// Message kinds, the label of the families by kind.
enum Kind : std::size_t { kZoneUsage, kRegionUsage, kAdminRequest };
inline constexpr std::string_view kKinds[] = {"zone_usage", "region_usage", "admin_request"};
enum AdminCount : std::size_t { kAllRequests, kChanges };
inline constexpr std::string_view kAdminCounts[] = {"all", "changes"};
enum EarlyReason : std::size_t { kNewRates, kRise, kFall };
inline constexpr std::string_view kEarlyReasons[] = {"new_rates", "rise", "fall"};

#define GRL_CONTROLLER_COUNTERS(COUNTER, COUNTER_BY)                                              \
    COUNTER_BY(received, "grl_controller_messages_total", "kind", kKinds,                         \
               "Valid messages received, by kind.")                                               \
    COUNTER_BY(malformed, "grl_controller_messages_malformed_total", "kind", kKinds,              \
               "Messages dropped as malformed, truncated, oversized or of a wrong version, by "   \
               "kind.")                                                                           \
    COUNTER_BY(batches_cut, "grl_controller_batches_cut_total", "kind", kKinds,                   \
               "Batches of received messages stopped at their time budget (a fifth of the "       \
               "interval, at most 50 ms) with more queued, by kind: messages arrive faster than " \
               "they are handled; the rest waits, bounded per connection, while the tick goes "   \
               "on.")                                                                             \
    COUNTER(messages_dropped, "grl_controller_messages_dropped_total",                            \
            "Messages that could not be queued for sending.")                                     \
    COUNTER(instructions_published, "grl_controller_instructions_published_total",                \
            "Instruction messages published (heartbeats included).")                              \
    COUNTER_BY(admin_requests, "grl_controller_admin_requests_total", "kind", kAdminCounts,       \
               "Admin requests served (changes: set, clear, add, remove that succeeded).")        \
    COUNTER(admin_ticks_deferred, "grl_controller_admin_ticks_deferred_total",                    \
            "Admin changes published with the next admin tick rather than at once (several "      \
            "changes within an eighth of an interval).")                                          \
    COUNTER_BY(early_ticks, "grl_controller_early_ticks_total", "reason", kEarlyReasons,          \
               "Ticks before their time, by reason: new_rates (a zone usage with a bucket's "     \
               "first rates), rise or fall (a bucket's offered rate well above or below the "     \
               "zone's last usage).")                                                             \
    COUNTER(region_usage_unsent, "grl_controller_region_usage_unsent_total",                      \
            "Region usage not published: too large for 16 parts.")

struct Counters {
    GRL_CONTROLLER_COUNTERS(GRL_COUNTER_FIELD, GRL_COUNTER_BY_FIELD)
};

void write_counters(daemon::MetricsText& m, const Counters& c);

}  // namespace grl::controller
