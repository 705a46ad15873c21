// The collector's per-key quota use (core/control/src/pending_use.cpp,
// docs/design/009-per-key-quotas.md): each new report's `used` counted once, carried by the
// next zone usage and cleared, late rather than never when a usage has no room, bounded.
#include "grl/control/pending_use.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grl/wire/wire_control.h"

namespace grl::rates {
namespace {

wire::KeyRate used(std::uint64_t hash, std::uint64_t units, std::uint64_t offered_mrps = 0,
                   const std::string& text = "") {
    wire::KeyRate k;
    k.hash = hash;
    k.text = text;
    k.offered_mrps = offered_mrps;
    k.hosts = 1;
    k.used = units;
    return k;
}

wire::Report report(const std::string& host, std::uint64_t seq, std::vector<wire::KeyRate> keys) {
    wire::Report r;
    r.host = host;
    r.zone = "z1";
    r.region = "r1";
    r.epoch = 1;
    r.seq = seq;
    r.ts_ms = 1000 * seq;
    r.interval_ms = 1000;
    wire::ReportBucket b;
    b.name = "per-key";
    b.limit_mrps = 50000;
    b.offered = seq * 100;
    b.admitted = seq * 100;
    b.keyed = true;
    b.quota = {1000, Period::Day, 0};
    b.keys = std::move(keys);
    r.buckets.push_back(b);
    return r;
}

// A collector's steps: the table takes the report, the pending use only a new one.
struct Zone {
    Table table;
    PendingUse pending{kMaxPendingKeys};
    wire::ReportView view;
    Verdict add(const wire::Report& r) {
        const Verdict v = table.add(r, r.ts_ms);
        wire::view_of(r, view);
        if (is_new(v)) pending.add(view);
        return v;
    }
    wire::ZoneUsage usage() {
        wire::ZoneUsage u;
        table.usage(u);
        pending.take(u);
        return u;
    }
};

const wire::KeyRate* find(const wire::UsageBucket& b, std::uint64_t hash) {
    for (const wire::KeyRate& k : b.keys) {
        if (k.hash == hash) return &k;
    }
    return nullptr;
}

TEST(PendingUse, EachNewReportsUseIsSummedCarriedOnceAndCleared) {
    Zone z;
    z.add(report("h1", 1, {used(10, 3, 3000, "alpha"), used(11, 1, 1000)}));
    z.add(report("h2", 1, {used(10, 2, 2000), used(12, 4, 0, "quiet")}));
    EXPECT_EQ(z.add(report("h2", 1, {used(10, 2, 2000)})), Verdict::Duplicate);  // not again
    wire::ZoneUsage u = z.usage();
    ASSERT_EQ(u.buckets.size(), 1u);
    const wire::UsageBucket& b = u.buckets[0];
    ASSERT_EQ(b.keys.size(), 3u);
    EXPECT_EQ(find(b, 10)->used, 5u);
    EXPECT_EQ(find(b, 11)->used, 1u);
    // A key with use but no rate worth listing comes after the listed ones, rates 0.
    EXPECT_EQ(b.keys[2].hash, 12u);
    EXPECT_EQ(b.keys[2].used, 4u);
    EXPECT_EQ(b.keys[2].text, "quiet");
    EXPECT_EQ(b.keys[2].offered_mrps, 0u);
    EXPECT_EQ(z.pending.keys(), 0u);
    // The usage encodes and decodes with its use.
    u.source = "col-z1";
    u.region = "r1";
    u.zone = "z1";
    u.ts_ms = 5000;
    std::string bytes, err;
    wire::encode(u, bytes);
    wire::ZoneUsage d;
    ASSERT_TRUE(wire::decode(bytes, d, err)) << err;
    EXPECT_EQ(d.buckets[0].keys, u.buckets[0].keys);
    // A usage no controller took gives its use back: the next one carries it.
    z.pending.give_back(u);
    EXPECT_EQ(z.pending.keys(), 3u);
    u = z.usage();
    EXPECT_EQ(find(u.buckets[0], 10)->used, 5u);
    EXPECT_EQ(find(u.buckets[0], 12)->used, 4u);
    // Carried once: the next usage has the rates again but no use.
    u = z.usage();
    ASSERT_NE(find(u.buckets[0], 10), nullptr);
    EXPECT_EQ(find(u.buckets[0], 10)->used, 0u);
    EXPECT_EQ(find(u.buckets[0], 12), nullptr);
}

TEST(PendingUse, UseBeyondOneUsageWaitsForTheNextMostUsedFirst) {
    Zone z;
    const std::size_t n = wire::kMaxUsageKeys + 100;
    std::vector<wire::KeyRate> keys;
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < n; ++i) {
        keys.push_back(used(100 + i, 1 + i % 7));
        total += 1 + i % 7;
    }
    // Reports carry at most kMaxReportKeys keys: several hosts.
    for (std::size_t h = 0; h * wire::kMaxReportKeys < n; ++h) {
        const auto first = keys.begin() + static_cast<std::ptrdiff_t>(h * wire::kMaxReportKeys);
        const auto last = h * wire::kMaxReportKeys + wire::kMaxReportKeys < n
                              ? first + static_cast<std::ptrdiff_t>(wire::kMaxReportKeys)
                              : keys.end();
        z.add(report("h" + std::to_string(h), 1, {first, last}));
    }
    wire::ZoneUsage u = z.usage();
    ASSERT_EQ(u.buckets[0].keys.size(), wire::kMaxUsageKeys);
    std::uint64_t carried = 0, least = ~0ULL;
    for (const wire::KeyRate& k : u.buckets[0].keys)
        carried += k.used, least = std::min(least, k.used);
    EXPECT_EQ(z.pending.keys(), 100u);
    u = z.usage();
    std::uint64_t most = 0;
    for (const wire::KeyRate& k : u.buckets[0].keys)
        carried += k.used, most = std::max(most, k.used);
    EXPECT_LE(most, least);  // the first usage took the most used
    EXPECT_EQ(carried, total);
    EXPECT_EQ(z.pending.keys(), 0u);
}

// A usage entry full of busy keys (rates) still makes room for the keys with use: the least
// busy keys without use give way, down to half the entry.
TEST(PendingUse, UseIsNotHeldBackBehindAThousandBusyKeys) {
    Zone z;
    for (std::uint64_t h = 0; h < 4; ++h) {
        std::vector<wire::KeyRate> busy;
        for (std::uint64_t i = 0; i < wire::kMaxReportKeys; ++i) {
            busy.push_back(used(1000 + h * 1000 + i, 0, 100000 + i));
        }
        z.add(report("busy" + std::to_string(h), 1, busy));
    }
    std::vector<wire::KeyRate> quiet;
    for (std::uint64_t i = 0; i < 100; ++i) quiet.push_back(used(100 + i, 2));
    z.add(report("quiet", 1, quiet));
    wire::ZoneUsage u = z.usage();
    ASSERT_EQ(u.buckets[0].keys.size(), wire::kMaxUsageKeys);
    std::size_t with_use = 0;
    for (const wire::KeyRate& k : u.buckets[0].keys) with_use += k.used == 2 ? 1 : 0;
    EXPECT_EQ(with_use, 100u);
    EXPECT_EQ(z.pending.keys(), 0u);
    EXPECT_EQ(u.buckets[0].keys[0].offered_mrps,
              100000u + wire::kMaxReportKeys - 1);  // busiest kept
}

TEST(PendingUse, KeysBeyondTheBoundAndBucketsNoHostReportsLoseTheirUseCounted) {
    Zone z;
    z.pending = PendingUse(2);
    z.add(report("h1", 1, {used(10, 3), used(11, 1), used(12, 7)}));
    EXPECT_EQ(z.pending.keys(), 2u);
    EXPECT_EQ(z.pending.refused().keys, 1u);
    EXPECT_EQ(z.pending.refused().units, 7u);
    // The bucket leaves the usage (no fresh host reports it): its use is lost, counted.
    wire::ZoneUsage u;
    z.pending.take(u);
    EXPECT_EQ(z.pending.keys(), 0u);
    EXPECT_EQ(z.pending.refused().units, 11u);
}

}  // namespace
}  // namespace grl::rates
