// Cost of one keyed request in the per-key table (core/plane/src/keyed.cpp): hash the key, find or
// claim its entry, decide (ratio, local cap). Three shapes: one hot key; 10,000 keys that all
// fit; a flood of distinct keys through a full table (every request claims and evicts).
// Run: build/bench/grl_keyed_bench (google-benchmark; pin it: taskset -c 1 ...).
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "grl/plane/keyed.h"
#include "grl/common/prng.h"

namespace {

using grl::keyed::Table;

struct Fixture {
    explicit Fixture(std::uint32_t keys)
        : mem(new std::uint64_t[grl::keyed::bytes_for(keys) / 8 + 1]), t(mem.get()) {
        t.format(keys);
    }
    std::unique_ptr<std::uint64_t[]> mem;
    Table t;
};

std::vector<std::string> keys_named(std::size_t n) {
    std::vector<std::string> k;
    for (std::size_t i = 0; i < n; ++i) k.push_back("api-key-" + std::to_string(i * 7919));
    return k;
}

void run(benchmark::State& state, std::uint32_t table_keys, const std::vector<std::string>& keys) {
    Fixture f(table_keys);
    grl::Prng rng(1);
    std::uint64_t now = 1000, i = 0;
    for (auto _ : state) {
        const std::string& k = keys[i++ % keys.size()];
        if ((i & 1023) == 0) ++now;
        grl::keyed::Entry& e = f.t.touch(grl::keyed::hash_key(k), k, now);
        benchmark::DoNotOptimize(f.t.admit(e, now, 100000, 100, rng.next32()));
    }
    state.counters["evictions"] =
        benchmark::Counter(static_cast<double>(f.t.header().evictions.load()));
}

void BM_HotKey(benchmark::State& state) {
    run(state, 100000, keys_named(1));
}
void BM_TenThousandKeys(benchmark::State& state) {
    run(state, 100000, keys_named(10000));
}
void BM_FloodThroughAFullTable(benchmark::State& state) {
    run(state, 4096, keys_named(1000000));
}

BENCHMARK(BM_HotKey);
BENCHMARK(BM_TenThousandKeys);
BENCHMARK(BM_FloodThroughAFullTable);

}  // namespace

BENCHMARK_MAIN();
