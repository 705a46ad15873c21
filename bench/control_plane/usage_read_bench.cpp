// wire::read_usage() of one zone_usage of N plain buckets (the controller's intake), K times, at
// usage protocol version V (1: map entries, 2: positional). Instructions per message come from
// callgrind: the difference between K = 11 and K = 1, over 10 (bench/control_plane/README.md).
//   grl_usage_read_bench N K V
// With a fourth argument `parts`, the usage goes in parts (wire::encode_parts: 3 at N = 10,000)
// and each of the K rounds does what the controller's loop does with them: every part read
// (wire::PartAssembler::read: in place in its set's vector) and assembled (add()), the whole
// swapped with the usage held for the zone, and the replaced usage handed back to the assembler
// (recycle()).
//   grl_usage_read_bench 10000 K 2 parts
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "grl/wire/usage_parts.h"
#include "grl/wire/usage_reader.h"
#include "grl/wire/wire_control.h"

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
    if (argc > 4 && std::strcmp(argv[4], "parts") == 0) {
        std::vector<std::string> parts;
        if (!encode_parts(u, parts)) return 1;
        PartAssembler<ZoneUsage> assembler(4, 1000000);
        ZoneUsage read, held;
        std::string error;
        int complete = 0;
        for (int i = 0; i < k; ++i) {
            for (const std::string& p : parts) {
                if (!assembler.read(p, read, error)) return 1;
                if (assembler.add(read, 0) != PartResult::Complete) continue;
                ++complete;
                std::swap(read, held);  // Controller::take_zone_usage
                assembler.recycle(read);
            }
        }
        std::printf("v %llu: %d of %d sets of %zu parts assembled, %d buckets\n",
                    static_cast<unsigned long long>(u.v), complete, k, parts.size(), n);
        return complete == k ? 0 : 1;
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
