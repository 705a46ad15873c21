// Unit tests of per-key limits in the control plane (docs/per-key.md): the key table of one
// keyed instance (grl/key_limits.h), the collector's per-host key lists summed into zone usage
// (grl/rates.h), and the controller's keyed instances, instructions, overrides and admin keys
// (grl/control.h). Known answers; time is a number passed in, nothing sleeps.
#include "grl/control/key_limits.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grl/control/control.h"
#include "grl/control/rates.h"
#include "grl/common/ratio.h"

namespace grl::control {
namespace {

constexpr std::uint64_t kA = 0xa000000000000001ULL;
constexpr std::uint64_t kB = 0xb000000000000002ULL;
constexpr std::uint64_t kC = 0xc000000000000003ULL;

wire::KeyRate kr(std::uint64_t h, double offered_rps, std::uint64_t hosts = 1,
                 std::string text = "", double dropped_rps = 0) {
    wire::KeyRate k;
    k.hash = h;
    k.text = std::move(text);
    k.offered_mrps = static_cast<std::uint64_t>(offered_rps * 1000);
    k.dropped_mrps = static_cast<std::uint64_t>(dropped_rps * 1000);
    k.hosts = hosts;
    return k;
}

std::uint32_t ratio_of(const std::vector<wire::KeyRatio>& r, std::uint64_t h) {
    for (const auto& k : r) {
        if (k.hash == h) return k.ratio_ppm;
    }
    return UINT32_MAX;  // not sent
}

// ---------------------------------------------------------------------------------------------
// sum_keys and the key table

TEST(KeyLimits, SumKeysAddsByHashBusiestFirst) {
    std::vector<wire::KeyRate> z1 = {kr(kA, 100, 2, "", 10), kr(kB, 20, 1, "bee")};
    std::vector<wire::KeyRate> z2 = {kr(kA, 50, 1, "alpha", 5), kr(kC, 30, 1)};
    std::vector<wire::KeyRate> s = sum_keys({&z1, &z2}, 10);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[0].hash, kA);
    EXPECT_EQ(s[0].offered_mrps, 150000u);
    EXPECT_EQ(s[0].dropped_mrps, 15000u);
    EXPECT_EQ(s[0].hosts, 3u);
    EXPECT_EQ(s[0].text, "alpha");  // from the zone that sent one
    EXPECT_EQ(s[1].hash, kC);
    EXPECT_EQ(s[2].hash, kB);
    EXPECT_EQ(s[2].text, "bee");
    s = sum_keys({&z1, &z2}, 2);  // bounded: the busiest
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[1].hash, kC);
}

TEST(KeyLimits, RatioPerKeyOverItsLimit) {
    KeyTable t;
    KeyOptions o;  // window 2, fast attack 0.2, TTL 3 s
    EXPECT_EQ(t.update({kr(kA, 150), kr(kB, 20)}, false, false, 50000, o, 1000), 0u);
    // A: (150 - 50) / 150; B under its limit: not sent.
    std::vector<wire::KeyRatio> r = t.ratios();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(ratio_of(r, kA), 666666u);
    EXPECT_EQ(t.limited(), 1u);
    EXPECT_EQ(t.size(), 2u);  // B is held (grlctl keys shows it)
    // Smoothed as a bucket: mean of the window; a surge above it by 20% alone.
    t.update({kr(kA, 100), kr(kB, 20)}, false, false, 50000, o, 2000);
    EXPECT_EQ(ratio_of(t.ratios(), kA), drop_ratio_ppm(125000, 50000));  // mean 125 r/s
    t.update({kr(kA, 300), kr(kB, 20)}, false, false, 50000, o, 3000);
    EXPECT_EQ(ratio_of(t.ratios(), kA), drop_ratio_ppm(300000, 50000));  // fast attack
    // A per-key limit of 0 drops every key.
    t.update({kr(kA, 300), kr(kB, 20)}, false, false, 0, o, 4000);
    EXPECT_EQ(ratio_of(t.ratios(), kB), kPpmOne);
}

TEST(KeyLimits, AQuietKeyIsClearedForATtlThenForgotten) {
    KeyTable t;
    KeyOptions o;
    o.ttl_ms = 3000;
    t.update({kr(kA, 150)}, false, false, 50000, o, 1000);
    EXPECT_EQ(ratio_of(t.ratios(), kA), 666666u);
    // A goes quiet: samples [150, 0], mean 75 r/s: still over.
    t.update({}, false, false, 50000, o, 2000);
    EXPECT_EQ(ratio_of(t.ratios(), kA), drop_ratio_ppm(75000, 50000));
    // [0, 0]: under its limit, sent with ratio 0 (clears it on nginx)...
    t.update({}, false, false, 50000, o, 3000);
    EXPECT_EQ(ratio_of(t.ratios(), kA), 0u);
    EXPECT_EQ(t.limited(), 0u);
    t.update({}, false, false, 50000, o, 5999);  // ...for one TTL...
    EXPECT_EQ(ratio_of(t.ratios(), kA), 0u);
    t.update({}, false, false, 50000, o, 6000);  // ...then gone.
    EXPECT_TRUE(t.ratios().empty());
    EXPECT_EQ(t.size(), 0u);
    EXPECT_EQ(t.find(kA), nullptr);
}

TEST(KeyLimits, AKeyUnderItsLimitButBusyStaysWithoutRatio) {
    KeyTable t;
    KeyOptions o;
    t.update({kr(kA, 150)}, false, false, 50000, o, 1000);
    t.update({kr(kA, 40)}, false, false, 50000, o, 2000);  // mean 95: still over
    EXPECT_GT(ratio_of(t.ratios(), kA), 0u);
    t.update({kr(kA, 40)}, false, false, 50000, o, 3000);  // mean 40: under
    EXPECT_EQ(ratio_of(t.ratios(), kA), 0u);               // cleared...
    t.update({kr(kA, 40)}, false, false, 50000, o, 7000);
    EXPECT_TRUE(t.ratios().empty());  // ...once, then no longer sent
    ASSERT_NE(t.find(kA), nullptr);   // but still held: it has traffic
    EXPECT_EQ(t.find(kA)->offered_mrps, 40000);
}

TEST(KeyLimits, HoldAndProvisionalSamplesAsBuckets) {
    KeyTable t;
    KeyOptions o;
    t.update({kr(kA, 150)}, false, false, 50000, o, 1000);
    t.update({}, true, false, 50000, o, 2000);  // usage partly unknown: samples stand
    EXPECT_EQ(ratio_of(t.ratios(), kA), 666666u);
    t.update({kr(kA, 60)}, false, true, 50000, o, 3000);    // provisional...
    t.update({kr(kA, 150)}, false, false, 50000, o, 4000);  // ...replaced by the next
    EXPECT_EQ(t.find(kA)->samples.size(), 2u);
    EXPECT_DOUBLE_EQ(t.find(kA)->offered_mrps, 150000);
}

TEST(KeyLimits, BoundedTableRefusesNewKeys) {
    KeyTable t;
    KeyOptions o;
    o.max_keys = 2;
    EXPECT_EQ(t.update({kr(kA, 150), kr(kB, 120), kr(kC, 500)}, false, false, 50000, o, 1000), 1u);
    EXPECT_EQ(t.size(), 2u);
    EXPECT_EQ(t.find(kC), nullptr);  // refused: the table was full when it came
    // Instructions: highest offered first, at most kMaxInstructionKeys.
    std::vector<wire::KeyRatio> r = t.ratios();
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].hash, kA);
    KeyTable big;
    std::vector<wire::KeyRate> many;
    for (std::uint64_t i = 0; i < wire::kMaxInstructionKeys + 10; ++i)
        many.push_back(kr(2 + i, 100));
    o.max_keys = kMaxInstanceKeys;
    EXPECT_EQ(big.update(many, false, false, 50000, o, 1000), 0u);
    EXPECT_EQ(big.ratios().size(), wire::kMaxInstructionKeys);
    EXPECT_EQ(big.limited(), wire::kMaxInstructionKeys + 10);
}

// ---------------------------------------------------------------------------------------------
// The collector: each host's latest key list, summed over the zone's fresh hosts

wire::Report host_report(const std::string& host, std::uint64_t seq, std::uint64_t ts,
                         std::vector<wire::KeyRate> keys) {
    wire::Report r;
    r.host = host;
    r.zone = "z1";
    r.region = "r1";
    r.epoch = 1;
    r.seq = seq;
    r.ts_ms = ts;
    r.interval_ms = 1000;
    wire::ReportBucket b;
    b.name = "per-client";
    b.limit_mrps = 50000;
    b.offered = seq * 100;
    b.admitted = seq * 100;
    b.keyed = true;
    b.keys = std::move(keys);
    r.buckets.push_back(b);
    return r;
}

TEST(KeyLimits, CollectorSumsTheLatestKeysOfFreshHosts) {
    rates::Table t;
    t.add(host_report("h1", 1, 1000, {kr(kA, 100, 1, "alpha"), kr(kB, 10)}), 1000);
    t.add(host_report("h2", 1, 1000, {kr(kA, 50, 1), kr(kC, 5, 1, "c")}), 1000);
    t.add(host_report("h1", 2, 2000, {kr(kA, 90, 1, "alpha"), kr(kB, 10)}), 2000);  // latest
    wire::ZoneUsage u;
    t.usage(u);
    ASSERT_EQ(u.buckets.size(), 1u);
    const wire::UsageBucket& b = u.buckets[0];
    ASSERT_EQ(b.definitions.size(), 1u);
    EXPECT_TRUE(b.definitions[0].def.keyed);
    ASSERT_EQ(b.keys.size(), 3u);
    EXPECT_EQ(b.keys[0].hash, kA);
    EXPECT_EQ(b.keys[0].offered_mrps, 140000u);  // 90 (h1's latest) + 50
    EXPECT_EQ(b.keys[0].hosts, 2u);
    EXPECT_EQ(b.keys[0].text, "alpha");
    EXPECT_EQ(b.keys[1].hash, kB);
    EXPECT_EQ(b.keys[2].hash, kC);
    // The usage encodes and decodes (keys only beside a keyed definition).
    std::string bytes, err;
    u.source = "col-z1";
    u.region = "r1";
    u.zone = "z1";
    wire::encode(u, bytes);
    wire::ZoneUsage d;
    EXPECT_TRUE(wire::decode(bytes, d, err)) << err;
    // h2 goes stale: its keys leave the sums; forgotten: its state goes.
    t.sweep(2000 + 3 * 1000 + 1 - 1000);  // h2 silent 3 intervals + 1 ms, h1 not
    t.usage(u);
    ASSERT_EQ(u.buckets[0].keys.size(), 2u);
    EXPECT_EQ(u.buckets[0].keys[0].offered_mrps, 90000u);
    EXPECT_EQ(u.buckets[0].keys[0].hosts, 1u);
}

TEST(KeyLimits, CollectorKeepsTheBusiestUsageKeys) {
    rates::Table t;
    std::vector<wire::KeyRate> k1, k2;
    for (std::uint64_t i = 0; i < wire::kMaxReportKeys; ++i) {
        k1.push_back(kr(2 + i, 1 + static_cast<double>(i)));
        k2.push_back(kr(100000 + i, 1000 + static_cast<double>(i)));
    }
    for (int h = 0; h < 5; ++h) {
        std::vector<wire::KeyRate> own;
        for (std::uint64_t i = 0; i < wire::kMaxReportKeys; ++i)
            own.push_back(kr(1000000 * (h + 1) + i, 10));
        t.add(host_report("h" + std::to_string(h), 1, 1000, h == 0 ? k2 : own), 1000);
    }
    t.add(host_report("h9", 1, 1000, k1), 1000);
    wire::ZoneUsage u;
    t.usage(u);
    ASSERT_EQ(u.buckets[0].keys.size(), wire::kMaxUsageKeys);
    EXPECT_EQ(u.buckets[0].keys[0].hash, 100000 + wire::kMaxReportKeys - 1);  // busiest first
}

// ---------------------------------------------------------------------------------------------
// The controller

constexpr std::uint64_t kWall0 = 1'700'000'000'000;

wire::UsageBucket keyed_entry(std::vector<wire::KeyRate> keys, std::uint64_t hosts,
                              Scope scope = Scope::Global, std::uint64_t limit_rps = 50) {
    wire::UsageBucket b;
    b.name = "per-client";
    b.hosts = b.rated_hosts = hosts;
    for (const auto& k : keys) b.offered_mrps += k.offered_mrps;
    b.admitted_mrps = b.offered_mrps;
    b.definitions.push_back({{scope, Mode::Deny, limit_rps * 1000, true}, hosts});
    b.keys = std::move(keys);
    return b;
}

wire::ZoneUsage zone(const std::string& name, std::uint64_t seq, const Clock& now,
                     std::vector<wire::UsageBucket> buckets) {
    wire::ZoneUsage u;
    u.source = "col-" + name;
    u.region = "r1";
    u.zone = name;
    u.seq = seq;
    u.ts_ms = now.wall_ms;
    u.interval_ms = 1000;
    u.hosts = 2;
    u.buckets = std::move(buckets);
    return u;
}

Options copts() {
    Options o;
    o.name = "ctl-a";
    o.region = "r1";
    o.interval_ms = 1000;
    o.ttl_ms = 3000;
    o.window = 2;
    return o;
}

const wire::Instruction* keyed_instruction(const TickOutput& out, Scope scope,
                                           const std::string& zone = "") {
    for (const auto& m : out.instructions) {
        if (m.scope != scope || m.zone != zone) continue;
        for (const auto& e : m.buckets) {
            if (e.name == "per-client") return &e;
        }
    }
    return nullptr;
}

TEST(KeyLimits, ControllerSumsKeysOverTheScopeAndPublishesRatios) {
    Controller c(copts());
    Clock now{100000, kWall0};
    // Two zones, key A 150 r/s spread unevenly (100 + 50), B 20 r/s.
    c.on_zone_usage(zone("z1", 1, now, {keyed_entry({kr(kA, 100, 2, "alpha"), kr(kB, 15, 1)}, 2)}),
                    now);
    c.on_zone_usage(zone("z2", 1, now, {keyed_entry({kr(kA, 50, 2), kr(kB, 5, 1)}, 2)}), now);
    TickOutput out = c.tick(now);
    const wire::Instruction* e = keyed_instruction(out, Scope::Global);
    ASSERT_NE(e, nullptr);
    EXPECT_TRUE(e->keyed);
    EXPECT_EQ(e->ratio_ppm, 0u);  // the bucket's own
    EXPECT_FALSE(e->has_basis);
    EXPECT_EQ(e->limit_mrps, 50000u);  // each key's
    ASSERT_EQ(e->keys.size(), 1u);
    EXPECT_EQ(e->keys[0].hash, kA);
    EXPECT_EQ(e->keys[0].ratio_ppm, 666666u);  // (150 - 50) / 150
    // The region usage carries the region's keys for peers (global buckets).
    ASSERT_EQ(out.region_usage.buckets.size(), 1u);
    ASSERT_EQ(out.region_usage.buckets[0].keys.size(), 2u);
    EXPECT_EQ(out.region_usage.buckets[0].keys[0].offered_mrps, 150000u);
    std::string bytes, err;
    wire::encode(out.region_usage, bytes);
    wire::RegionUsage ru;
    EXPECT_TRUE(wire::decode(bytes, ru, err)) << err;
    // Status and admin keys.
    std::vector<wire::BucketStatus> st = c.status("per-client", false);
    ASSERT_EQ(st.size(), 1u);
    EXPECT_TRUE(st[0].keyed);
    EXPECT_EQ(st[0].keys_limited, 1u);
    EXPECT_EQ(st[0].ratio_ppm, 0u);
    std::vector<wire::KeyStatus> keys;
    EXPECT_EQ(c.keys("per-client", 0, keys), "");
    ASSERT_EQ(keys.size(), 2u);
    EXPECT_EQ(keys[0].key.hash, kA);
    EXPECT_EQ(keys[0].key.text, "alpha");
    EXPECT_EQ(keys[0].key.offered_mrps, 150000u);
    EXPECT_EQ(keys[0].key.hosts, 4u);
    EXPECT_EQ(keys[0].ratio_ppm, 666666u);
    EXPECT_EQ(keys[1].key.hash, kB);
    EXPECT_EQ(keys[1].ratio_ppm, 0u);
    EXPECT_EQ(c.keys("per-client", 1, keys), "");
    EXPECT_EQ(keys.size(), 1u);
    EXPECT_NE(c.keys("nope", 0, keys), "");

    // An override of a keyed bucket's limit is each key's limit.
    ASSERT_EQ(c.set_override("per-client", 100000, std::nullopt, 0, now), "");
    now.mono_ms += 1000;
    now.wall_ms += 1000;
    c.on_zone_usage(zone("z1", 2, now, {keyed_entry({kr(kA, 100, 2), kr(kB, 15, 1)}, 2)}), now);
    c.on_zone_usage(zone("z2", 2, now, {keyed_entry({kr(kA, 50, 2), kr(kB, 5, 1)}, 2)}), now);
    out = c.tick(now);
    e = keyed_instruction(out, Scope::Global);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->limit_mrps, 100000u);
    EXPECT_EQ(e->keys[0].ratio_ppm, drop_ratio_ppm(150000, 100000));
}

// A keyed bucket with quota= (docs/design/009-per-key-quotas.md): the zones' per-key use adds
// up, and a key that used its quota is published with ratio 1 before the keys over their rate,
// with each key's N and the window's end; the region usage carries each key's use.
TEST(KeyLimits, ControllerPublishesKeysThatUsedTheirQuotaFirst) {
    Controller c(copts());
    Clock now{100000, kWall0};
    QuotaSpec q;
    q.n = 100;
    q.period = Period::Hour;
    auto quota_zone = [&](const std::string& name, std::uint64_t seq,
                          std::vector<wire::KeyRate> keys) {
        wire::ZoneUsage u = zone(name, seq, now, {keyed_entry(std::move(keys), 2)});
        u.quotas.push_back({"per-client", Scope::Global, q});
        return u;
    };
    wire::KeyRate a = kr(kA, 150, 2, "alpha");  // over its rate of 50 r/s
    wire::KeyRate b = kr(kB, 1, 1);
    b.used = 60;
    c.on_zone_usage(quota_zone("z1", 1, {a, b}), now);
    wire::KeyRate b2 = kr(kB, 1, 1);
    b2.used = 45;
    const std::uint64_t kC = 0xc000000000000003ULL;
    wire::KeyRate c2 = kr(kC, 0, 1);  // use, no rate: only the ledger holds it
    c2.used = 7;
    c.on_zone_usage(quota_zone("z2", 1, {b2, c2}), now);
    TickOutput out = c.tick(now);
    const wire::Instruction* e = keyed_instruction(out, Scope::Global);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->key_quota, 100u);
    EXPECT_EQ(e->key_quota_reset_ms, window_at(q, kWall0).end_ms);
    EXPECT_EQ(e->quota, 0u);  // the bucket itself has no quota of its own
    ASSERT_EQ(e->keys.size(), 2u);
    EXPECT_EQ(e->keys[0].hash, kB);  // 105 of 100 used
    EXPECT_EQ(e->keys[0].ratio_ppm, 1000000u);
    EXPECT_EQ(e->keys[1].hash, kA);
    EXPECT_EQ(e->keys[1].ratio_ppm, 666666u);
    std::string bytes, err;
    wire::encode(out.instructions[0], bytes);
    wire::Instructions back;
    ASSERT_TRUE(wire::decode(bytes, back, err)) << err;
    ASSERT_EQ(out.region_usage.quotas.size(), 1u);
    EXPECT_EQ(out.region_usage.quotas[0].keys, (std::vector<wire::KeyUse>{{kB, 105}, {kC, 7}}));
    // What grlctl explain reads: each key's N and the keys used up, a key's use and ratio as
    // published.
    wire::AdminReply r, reply;
    r.source = "ctl-a";
    r.region = "r1";
    r.buckets = c.status("per-client", false);
    ASSERT_EQ(r.buckets.size(), 1u);
    EXPECT_EQ(r.buckets[0].key_quota, 100u);
    EXPECT_EQ(r.buckets[0].keys_used_up, 1u);
    EXPECT_EQ(c.keys("per-client", 10, r.keys, kWall0), "");
    ASSERT_EQ(r.keys.size(), 3u);
    EXPECT_EQ(r.keys[0].key.hash, kA);
    EXPECT_EQ(r.keys[0].key.used, 0u);
    EXPECT_EQ(r.keys[1].key.hash, kB);
    EXPECT_EQ(r.keys[1].key.used, 105u);
    EXPECT_EQ(r.keys[1].ratio_ppm, 1000000u);
    EXPECT_EQ(r.keys[2].key.hash, kC);
    EXPECT_EQ(r.keys[2].key.used, 7u);
    EXPECT_EQ(r.keys[2].ratio_ppm, 0u);
    wire::encode(r, bytes);
    ASSERT_TRUE(wire::decode(bytes, reply, err)) << err;
    EXPECT_EQ(reply.keys, r.keys);
    EXPECT_EQ(reply.buckets[0].key_quota_reset_ms, r.buckets[0].key_quota_reset_ms);
}

TEST(KeyLimits, ControllerZoneScopeAndAQuietKey) {
    Controller c(copts());
    Clock now{100000, kWall0};
    std::uint64_t seq = 0;
    auto feed = [&](std::vector<wire::KeyRate> z1, std::vector<wire::KeyRate> z2) {
        ++seq;
        c.on_zone_usage(zone("z1", seq, now, {keyed_entry(z1, 2, Scope::Zone)}), now);
        c.on_zone_usage(zone("z2", seq, now, {keyed_entry(z2, 2, Scope::Zone)}), now);
        TickOutput out = c.tick(now);
        now.mono_ms += 1000;
        now.wall_ms += 1000;
        return out;
    };
    // Zone scope: each zone's own sum. z1: A 120 -> over; z2: A 30 -> under.
    TickOutput out = feed({kr(kA, 120)}, {kr(kA, 30)});
    ASSERT_NE(keyed_instruction(out, Scope::Zone, "z1"), nullptr);
    EXPECT_EQ(ratio_of(keyed_instruction(out, Scope::Zone, "z1")->keys, kA),
              drop_ratio_ppm(120000, 50000));
    EXPECT_TRUE(keyed_instruction(out, Scope::Zone, "z2")->keys.empty());
    // A goes quiet in z1 (absent from its usage): over for one more tick (mean 60), then sent
    // with ratio 0 for a TTL (3 ticks), then gone.
    out = feed({}, {kr(kA, 30)});
    EXPECT_EQ(ratio_of(keyed_instruction(out, Scope::Zone, "z1")->keys, kA),
              drop_ratio_ppm(60000, 50000));
    int zeros = 0;
    for (int i = 0; i < 6; ++i) {
        out = feed({}, {kr(kA, 30)});
        std::uint32_t r = ratio_of(keyed_instruction(out, Scope::Zone, "z1")->keys, kA);
        if (r == 0) ++zeros;
        if (r == UINT32_MAX) break;
    }
    EXPECT_EQ(zeros, 3);
    EXPECT_TRUE(keyed_instruction(out, Scope::Zone, "z1")->keys.empty());
    std::vector<wire::KeyStatus> keys;
    EXPECT_EQ(c.keys("per-client", 5, keys), "");
    ASSERT_EQ(keys.size(), 1u);  // z2's A only
    EXPECT_EQ(keys[0].zone, "z2");
}

TEST(KeyLimits, ControllerRefusesKeysBeyondItsTableAndSaysSo) {
    Options o = copts();
    o.max_instance_keys = 2;
    Controller c(o);
    Clock now{100000, kWall0};
    c.on_zone_usage(zone("z1", 1, now, {keyed_entry({kr(kA, 100), kr(kB, 90), kr(kC, 80)}, 2)}),
                    now);
    TickOutput out = c.tick(now);
    EXPECT_EQ(c.keys_refused(), 1u);
    bool logged = false;
    for (const auto& ev : out.events) logged = logged || ev.text.find("key table full") == 0;
    EXPECT_TRUE(logged);
    ASSERT_NE(keyed_instruction(out, Scope::Global), nullptr);
    EXPECT_EQ(keyed_instruction(out, Scope::Global)->keys.size(), 2u);
}

TEST(KeyLimits, InstructionsOfManyKeyedBucketsStayUnderOneMessage) {
    Controller c(copts());
    Clock now{100000, kWall0};
    std::vector<wire::UsageBucket> buckets;
    for (int i = 0; i < 80; ++i) {
        std::vector<wire::KeyRate> keys;
        for (std::uint64_t k = 0; k < wire::kMaxUsageKeys; ++k) keys.push_back(kr(2 + k, 100));
        wire::UsageBucket b = keyed_entry(std::move(keys), 2);
        b.name = "k" + std::to_string(100 + i);
        buckets.push_back(std::move(b));
    }
    c.on_zone_usage(zone("z1", 1, now, std::move(buckets)), now);
    TickOutput out = c.tick(now);
    std::size_t entries = 0, messages = 0;
    for (const auto& m : out.instructions) {
        if (m.scope != Scope::Global) continue;
        ++messages;
        std::string bytes, err;
        wire::encode(m, bytes);
        EXPECT_LE(bytes.size(), wire::kMaxMessageBytes);
        wire::Instructions d;
        EXPECT_TRUE(wire::decode(bytes, d, err)) << err;
        entries += m.buckets.size();
    }
    EXPECT_EQ(entries, 80u);
    EXPECT_GE(messages, 2u);  // 80 x 1024 keys x ~14 bytes: more than 1 MiB
}

}  // namespace
}  // namespace grl::control
