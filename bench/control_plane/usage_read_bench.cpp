// wire::read_usage() of one zone_usage of N plain buckets (the controller's intake), K times, at
// usage protocol version V (1: map entries, 2: positional). Instructions per message come from
// callgrind: the difference between K = 11 and K = 1, over 10 (bench/control_plane/README.md).
//   grl_usage_read_bench N K V
#include <cstdio>
#include <cstdlib>
#include <string>

#include "grl/usage_reader.h"
#include "grl/wire_control.h"

int main(int argc, char** argv) {
    using namespace grl;
    using namespace grl::wire;
    const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
    const int k = argc > 2 ? std::atoi(argv[2]) : 11;
    ZoneUsage u;
    u.v = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : kUsageVersion;
    u.source = "col-z1";
    u.region = "r1";
    u.zone = "z1";
    u.seq = 1;
    u.ts_ms = 1700000000000;
    u.interval_ms = 250;
    u.hosts = 20;
    for (int i = 0; i < n; ++i) {
        UsageBucket b;
        char name[32];
        std::snprintf(name, sizeof(name), "svc-%05d.route", i);
        b.name = name;
        b.offered_mrps = 1234567;
        b.admitted_mrps = 1000000;
        b.dropped_mrps = 234567;
        b.hosts = 3;
        b.rated_hosts = 3;
        b.definitions.push_back({{Scope::Global, Mode::Deny, 100000, false}, 3});
        u.buckets.push_back(b);
    }
    std::string bytes;
    encode(u, bytes);
    ZoneUsage out;
    std::string error;
    UsageRead how = UsageRead::Decoded;
    int ok = 0;
    for (int i = 0; i < k; ++i) ok += read_usage(bytes, out, error, &how) ? 1 : 0;
    std::printf("v %llu: %d of %d read (%s), %zu bytes, %d buckets\n",
                static_cast<unsigned long long>(u.v), ok, k,
                how == UsageRead::Fast ? "one pass" : "wire::decode", bytes.size(), n);
    return ok == k ? 0 : 1;
}
