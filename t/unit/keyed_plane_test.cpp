// Keyed buckets in the data plane (docs/per-key.md): the grl_bucket per-key parameters, the
// keyed branch of the decision, heavy hitters in the report, per-key instructions, and the
// status page; over a real shm with a key table placed in it as nginx's init_shm does.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "grl/plane/keyed_decision.h"
#include "grl/common/parse.h"
#include "grl/plane/keyed_spec.h"
#include "grl/plane/plane.h"
#include "grl/common/ratio.h"

namespace grl {
namespace {

// Keys are one hash fleet-wide (docs/protocol.md): every build must hash as every other, so
// these values are fixed. Lengths around the four-byte step: empty, 1, 4, 16 and 46 bytes.
TEST(KeyHash, IsTheSameOnEveryBuild) {
    using std::string_view;
    EXPECT_EQ(keyed::hash_key(string_view("", 0)), 0xefd01f60ba992926ULL);
    EXPECT_EQ(keyed::hash_key("a"), 0x82a2a958a9bece5bULL);
    EXPECT_EQ(keyed::hash_key(string_view("\x7f\x00\x00\x01", 4)), 0xe2b8dcd14d0de18aULL);
    EXPECT_EQ(keyed::hash_key("2001:db8::1-ipv6"), 0x87463fe6e1a04d2fULL);
    EXPECT_EQ(keyed::hash_key("an-api-key-of-some-length-0123456789abcdefghij"),
              0x26e2ece7821230f7ULL);
}

TEST(KeyedParams, DefaultsAndValues) {
    KeyedSpec k;
    EXPECT_EQ(k.keys, 10000u);
    EXPECT_EQ(k.report_keys, 64u);
    EXPECT_FALSE(k.hash_keys);
    std::string err;
    EXPECT_TRUE(take_keyed_param("keys=100000", k, err));
    EXPECT_EQ(err, "");
    EXPECT_TRUE(take_keyed_param("report_keys=256", k, err));
    EXPECT_TRUE(take_keyed_param("hash_keys=on", k, err));
    EXPECT_EQ(err, "");
    EXPECT_EQ(k.keys, 100000u);
    EXPECT_EQ(k.report_keys, 256u);
    EXPECT_TRUE(k.hash_keys);
    // Not a per-key parameter: left to the caller.
    EXPECT_FALSE(take_keyed_param("rate=10r/s", k, err));
    EXPECT_FALSE(take_keyed_param("keys", k, err));
    EXPECT_FALSE(take_keyed_param("key=$x", k, err));
}

TEST(KeyedParams, BadValuesNameTheValue) {
    const std::pair<const char*, const char*> cases[] = {
        {"keys=0", "invalid keys \"0\", expected 8..16777216 (table entries)"},
        {"keys=7", "invalid keys \"7\""},
        {"keys=1e6", "invalid keys \"1e6\""},
        {"keys=16777217", "invalid keys \"16777217\""},
        {"report_keys=0", "invalid report_keys \"0\", expected 1..256"},
        {"report_keys=257", "invalid report_keys \"257\""},
        {"hash_keys=yes", "invalid hash_keys \"yes\", expected on or off"},
    };
    for (const auto& [arg, want] : cases) {
        KeyedSpec k;
        std::string err;
        EXPECT_TRUE(take_keyed_param(arg, k, err)) << arg;
        EXPECT_NE(err.find(want), std::string::npos) << arg << ": " << err;
    }
    KeyedSpec k;
    std::string err;
    EXPECT_TRUE(take_keyed_param("keys=100", k, err));
    EXPECT_TRUE(take_keyed_param("keys=200", k, err));
    EXPECT_EQ(err, "duplicate \"keys=200\"");
}

// A zone of 4 configurable buckets and, behind it, a key table for slot 0 ("per-key").
struct KeyedZone : ::testing::Test {
    static constexpr std::uint32_t kCap = 4 + shm::kRuntimeSlots;
    static constexpr std::uint32_t kKeys = 64;
    std::size_t zone_bytes = (shm::bytes_for(kCap) + 63) / 64 * 64;
    std::unique_ptr<void, decltype(&std::free)> mem{
        std::aligned_alloc(64, zone_bytes + keyed::bytes_for(kKeys)), &std::free};
    shm::View z{mem.get()};
    BucketTable table;
    Identity id{"h1", "z1", "r1"};
    keyed::Table keys;

    void SetUp() override {
        z.format(kCap, 7);
        BucketDef k;
        k.name = "per-key";
        k.limit_mrps = 64000;  // 64 r/s for each key
        BucketDef plain;
        plain.name = "plain";
        plain.limit_mrps = 1000000;
        table.defs = {k, plain};
        KeyedSpec spec;
        spec.keyed = true;
        spec.key = "$http_x_api_key";
        spec.report_keys = 3;
        table.keyed = {spec, KeyedSpec()};
        std::uint64_t gen = 0;
        ASSERT_EQ(z.assign({"per-key", "plain"}, table.slots, gen), "");
        keys = keyed::Table(static_cast<char*>(mem.get()) + zone_bytes);
        keys.format(kKeys);
        z.slot(table.slots[0]).key_table = static_cast<std::int64_t>(zone_bytes);
    }
    // n requests of `key` at `now_ms` through the keyed branch, as the module does them.
    void offer(const std::string& key, int n, std::uint64_t now_ms) {
        for (int i = 0; i < n; ++i) {
            keyed::Entry& e = keys.touch(keyed::hash_key(key), key, now_ms);
            keys.admit(e, now_ms, 64000, kKeyedBurstMs, 0xffffffffu);
        }
    }
};

TEST_F(KeyedZone, TheKeyTableIsFoundFromItsBucketSlot) {
    EXPECT_TRUE(z.key_table(table.slots[0]).valid());
    EXPECT_EQ(z.key_table(table.slots[0]).capacity(), kKeys);
    EXPECT_FALSE(z.key_table(table.slots[1]).valid());
}

TEST_F(KeyedZone, AKeyedDenyDropRejectsAndEveryMatchedBucketCountsIt) {
    const std::uint16_t matched[2] = {table.slots[0], table.slots[1]};
    Prng rng(1);
    Outcome out = decide(z, matched, 2, 0, 1000, rng);
    ASSERT_EQ(out.decision, Decision::Pass);  // a keyed bucket's own ratio is 0
    KeyedVerdict v{0, keyed::Verdict::LocalCap, true, 1, "a", 0, true};
    fold_keyed(z, matched, 2, &v, 1, 0, out);
    EXPECT_EQ(out.decision, Decision::Drop);
    EXPECT_EQ(out.decided_by, 0);
    for (std::uint16_t s : matched) {
        EXPECT_EQ(z.totals(s).offered, 1u);
        EXPECT_EQ(z.totals(s).dropped, 1u);
        EXPECT_EQ(z.totals(s).admitted, 0u);
    }
}

TEST_F(KeyedZone, AKeyedShadowDropOnlyCountsWhatItWouldDrop) {
    const std::uint16_t matched[2] = {table.slots[0], table.slots[1]};
    Prng rng(1);
    Outcome out = decide(z, matched, 2, 0, 1000, rng);
    KeyedVerdict v{0, keyed::Verdict::Ratio, false, 1, "a", shm::kThresholdOne / 2, true};
    fold_keyed(z, matched, 2, &v, 1, 0, out);
    EXPECT_EQ(out.decision, Decision::ShadowDrop);
    EXPECT_EQ(out.threshold, shm::kThresholdOne / 2);
    EXPECT_EQ(z.totals(matched[0]).shadow_dropped, 1u);
    EXPECT_EQ(z.totals(matched[0]).dropped, 0u);
    EXPECT_EQ(z.totals(matched[1]).shadow_dropped, 0u);
    // A pass changes nothing.
    Outcome again = decide(z, matched, 2, 0, 1000, rng);
    KeyedVerdict pass{0, keyed::Verdict::Pass, true, 1, "a", 0, false};
    fold_keyed(z, matched, 2, &pass, 1, 0, again);
    EXPECT_EQ(again.decision, Decision::Pass);
    EXPECT_EQ(z.totals(matched[0]).dropped, 0u);
}

TEST_F(KeyedZone, ReportCarriesHeavyHittersAsRatesBoundedByReportKeys) {
    // First report: its span is unknown, so it counts as one interval (1 s).
    offer("big", 50, 1000);
    wire::Report r;
    build_report(z, table, id, 1000, 5, r);
    add_key_rates(z, table, 1000, r);
    ASSERT_EQ(r.buckets.size(), 2u);
    EXPECT_TRUE(r.buckets[0].keyed);
    EXPECT_FALSE(r.buckets[1].keyed);
    EXPECT_TRUE(r.buckets[1].keys.empty());
    ASSERT_EQ(r.buckets[0].keys.size(), 1u);
    EXPECT_EQ(r.buckets[0].keys[0].text, "big");
    EXPECT_EQ(r.buckets[0].keys[0].hash, keyed::hash_key("big"));
    EXPECT_EQ(r.buckets[0].keys[0].offered_mrps, 50000u);
    EXPECT_EQ(r.buckets[0].keys[0].hosts, 1u);

    // 500 ms later: 6 keys, the threshold is 1/64 of 64 r/s over 0.5 s = 0.5 request -> 1.
    // At most report_keys=3 of them, busiest first, with their drops (the local cap).
    offer("big", 100, 1200);
    offer("k1", 40, 1300);
    offer("k2", 30, 1300);
    offer("k3", 20, 1300);
    offer("k4", 10, 1300);
    offer("one", 1, 1300);
    build_report(z, table, id, 1000, 6, r);
    add_key_rates(z, table, 1500, r);
    const auto& k = r.buckets[0].keys;
    ASSERT_EQ(k.size(), 3u);
    EXPECT_EQ(k[0].text, "big");
    EXPECT_EQ(k[0].offered_mrps, 200000u);  // 100 requests in 0.5 s
    EXPECT_GT(k[0].dropped_mrps, 0u);       // 100 at once: over the 100 ms burst
    EXPECT_LE(k[0].dropped_mrps, k[0].offered_mrps);
    EXPECT_EQ(k[1].text, "k1");
    EXPECT_EQ(k[2].text, "k2");
    EXPECT_EQ(k[2].offered_mrps, 60000u);

    // Nothing since: no keys. hash_keys=on: hashes only.
    table.keyed[0].hash_keys = true;
    offer("k9", 20, 1600);
    build_report(z, table, id, 1000, 7, r);
    add_key_rates(z, table, 2500, r);
    ASSERT_EQ(r.buckets[0].keys.size(), 1u);
    EXPECT_EQ(r.buckets[0].keys[0].text, "");
    EXPECT_EQ(r.buckets[0].keys[0].hash, keyed::hash_key("k9"));
}

TEST_F(KeyedZone, ReportLeavesOutKeysUnderOneSixtyFourthOfTheLimit) {
    table.defs[0].limit_mrps = 640000;  // 640 r/s: 10 requests a second is 1/64
    wire::Report r;
    build_report(z, table, id, 1000, 5, r);
    add_key_rates(z, table, 1000, r);  // starts the span
    offer("under", 9, 1500);
    offer("at", 10, 1500);
    build_report(z, table, id, 1000, 6, r);
    add_key_rates(z, table, 2000, r);
    ASSERT_EQ(r.buckets[0].keys.size(), 1u);
    EXPECT_EQ(r.buckets[0].keys[0].text, "at");
}

// With quota=, a key under 1/64 of the limit is listed too, with the units it used
// (docs/design/009-per-key-quotas.md); keys beyond report_keys wait for the next report.
TEST_F(KeyedZone, AQuotaBucketsReportListsEveryKeysUse) {
    table.defs[0].limit_mrps = 640000;
    QuotaSpec day;
    day.n = 1000;
    day.period = Period::Day;
    table.quotas = {day};
    wire::Report r;
    build_report(z, table, id, 1000, 5, r);
    add_key_rates(z, table, 1000, r);
    for (int i = 0; i < 5; ++i) offer("k" + std::to_string(i), i + 1, 1500);
    build_report(z, table, id, 1000, 6, r);
    add_key_rates(z, table, 2000, r);
    // report_keys=3: one for the oldest unlisted use (all as old here: the lowest hash), two
    // for the most use; the others wait for the next report.
    ASSERT_EQ(r.buckets[0].keys.size(), 3u);
    std::map<std::string, std::uint64_t> used;
    for (const wire::KeyRate& k : r.buckets[0].keys) {
        used[k.text] = k.used;
        EXPECT_EQ(k.offered_mrps, k.used * 1000) << k.text;  // its rate too
    }
    EXPECT_EQ(used["k4"], 5u);
    EXPECT_EQ(used["k3"], 4u);
    build_report(z, table, id, 1000, 7, r);
    add_key_rates(z, table, 3000, r);
    ASSERT_EQ(r.buckets[0].keys.size(), 2u);
    for (const wire::KeyRate& k : r.buckets[0].keys) used[k.text] = k.used;
    EXPECT_EQ(used, (std::map<std::string, std::uint64_t>{
                        {"k0", 1}, {"k1", 2}, {"k2", 3}, {"k3", 4}, {"k4", 5}}));
    // A bucket without quota= lists neither.
    table.quotas.clear();
    offer("k0", 1, 3500);
    build_report(z, table, id, 1000, 8, r);
    add_key_rates(z, table, 4000, r);
    EXPECT_TRUE(r.buckets[0].keys.empty());
}

// Use held back while reports could not be sent, across the start of a new window, is dropped
// and counted: it belongs to the window that ended.
TEST_F(KeyedZone, UseHeldBackAcrossTheEndOfItsWindowIsDroppedAndCounted) {
    QuotaSpec minute;
    minute.n = 1000;
    table.quotas = {minute};
    offer("a", 3, 1500);
    wire::Report r;
    build_report(z, table, id, 1000, 125000, r);  // in the window from 120 s
    add_key_rates(z, table, 2000, r, 119500);     // the last report sent: within two intervals
    ASSERT_EQ(r.buckets[0].keys.size(), 1u);
    EXPECT_EQ(r.buckets[0].keys[0].used, 3u);
    unlist_key_use(z, table, r);  // not sent
    offer("a", 2, 2500);
    build_report(z, table, id, 1000, 185000, r);  // the next window; nothing sent since
    add_key_rates(z, table, 3000, r, 119500);
    for (const wire::KeyRate& k : r.buckets[0].keys) EXPECT_EQ(k.used, 0u);  // a rate, no use
    EXPECT_EQ(keys.header().quota_units_lost.load(), 5u);
}

TEST_F(KeyedZone, KeyedInstructionsSetEachKeysRatioWithTheTtlAndZeroClears) {
    offer("a", 1, 100);
    offer("b", 1, 100);
    wire::Instructions m;
    m.source = "c1";
    m.seq = 1;
    m.ts_ms = 10;
    m.ttl_ms = 9000;  // capped at grl_instruction_ttl 3000 below
    wire::Instruction in;
    in.name = "per-key";
    in.limit_mrps = 64000;
    in.keyed = true;
    in.keys = {{keyed::hash_key("a"), 500000},
               {keyed::hash_key("b"), 1000000},
               {keyed::hash_key("absent"), 1000000}};
    m.buckets = {in};
    EXPECT_EQ(apply_instructions(z, table, m, 1000, 3000), 1u);
    keyed::Entry* a = keys.find(keyed::hash_key("a"));
    keyed::Entry* b = keys.find(keyed::hash_key("b"));
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->threshold.load(), ppm_to_threshold(500000));
    EXPECT_EQ(a->expires_ms.load(), 4000u);
    EXPECT_EQ(b->threshold.load(), keyed::kThresholdOne);
    EXPECT_EQ(keys.find(keyed::hash_key("absent")), nullptr);  // no claim for a key not here
    // The bucket's own ratio stays 0.
    EXPECT_EQ(z.slot(table.slots[0]).threshold.load(), 0u);
    // b is dropped by its ratio, then cleared by ratio 0.
    EXPECT_EQ(keys.admit(*b, 1500, 64000, kKeyedBurstMs, 0), keyed::Verdict::Ratio);
    m.ts_ms = 11;
    m.buckets[0].keys = {{keyed::hash_key("b"), 0}};
    apply_instructions(z, table, m, 1600, 3000);
    EXPECT_EQ(b->threshold.load(), 0u);
    EXPECT_EQ(keys.admit(*b, 1700, 64000, kKeyedBurstMs, 0), keyed::Verdict::Pass);
    // a's ratio expires with its TTL: fail open per key.
    EXPECT_EQ(keys.admit(*a, 4001, 64000, kKeyedBurstMs, 0), keyed::Verdict::Pass);
}

// The reporter's log line when a keyed bucket starts and stops limiting keys: only on the
// transitions; a key sent with ratio 0 (being cleared) is not limited.
TEST(KeyLimiting, StartsWithAKeyOverItsLimitAndStopsWhenNoneIs) {
    wire::Instruction in;
    in.name = "per-key";
    in.keyed = true;
    bool limiting = false;
    EXPECT_EQ(key_limiting(limiting, in), KeyLimiting::Unchanged);  // no key: not limiting
    in.keys = {{1, 0}};
    EXPECT_EQ(limited_keys(in), 0u);
    EXPECT_EQ(key_limiting(limiting, in), KeyLimiting::Unchanged);
    in.keys = {{1, 500000}, {2, 0}, {3, 1000000}};
    EXPECT_EQ(limited_keys(in), 2u);
    EXPECT_EQ(key_limiting(limiting, in), KeyLimiting::Started);
    EXPECT_TRUE(limiting);
    in.keys = {{1, 250000}};
    EXPECT_EQ(key_limiting(limiting, in), KeyLimiting::Unchanged);  // still limiting: no line
    in.keys = {{1, 0}};
    EXPECT_EQ(key_limiting(limiting, in), KeyLimiting::Stopped);
    EXPECT_FALSE(limiting);
    EXPECT_EQ(key_limiting(limiting, in), KeyLimiting::Unchanged);
    in.keys = {{1, 1000}};
    in.keyed = false;  // a bucket that is no longer keyed limits no key
    limiting = true;
    EXPECT_EQ(key_limiting(limiting, in), KeyLimiting::Stopped);
}

TEST_F(KeyedZone, StatusShowsTheKeyTableAndTopKeysAndPrometheusNoKey) {
    offer("busy \"quoted\"", 30, 100);
    offer("quiet", 2, 100);
    offer(std::string("\x01\xff", 2), 1, 100);
    StatusInput in;
    in.shm = &z;
    in.table = &table;
    in.id = id;
    in.shm_name = "grl";
    in.now_ms = 200;
    in.ttl_ms = 5000;
    std::string json = render_status_json(in);
    EXPECT_NE(json.find("\"keyed\":{\"key\":\"$http_x_api_key\",\"capacity\":64,\"in_use\":3,"
                        "\"claims\":3,\"evictions\":0,\"races\":0,\"report_keys\":3,"
                        "\"hash_keys\":false,\"top\":[{\"hash\":\""),
              std::string::npos)
        << json;
    EXPECT_NE(json.find("\"key\":\"busy \\\"quoted\\\"\",\"offered\":30,\"dropped\":"),
              std::string::npos)
        << json;
    EXPECT_NE(json.find("\"key\":\"\\u0001\\u00ff\""), std::string::npos) << json;
    EXPECT_NE(json.find("\"rate_rps\":null,\"ratio\":0.000000,\"ratio_state\":\"waiting\""),
              std::string::npos)
        << json;
    // The plain bucket has no "keyed".
    EXPECT_EQ(json.find("\"keyed\"", json.find("\"name\":\"plain\"")), std::string::npos);

    std::string prom = render_status_prometheus(in);
    EXPECT_NE(prom.find("grl_bucket_key_capacity{bucket=\"per-key\"} 64\n"), std::string::npos);
    EXPECT_NE(prom.find("grl_bucket_key_claims_total{bucket=\"per-key\"} 3\n"), std::string::npos);
    EXPECT_NE(prom.find("grl_bucket_key_evictions_total{bucket=\"per-key\"} 0\n"),
              std::string::npos);
    EXPECT_EQ(prom.find("bucket=\"plain\"} 64"), std::string::npos);
    EXPECT_EQ(prom.find("quiet"), std::string::npos);  // never a series per key
}

}  // namespace
}  // namespace grl
