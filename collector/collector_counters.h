// The collector's own counters, declared once (daemon/include/grl/daemon/metrics.h): each line
// makes a field of Counters and its family in /metrics. A new counter is one line here plus
// its increment.
#pragma once

#include <cstdint>

#include "grl/control/curve_key_bindings.h"
#include "grl/control/rates.h"
#include "grl/daemon/metrics.h"

namespace grl::collector {

inline constexpr rates::Verdict kVerdicts[] = {
    rates::Verdict::First,     rates::Verdict::Accepted,  rates::Verdict::Restarted,
    rates::Verdict::Duplicate, rates::Verdict::OldEpoch,  rates::Verdict::NoTime,
    rates::Verdict::TooSoon,   rates::Verdict::Reclaimed, rates::Verdict::Pending,
    rates::Verdict::Conflict,  rates::Verdict::Full,      rates::Verdict::MemoryFull};
inline constexpr CurveKeyBindings::Result kRefusals[] = {
    CurveKeyBindings::Result::KeyTaken, CurveKeyBindings::Result::NameTaken,
    CurveKeyBindings::Result::Full, CurveKeyBindings::Result::NotListed};

#define GRL_COLLECTOR_COUNTERS(COUNTER, COUNTER_BY)                                               \
    COUNTER_BY(reports, "grl_collector_reports_total", "result", kVerdicts,                       \
               "Reports received, by what was done with them.")                                   \
    COUNTER(reports_malformed, "grl_collector_reports_malformed_total",                           \
            "Reports dropped as malformed, truncated, oversized or of a wrong version.")          \
    COUNTER(batches_cut, "grl_collector_report_batches_cut_total",                                \
            "Batches of reports stopped at their time budget (a fifth of the interval, at most "  \
            "50 ms) with more to take (reports arrive faster than they are handled; the rest "    \
            "waits, bounded per connection).")                                                    \
    COUNTER_BY(reports_refused, "grl_collector_reports_refused_total", "reason", kRefusals,       \
               "Reports refused because their CURVE key speaks for another host (or another key " \
               "for this one), or is no longer listed (removed by a reload), by reason.")         \
    COUNTER(reports_wrong_zone, "grl_collector_reports_wrong_zone_total",                         \
            "Reports dropped because the host belongs to another zone or region.")                \
    COUNTER(report_bytes, "grl_collector_report_bytes_total", "Bytes of report bodies received.") \
    COUNTER(usage_truncated, "grl_collector_usage_truncated_total",                               \
            "Zone usage messages sent without host names, with keyed buckets' keys cut or with "  \
            "buckets left out to stay under the size limit.")

struct Counters {
    GRL_COLLECTOR_COUNTERS(GRL_COUNTER_FIELD, GRL_COUNTER_BY_FIELD)
};

void write_counters(daemon::MetricsText& m, const Counters& c);

}  // namespace grl::collector
