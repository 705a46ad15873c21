// Microbenchmark of the per-request decision: what the nginx handler does
// between reading the caller/procedure and returning (match + count + sample).
// Run: build/bench/grl_decision_bench   (see bench/README.md)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "grl/common/bucket.h"
#include "grl/plane/decision.h"
#include "grl/common/ratio.h"
#include "grl/plane/shm_layout.h"

namespace {

struct Setup {
    std::unique_ptr<void, decltype(&std::free)> mem{nullptr, &std::free};
    grl::shm::View z;
    grl::Matcher matcher;
    std::vector<std::uint16_t> slots;
    grl::Prng rng{12345};

    // `buckets` procedure-prefix buckets on distinct paths plus, if `regex`,
    // one regex bucket; `ratio_ppm` in force on every bucket.
    // With `mixed`, every other bucket matches one exact path instead.
    Setup(int buckets, std::uint32_t ratio_ppm, bool regex,
          const char* pattern = "^/api/v[0-9]+/users/[0-9]+$", bool mixed = false) {
        const auto cap = static_cast<std::uint32_t>(buckets < 64 ? 64 : buckets + 32);
        // bytes_for() is a multiple of 64, as aligned_alloc requires.
        mem.reset(std::aligned_alloc(64, grl::shm::bytes_for(cap)));
        z = grl::shm::View(mem.get());
        z.format(cap, 1);
        std::vector<std::string> names;
        for (int i = 0; i < buckets; ++i) {
            grl::BucketDef d;
            d.name = "b" + std::to_string(i);
            d.procedure = {grl::MatchKind::Prefix, "/api/v" + std::to_string(i) + "/"};
            if (mixed && i % 2 == 1) {
                d.procedure = {grl::MatchKind::Exact, "/svc/" + std::to_string(i) + "/status"};
            }
            d.limit_mrps = 1000000;
            matcher.add(d);
            names.push_back(d.name);
        }
        if (regex) {
            grl::BucketDef d;
            d.name = "re";
            d.procedure = {grl::MatchKind::Regex, pattern};
            d.limit_mrps = 1000000;
            matcher.add(d);
            names.push_back(d.name);
        }
        std::uint64_t gen = 0;
        z.assign(names, slots, gen);
        for (std::uint16_t s : slots) {
            z.slot(s).threshold = grl::ppm_to_threshold(ratio_ppm);
            z.slot(s).expires_ms = ~0ULL;
        }
    }

    grl::Decision one(std::string_view procedure, bool linear = false) {
        grl::RequestKey key{"", false, procedure};
        std::uint16_t idx[grl::kMaxMatchesPerRequest];
        std::size_t n = linear ? matcher.match_linear(key, idx, grl::kMaxMatchesPerRequest)
                               : matcher.match(key, idx, grl::kMaxMatchesPerRequest);
        std::uint16_t s[grl::kMaxMatchesPerRequest];
        for (std::size_t i = 0; i < n; ++i) s[i] = slots[idx[i]];
        return grl::decide(z, s, n, 0, 1000, rng).decision;
    }
};

// The configuration: 10 buckets at ratio 0; the request matches one.
void BM_Decision10BucketsRatio0(benchmark::State& state) {
    Setup s(10, 0, false);
    for (auto _ : state) benchmark::DoNotOptimize(s.one("/api/v7/users/42"));
}
BENCHMARK(BM_Decision10BucketsRatio0);

// Same, with a ratio in force (samples the PRNG, sometimes drops).
void BM_Decision10BucketsRatio33(benchmark::State& state) {
    Setup s(10, 330000, false);
    for (auto _ : state) benchmark::DoNotOptimize(s.one("/api/v7/users/42"));
}
BENCHMARK(BM_Decision10BucketsRatio33);

// No bucket matches: the cost every unmatched request pays.
void BM_Decision10BucketsNoMatch(benchmark::State& state) {
    Setup s(10, 0, false);
    for (auto _ : state) benchmark::DoNotOptimize(s.one("/static/logo.png"));
}
BENCHMARK(BM_Decision10BucketsNoMatch);

// 10 prefix buckets plus one PCRE2 (JIT) regex bucket that matches.
void BM_Decision10BucketsPlusRegex(benchmark::State& state) {
    Setup s(10, 0, true);
    for (auto _ : state) benchmark::DoNotOptimize(s.one("/api/v7/users/42"));
}
BENCHMARK(BM_Decision10BucketsPlusRegex);

// A pathological regex (exponential backtracking) on a request it cannot match: the cost
// is bounded by grl::kRegexMatchLimit (the match stops and counts as no match). Compare
// with BM_Decision10BucketsPlusRegex in the same run. Path lengths: a short one, and one
// that would take hours without the limit.
void BM_DecisionPathologicalRegex(benchmark::State& state) {
    Setup s(10, 0, true, "^/(a+)+$");
    const std::string path = "/" + std::string(static_cast<std::size_t>(state.range(0)), 'a') + "b";
    for (auto _ : state) benchmark::DoNotOptimize(s.one(path));
}
BENCHMARK(BM_DecisionPathologicalRegex)->Arg(12)->Arg(64);

// Scaling of the linear scan.
void BM_DecisionNBuckets(benchmark::State& state) {
    Setup s(static_cast<int>(state.range(0)), 0, false);
    for (auto _ : state) benchmark::DoNotOptimize(s.one("/api/v0/users/42"));
}
BENCHMARK(BM_DecisionNBuckets)->Arg(1)->Arg(10)->Arg(50)->Arg(500);

// An edge gateway with a bucket per route: half exact paths, half prefixes; the
// request matches one prefix bucket (issue 11: 500 within 2x of 10, same run).
void BM_DecisionMixedBuckets(benchmark::State& state) {
    Setup s(static_cast<int>(state.range(0)), 0, false, "", true);
    for (auto _ : state) benchmark::DoNotOptimize(s.one("/api/v4/users/42"));
}
BENCHMARK(BM_DecisionMixedBuckets)->Arg(10)->Arg(500);

// The same through the linear scan (the matcher before the index), for comparison.
void BM_DecisionMixedBucketsLinear(benchmark::State& state) {
    Setup s(static_cast<int>(state.range(0)), 0, false, "", true);
    for (auto _ : state) benchmark::DoNotOptimize(s.one("/api/v4/users/42", true));
}
BENCHMARK(BM_DecisionMixedBucketsLinear)->Arg(10)->Arg(500);

}  // namespace

BENCHMARK_MAIN();
