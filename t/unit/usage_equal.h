// Field-by-field equality of decoded usage messages, for the differential checks of
// read_usage() against wire::decode (t/unit/usage_reader_test.cpp, fuzz/fuzz_usage.cpp).
#pragma once

#include <vector>

#include "grl/wire/wire_control.h"

namespace grl::wire::usage_equal {

inline bool same(const UsageBucket& a, const UsageBucket& b) {
    return a.name == b.name && a.offered_mrps == b.offered_mrps &&
           a.admitted_mrps == b.admitted_mrps && a.dropped_mrps == b.dropped_mrps &&
           a.shadow_dropped_mrps == b.shadow_dropped_mrps && a.hosts == b.hosts &&
           a.rated_hosts == b.rated_hosts && a.definitions == b.definitions &&
           a.host_names == b.host_names && a.keys == b.keys;
}

inline bool same_buckets(const std::vector<UsageBucket>& a, const std::vector<UsageBucket>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (!same(a[i], b[i])) return false;
    }
    return true;
}

inline bool same(const ZoneUsage& a, const ZoneUsage& b) {
    return a.v == b.v && a.source == b.source && a.region == b.region && a.zone == b.zone &&
           a.seq == b.seq && a.ts_ms == b.ts_ms && a.interval_ms == b.interval_ms &&
           a.hosts == b.hosts && a.stale_hosts == b.stale_hosts && a.host_names == b.host_names &&
           same_buckets(a.buckets, b.buckets) && a.part == b.part && a.parts == b.parts;
}

inline bool same(const RegionUsage& a, const RegionUsage& b) {
    return a.v == b.v && a.source == b.source && a.region == b.region && a.seq == b.seq &&
           a.ts_ms == b.ts_ms && a.interval_ms == b.interval_ms && a.zones == b.zones &&
           a.hosts == b.hosts && a.limits_digest == b.limits_digest &&
           same_buckets(a.buckets, b.buckets) && a.overrides == b.overrides && a.part == b.part &&
           a.parts == b.parts;
}

}  // namespace grl::wire::usage_equal
