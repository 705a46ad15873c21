// libFuzzer harness, differential: the controller's usage reader (grl/usage_reader.h) must
// accept exactly what wire::decode accepts, read the same message, and refuse with the same
// reason. Input: a selector byte (even: zone_usage, odd: region_usage) and the body.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "grl/usage_reader.h"
#include "grl/wire_control.h"

namespace {

using namespace grl::wire;

bool same(const UsageBucket& a, const UsageBucket& b) {
    return a.name == b.name && a.offered_mrps == b.offered_mrps &&
           a.admitted_mrps == b.admitted_mrps && a.dropped_mrps == b.dropped_mrps &&
           a.shadow_dropped_mrps == b.shadow_dropped_mrps && a.hosts == b.hosts &&
           a.rated_hosts == b.rated_hosts && a.definitions == b.definitions &&
           a.host_names == b.host_names && a.keys == b.keys;
}

bool same_buckets(const std::vector<UsageBucket>& a, const std::vector<UsageBucket>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (!same(a[i], b[i])) return false;
    }
    return true;
}

bool same(const ZoneUsage& a, const ZoneUsage& b) {
    return a.source == b.source && a.region == b.region && a.zone == b.zone && a.seq == b.seq &&
           a.ts_ms == b.ts_ms && a.interval_ms == b.interval_ms && a.hosts == b.hosts &&
           a.stale_hosts == b.stale_hosts && a.host_names == b.host_names &&
           same_buckets(a.buckets, b.buckets) && a.part == b.part && a.parts == b.parts;
}

bool same(const RegionUsage& a, const RegionUsage& b) {
    return a.source == b.source && a.region == b.region && a.seq == b.seq && a.ts_ms == b.ts_ms &&
           a.interval_ms == b.interval_ms && a.zones == b.zones && a.hosts == b.hosts &&
           a.limits_digest == b.limits_digest && same_buckets(a.buckets, b.buckets) &&
           a.overrides == b.overrides && a.part == b.part && a.parts == b.parts;
}

// `reused` has read a previous input: what it held must not leak into this one.
template <class Usage>
void check(std::string_view bytes, Usage& reused) {
    Usage want;
    std::string e1, e2;
    const bool a = decode(bytes, want, e1);
    const bool b = read_usage(bytes, reused, e2);
    if (a != b) std::abort();
    if (a && !same(want, reused)) std::abort();
    if (!a && e1 != e2) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    static ZoneUsage zone;
    static RegionUsage region;
    std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] % 2 == 0) {
        check(bytes, zone);
    } else {
        check(bytes, region);
    }
    return 0;
}
