// Cycle time of grl-rlc's limits half: plan_cycle (every policy's proposal, the rollout step,
// the resulting limits file) for N buckets x W weeks of history, per policy, from an
// in-memory history (docs/rlc.md, "Measured"). Never run by ctest.
//
//   build/bench/grl_rlc_cycle_bench [--buckets 2000] [--weeks 5] [--interval 60] [--batch 100]
//
// History is generated and planned in batches of --batch buckets so that memory stays
// bounded (2,000 buckets x 5 weeks at 60 s are 100.8 M samples, ~10 GB as Series); only
// plan_cycle is timed, generation is reported apart.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "config.h"
#include "cycle.h"

using namespace grl::rlc;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::int64_t kEnd = 1'795'996'800;  // 2026-11-30T00:00:00Z

// Daily and weekly swings, a slight trend and noise: what a policy really has to chew on.
std::vector<Series> generate(int first, int count, int weeks, int interval, std::uint64_t seed) {
    std::vector<Series> out;
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    auto rnd = [&x] {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        return static_cast<double>(x >> 11) / 9007199254740992.0;
    };
    const std::int64_t since = kEnd - static_cast<std::int64_t>(weeks) * 7 * 86400;
    for (int b = first; b < first + count; ++b) {
        Series s;
        s.key.bucket = "bucket-" + std::to_string(b);
        double base = 10 + 1000 * rnd();
        s.samples.reserve(static_cast<std::size_t>((kEnd - since) / interval));
        for (std::int64_t t = since; t < kEnd; t += interval) {
            double day = std::sin(2 * M_PI * static_cast<double>(t % 86400) / 86400);
            double week = std::sin(2 * M_PI * static_cast<double>(t % (7 * 86400)) / (7 * 86400));
            double mean =
                base *
                (1 + 0.4 * day + 0.2 * week + 0.02 * static_cast<double>(t - since) / 604800) *
                (0.95 + 0.1 * rnd());
            Sample smp;
            smp.start_s = t;
            smp.length_s = interval;
            smp.ticks = interval;
            smp.offered = {mean, mean * (1.1 + 0.2 * rnd())};
            smp.admitted = smp.offered;
            smp.limit_rps = base * 2;
            s.samples.push_back(smp);
        }
        out.push_back(std::move(s));
    }
    return out;
}

long arg(int argc, char** argv, const char* name, long def) {
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], name) == 0) return std::atol(argv[i + 1]);
    return def;
}

}  // namespace

int main(int argc, char** argv) {
    const int buckets = static_cast<int>(arg(argc, argv, "--buckets", 2000));
    const int weeks = static_cast<int>(arg(argc, argv, "--weeks", 5));
    const int interval = static_cast<int>(arg(argc, argv, "--interval", 60));
    const int batch = static_cast<int>(arg(argc, argv, "--batch", 100));

    char dir[] = "/tmp/rlc-bench-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    std::string quotas = std::string(dir) + "/quotas.yaml";
    {
        std::ofstream q(quotas);
        q << "quotas:\n";
        for (int b = 0; b < buckets; ++b) q << "  bucket-" << b << ": " << (100 + b) << "r/s\n";
    }
    std::printf(
        "grl-rlc cycle: %d buckets x %d weeks at %d s intervals (%lld samples), batches of %d\n",
        buckets, weeks, interval, static_cast<long long>(buckets) * weeks * 7 * 86400 / interval,
        batch);
    std::printf("%-10s %12s %14s %12s %10s\n", "policy", "cycle (s)", "generate (s)", "proposals",
                "declined");
    for (const char* policy : {"peak", "forecast", "fixed"}) {
        std::string yaml = "limits_file: " + std::string(dir) +
                           "/limits.yaml\nwindow: " + std::to_string(weeks) +
                           "w\nquota_file: " + quotas + "\ndefault: " + policy + "\n";
        Config cfg = parse_config(yaml, "bench-rlc.yaml", dir);
        double cycle_s = 0, gen_s = 0;
        std::size_t proposals = 0, declined = 0;
        // fixed reads no history: one cycle proposes every quota of the file.
        const bool fixed = std::strcmp(policy, "fixed") == 0;
        for (int first = 0; first < buckets; first += fixed ? buckets : batch) {
            auto t0 = Clock::now();
            auto history = fixed ? std::vector<Series>{}
                                 : generate(first, std::min(batch, buckets - first), weeks,
                                            interval, 7 + first);
            auto t1 = Clock::now();
            Plan p = plan_cycle(cfg, history, {}, {}, kEnd, false);
            auto t2 = Clock::now();
            gen_s += std::chrono::duration<double>(t1 - t0).count();
            cycle_s += std::chrono::duration<double>(t2 - t1).count();
            for (const auto& r : p.rows) {
                // fixed proposes every quota bucket in every batch; count this batch's own.
                int n = std::atoi(r.proposal.bucket.c_str() + 7);
                if (!fixed && (n < first || n >= first + batch)) continue;
                (r.proposal.new_mrps ? proposals : declined)++;
            }
        }
        std::printf("%-10s %12.2f %14.2f %12zu %10zu\n", policy, cycle_s, gen_s, proposals,
                    declined);
    }
    std::remove(quotas.c_str());
    rmdir(dir);
    return 0;
}
