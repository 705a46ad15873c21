// The usage the controller's simulators play (controller_sim.cpp over the network,
// tick_bench.cpp in one process): the same bucket names and entries (benchmark only).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "grl/wire/wire.h"

namespace grl::sim {

// svc-00000, svc-00001, ...: 9 bytes, inside std::string itself (bench/control_plane/README.md).
inline std::vector<std::string> bucket_names(std::size_t n) {
    std::vector<std::string> v;
    char name[32];
    for (std::size_t i = 0; i < n; ++i) {
        std::snprintf(name, sizeof(name), "svc-%05zu", i);
        v.emplace_back(name);
    }
    return v;
}

// A global bucket's entry: every host rated, one definition, nothing dropped.
inline wire::UsageBucket usage_bucket(const std::string& name, std::uint64_t offered_mrps,
                                      std::uint64_t limit_mrps, std::uint64_t hosts) {
    wire::UsageBucket b;
    b.name = name;
    b.offered_mrps = offered_mrps;
    b.admitted_mrps = offered_mrps;
    b.hosts = hosts;
    b.rated_hosts = hosts;
    b.definitions.push_back({{Scope::Global, Mode::Deny, limit_mrps}, hosts});
    return b;
}

// What one zone offers of bucket `i`: the first share `over` of the buckets 1.5x their limit
// fleet-wide, the rest 0.5x, split evenly over every zone of every region.
struct ZoneOffered {
    std::uint64_t limit_mrps;
    std::size_t buckets, zones, regions;
    double over;
    std::uint64_t operator()(std::size_t i) const {
        const auto over_n = static_cast<std::size_t>(over * static_cast<double>(buckets));
        const double f = i < over_n ? 1.5 : 0.5;
        return static_cast<std::uint64_t>(static_cast<double>(limit_mrps) * f /
                                          static_cast<double>(zones * regions));
    }
};

}  // namespace grl::sim
