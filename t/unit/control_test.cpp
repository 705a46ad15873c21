// Unit tests of grl::control: scope aggregation, definition resolution, smoothing and ratio
// computation, staleness, limits and overrides, run-time buckets, replication between
// controllers. Time is injected (Clock), nothing sleeps.
#include "grl/control/control.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grl/common/ratio.h"
#include "grl/control/usage_intake.h"
#include "grl/wire/usage_parts.h"

namespace grl::control {
namespace {

constexpr std::uint64_t kWall0 = 1'700'000'000'000;

struct Fleet {
    Clock now{100000, kWall0};
    void advance(std::uint64_t ms) {
        now.mono_ms += ms;
        now.wall_ms += ms;
    }
};

wire::UsageBucket ub(const std::string& name, double offered_rps, std::uint64_t hosts = 1,
                     Scope scope = Scope::Global, std::uint64_t limit_rps = 100,
                     Mode mode = Mode::Deny) {
    wire::UsageBucket b;
    b.name = name;
    b.offered_mrps = static_cast<std::uint64_t>(offered_rps * 1000);
    b.admitted_mrps = b.offered_mrps;
    b.hosts = hosts;
    b.rated_hosts = hosts;
    b.definitions.push_back({{scope, mode, limit_rps * 1000}, hosts});
    return b;
}

std::uint64_t g_seq = 0;

wire::ZoneUsage zu(const std::string& zone, std::vector<wire::UsageBucket> buckets,
                   const Clock& now, const std::string& region = "r1") {
    wire::ZoneUsage u;
    u.source = "col-" + zone;
    u.region = region;
    u.zone = zone;
    u.seq = ++g_seq;
    u.ts_ms = now.wall_ms;
    u.interval_ms = 1000;
    u.hosts = 0;
    for (const auto& b : buckets) u.hosts = std::max(u.hosts, b.hosts);
    u.buckets = std::move(buckets);
    return u;
}

Options opts(const std::string& name = "ctl-a", const std::string& region = "r1") {
    Options o;
    o.name = name;
    o.region = region;
    o.interval_ms = 1000;
    o.ttl_ms = 3000;
    o.window = 2;
    return o;
}

// The match of a run-time bucket for callers named "bot-...".
wire::RuntimeMatch bots() {
    wire::RuntimeMatch m;
    m.caller = "bot-";
    m.caller_kind = MatchKind::Prefix;
    return m;
}

const Instance* inst(const Controller& c, const std::string& bucket, const std::string& zone = "") {
    for (const auto& [k, i] : c.instances()) {
        if (i.bucket == bucket && i.zone == zone) return &i;
    }
    return nullptr;
}

std::uint32_t ratio(const Controller& c, const std::string& bucket, const std::string& zone = "") {
    const Instance* i = inst(c, bucket, zone);
    return i ? i->ratio_ppm : UINT32_MAX;
}

const wire::Instructions* msg(const TickOutput& out, Scope scope, const std::string& zone = "") {
    for (const auto& m : out.instructions) {
        if (m.scope == scope && m.zone == zone) return &m;
    }
    return nullptr;
}

const wire::Instruction* entry(const TickOutput& out, Scope scope, const std::string& bucket,
                               const std::string& zone = "") {
    const wire::Instructions* m = msg(out, scope, zone);
    if (m == nullptr) return nullptr;
    for (const auto& e : m->buckets) {
        if (e.name == bucket) return &e;
    }
    return nullptr;
}

bool has_event(const TickOutput& out, const std::string& needle) {
    for (const auto& e : out.events) {
        if ((e.bucket + ": " + e.text).find(needle) != std::string::npos) return true;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Resolution

TEST(Resolve, MajorityThenLowestLimitThenDeny) {
    using D = wire::DefinitionCount;
    std::vector<D> defs = {{{Scope::Global, Mode::Deny, 100}, 3},
                           {{Scope::Global, Mode::Deny, 50}, 2}};
    EXPECT_EQ(resolve(defs, Scope::Global)->limit_mrps, 100u);
    defs[1].hosts = 3;  // tie: the lower limit
    EXPECT_EQ(resolve(defs, Scope::Global)->limit_mrps, 50u);
    defs = {{{Scope::Global, Mode::Shadow, 100}, 2}, {{Scope::Global, Mode::Deny, 100}, 2}};
    EXPECT_EQ(resolve(defs, Scope::Global)->mode, Mode::Deny);  // tie: deny
    // Only definitions of the winning scope count when there are any.
    defs = {{{Scope::Zone, Mode::Deny, 10}, 5}, {{Scope::Global, Mode::Deny, 100}, 1}};
    EXPECT_EQ(resolve(defs, Scope::Global)->limit_mrps, 100u);
    EXPECT_FALSE(resolve({}, Scope::Global).has_value());
}

TEST(Resolve, ScopeByHostsWiderWinsTies) {
    EXPECT_EQ(
        *resolve_scope({{{Scope::Zone, Mode::Deny, 1}, 3}, {{Scope::Global, Mode::Deny, 1}, 2}}),
        Scope::Zone);
    EXPECT_EQ(
        *resolve_scope({{{Scope::Zone, Mode::Deny, 1}, 2}, {{Scope::Region, Mode::Deny, 1}, 2}}),
        Scope::Region);
    EXPECT_EQ(
        *resolve_scope({{{Scope::Zone, Mode::Deny, 1}, 2}, {{Scope::Global, Mode::Deny, 1}, 2}}),
        Scope::Global);
    EXPECT_FALSE(resolve_scope({}).has_value());
}

// ---------------------------------------------------------------------------------------------
// Scopes and ratios

TEST(Controller, GlobalBucketSumsZonesAndComputesTheRatio) {
    Fleet f;
    Controller c(opts());
    // 90 + 60 = 150 r/s offered against 100 r/s: drop a third.
    c.on_zone_usage(zu("z1", {ub("api", 90, 2)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 60, 2)}, f.now), f.now);
    TickOutput out = c.tick(f.now);
    EXPECT_EQ(ratio(c, "api"), 333333u);
    const wire::Instruction* e = entry(out, Scope::Global, "api");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->ratio_ppm, 333333u);
    EXPECT_EQ(e->limit_mrps, 100000u);
    EXPECT_EQ(e->mode, Mode::Deny);
    EXPECT_FALSE(e->has_match);
    EXPECT_EQ(inst(c, "api")->hosts, 4u);
    // Under the limit: ratio 0, still published (effective limit/mode stay visible in nginx).
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 30, 2)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 20, 2)}, f.now), f.now);
    c.tick(f.now);
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 30, 2)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 20, 2)}, f.now), f.now);
    out = c.tick(f.now);
    EXPECT_EQ(ratio(c, "api"), 0u);
    ASSERT_NE(entry(out, Scope::Global, "api"), nullptr);
    EXPECT_EQ(entry(out, Scope::Global, "api")->ratio_ppm, 0u);
}

// The instruction carries the newest sample's offered rate and the stamp of the oldest zone
// usage in it: each nginx finds its own share of that sample (surge damping, design.md).
TEST(Controller, InstructionsCarryTheSurgeBasis) {
    Fleet f;
    Controller c(opts());
    wire::ZoneUsage a = zu("z1", {ub("api", 90, 2)}, f.now);
    wire::ZoneUsage b = zu("z2", {ub("api", 60, 2)}, f.now);
    a.ts_ms -= 40;  // z1's usage is the older one
    c.on_zone_usage(a, f.now);
    c.on_zone_usage(b, f.now);
    TickOutput out = c.tick(f.now);
    const wire::Instruction* e = entry(out, Scope::Global, "api");
    ASSERT_NE(e, nullptr);
    EXPECT_TRUE(e->has_basis);
    EXPECT_EQ(e->basis_offered_mrps, 150000u);
    EXPECT_EQ(e->basis_ms, a.ts_ms);
    // Smoothing does not blur the basis: after a fall that stays over the limit the ratio is
    // averaged, the basis is the newest sample alone.
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 80, 2)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 40, 2)}, f.now), f.now);
    out = c.tick(f.now);
    e = entry(out, Scope::Global, "api");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->basis_offered_mrps, 120000u);
    EXPECT_EQ(e->basis_ms, f.now.wall_ms);
    EXPECT_EQ(e->ratio_ppm, drop_ratio_ppm(135000, 100000));  // the mean of 150 and 120 r/s
}

TEST(Controller, ZoneBucketIsLimitedPerZone) {
    Fleet f;
    Controller c(opts());
    c.on_zone_usage(zu("z1", {ub("api", 150, 2, Scope::Zone)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 50, 2, Scope::Zone)}, f.now), f.now);
    TickOutput out = c.tick(f.now);
    EXPECT_EQ(ratio(c, "api", "z1"), 333333u);
    EXPECT_EQ(ratio(c, "api", "z2"), 0u);
    ASSERT_NE(entry(out, Scope::Zone, "api", "z1"), nullptr);
    EXPECT_EQ(entry(out, Scope::Zone, "api", "z1")->ratio_ppm, 333333u);
    EXPECT_EQ(entry(out, Scope::Zone, "api", "z2")->ratio_ppm, 0u);
    EXPECT_EQ(entry(out, Scope::Global, "api"), nullptr);  // one scope per bucket name
    const wire::Instructions* m = msg(out, Scope::Zone, "z1");
    EXPECT_EQ(m->region, "r1");
    EXPECT_EQ(wire::topic(m->scope, m->region, m->zone), "grl/z/r1/z1/");
}

TEST(Controller, RegionBucketSumsThisRegionOnly) {
    Fleet f;
    Controller c(opts());
    c.on_zone_usage(zu("z1", {ub("api", 80, 1, Scope::Region)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 80, 1, Scope::Region)}, f.now), f.now);
    // Another region's usage of the bucket does not count for a region bucket.
    wire::RegionUsage other;
    other.source = "ctl-b";
    other.region = "r2";
    other.ts_ms = f.now.wall_ms;
    other.interval_ms = 1000;
    other.buckets.push_back(ub("api", 1000, 5, Scope::Region));
    c.on_region_usage(other, f.now);
    TickOutput out = c.tick(f.now);
    EXPECT_EQ(ratio(c, "api"), drop_ratio_ppm(160000, 100000));
    EXPECT_EQ(inst(c, "api")->hosts, 2u);
    ASSERT_NE(entry(out, Scope::Region, "api"), nullptr);
    EXPECT_EQ(msg(out, Scope::Region)->region, "r1");
}

TEST(Controller, TwoRegionsComputeTheSameGlobalAnswer) {
    Fleet f;
    Controller a(opts("ctl-a", "r1")), b(opts("ctl-b", "r2"));
    // r1 carries 200 r/s of the global bucket, r2 100 r/s; limit 100: ratio 2/3 everywhere.
    for (int round = 0; round < 3; ++round) {
        a.on_zone_usage(zu("z1", {ub("api", 200, 3)}, f.now, "r1"), f.now);
        b.on_zone_usage(zu("z9", {ub("api", 100, 1)}, f.now, "r2"), f.now);
        TickOutput oa = a.tick(f.now), ob = b.tick(f.now);
        b.on_region_usage(oa.region_usage, f.now);
        a.on_region_usage(ob.region_usage, f.now);
        f.advance(1000);
    }
    EXPECT_EQ(ratio(a, "api"), 666666u);
    EXPECT_EQ(ratio(b, "api"), 666666u);
    EXPECT_EQ(inst(a, "api")->hosts, 4u);
    EXPECT_EQ(inst(b, "api")->hosts, 4u);
}

// A partition between regions: r2's controllers go silent for r1. r1 keeps r2's last usage
// in the global sum for peer_hold_ms, so r1 goes on admitting its share (200 of 300 r/s of
// demand: 2/3 of the limit) rather than the whole limit (which r2, on its side, also
// admits); after the hold, r2 leaves the sums (presumed gone) and r1 alone gets the limit.
// Both changes are announced, and the loss counted.
TEST(Controller, PartitionHoldsTheSilentRegionsShareForABoundedTime) {
    Fleet f;
    Options oa = opts("ctl-a", "r1");
    oa.peer_hold_ms = 20000;
    Controller a(oa), b(opts("ctl-b", "r2"));
    for (int round = 0; round < 3; ++round) {
        a.on_zone_usage(zu("z1", {ub("api", 200, 3)}, f.now, "r1"), f.now);
        b.on_zone_usage(zu("z9", {ub("api", 100, 1)}, f.now, "r2"), f.now);
        TickOutput ta = a.tick(f.now), tb = b.tick(f.now);
        b.on_region_usage(ta.region_usage, f.now);
        a.on_region_usage(tb.region_usage, f.now);
        f.advance(1000);
    }
    ASSERT_EQ(ratio(a, "api"), 666666u);
    bool announced = false;
    for (int round = 0; round < 15; ++round) {  // r2 silent for 15 s: within the hold
        a.on_zone_usage(zu("z1", {ub("api", 200, 3)}, f.now, "r1"), f.now);
        announced =
            has_event(a.tick(f.now), "peer region r2 silent: its last usage stays") || announced;
        f.advance(1000);
    }
    EXPECT_TRUE(announced);
    EXPECT_EQ(ratio(a, "api"), 666666u);  // r1 still admits 2/3 x 100 = its share
    EXPECT_EQ(a.held_regions(), 1u);
    bool dropped = false;
    for (int round = 0; round < 8; ++round) {  // past the hold
        a.on_zone_usage(zu("z1", {ub("api", 200, 3)}, f.now, "r1"), f.now);
        dropped = has_event(a.tick(f.now),
                            "peer region r2 silent for 20 s: out of the global "
                            "sums") ||
                  dropped;
        f.advance(1000);
    }
    EXPECT_TRUE(dropped);
    EXPECT_EQ(ratio(a, "api"), 500000u);  // r1 alone: 200 vs 100
    EXPECT_EQ(a.held_regions(), 0u);
    EXPECT_EQ(a.regions_lost(), 1u);
}

TEST(Controller, StepResponseOfTheSmoothingWindow) {
    for (double attack : {0.0, 0.2}) {
        SCOPED_TRACE(attack);
        Fleet f;
        Options o = opts();
        o.window = 2;
        o.fast_attack = attack;
        Controller c(o);
        auto feed = [&](double rps) {
            c.on_zone_usage(zu("z1", {ub("api", rps, 1, Scope::Global, 150)}, f.now), f.now);
            c.tick(f.now);
            f.advance(1000);
            return ratio(c, "api");
        };
        feed(100);
        EXPECT_EQ(feed(100), 0u);
        // Step to 300 r/s with limit 150 (exact answer 0.5). Window only: half-way after one
        // tick (mean 200: 0.25), exact after two. Fast attack: exact at once. Never beyond.
        EXPECT_EQ(feed(300), attack > 0 ? 500000u : 250000u);
        EXPECT_EQ(feed(300), 500000u);
        EXPECT_EQ(feed(300), 500000u);
        // Step back down to under the limit: released at once (the newest sample needs no
        // drop); the plain mean (fast attack off) over-drops for one tick.
        EXPECT_EQ(feed(100), attack > 0 ? 0u : 250000u);
        EXPECT_EQ(feed(100), 0u);
        // A fall that stays over the limit is averaged either way (300 -> 200: mean 250).
        feed(300);
        feed(300);
        EXPECT_EQ(feed(200), drop_ratio_ppm(250000, 150000));
        EXPECT_EQ(feed(200), drop_ratio_ppm(200000, 150000));
        // Noise (+10%, +15%) is averaged, not taken for a surge.
        feed(200);
        feed(200);
        EXPECT_EQ(feed(220), drop_ratio_ppm(210000, 150000));
        EXPECT_EQ(feed(230), drop_ratio_ppm(225000, 150000));
        // A step that the samples see over three ticks (the first ones in part): 100 -> 200
        // is a surge; 280 is not 1.2x the mean (240) but the rise goes on, and so does the
        // attack, to 300; the first sample not above the one before ends it.
        feed(100);
        feed(100);
        EXPECT_EQ(feed(200),
                  attack > 0 ? drop_ratio_ppm(200000, 150000) : drop_ratio_ppm(150000, 150000));
        EXPECT_EQ(feed(280),
                  attack > 0 ? drop_ratio_ppm(280000, 150000) : drop_ratio_ppm(240000, 150000));
        EXPECT_EQ(feed(300), attack > 0 ? 500000u : drop_ratio_ppm(290000, 150000));
        EXPECT_EQ(feed(290), drop_ratio_ppm(295000, 150000));
    }
}

// An early tick (a zone usage that rose well above the last) and the regular tick after it see
// the same usage: it is one sample, not two. Counted twice it filled the window and ended the
// fast attack, and the rise's next sample was averaged with it (the 1 s step's overshoot).
TEST(Controller, AUsageSeenByTwoTicksIsOneSampleAndTheAttackGoesOn) {
    Fleet f;
    Options o = opts();
    o.window = 2;
    o.fast_attack = 0.2;
    Controller c(o);
    auto usage = [&](double rps) {
        c.on_zone_usage(zu("z1", {ub("api", rps, 1, Scope::Global, 150)}, f.now), f.now);
    };
    auto tick = [&] {
        c.tick(f.now);
        f.advance(500);
        return ratio(c, "api");
    };
    usage(100);
    tick();
    tick();
    usage(100);
    EXPECT_EQ(tick(), 0u);
    tick();
    usage(200);  // the step, seen in part by the early tick
    EXPECT_EQ(tick(), drop_ratio_ppm(200000, 150000));
    EXPECT_EQ(tick(), drop_ratio_ppm(200000, 150000));  // the regular tick: the same usage
    usage(300);                                         // the step whole: still attacking
    EXPECT_EQ(tick(), 500000u);
    EXPECT_EQ(tick(), 500000u);
    // Under the limit again and seen twice: still released, and the window holds 100 and 300.
    usage(100);
    EXPECT_EQ(tick(), 0u);
    EXPECT_EQ(tick(), 0u);
    usage(200);  // 1.33 x the mean of 100 and 200: an attack again
    EXPECT_EQ(tick(), drop_ratio_ppm(200000, 150000));
    const Instance* i = inst(c, "api");
    ASSERT_NE(i, nullptr);
    EXPECT_EQ(i->samples.size(), 2u);
}

// The fast release takes a sample under the limit for the demand, but a provisional one (some
// hosts have no rate yet) sums only part of the hosts: averaged, and replaced by the next.
TEST(Controller, AProvisionalSampleUnderTheLimitIsNoRelease) {
    Fleet f;
    Controller c(opts());
    auto feed = [&](wire::UsageBucket b) {
        c.on_zone_usage(zu("z1", {b}, f.now), f.now);
        c.tick(f.now);
        f.advance(1000);
        return ratio(c, "api");
    };
    feed(ub("api", 300, 2, Scope::Global, 150));
    EXPECT_EQ(feed(ub("api", 300, 2, Scope::Global, 150)), 500000u);
    wire::UsageBucket part = ub("api", 100, 2, Scope::Global, 150);
    part.rated_hosts = 1;
    EXPECT_EQ(feed(part), 250000u);                              // mean of 300 and 100, not 0
    EXPECT_EQ(feed(ub("api", 100, 2, Scope::Global, 150)), 0u);  // complete: released
}

TEST(Controller, ZeroLimitDropsEverythingAndShadowKeepsItsMode) {
    Fleet f;
    Controller c(opts());
    c.on_zone_usage(zu("z1",
                       {ub("blocked", 10, 1, Scope::Global, 0),
                        ub("trial", 200, 1, Scope::Global, 100, Mode::Shadow)},
                       f.now),
                    f.now);
    TickOutput out = c.tick(f.now);
    EXPECT_EQ(entry(out, Scope::Global, "blocked")->ratio_ppm, kPpmOne);
    const wire::Instruction* t = entry(out, Scope::Global, "trial");
    EXPECT_EQ(t->ratio_ppm, 500000u);  // the same would-be ratio as deny
    EXPECT_EQ(t->mode, Mode::Shadow);
    EXPECT_TRUE(has_event(out, "trial: would drop (shadow)"));
    EXPECT_TRUE(has_event(out, "blocked: dropping"));
}

TEST(Controller, StaleZonesLeaveTheSumsAndHeartbeatsContinue) {
    Fleet f;
    Controller c(opts());
    c.on_zone_usage(zu("z1", {ub("api", 150)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 150)}, f.now), f.now);
    c.tick(f.now);
    EXPECT_EQ(c.fresh_zones(), 2u);
    // z2's collector goes silent; z1 keeps reporting.
    for (int i = 0; i < 4; ++i) {
        f.advance(1000);
        c.on_zone_usage(zu("z1", {ub("api", 150)}, f.now), f.now);
        c.tick(f.now);
    }
    EXPECT_EQ(c.fresh_zones(), 1u);
    EXPECT_EQ(ratio(c, "api"), drop_ratio_ppm(150000, 100000));
    // Everyone silent: no instance, so no ratio is published (nginx fails open after the TTL),
    // but heartbeats keep saying that the control plane is alive.
    f.advance(4000);
    TickOutput out = c.tick(f.now);
    EXPECT_TRUE(c.instances().empty());
    ASSERT_NE(msg(out, Scope::Global), nullptr);
    EXPECT_TRUE(msg(out, Scope::Global)->buckets.empty());
    ASSERT_NE(msg(out, Scope::Region), nullptr);
    EXPECT_EQ(msg(out, Scope::Global)->ttl_ms, 3000u);
    EXPECT_EQ(msg(out, Scope::Global)->source, "ctl-a");
}

TEST(Controller, HeartbeatPerZoneEvenWithoutZoneBuckets) {
    Fleet f;
    Controller c(opts());
    c.on_zone_usage(zu("z1", {}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 1)}, f.now), f.now);
    TickOutput out = c.tick(f.now);
    ASSERT_EQ(out.instructions.size(), 4u);  // global, region, z1, z2
    EXPECT_NE(msg(out, Scope::Zone, "z1"), nullptr);
    EXPECT_NE(msg(out, Scope::Zone, "z2"), nullptr);
    // Every message has its own, increasing seq and the tick's wall clock.
    for (std::size_t i = 1; i < out.instructions.size(); ++i) {
        EXPECT_GT(out.instructions[i].seq, out.instructions[i - 1].seq);
        EXPECT_EQ(out.instructions[i].ts_ms, f.now.wall_ms);
    }
}

TEST(Controller, ZoneUsageOrderingAndRegion) {
    Fleet f;
    Controller c(opts());
    wire::ZoneUsage newer = zu("z1", {ub("api", 300)}, f.now);
    wire::ZoneUsage older = newer;
    older.ts_ms -= 1000;
    older.seq -= 1;
    older.buckets[0].offered_mrps = 1000;
    EXPECT_EQ(c.on_zone_usage(newer, f.now), Accepted::Yes);
    EXPECT_EQ(c.on_zone_usage(older, f.now), Accepted::Older);
    EXPECT_EQ(c.on_zone_usage(newer, f.now), Accepted::Older);  // duplicate
    wire::ZoneUsage foreign = zu("z7", {ub("api", 1000)}, f.now, "r2");
    EXPECT_EQ(c.on_zone_usage(foreign, f.now), Accepted::WrongRegion);
    c.tick(f.now);
    EXPECT_EQ(ratio(c, "api"), drop_ratio_ppm(300000, 100000));
    // A restarted collector starts again at seq 1 with a later clock: accepted.
    f.advance(1000);
    wire::ZoneUsage restarted = zu("z1", {ub("api", 100)}, f.now);
    restarted.seq = 1;
    EXPECT_EQ(c.on_zone_usage(restarted, f.now), Accepted::Yes);
}

// The entry of a collector that has hosts but no rates yet (just restarted).
wire::UsageBucket unrated(wire::UsageBucket b) {
    b.offered_mrps = b.admitted_mrps = 0;
    b.rated_hosts = 0;
    return b;
}

TEST(Controller, UnratedUsageNeverPublishesAFalseZero) {
    Fleet f;
    Controller c(opts());
    // z1's collector restarts: its first usage has hosts but no rates yet. The last rated
    // entry stands in, so the ratio does not fall to zero.
    c.on_zone_usage(zu("z1", {ub("api", 300, 2)}, f.now), f.now);
    c.tick(f.now);
    EXPECT_EQ(ratio(c, "api"), 666666u);
    f.advance(1000);
    c.on_zone_usage(zu("z1", {unrated(ub("api", 300, 2))}, f.now), f.now);
    c.tick(f.now);
    EXPECT_EQ(ratio(c, "api"), 666666u);
    // A second zone restarting after a long silence (nothing to stand in): a global instance
    // that exists holds its last samples rather than counting that zone as zero.
    c.on_zone_usage(zu("z2", {unrated(ub("api", 300, 1))}, f.now), f.now);
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 300, 2)}, f.now), f.now);
    c.tick(f.now);
    EXPECT_EQ(ratio(c, "api"), 666666u);
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 300, 2)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 40, 1)}, f.now), f.now);
    c.tick(f.now);
    EXPECT_EQ(ratio(c, "api"), drop_ratio_ppm(320000, 100000));  // mean of 300 and 340
    // A brand-new controller that only hears unrated usage publishes nothing for the bucket
    // (nginx keeps what it holds until the TTL), then the exact ratio from the first rates.
    Controller fresh(opts("ctl-b"));
    fresh.on_zone_usage(zu("z1", {unrated(ub("api", 300, 2))}, f.now), f.now);
    TickOutput out = fresh.tick(f.now);
    EXPECT_EQ(entry(out, Scope::Global, "api"), nullptr);
    f.advance(1000);
    fresh.on_zone_usage(zu("z1", {ub("api", 300, 2)}, f.now), f.now);
    out = fresh.tick(f.now);
    ASSERT_NE(entry(out, Scope::Global, "api"), nullptr);
    EXPECT_EQ(entry(out, Scope::Global, "api")->ratio_ppm, 666666u);
    // Stand-ins expire: after hold_intervals the zone's unrated usage is unknown again.
    f.advance(11000);
    fresh.on_zone_usage(zu("z1", {unrated(ub("api", 300, 2))}, f.now), f.now);
    fresh.tick(f.now);
    EXPECT_EQ(ratio(fresh, "api"), 666666u);            // held, not zero
    EXPECT_EQ(inst(fresh, "api")->samples.size(), 1u);  // no sample taken while unknown
}

// take_zone_usage() keeps the message without a copy (the daemon's intake) and stands in for
// unrated entries as on_zone_usage() does, whatever the order of the entries; a bucket absent
// from one usage keeps its last rated entry for the next.
TEST(Controller, TakenUsageStandsInForUnratedEntriesInAnyOrder) {
    Fleet f;
    Controller c(opts());
    wire::ZoneUsage first = zu("z1", {ub("c", 300, 2), ub("a", 200, 2), ub("b", 400, 2)}, f.now);
    ASSERT_EQ(c.take_zone_usage(first, f.now), Accepted::Yes);
    EXPECT_TRUE(first.buckets.empty());  // the zone's previous usage: none
    c.tick(f.now);
    EXPECT_EQ(ratio(c, "a"), drop_ratio_ppm(200000, 100000));
    f.advance(1000);
    // Unsorted, "b" absent, "a" and "c" unrated: the last rates stand in.
    wire::ZoneUsage second = zu("z1", {unrated(ub("c", 0, 2)), unrated(ub("a", 0, 2))}, f.now);
    ASSERT_EQ(c.take_zone_usage(second, f.now), Accepted::Yes);
    EXPECT_EQ(second.buckets.size(), 3u);  // swapped: the first usage came back
    c.tick(f.now);
    EXPECT_EQ(ratio(c, "a"), drop_ratio_ppm(200000, 100000));
    EXPECT_EQ(ratio(c, "c"), drop_ratio_ppm(300000, 100000));
    f.advance(1000);
    // "b" comes back unrated: its entry of two usages ago stands in.
    wire::ZoneUsage third = zu("z1", {unrated(ub("b", 0, 2)), ub("a", 200, 2)}, f.now);
    ASSERT_EQ(c.take_zone_usage(third, f.now), Accepted::Yes);
    TickOutput out = c.tick(f.now);
    ASSERT_NE(entry(out, Scope::Global, "b"), nullptr);
    EXPECT_EQ(entry(out, Scope::Global, "b")->ratio_ppm, drop_ratio_ppm(400000, 100000));
    // A refused message is left as it was.
    wire::ZoneUsage late = zu("z1", {ub("a", 900, 2)}, f.now);
    late.ts_ms -= 5000;
    EXPECT_EQ(c.take_zone_usage(late, f.now), Accepted::Older);
    EXPECT_EQ(late.buckets.size(), 1u);
}

TEST(Controller, DisagreeingHostsAreResolvedCountedAndLogged) {
    Fleet f;
    Controller c(opts());
    wire::UsageBucket b = ub("api", 150, 3, Scope::Global, 100);
    b.hosts = 4;
    b.definitions.push_back({{Scope::Global, Mode::Deny, 50000}, 1});  // one host says 50 r/s
    c.on_zone_usage(zu("z1", {b}, f.now), f.now);
    TickOutput out = c.tick(f.now);
    EXPECT_EQ(inst(c, "api")->limit_mrps, 100000u);  // the majority's
    EXPECT_EQ(inst(c, "api")->disagreeing_hosts, 1u);
    EXPECT_TRUE(has_event(out, "api: hosts disagree on the definition in global: 1 of 4"));
    // Now a tie (2 vs 2): the lower limit is in force.
    f.advance(1000);
    b.definitions = {{{Scope::Global, Mode::Deny, 100000}, 2},
                     {{Scope::Global, Mode::Deny, 50000}, 2}};
    c.on_zone_usage(zu("z1", {b}, f.now), f.now);
    out = c.tick(f.now);
    EXPECT_EQ(inst(c, "api")->limit_mrps, 50000u);
    EXPECT_FALSE(has_event(out, "disagree"));  // still disagreeing: no new line
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 150, 4)}, f.now), f.now);
    out = c.tick(f.now);
    EXPECT_EQ(inst(c, "api")->disagreeing_hosts, 0u);
    EXPECT_TRUE(has_event(out, "api: hosts agree on the definition again"));
}

// ---------------------------------------------------------------------------------------------
// Limits file and overrides

TEST(Controller, LimitsFileThenOverrideThenExpiry) {
    Fleet f;
    Controller c(opts());
    auto feed = [&] {
        c.on_zone_usage(zu("z1", {ub("api", 200)}, f.now), f.now);
        TickOutput out = c.tick(f.now);
        f.advance(1000);
        return out;
    };
    feed();
    EXPECT_EQ(inst(c, "api")->limit_mrps, 100000u);
    EXPECT_EQ(inst(c, "api")->limit_source, LimitSource::Conf);
    Limits l;
    l.buckets["api"].limit_mrps = 50000;
    c.set_limits(l, f.now);
    feed();
    EXPECT_EQ(inst(c, "api")->limit_mrps, 50000u);
    EXPECT_EQ(inst(c, "api")->limit_source, LimitSource::File);
    EXPECT_EQ(ratio(c, "api"), 750000u);
    // An override for 10 s wins over the file, for the limit only.
    EXPECT_EQ(c.set_override("api", 150000, std::nullopt, 10000, f.now), "");
    TickOutput out = feed();
    EXPECT_TRUE(has_event(out, "api: override set: limit 150.0 r/s"));
    EXPECT_EQ(inst(c, "api")->limit_mrps, 150000u);
    EXPECT_EQ(inst(c, "api")->limit_source, LimitSource::Override);
    EXPECT_EQ(inst(c, "api")->mode_source, LimitSource::Conf);
    EXPECT_EQ(entry(out, Scope::Global, "api")->limit_mrps, 150000u);
    EXPECT_EQ(c.set_override("api", std::nullopt, Mode::Shadow, 10000, f.now), "");
    feed();
    EXPECT_EQ(inst(c, "api")->mode, Mode::Shadow);
    EXPECT_EQ(inst(c, "api")->limit_mrps, 150000u);  // kept
    // The override expires (wall clock) and the file's limit is back.
    f.advance(10000);
    out = feed();
    EXPECT_TRUE(has_event(out, "api: override expired"));
    EXPECT_EQ(inst(c, "api")->limit_mrps, 50000u);
    EXPECT_EQ(inst(c, "api")->mode, Mode::Deny);
}

TEST(Controller, CandidateIsEvaluatedBesideTheLimitInForce) {
    Fleet f;
    Controller c(opts());
    Limits l;
    l.buckets["api"].limit_mrps = 150000;     // enforced: 150 r/s
    l.buckets["api"].candidate_mrps = 80000;  // soaking: 80 r/s
    c.set_limits(l, f.now);
    // 90 + 30 = 120 r/s offered per tick, in both zones of the region.
    c.on_zone_usage(zu("z1", {ub("api", 90, 2)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 30, 2)}, f.now), f.now);
    TickOutput out = c.tick(f.now);
    const Instance* i = inst(c, "api");
    ASSERT_NE(i, nullptr);
    // Under the limit in force: nothing dropped and nothing changes for nginx...
    EXPECT_EQ(i->ratio_ppm, 0u);
    EXPECT_EQ(i->mode, Mode::Deny);
    EXPECT_EQ(entry(out, Scope::Global, "api")->limit_mrps, 150000u);
    EXPECT_EQ(entry(out, Scope::Global, "api")->ratio_ppm, 0u);
    // ...while the candidate would drop 120 - 80 = 40 r/s.
    ASSERT_TRUE(i->candidate_mrps);
    EXPECT_EQ(*i->candidate_mrps, 80000u);
    EXPECT_DOUBLE_EQ(i->candidate_would_drop_mrps, 40000.0);
    // On the same smoothed offered as the ratio: 120 then 60 r/s average to 90 (window 2).
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 40, 2)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 20, 2)}, f.now), f.now);
    c.tick(f.now);
    EXPECT_DOUBLE_EQ(inst(c, "api")->offered_mrps, 90000.0);
    EXPECT_DOUBLE_EQ(inst(c, "api")->candidate_would_drop_mrps, 10000.0);
    std::vector<wire::BucketStatus> st = c.status("api", false);
    ASSERT_EQ(st.size(), 1u);
    EXPECT_EQ(st[0].candidate_limit_mrps, std::optional<std::uint64_t>(80000));
    EXPECT_EQ(st[0].candidate_would_drop_mrps, 10000u);
    // Below the candidate it would drop nothing (never a negative rate).
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 20, 2)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 20, 2)}, f.now), f.now);
    c.tick(f.now);
    EXPECT_DOUBLE_EQ(inst(c, "api")->offered_mrps, 50000.0);
    EXPECT_DOUBLE_EQ(inst(c, "api")->candidate_would_drop_mrps, 0.0);
    // The candidate removed from the file: gone from the instance and its status.
    l.buckets["api"].candidate_mrps.reset();
    c.set_limits(l, f.now);
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 200, 2)}, f.now), f.now);
    c.tick(f.now);
    EXPECT_FALSE(inst(c, "api")->candidate_mrps);
    EXPECT_DOUBLE_EQ(inst(c, "api")->candidate_would_drop_mrps, 0.0);
    EXPECT_FALSE(c.status("api", false)[0].candidate_limit_mrps);
}

TEST(Controller, CandidateChangesTheDigestOnlyWhenPresent) {
    Limits a;
    a.buckets["api"].limit_mrps = 150000;
    const std::string without = digest(a);
    a.buckets["api"].candidate_mrps = 80000;
    EXPECT_NE(digest(a), without);
    a.buckets["api"].candidate_mrps.reset();
    EXPECT_EQ(digest(a), without);
}

TEST(Controller, ClearOverride) {
    Fleet f;
    Controller c(opts());
    EXPECT_NE(c.clear_override("api", false, false, f.now), "");  // nothing to clear
    EXPECT_NE(c.set_override("api", std::nullopt, std::nullopt, 0, f.now), "");
    EXPECT_NE(c.set_override("bad name", 1, std::nullopt, 0, f.now), "");
    EXPECT_EQ(c.set_override("api", 1000, Mode::Shadow, 0, f.now), "");
    EXPECT_EQ(c.clear_override("api", true, false, f.now), "");
    EXPECT_FALSE(c.overrides().at("api").limit_mrps.has_value());
    EXPECT_EQ(c.overrides().at("api").mode, Mode::Shadow);
    EXPECT_EQ(c.clear_override("api", false, false, f.now), "");
    EXPECT_TRUE(c.overrides().at("api").tombstone());
    EXPECT_NE(c.clear_override("api", false, false, f.now), "");
}

// Clock skew between controllers: b's wall clock runs 30 s ahead. Its override is stamped
// 30 s in the future for a, but a later change on a still wins everywhere (a stamps its
// change just after the entry it holds), and so does b's next one: a skewed controller
// never owns an override for ever.
TEST(Controller, ASkewedControllerDoesNotWinForEver) {
    Fleet f;
    Controller a(opts("ctl-a", "r1")), b(opts("ctl-b", "r2"));
    Clock b_now = f.now;
    auto exchange = [&] {
        b_now = {f.now.mono_ms, f.now.wall_ms + 30000};
        TickOutput oa = a.tick(f.now), ob = b.tick(b_now);
        b.on_region_usage(oa.region_usage, b_now);
        a.on_region_usage(ob.region_usage, f.now);
        f.advance(1000);
    };
    exchange();
    ASSERT_EQ(b.set_override("api", 5000, std::nullopt, 0, b_now), "");
    exchange();
    ASSERT_EQ(a.overrides().at("api").limit_mrps, 5000u);
    ASSERT_EQ(a.set_override("api", 7000, std::nullopt, 0, f.now), "");  // 1 s later, by a
    exchange();
    exchange();
    for (Controller* x : {&a, &b}) {
        EXPECT_EQ(x->overrides().at("api").limit_mrps, 7000u) << x->options().name;
        EXPECT_EQ(x->overrides().at("api").origin, "ctl-a");
    }
    ASSERT_EQ(b.clear_override("api", false, false, b_now), "");
    exchange();
    exchange();
    EXPECT_TRUE(a.overrides().at("api").tombstone());
}

TEST(Controller, OverridesReplicateLastWriterWins) {
    Fleet f;
    Controller a(opts("ctl-a", "r1")), b(opts("ctl-b", "r1")), c(opts("ctl-c", "r2"));
    auto exchange = [&] {
        TickOutput oa = a.tick(f.now), ob = b.tick(f.now), oc = c.tick(f.now);
        for (Controller* x : {&b, &c}) x->on_region_usage(oa.region_usage, f.now);
        for (Controller* x : {&a, &c}) x->on_region_usage(ob.region_usage, f.now);
        for (Controller* x : {&a, &b}) x->on_region_usage(oc.region_usage, f.now);
        f.advance(1000);
    };
    ASSERT_EQ(a.set_override("api", 5000, std::nullopt, 0, f.now), "");
    exchange();
    EXPECT_EQ(b.overrides().at("api").limit_mrps, 5000u);
    EXPECT_EQ(c.overrides().at("api").limit_mrps, 5000u);
    // Cleared on b later: the clear wins everywhere.
    ASSERT_EQ(b.clear_override("api", false, false, f.now), "");
    exchange();
    EXPECT_TRUE(a.overrides().at("api").tombstone());
    EXPECT_TRUE(c.overrides().at("api").tombstone());
    // Concurrent writes at the same millisecond: the origin breaks the tie, same everywhere.
    ASSERT_EQ(a.set_override("web", 1000, std::nullopt, 0, f.now), "");
    ASSERT_EQ(c.set_override("web", 2000, std::nullopt, 0, f.now), "");
    exchange();
    exchange();
    for (Controller* x : {&a, &b, &c}) {
        EXPECT_EQ(x->overrides().at("web").limit_mrps, 2000u) << x->options().name;
        EXPECT_EQ(x->overrides().at("web").origin, "ctl-c");
    }
    // A stale copy of an old message merges to nothing new.
    wire::RegionUsage old;
    old.source = "ctl-x";
    old.region = "r3";
    wire::Override o;
    o.name = "web";
    o.limit_mrps = 9;
    o.set_ms = 1;
    o.origin = "zzz";
    old.overrides.push_back(o);
    a.on_region_usage(old, f.now);
    EXPECT_EQ(a.overrides().at("web").limit_mrps, 2000u);
}

TEST(Controller, RunTimeBucketIsPublishedWithItsMatchAndRemoved) {
    Fleet f;
    Controller c(opts());
    c.on_zone_usage(zu("z1", {ub("api", 10)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 10)}, f.now), f.now);
    c.tick(f.now);
    wire::RuntimeMatch m;
    m.caller = "bot-";
    m.caller_kind = MatchKind::Prefix;
    m.procedure = "^/search";
    m.procedure_kind = MatchKind::Regex;
    m.scope = Scope::Zone;
    EXPECT_NE(c.add_runtime("api", m, 0, std::nullopt, 0, f.now), "");  // configured on hosts
    wire::RuntimeMatch bad = m;
    bad.procedure = "(unclosed";
    EXPECT_NE(c.add_runtime("bots", bad, 0, std::nullopt, 0, f.now), "");
    ASSERT_EQ(c.add_runtime("bots", m, 20000, std::nullopt, 60000, f.now), "");
    EXPECT_NE(c.add_runtime("bots", m, 20000, std::nullopt, 0, f.now), "");  // exists
    // Before any host has it: published to every zone of the region, with its match.
    TickOutput out = c.tick(f.now);
    EXPECT_TRUE(has_event(
        out,
        "bots: run-time bucket added: caller_prefix=bot- procedure_regex=^/search scope=zone"));
    for (const char* z : {"z1", "z2"}) {
        const wire::Instruction* e = entry(out, Scope::Zone, "bots", z);
        ASSERT_NE(e, nullptr) << z;
        EXPECT_TRUE(e->has_match);
        EXPECT_TRUE(e->match == m);
        EXPECT_EQ(e->limit_mrps, 20000u);
        EXPECT_EQ(e->ratio_ppm, 0u);  // no usage yet
    }
    // Its usage comes back like any bucket's: z1 offers 40 r/s against 20: ratio 0.5 there.
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 10), ub("bots", 40, 1, Scope::Zone, 20)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 10)}, f.now), f.now);
    out = c.tick(f.now);
    // From 0 to 40 r/s is a surge: used at once (fast attack), not averaged with the 0.
    EXPECT_EQ(ratio(c, "bots", "z1"), 500000u);
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 10), ub("bots", 40, 1, Scope::Zone, 20)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 10)}, f.now), f.now);
    out = c.tick(f.now);
    EXPECT_EQ(entry(out, Scope::Zone, "bots", "z1")->ratio_ppm, 500000u);
    EXPECT_EQ(entry(out, Scope::Zone, "bots", "z2")->ratio_ppm, 0u);
    EXPECT_EQ(inst(c, "bots", "z1")->disagreeing_hosts, 0u);
    // Removed: no longer published, not even without its match (nginx would count it as an
    // instruction for an unknown bucket), although z1's hosts still report it.
    EXPECT_NE(c.remove_runtime("api", f.now), "");
    ASSERT_EQ(c.remove_runtime("bots", f.now), "");
    f.advance(1000);
    c.on_zone_usage(zu("z1", {ub("api", 10), ub("bots", 40, 1, Scope::Zone, 20)}, f.now), f.now);
    c.on_zone_usage(zu("z2", {ub("api", 10)}, f.now), f.now);
    out = c.tick(f.now);
    EXPECT_EQ(entry(out, Scope::Zone, "bots", "z1"), nullptr);
    EXPECT_NE(entry(out, Scope::Global, "api"), nullptr);
    for (const auto& msg : out.instructions) {
        for (const auto& e : msg.buckets) EXPECT_FALSE(e.has_match) << e.name;
    }
}

// After `grlctl remove` the hosts report a run-time bucket until its ratio expires there: it
// is listed as removed (not as a bucket of nginx.conf) for that while, and only that while.
TEST(Controller, RemovedRunTimeBucketIsListedAsRemovedUntilHostsDropIt) {
    Fleet f;
    Controller c(opts());
    ASSERT_EQ(c.add_runtime("bots", bots(), 20000, std::nullopt, 0, f.now), "");
    auto report = [&] {
        c.on_zone_usage(zu("z1", {ub("bots", 40, 2, Scope::Global, 20)}, f.now), f.now);
    };
    report();
    c.tick(f.now);
    auto from = [&] {
        std::vector<wire::BucketStatus> st = c.status("bots", false);
        return st.size() == 1 ? st[0].limit_source + "/" + st[0].mode_source : std::string("-");
    };
    EXPECT_EQ(from(), "override/override");
    ASSERT_EQ(c.remove_runtime("bots", f.now), "");
    f.advance(1000);
    report();
    TickOutput out = c.tick(f.now);
    EXPECT_EQ(from(), "removed/removed");
    EXPECT_EQ(entry(out, Scope::Global, "bots"), nullptr);
    EXPECT_EQ(inst(c, "bots")->hosts, 2u);
    // Within the grace (TTL 3 s + 3 intervals) it stays removed...
    f.advance(4000);
    report();
    out = c.tick(f.now);
    EXPECT_EQ(from(), "removed/removed");
    EXPECT_EQ(entry(out, Scope::Global, "bots"), nullptr);
    // ...and once the hosts stop reporting it, it is gone.
    f.advance(1000);
    c.on_zone_usage(zu("z1", {}, f.now), f.now);
    c.tick(f.now);
    EXPECT_EQ(from(), "-");
}

// A name still reported long after its run-time bucket went is a bucket of nginx.conf now
// (the operator defined it there): it is published again as one.
TEST(Controller, RemovedRunTimeBucketStillReportedAfterTheGraceIsConf) {
    Fleet f;
    Controller c(opts());
    wire::RuntimeMatch m;
    m.procedure = "/x";
    ASSERT_EQ(c.add_runtime("x", m, 20000, std::nullopt, 2000, f.now), "");  // --for 2s
    for (int i = 0; i < 12; ++i) {
        c.on_zone_usage(zu("z1", {ub("x", 40, 1, Scope::Global, 20)}, f.now), f.now);
        TickOutput out = c.tick(f.now);
        const std::vector<wire::BucketStatus> st = c.status("x", false);
        ASSERT_EQ(st.size(), 1u) << i;
        // Ticks 0-1: the override; 2-7: expired, removed (grace 6 s); 8 on: conf.
        const char* want = i < 2 ? "override" : i < 8 ? "removed" : "conf";
        EXPECT_EQ(st[0].limit_source, want) << "tick " << i;
        EXPECT_EQ(entry(out, Scope::Global, "x") != nullptr, std::string(want) != "removed")
            << "tick " << i;
        f.advance(1000);
    }
}

TEST(Controller, RunTimeBucketExpires) {
    Fleet f;
    Controller c(opts());
    wire::RuntimeMatch m;
    m.caller = "evil";
    m.scope = Scope::Global;
    ASSERT_EQ(c.add_runtime("block-evil", m, 0, std::nullopt, 5000, f.now), "");
    TickOutput out = c.tick(f.now);
    ASSERT_NE(entry(out, Scope::Global, "block-evil"), nullptr);
    EXPECT_EQ(entry(out, Scope::Global, "block-evil")->ratio_ppm, kPpmOne);
    f.advance(5000);
    out = c.tick(f.now);
    EXPECT_EQ(entry(out, Scope::Global, "block-evil"), nullptr);
    EXPECT_TRUE(has_event(out, "block-evil: run-time bucket expired"));
}

TEST(Controller, RunTimeBucketFromTheLimitsFile) {
    Fleet f;
    Controller c(opts());
    Limits l;
    FileLimit& e = l.buckets["scrapers"];
    e.limit_mrps = 5000;
    e.has_match = true;
    e.match.caller = "scraper";
    e.match.caller_kind = MatchKind::Prefix;
    e.match.scope = Scope::Region;
    c.set_limits(l, f.now);
    TickOutput out = c.tick(f.now);
    const wire::Instruction* i = entry(out, Scope::Region, "scrapers");
    ASSERT_NE(i, nullptr);
    EXPECT_TRUE(i->has_match);
    EXPECT_EQ(i->limit_mrps, 5000u);
    EXPECT_NE(c.remove_runtime("scrapers", f.now), "");  // the file owns it
}

TEST(Controller, LimitsDigestIsFixedAcrossVersions) {
    // Peers compare digests during an upgrade: values from an independent implementation (the
    // FNV-1a 64 of each field then 0xff, in Python), not from digest() itself.
    Limits a;
    a.buckets["api"].limit_mrps = 100000;
    a.buckets["api"].mode = Mode::Deny;
    a.buckets["search"].mode = Mode::Shadow;
    EXPECT_EQ(digest(a), "ba11cbc697798153");
    Limits b;
    b.buckets["api"].limit_mrps = 100000;
    b.buckets["api"].mode = Mode::Deny;
    b.buckets["api"].candidate_mrps = 50000;
    EXPECT_EQ(digest(b), "bc9e3d3c256830c5");
}

TEST(Controller, LimitsDigestIsCanonicalAndMismatchIsReported) {
    Limits a, b;
    a.buckets["x"].limit_mrps = 1000;
    a.buckets["y"].mode = Mode::Shadow;
    b.buckets["y"].mode = Mode::Shadow;
    b.buckets["x"].limit_mrps = 1000;
    EXPECT_EQ(digest(a), digest(b));
    EXPECT_EQ(digest(a).size(), 16u);
    b.buckets["x"].limit_mrps = 1001;
    EXPECT_NE(digest(a), digest(b));

    Fleet f;
    Controller c1(opts("ctl-a")), c2(opts("ctl-b"));
    c1.set_limits(a, f.now);
    c2.set_limits(b, f.now);
    c1.on_region_usage(c2.tick(f.now).region_usage, f.now);
    TickOutput out = c1.tick(f.now);
    EXPECT_TRUE(has_event(out, "peer ctl-b (region r1) has different limits"));
    EXPECT_EQ(c1.peers(f.now).size(), 1u);
    EXPECT_EQ(c1.peers(f.now)[0].limits_digest, digest(b));
}

TEST(Controller, StatusListsInstancesWithHosts) {
    Fleet f;
    Controller c(opts());
    wire::ZoneUsage z1 = zu("z1", {ub("api", 150, 2, Scope::Zone)}, f.now);
    z1.host_names = {"h1", "h2"};
    wire::ZoneUsage z2 = zu("z2", {ub("api", 50, 1, Scope::Zone)}, f.now);
    z2.host_names = {"h3", "h4"};
    z2.buckets[0].host_names = {"h4"};  // only h4 of z2 has the bucket
    c.on_zone_usage(z1, f.now);
    c.on_zone_usage(z2, f.now);
    c.tick(f.now);
    std::vector<wire::BucketStatus> s = c.status("", true);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0].zone, "z1");
    EXPECT_EQ(s[0].host_names, (std::vector<std::string>{"h1", "h2"}));
    EXPECT_EQ(s[0].ratio_ppm, 333333u);
    EXPECT_EQ(s[0].offered_mrps, 150000u);
    EXPECT_EQ(s[0].region, "r1");
    EXPECT_EQ(s[1].host_names, (std::vector<std::string>{"h4"}));
    EXPECT_TRUE(c.status("nope", false).empty());
    EXPECT_TRUE(c.status("api", false)[0].host_names.empty());
    std::vector<wire::ZoneStatus> zs = c.zones(f.now);
    ASSERT_EQ(zs.size(), 2u);
    EXPECT_TRUE(zs[0].fresh);
    EXPECT_EQ(zs[0].source, "col-z1");
}

}  // namespace
}  // namespace grl::control

namespace grl::control {
namespace {

// Takes `u` (accepted) and returns what it asks of an early tick.
Early news(Controller& c, wire::ZoneUsage u, const Clock& now) {
    Early e;
    EXPECT_EQ(c.take_zone_usage(u, now, nullptr, &e), Accepted::Yes);
    return e;
}

TEST(Control, NewRatesFromANewOrReturningZoneTickAtOnce) {
    Fleet f;
    Controller c(opts());
    EXPECT_TRUE(news(c, zu("z1", {ub("g", 150)}, f.now), f.now).new_rates);  // no instance yet
    c.tick(f.now);
    f.advance(1000);
    // The same zone again, with its instance known: the regular tick is soon enough...
    EXPECT_FALSE(news(c, zu("z1", {ub("g", 150)}, f.now), f.now).new_rates);
    // ...but a zone not heard from yet, or one that went silent and is back (its collector
    // restarted), changes the sums now.
    EXPECT_TRUE(news(c, zu("z2", {ub("g", 50)}, f.now), f.now).new_rates);
    f.advance(10000);  // z1 and z2 stale (3 intervals)
    c.tick(f.now);
    EXPECT_TRUE(news(c, zu("z1", {ub("g", 150)}, f.now), f.now).new_rates);
    wire::ZoneUsage unrated = zu("z2", {ub("g", 0)}, f.now);
    unrated.buckets[0].rated_hosts = 0;
    EXPECT_FALSE(news(c, unrated, f.now).new_rates);  // nothing to compute from yet
    // A refused usage is not judged.
    wire::ZoneUsage late = zu("z3", {ub("g", 150)}, f.now, "r2");
    Early e{true, Change::Rise};
    EXPECT_EQ(c.take_zone_usage(late, f.now, nullptr, &e), Accepted::WrongRegion);
    EXPECT_FALSE(e.new_rates);
    EXPECT_EQ(e.change, Change::None);
}

// New rates are judged by bucket id, with what the last tick left of each id's instances: an
// id freed since and taken by another name does not carry what the tick said of the first.
TEST(Control, NewRatesAreJudgedByIdsThatChangeHands) {
    Fleet f;
    Controller c(opts());
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 150)}, f.now), f.now), Accepted::Yes);
    c.tick(f.now);
    f.advance(100);
    EXPECT_FALSE(news(c, zu("z1", {}, f.now), f.now).new_rates);  // frees "a"'s id
    f.advance(100);
    EXPECT_TRUE(news(c, zu("z1", {ub("b", 150)}, f.now), f.now).new_rates) << "b takes a's id";
    // The other way: an id free at the tick (no instance) taken by a bucket with an instance
    // (a run-time bucket, which has one without usage).
    f.advance(100);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("x", 150)}, f.now), f.now), Accepted::Yes);  // b's free
    ASSERT_EQ(c.add_runtime("bots", bots(), 20000, std::nullopt, 0, f.now), "");
    c.tick(f.now);
    ASSERT_NE(inst(c, "bots"), nullptr);
    f.advance(100);
    EXPECT_FALSE(news(c, zu("z1", {ub("bots", 10), ub("x", 150)}, f.now), f.now).new_rates)
        << "bots takes b's id and has its instance";
}

// The tick notes each instance by the id of the usage it was summed from; a run-time bucket
// that no fresh input names has an instance without usage, yet its name may still hold an id
// (a stale zone's usage names it): that id is noted too, by name, so that a fresh zone that
// starts reporting the bucket does not bring new rates (its instance exists).
TEST(Control, NewRatesOfARunTimeBucketNamedOnlyByAStaleZone) {
    Fleet f;
    Controller c(opts());
    ASSERT_EQ(c.add_runtime("bots", bots(), 20000, std::nullopt, 0, f.now), "");
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("bots", 10)}, f.now), f.now), Accepted::Yes);
    ASSERT_EQ(c.on_zone_usage(zu("z2", {ub("x", 150)}, f.now), f.now), Accepted::Yes);
    c.tick(f.now);
    ASSERT_TRUE(inst(c, "bots")->has_usage);
    // z1 goes silent: stale after 3 intervals, still held (forgotten after 60).
    for (int i = 0; i < 5; ++i) {
        f.advance(1000);
        ASSERT_EQ(c.on_zone_usage(zu("z2", {ub("x", 150)}, f.now), f.now), Accepted::Yes);
        c.tick(f.now);
    }
    ASSERT_TRUE(c.knows_zone("z1"));
    ASSERT_NE(inst(c, "bots"), nullptr);
    ASSERT_FALSE(inst(c, "bots")->has_usage) << "z1 is stale: no input names bots";
    f.advance(1000);
    EXPECT_FALSE(news(c, zu("z2", {ub("bots", 10), ub("x", 150)}, f.now), f.now).new_rates)
        << "bots has its instance";
}

TEST(Control, NewRatesCompleteTheProvisionalInstanceOfTheirOwnZone) {
    Fleet f;
    Controller c(opts());
    wire::UsageBucket part = ub("zb", 100, 2, Scope::Zone);
    part.rated_hosts = 1;  // one of two hosts has a rate: provisional
    ASSERT_EQ(c.on_zone_usage(zu("z1", {part, ub("gb", 100, 2)}, f.now), f.now), Accepted::Yes);
    ASSERT_EQ(
        c.on_zone_usage(zu("z2", {ub("zb", 100, 2, Scope::Zone), ub("gb", 100, 2)}, f.now), f.now),
        Accepted::Yes);
    c.tick(f.now);
    ASSERT_TRUE(inst(c, "zb", "z1")->last_provisional);
    ASSERT_FALSE(inst(c, "zb", "z2")->last_provisional);
    f.advance(300);
    auto complete = [&](const char* zone) {
        return zu(zone, {ub("zb", 100, 2, Scope::Zone), ub("gb", 100, 2)}, f.now);
    };
    EXPECT_FALSE(news(c, complete("z2"), f.now).new_rates) << "z2's instance was complete";
    EXPECT_TRUE(news(c, complete("z1"), f.now).new_rates) << "z1's was provisional";
    wire::ZoneUsage again = zu("z1", {part, ub("gb", 100, 2)}, f.now);
    EXPECT_FALSE(news(c, again, f.now).new_rates) << "still provisional";
    // A global instance made provisional by one zone is completed by any zone.
    f.advance(300);
    wire::UsageBucket gpart = ub("gb", 100, 2);
    gpart.rated_hosts = 1;
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("zb", 100, 2, Scope::Zone), gpart}, f.now), f.now),
              Accepted::Yes);
    c.tick(f.now);
    ASSERT_TRUE(inst(c, "gb")->last_provisional);
    f.advance(300);
    EXPECT_TRUE(news(c, complete("z2"), f.now).new_rates);
}

// A zone usage whose bucket rose well above its last one, or fell well below it
// (grl::changed_well), ticks early, a rise before a fall; noise, or a sum over other hosts
// than before, does not. Each case is judged against the same last usage ({g 500, h 10}, or
// {g, h, k} when names change), by place when the names stand where they stood, else by name.
TEST(Controller, AChangeInAZonesUsageIsAReasonToTickEarly) {
    {
        Fleet f;
        Controller c(opts());
        EXPECT_EQ(news(c, zu("z1", {ub("g", 500, 4)}, f.now), f.now).change, Change::None)
            << "unknown zone";
    }
    auto change_of = [](std::vector<wire::UsageBucket> probe, const char* zone = "z1",
                        std::uint64_t silent_ms = 0, bool with_k = false) {
        Fleet f;
        Controller c(opts());
        std::vector<wire::UsageBucket> base{ub("g", 500, 4), ub("h", 10, 4)};
        if (with_k) base.push_back(ub("k", 10, 4));
        EXPECT_EQ(c.on_zone_usage(zu("z1", base, f.now), f.now), Accepted::Yes);
        c.tick(f.now);
        f.advance(300 + silent_ms);
        if (silent_ms) c.tick(f.now);
        const Early e = news(c, zu(zone, std::move(probe), f.now), f.now);
        if (e.new_rates) {
            EXPECT_EQ(e.change, Change::None);
        }
        return e.change;
    };
    auto change = [&](double g, double h, std::uint64_t g_hosts = 4, const char* zone = "z1",
                      std::uint64_t silent_ms = 0) {
        return change_of({ub("g", g, g_hosts), ub("h", h, 4)}, zone, silent_ms);
    };
    EXPECT_EQ(change(600, 10), Change::None);
    EXPECT_EQ(change(710, 10), Change::Rise);
    EXPECT_EQ(change(500, 40), Change::Rise);
    EXPECT_EQ(change(500, 20), Change::None) << "10 requests more of 10: within the noise";
    EXPECT_EQ(change(300, 10), Change::Fall);
    EXPECT_EQ(change(300, 40), Change::Rise) << "a rise is news before a fall";
    EXPECT_EQ(change(710, 10, 5), Change::None) << "a host more: new rates, not a rise";
    EXPECT_EQ(change(300, 10, 3), Change::None) << "a host fewer: not a fall";
    EXPECT_EQ(change(710, 10, 4, "z2"), Change::None) << "another zone";
    // z1 silent: its return is new rates'.
    EXPECT_EQ(change(710, 10, 4, "z1", 10000), Change::None);
    // Names not at their places: matched by name.
    EXPECT_EQ(change_of({ub("g", 710, 4), ub("h", 10, 4)}, "z1", 0, true), Change::Rise);
    EXPECT_EQ(change_of({ub("h", 10, 4), ub("g", 300, 4)}), Change::Fall) << "unsorted";
    EXPECT_EQ(change_of({ub("h", 10, 4), ub("k", 10, 4)}, "z1", 0, true), Change::None);
    EXPECT_EQ(change_of({ub("g", 300, 4), ub("k", 40, 4)}, "z1", 0, true), Change::Rise);
    // A rise beside new rates (a bucket without an instance, named after "g", so that a pass
    // judging entry by entry meets the rise first): the tick new_rates asks for answers both,
    // so no change is reported.
    {
        Fleet f;
        Controller c(opts());
        ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("g", 500, 4), ub("h", 10, 4)}, f.now), f.now),
                  Accepted::Yes);
        c.tick(f.now);
        f.advance(300);
        const Early e =
            news(c, zu("z1", {ub("g", 710, 4), ub("h", 10, 4), ub("n", 10, 4)}, f.now), f.now);
        EXPECT_TRUE(e.new_rates);
        EXPECT_EQ(e.change, Change::None);
    }
}

// The last rated entries of buckets absent from a usage are kept (by name) while the usage
// names the same buckets at the same places, and match again by name when the bucket is back.
TEST(Controller, LastRatesOfAbsentBucketsOutliveUsagesMatchedByPlace) {
    Fleet f;
    Controller c(opts());
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("g", 500, 4), ub("k", 100, 4)}, f.now), f.now),
              Accepted::Yes);
    c.tick(f.now);
    for (int i = 0; i < 3; ++i) {  // "k" absent: its entry is kept beside the matched ones
        f.advance(300);
        EXPECT_EQ(news(c, zu("z1", {ub("g", 500, 4)}, f.now), f.now).change, Change::None);
    }
    f.advance(300);
    EXPECT_EQ(news(c, zu("z1", {ub("g", 500, 4), ub("k", 200, 4)}, f.now), f.now).change,
              Change::Rise);
    // Back unrated, then by place: its last rates stand in.
    f.advance(300);
    wire::UsageBucket k = ub("k", 0, 4);
    k.rated_hosts = 0;
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("g", 500, 4), k}, f.now), f.now), Accepted::Yes);
    c.tick(f.now);
    ASSERT_NE(inst(c, "k"), nullptr);
    EXPECT_DOUBLE_EQ(inst(c, "k")->samples.back().offered, 200000);
    // hold_intervals later, without a rate since, the entry is gone.
    f.advance(11000);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("g", 500, 4), k}, f.now), f.now), Accepted::Yes);
    f.advance(300);
    EXPECT_EQ(news(c, zu("z1", {ub("g", 500, 4), ub("k", 900, 4)}, f.now), f.now).change,
              Change::None);
}

// The last rates of buckets a usage no longer names keep their names (held apart from the
// entries) when some of them expire while usages name the same buckets at the same places.
TEST(Controller, AbsentBucketsKeepTheirNamesWhenOthersExpire) {
    Fleet f;
    Controller c(opts());
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 100, 4), ub("b", 200, 4), ub("c", 300, 4)}, f.now),
                              f.now),
              Accepted::Yes);
    f.advance(6000);  // "b" absent, rated at 0 s
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 100, 4), ub("c", 300, 4)}, f.now), f.now),
              Accepted::Yes);
    f.advance(300);  // "c" absent too, rated at 6 s
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 100, 4)}, f.now), f.now), Accepted::Yes);
    f.advance(5000);  // by place; "b"'s last rates are past hold_intervals, "c"'s are not
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 100, 4)}, f.now), f.now), Accepted::Yes);
    f.advance(300);  // "c" back unrated: its last rates stand in
    wire::UsageBucket back = ub("c", 0, 4);
    back.rated_hosts = 0;
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 100, 4), back}, f.now), f.now), Accepted::Yes);
    c.tick(f.now);
    ASSERT_NE(inst(c, "c"), nullptr);
    EXPECT_DOUBLE_EQ(inst(c, "c")->samples.back().offered, 300000);
}

// A restarted collector sends its first usage when some hosts have reconnected, not all (under
// load a host may take a few hundred ms): that sum is part of the zone, not the whole. The zone
// awaits the hosts it had, for --stale-intervals: a partial sample is replaced by the complete
// one, which ticks at once, instead of staying in the mean for a window.
TEST(Control, AZoneBackWithFewerHostsIsPartialUntilTheyReturn) {
    Fleet f;
    Controller c(opts());
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("g", 150, 2)}, f.now), f.now), Accepted::Yes);
        c.tick(f.now);
        f.advance(1000);
    }
    EXPECT_EQ(ratio(c, "g"), 333333u);
    f.advance(10000);  // the collector is gone: z1 stale
    c.tick(f.now);
    // Back, with one of its two hosts so far (100 r/s of the 150).
    EXPECT_TRUE(news(c, zu("z1", {ub("g", 100, 1)}, f.now), f.now).new_rates);
    c.tick(f.now);
    EXPECT_TRUE(inst(c, "g")->last_provisional);
    f.advance(200);
    // The other host is back: complete at once (an early tick), and the partial sample is gone.
    EXPECT_TRUE(news(c, zu("z1", {ub("g", 150, 2)}, f.now), f.now).new_rates);
    c.tick(f.now);
    EXPECT_FALSE(inst(c, "g")->last_provisional);
    EXPECT_EQ(ratio(c, "g"), 333333u);

    // A host that never comes back is awaited for --stale-intervals (3 x 1 s) only.
    f.advance(10000);
    c.tick(f.now);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("g", 100, 1)}, f.now), f.now), Accepted::Yes);
    c.tick(f.now);
    EXPECT_TRUE(inst(c, "g")->last_provisional);
    f.advance(3000);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("g", 100, 1)}, f.now), f.now), Accepted::Yes);
    c.tick(f.now);
    EXPECT_FALSE(inst(c, "g")->last_provisional);
}

}  // namespace
}  // namespace grl::control

// ---------------------------------------------------------------------------------------------
// Untrusted inputs: stamps, intervals and counts of messages are bounded

namespace grl::control {
namespace {

constexpr std::uint64_t kTenDaysMs = 10ULL * 24 * 3600 * 1000;

wire::RegionUsage peer_usage(const std::string& source, const std::string& region,
                             std::vector<wire::UsageBucket> buckets, const Clock& now) {
    wire::RegionUsage u;
    u.source = source;
    u.region = region;
    u.seq = ++g_seq;
    u.ts_ms = now.wall_ms;
    u.interval_ms = 1000;
    u.zones = 1;
    for (const auto& b : buckets) u.hosts = std::max(u.hosts, b.hosts);
    u.buckets = std::move(buckets);
    return u;
}

TEST(Hardening, ZoneUsageStampedInTheFutureCannotPinTheZone) {
    Fleet f;
    Controller c(opts());
    c.on_zone_usage(zu("z1", {ub("api", 150, 2)}, f.now), f.now);
    c.tick(f.now);
    ASSERT_EQ(ratio(c, "api"), 333333u);
    // A forged (or broken) sender stamps its zone's usage ten days ahead, with a huge interval:
    // held, it would be "newer" than every genuine message for ten days.
    wire::ZoneUsage forged = zu("z1", {ub("api", 1, 2)}, f.now);
    forged.ts_ms = f.now.wall_ms + kTenDaysMs;
    forged.interval_ms = 1'000'000'000'000;
    std::string why;
    EXPECT_EQ(c.on_zone_usage(forged, f.now, &why), Accepted::Future);
    EXPECT_EQ(why, "zone usage from col-z1 (zone z1) refused: ts_ms " +
                       std::to_string(forged.ts_ms) +
                       " is 864000000 ms ahead of this controller's clock (at most 60000 allowed)");
    for (int i = 0; i < 5; ++i) {
        f.advance(1000);
        EXPECT_EQ(c.on_zone_usage(zu("z1", {ub("api", 150, 2)}, f.now), f.now), Accepted::Yes);
        c.tick(f.now);
    }
    EXPECT_EQ(ratio(c, "api"), 333333u);
    // A sender whose clock runs ahead within the bound is accepted.
    wire::ZoneUsage ahead = zu("z2", {ub("api", 50, 1)}, f.now);
    ahead.ts_ms = f.now.wall_ms + 59'000;
    EXPECT_EQ(c.on_zone_usage(ahead, f.now), Accepted::Yes);
}

TEST(Hardening, RegionUsageStampedInTheFutureCannotPinThePeer) {
    Fleet f;
    Controller a(opts("ctl-a", "r1"));
    auto feed = [&](const wire::RegionUsage& from_b) {
        a.on_zone_usage(zu("z1", {ub("api", 100, 1)}, f.now), f.now);
        Accepted got = a.on_region_usage(from_b, f.now);
        a.tick(f.now);
        return got;
    };
    // 100 r/s here and 100 r/s in r2 against a global 100 r/s: ratio 0.5.
    EXPECT_EQ(feed(peer_usage("ctl-b", "r2", {ub("api", 100, 1)}, f.now)), Accepted::Yes);
    ASSERT_EQ(ratio(a, "api"), 500000u);
    wire::RegionUsage forged = peer_usage("ctl-b", "r2", {ub("api", 0, 1)}, f.now);
    forged.ts_ms = f.now.wall_ms + kTenDaysMs;
    forged.interval_ms = 1'000'000'000'000;
    forged.overrides.push_back({});
    forged.overrides[0].name = "api";
    forged.overrides[0].limit_mrps = 1;
    forged.overrides[0].set_ms = f.now.wall_ms;
    forged.overrides[0].origin = "ctl-b";
    std::string why;
    EXPECT_EQ(a.on_region_usage(forged, f.now, &why), Accepted::Future);
    EXPECT_NE(why.find("region usage from ctl-b (region r2) refused: ts_ms"), std::string::npos)
        << why;
    EXPECT_TRUE(a.overrides().empty());  // refused whole, its overrides too
    for (int i = 0; i < 5; ++i) {
        f.advance(1000);
        EXPECT_EQ(feed(peer_usage("ctl-b", "r2", {ub("api", 100, 1)}, f.now)), Accepted::Yes);
    }
    EXPECT_EQ(ratio(a, "api"), 500000u);
}

TEST(Hardening, HugeIntervalsAreClamped) {
    Fleet f;
    Options o = opts();
    o.peer_hold_ms = 0;  // the peer's usage leaves the sums when it goes stale
    Controller c(o);
    // One message claiming an interval of 31 years (or one that overflows when multiplied):
    // the zone, and the peer, must still go stale and be forgotten after bounded times.
    wire::ZoneUsage u = zu("z1", {ub("api", 150)}, f.now);
    u.interval_ms = 1'000'000'000'000;
    ASSERT_EQ(c.on_zone_usage(u, f.now), Accepted::Yes);
    wire::RegionUsage p = peer_usage("ctl-b", "r2", {ub("api", 10)}, f.now);
    p.interval_ms = UINT64_MAX;
    ASSERT_EQ(c.on_region_usage(p, f.now), Accepted::Yes);
    c.tick(f.now);
    EXPECT_EQ(c.fresh_zones(), 1u);
    ASSERT_EQ(c.peers(f.now).size(), 1u);
    EXPECT_TRUE(c.peers(f.now)[0].fresh);
    // Stale after 3 intervals of at most 60 s.
    f.advance(std::uint64_t{3} * 60'000);
    c.tick(f.now);
    EXPECT_EQ(c.fresh_zones(), 0u);
    EXPECT_TRUE(c.instances().empty());
    EXPECT_FALSE(c.peers(f.now)[0].fresh);
    // Forgotten after 60 intervals of at most 60 s.
    f.advance(std::uint64_t{57} * 60'000);
    c.tick(f.now);
    EXPECT_TRUE(c.zones(f.now).empty());
    EXPECT_TRUE(c.peers(f.now).empty());
}

TEST(Hardening, OneMessageCannotOutvoteTheFleet) {
    Fleet f;
    Controller c(opts());
    auto genuine = [&] {
        c.on_zone_usage(zu("z1", {ub("api", 50, 4)}, f.now), f.now);
        c.tick(f.now);
        f.advance(1000);
    };
    genuine();
    ASSERT_EQ(inst(c, "api")->limit_mrps, 100000u);
    ASSERT_EQ(ratio(c, "api"), 0u);
    // One zone usage claiming 10^12 hosts, all configured with limit 0: summed, it would win
    // the vote and drop the global bucket everywhere.
    const std::uint64_t lots = 1'000'000'000'000;
    std::string why;
    EXPECT_EQ(c.on_zone_usage(zu("z9", {ub("api", 0, lots, Scope::Global, 0)}, f.now), f.now, &why),
              Accepted::TooManyHosts);
    EXPECT_EQ(why,
              "zone usage from col-z9 (zone z9) refused: it claims 1000000000000 hosts and 0 "
              "stale hosts (at most 100000 each per zone)");
    genuine();
    EXPECT_EQ(inst(c, "api")->limit_mrps, 100000u);
    EXPECT_EQ(ratio(c, "api"), 0u);
    EXPECT_EQ(inst(c, "api")->hosts, 4u);
    EXPECT_EQ(c.fresh_hosts(), 4u);
    // The same from a "peer": the whole message is refused, its overrides included.
    wire::RegionUsage big =
        peer_usage("ctl-x", "r2", {ub("api", 0, lots, Scope::Global, 0)}, f.now);
    wire::Override o;
    o.name = "web";
    o.limit_mrps = 1;
    o.set_ms = f.now.wall_ms;
    o.origin = "ctl-x";
    big.overrides.push_back(o);
    EXPECT_EQ(c.on_region_usage(big, f.now, &why), Accepted::TooManyHosts);
    EXPECT_NE(why.find("it claims 1000000000000 hosts (at most 1000000 per region)"),
              std::string::npos)
        << why;
    genuine();
    EXPECT_EQ(inst(c, "api")->limit_mrps, 100000u);
    EXPECT_EQ(ratio(c, "api"), 0u);
    EXPECT_EQ(inst(c, "api")->hosts, 4u);
    EXPECT_EQ(c.overrides().count("web"), 0u);
    // The bounds are exact: max_zone_hosts hosts (or stale hosts) pass, one more does not.
    Options small = opts();
    small.max_zone_hosts = 10;
    small.max_region_hosts = 20;
    Controller d(small);
    EXPECT_EQ(d.on_zone_usage(zu("z1", {ub("api", 50, 10)}, f.now), f.now), Accepted::Yes);
    EXPECT_EQ(d.on_zone_usage(zu("z2", {ub("api", 50, 11)}, f.now), f.now), Accepted::TooManyHosts);
    wire::ZoneUsage stale = zu("z3", {ub("api", 50, 1)}, f.now);
    stale.stale_hosts = 11;
    EXPECT_EQ(d.on_zone_usage(stale, f.now), Accepted::TooManyHosts);
    EXPECT_EQ(d.on_region_usage(peer_usage("p1", "r2", {ub("api", 50, 20)}, f.now), f.now),
              Accepted::Yes);
    EXPECT_EQ(d.on_region_usage(peer_usage("p2", "r2", {ub("api", 50, 21)}, f.now), f.now),
              Accepted::TooManyHosts);
}

TEST(Hardening, ZoneAndPeerTablesAreBounded) {
    Fleet f;
    Options o = opts();
    o.max_zones = 2;
    o.max_peers = 1;
    o.peer_hold_ms = 0;
    Controller c(o);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("api", 50)}, f.now), f.now), Accepted::Yes);
    ASSERT_EQ(c.on_zone_usage(zu("z2", {ub("api", 50)}, f.now), f.now), Accepted::Yes);
    // A third zone is refused whole, with a reason naming the option; the held ones go on.
    std::string why;
    EXPECT_EQ(c.on_zone_usage(zu("z3", {ub("api", 500)}, f.now), f.now, &why), Accepted::Full);
    EXPECT_EQ(why,
              "zone usage from col-z3 (zone z3) refused: this controller already holds 2 zones "
              "(--max-zones)");
    f.advance(1000);
    EXPECT_EQ(c.on_zone_usage(zu("z1", {ub("api", 60)}, f.now), f.now), Accepted::Yes);
    c.tick(f.now);
    EXPECT_EQ(c.fresh_zones(), 2u);
    EXPECT_EQ(inst(c, "api")->hosts, 2u);
    // A peer beyond max_peers is refused before its overrides are merged.
    ASSERT_EQ(c.on_region_usage(peer_usage("ctl-b", "r2", {ub("api", 10)}, f.now), f.now),
              Accepted::Yes);
    wire::RegionUsage extra = peer_usage("ctl-c", "r3", {ub("api", 10)}, f.now);
    wire::Override ov;
    ov.name = "web";
    ov.limit_mrps = 1;
    ov.set_ms = f.now.wall_ms;
    ov.origin = "ctl-c";
    extra.overrides.push_back(ov);
    EXPECT_EQ(c.on_region_usage(extra, f.now, &why), Accepted::Full);
    EXPECT_EQ(why,
              "region usage from ctl-c (region r3) refused: this controller already holds 1 peer "
              "controllers (--max-peers)");
    EXPECT_EQ(c.overrides().count("web"), 0u);
    // A departed zone frees its place once forgotten (60 intervals of 1 s).
    for (int i = 0; i < 61; ++i) {
        f.advance(1000);
        c.on_zone_usage(zu("z1", {ub("api", 60)}, f.now), f.now);
        c.tick(f.now);
    }
    EXPECT_EQ(c.on_zone_usage(zu("z3", {ub("api", 50)}, f.now), f.now), Accepted::Yes);
    EXPECT_EQ(c.on_region_usage(peer_usage("ctl-c", "r3", {ub("api", 10)}, f.now), f.now),
              Accepted::Yes);
}

// A usage naming the same buckets at the same places takes over its predecessor's hold on their
// ids: a name stays held while some usage names it, and is freed with the last.
TEST(Hardening, BucketNamesStayHeldWhileAUsageNamesThem) {
    Fleet f;
    Controller c(opts());
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 10), ub("b", 10)}, f.now), f.now),
                  Accepted::Yes);
        ASSERT_EQ(
            c.on_region_usage(peer_usage("ctl-p", "r2", {ub("b", 10), ub("c", 10)}, f.now), f.now),
            Accepted::Yes);
        f.advance(100);
    }
    EXPECT_EQ(c.bucket_names(), 3u);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 10)}, f.now), f.now), Accepted::Yes);
    EXPECT_EQ(c.bucket_names(), 3u);  // "b": the peer's
    ASSERT_EQ(c.on_region_usage(peer_usage("ctl-p", "r2", {ub("c", 10)}, f.now), f.now),
              Accepted::Yes);
    EXPECT_EQ(c.bucket_names(), 2u);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {}, f.now), f.now), Accepted::Yes);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {}, f.now), f.now), Accepted::Yes);
    ASSERT_EQ(c.on_region_usage(peer_usage("ctl-p", "r2", {}, f.now), f.now), Accepted::Yes);
    EXPECT_EQ(c.bucket_names(), 0u);
}

TEST(Hardening, BucketNamesAreBounded) {
    Fleet f;
    Options o = opts();
    o.max_bucket_names = 3;
    o.peer_hold_ms = 0;
    Controller c(o);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 50), ub("b", 50)}, f.now), f.now), Accepted::Yes);
    ASSERT_EQ(c.on_zone_usage(zu("z2", {ub("b", 50), ub("c", 50)}, f.now), f.now), Accepted::Yes);
    EXPECT_EQ(c.bucket_names(), 3u);
    // A fourth name is refused with its whole usage, naming the option; the zone's last usage
    // stays in force.
    std::string why;
    EXPECT_EQ(c.on_zone_usage(zu("z2", {ub("b", 80), ub("d", 50)}, f.now), f.now, &why),
              Accepted::TooManyBuckets);
    EXPECT_EQ(why,
              "zone usage from col-z2 (zone z2) refused: it names buckets beyond the 3 this "
              "controller holds (--max-bucket-names)");
    EXPECT_EQ(c.on_region_usage(peer_usage("ctl-b", "r2", {ub("e", 10)}, f.now), f.now, &why),
              Accepted::TooManyBuckets);
    EXPECT_EQ(why,
              "region usage from ctl-b (region r2) refused: it names buckets beyond the 3 this "
              "controller holds (--max-bucket-names)");
    c.tick(f.now);
    EXPECT_EQ(inst(c, "b")->offered_mrps, 100000);
    EXPECT_EQ(inst(c, "c")->offered_mrps, 50000);
    EXPECT_EQ(inst(c, "d"), nullptr);
    // A name no usage held names any more frees its place: z2 stops naming c.
    f.advance(1000);
    ASSERT_EQ(c.on_zone_usage(zu("z2", {ub("b", 50)}, f.now), f.now), Accepted::Yes);
    EXPECT_EQ(c.bucket_names(), 2u);
    ASSERT_EQ(c.on_zone_usage(zu("z2", {ub("b", 50), ub("d", 70)}, f.now), f.now), Accepted::Yes);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 50), ub("b", 50)}, f.now), f.now), Accepted::Yes);
    c.tick(f.now);
    EXPECT_EQ(inst(c, "c"), nullptr);
    EXPECT_EQ(inst(c, "d")->offered_mrps, 70000);
    // A forgotten zone releases its names (60 intervals of 1 s).
    for (int i = 0; i < 61; ++i) {
        f.advance(1000);
        c.on_zone_usage(zu("z1", {ub("a", 50)}, f.now), f.now);
        c.tick(f.now);
    }
    EXPECT_EQ(c.fresh_zones(), 1u);
    EXPECT_EQ(c.bucket_names(), 1u);
    EXPECT_EQ(
        c.on_region_usage(peer_usage("ctl-b", "r2", {ub("a", 10), ub("e", 10)}, f.now), f.now),
        Accepted::Yes);
    c.tick(f.now);
    EXPECT_EQ(inst(c, "e")->hosts, 1u);
    EXPECT_EQ(inst(c, "a")->hosts, 2u);
}

TEST(Aggregation, BucketsComeAndGoAcrossZonesAndPeers) {
    // Names appear, vanish and come back in different zones and peers, in and out of order:
    // every instance sums exactly the entries of the inputs that name it.
    Fleet f;
    Options o = opts();
    Controller c(o);
    auto offered = [&](const std::string& b) {
        const Instance* i = inst(c, b);
        return i ? i->samples.back().offered : -1.0;
    };
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("a", 1), ub("b", 2), ub("c", 4)}, f.now), f.now),
              Accepted::Yes);
    ASSERT_EQ(c.on_zone_usage(zu("z2", {ub("c", 8), ub("b", 16)}, f.now), f.now), Accepted::Yes);
    ASSERT_EQ(
        c.on_region_usage(peer_usage("ctl-b", "r2", {ub("d", 32), ub("a", 64)}, f.now), f.now),
        Accepted::Yes);
    c.tick(f.now);
    EXPECT_EQ(offered("a"), 65000);
    EXPECT_EQ(offered("b"), 18000);
    EXPECT_EQ(offered("c"), 12000);
    EXPECT_EQ(offered("d"), 32000);
    f.advance(1000);
    ASSERT_EQ(c.on_zone_usage(zu("z1", {ub("e", 1), ub("c", 2)}, f.now), f.now), Accepted::Yes);
    ASSERT_EQ(c.on_zone_usage(zu("z2", {ub("a", 4), ub("b", 8), ub("c", 16)}, f.now), f.now),
              Accepted::Yes);
    ASSERT_EQ(c.on_region_usage(peer_usage("ctl-b", "r2", {ub("b", 32)}, f.now), f.now),
              Accepted::Yes);
    const TickOutput out = c.tick(f.now);
    EXPECT_EQ(offered("a"), 4000);
    EXPECT_EQ(offered("b"), 40000);
    EXPECT_EQ(offered("c"), 18000);
    EXPECT_EQ(offered("d"), -1.0);  // no input names it: forgotten
    EXPECT_EQ(offered("e"), 1000);
    // The region usage lists this region's buckets in name order.
    std::vector<std::string> names;
    for (const auto& b : out.region_usage.buckets) names.push_back(b.name);
    EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "e"}));
    EXPECT_EQ(out.region_usage.buckets[2].offered_mrps, 18000u);
}

TEST(Hardening, SumsOfRatesSaturate) {
    Fleet f;
    Controller c(opts());
    // Two zones whose rates each fit in 64 bits but whose sum does not: the region usage sent
    // to the peers must say "very much", not wrap to almost nothing.
    wire::UsageBucket b = ub("api", 0, 1);
    b.offered_mrps = b.admitted_mrps = (1ULL << 63) + 5;
    c.on_zone_usage(zu("z1", {b}, f.now), f.now);
    c.on_zone_usage(zu("z2", {b}, f.now), f.now);
    TickOutput out = c.tick(f.now);
    ASSERT_EQ(out.region_usage.buckets.size(), 1u);
    EXPECT_EQ(out.region_usage.buckets[0].offered_mrps, UINT64_MAX);
    EXPECT_EQ(out.region_usage.buckets[0].admitted_mrps, UINT64_MAX);
    EXPECT_EQ(ratio(c, "api"), drop_ratio_ppm(UINT64_MAX, 100000));
}

TEST(Hardening, AnOverrideStampedInTheFarFutureIsRefusedAndCanBeReplaced) {
    Fleet f;
    Controller a(opts("ctl-a"));
    // A forged entry with set_ms at the end of time would win every later change, for ever.
    wire::RegionUsage forged = peer_usage("ctl-x", "r3", {}, f.now);
    wire::Override o;
    o.name = "api";
    o.limit_mrps = 1;
    o.set_ms = UINT64_MAX;
    o.origin = "zzz";
    forged.overrides.push_back(o);
    std::string why;
    EXPECT_EQ(a.on_region_usage(forged, f.now, &why), Accepted::Yes);  // the rest of it is fine
    EXPECT_EQ(a.overrides().count("api"), 0u);
    EXPECT_EQ(a.overrides_rejected(), 1u);
    EXPECT_NE(why.find("override of bucket \"api\" (origin zzz) from ctl-x refused: set_ms "
                       "18446744073709551615 is "),
              std::string::npos)
        << why;
    // An operator's override stands whatever copies of the forged entry keep arriving.
    ASSERT_EQ(a.set_override("api", 5000, std::nullopt, 0, f.now), "");
    f.advance(1000);
    forged.seq++;
    forged.ts_ms = f.now.wall_ms;
    a.on_region_usage(forged, f.now);
    EXPECT_EQ(a.overrides().at("api").limit_mrps, 5000u);
    EXPECT_EQ(a.overrides_rejected(), 2u);
    EXPECT_LE(a.overrides().at("api").set_ms, f.now.wall_ms);
    // A peer whose clock runs 30 s ahead: its entries merge as before, and a later local
    // change still wins (its stamp follows the held one).
    o.name = "web";
    o.set_ms = f.now.wall_ms + 30'000;
    forged.overrides = {o};
    forged.seq++;
    a.on_region_usage(forged, f.now);
    ASSERT_EQ(a.overrides().count("web"), 1u);
    EXPECT_EQ(a.overrides_rejected(), 2u);
    EXPECT_EQ(a.overrides().at("web").limit_mrps, 1u);
    ASSERT_EQ(a.set_override("web", 7000, std::nullopt, 0, f.now), "");
    EXPECT_EQ(a.overrides().at("web").limit_mrps, 7000u);
    EXPECT_GT(a.overrides().at("web").set_ms, f.now.wall_ms + 30'000);
}

TEST(Hardening, ExpiryStampsDoNotWrap) {
    Fleet f;
    Controller c(opts());
    // "--for" as long as it gets: it never expires, rather than expiring at once.
    ASSERT_EQ(c.set_override("api", 5000, std::nullopt, UINT64_MAX, f.now), "");
    c.on_zone_usage(zu("z1", {ub("api", 10)}, f.now), f.now);
    c.tick(f.now);
    EXPECT_EQ(inst(c, "api")->limit_mrps, 5000u);
    EXPECT_EQ(c.overrides().at("api").expires_ms, UINT64_MAX);
    wire::RuntimeMatch m;
    m.caller = "evil";
    m.scope = Scope::Global;
    ASSERT_EQ(c.add_runtime("block-evil", m, 0, std::nullopt, UINT64_MAX - 1, f.now), "");
    f.advance(1000);
    TickOutput out = c.tick(f.now);
    ASSERT_NE(entry(out, Scope::Global, "block-evil"), nullptr);
    EXPECT_EQ(entry(out, Scope::Global, "block-evil")->ratio_ppm, kPpmOne);
}

// ---------------------------------------------------------------------------------------------
// Running sums (docs/control-plane.md "Running sums"): a controller that keeps them and one that
// sums every entry at every tick (Options::walk_entries, the reference) are fed the same usage
// and must agree on everything, tick after tick, through what the bookkeeping must get right.

struct Twins {
    Fleet f;
    Controller run;
    Controller walk;
    static Options walking(Options o) {
        o.walk_entries = true;
        return o;
    }
    explicit Twins(const Options& o = opts()) : run(o), walk(walking(o)) {}
    void zone(const wire::ZoneUsage& u) {
        EXPECT_EQ(run.on_zone_usage(u, f.now), walk.on_zone_usage(u, f.now));
    }
    void peer(const wire::RegionUsage& u) {
        EXPECT_EQ(run.on_region_usage(u, f.now), walk.on_region_usage(u, f.now));
    }
    static std::string bytes(const wire::Instructions& m) {
        std::string s;
        wire::encode(m, s);
        return s;
    }
    static std::string bytes(const wire::RegionUsage& m) {
        std::string s;
        wire::encode(m, s);
        return s;
    }
    static std::string status(const Controller& c) {
        wire::AdminReply r;
        r.buckets = c.status("", true);
        std::string s;
        wire::encode(r, s);
        return s;
    }
    // Ticks both; what the running sums' controller published, and its buckets walked. The
    // running sums' controller ticks into the same TickOutput every time, as the daemon does;
    // the reference into a new one.
    std::uint64_t tick() {
        run.tick(f.now, reused);
        const TickOutput& a = reused;
        const TickOutput b = walk.tick(f.now);
        EXPECT_EQ(a.instructions.size(), b.instructions.size());
        for (std::size_t i = 0; i < a.instructions.size() && i < b.instructions.size(); ++i)
            EXPECT_EQ(bytes(a.instructions[i]), bytes(b.instructions[i])) << "message " << i;
        EXPECT_EQ(bytes(a.region_usage), bytes(b.region_usage));
        std::size_t running = 0;  // the lines only the running sums' controller logs
        for (const Event& e : a.events) running += e.text.find("running sums") != std::string::npos;
        EXPECT_EQ(a.events.size() - running, b.events.size());
        EXPECT_EQ(status(run), status(walk));
        const Controller::Instances& x = run.instances();
        const Controller::Instances& y = walk.instances();
        EXPECT_EQ(x.size(), y.size());
        for (auto i = x.begin(), j = y.begin(); i != x.end() && j != y.end(); ++i, ++j) {
            const Instance& p = i->second;
            const Instance& q = j->second;
            SCOPED_TRACE(p.bucket + " " + p.zone);
            EXPECT_EQ(p.bucket, q.bucket);
            EXPECT_EQ(p.zone, q.zone);
            EXPECT_EQ(p.scope, q.scope);
            EXPECT_EQ(p.offered_mrps, q.offered_mrps);
            EXPECT_EQ(p.admitted_mrps, q.admitted_mrps);
            EXPECT_EQ(p.dropped_mrps, q.dropped_mrps);
            EXPECT_EQ(p.shadow_dropped_mrps, q.shadow_dropped_mrps);
            EXPECT_EQ(p.ratio_ppm, q.ratio_ppm);
            EXPECT_EQ(p.limit_mrps, q.limit_mrps);
            EXPECT_EQ(p.hosts, q.hosts);
            EXPECT_EQ(p.own_hosts, q.own_hosts);
            EXPECT_EQ(p.definitions, q.definitions);
            EXPECT_EQ(p.disagreeing_hosts, q.disagreeing_hosts);
            EXPECT_EQ(p.has_usage, q.has_usage);
            EXPECT_EQ(p.last_provisional, q.last_provisional);
            EXPECT_EQ(p.attacking, q.attacking);
            EXPECT_EQ(p.inputs_gen, q.inputs_gen);
            EXPECT_EQ(p.basis_offered_mrps, q.basis_offered_mrps);
            EXPECT_EQ(p.basis_ms, q.basis_ms);
            EXPECT_EQ(p.samples.size(), q.samples.size());
            for (std::size_t k = 0; k < p.samples.size() && k < q.samples.size(); ++k) {
                EXPECT_EQ(p.samples[k].offered, q.samples[k].offered);
                EXPECT_EQ(p.samples[k].admitted, q.samples[k].admitted);
                EXPECT_EQ(p.samples[k].dropped, q.samples[k].dropped);
                EXPECT_EQ(p.samples[k].shadow_dropped, q.samples[k].shadow_dropped);
            }
        }
        EXPECT_GE(walk.buckets_walked(), run.buckets_walked());  // the reference walks all
        last = a;
        return run.buckets_walked();
    }
    void advance(std::uint64_t ms = 1000) { f.advance(ms); }
    TickOutput reused;  // the running sums' controller's, written over at every tick
    TickOutput last;    // a copy of its last tick
};

// The instance the running sums' controller holds for `bucket`; a failure (not a crash) when
// it holds none.
const Instance& held(const Controller& c, const std::string& bucket) {
    static const Instance kNone;
    const Instance* i = inst(c, bucket);
    if (i == nullptr) ADD_FAILURE() << "no instance of " << bucket;
    return i ? *i : kNone;
}

// Its newest sample's offered rate (-1: none).
double newest(const Controller& c, const std::string& bucket) {
    const Instance& i = held(c, bucket);
    return i.samples.empty() ? -1.0 : i.samples.back().offered;
}

// Every usage a zone or peer sends in these tests: buckets a, b, c, global, at rates that
// change with `k` so that every tick's sums differ.
std::vector<wire::UsageBucket> abc(std::uint64_t k, std::uint64_t hosts = 2) {
    return {ub("a", 10.0 + k, hosts), ub("b", 20.0 + 2 * k, hosts), ub("c", 5.0 + k, hosts)};
}

TEST(RunningSums, ZonesGoStaleComeBackAndAreForgotten) {
    Twins t;
    std::uint64_t k = 0;
    auto send = [&](std::initializer_list<const char*> zones) {
        for (const char* z : zones) t.zone(zu(z, abc(++k), t.f.now));
        t.peer(peer_usage("ctl-b", "r2", abc(++k, 5), t.f.now));
    };
    send({"z1", "z2", "z3"});
    EXPECT_EQ(t.tick(), 0u);       // every zone and peer holds every bucket: no walk
    for (int i = 0; i < 5; ++i) {  // z2 silent: stale after 3 intervals, out of the sums
        t.advance();
        send({"z1", "z3"});
        EXPECT_EQ(t.tick(), 0u);
    }
    EXPECT_EQ(held(t.run, "a").own_hosts, 4u);  // z1 and z3
    t.advance();
    send({"z1", "z2", "z3"});  // back: into the sums again
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").own_hosts, 6u);
    // z3 silent until forgotten, with no tick in between (it is still in the sums then).
    t.advance(62000);
    send({"z1", "z2"});
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").own_hosts, 4u);
    t.advance();
    send({"z1", "z2", "z3"});  // a new zone by that name
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").own_hosts, 6u);
}

TEST(RunningSums, APeerIsReplacedByAnotherOfItsRegion) {
    Twins t;
    std::uint64_t k = 0;
    t.zone(zu("z1", abc(++k), t.f.now));
    t.peer(peer_usage("ctl-b", "r2", abc(++k, 5), t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").hosts, 7u);
    t.advance();
    t.zone(zu("z1", abc(++k), t.f.now));
    t.peer(peer_usage("ctl-b", "r2", abc(++k, 5), t.f.now));
    t.advance(10);
    t.peer(peer_usage("ctl-b2", "r2", abc(++k, 3), t.f.now));  // newer: chosen for r2
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").hosts, 5u);
    t.advance();
    t.zone(zu("z1", abc(++k), t.f.now));
    t.peer(peer_usage("ctl-b", "r2", abc(++k, 5), t.f.now));  // newer again: back to ctl-b
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").hosts, 7u);
    for (int i = 0; i < 5; ++i) {  // r2 silent: held in the sums (a partition), unchanged
        t.advance();
        t.zone(zu("z1", abc(++k), t.f.now));
        EXPECT_EQ(t.tick(), 0u);
    }
    EXPECT_EQ(held(t.run, "a").hosts, 7u);
    t.peer(peer_usage("ctl-c", "r3", abc(++k, 1), t.f.now));  // a third region
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").hosts, 8u);
    // Every peer silent past peer_hold_ms with no tick in between: forgotten from the sums.
    t.advance(601000);
    t.zone(zu("z1", abc(++k), t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").hosts, 2u);
}

TEST(RunningSums, AnIdReleasedIsReusedByAnotherName) {
    Twins t;
    std::uint64_t k = 0;
    t.zone(zu("z1", abc(++k), t.f.now));
    t.zone(zu("z2", abc(++k), t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    const std::uint64_t names = t.run.bucket_names();
    t.advance();
    // "c" leaves every usage (its id is released), "d" comes (and takes an id, maybe c's).
    auto abd = [&](std::uint64_t hosts) {
        return std::vector<wire::UsageBucket>{ub("a", 1.0 + static_cast<double>(++k), hosts),
                                              ub("b", 2, hosts), ub("d", 7, hosts)};
    };
    t.zone(zu("z1", abd(2), t.f.now));
    t.zone(zu("z2", abd(3), t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(t.run.bucket_names(), names);
    EXPECT_EQ(inst(t.run, "c"), nullptr);
    EXPECT_EQ(held(t.run, "d").own_hosts, 5u);
    EXPECT_EQ(newest(t.run, "d"), 14000);
}

TEST(RunningSums, SumsBeyondWhatDoublesHoldExactlyAreWalked) {
    Twins t;
    wire::UsageBucket big = ub("b", 0, 1);
    big.offered_mrps = big.admitted_mrps = (1ULL << 63) + 5;  // the sum saturates
    // Hosts whose sum saturates: walked too (a value of 2^48 or more is odd), and saturated.
    wire::UsageBucket many = ub("h", 1, 1ULL << 63);
    for (const char* z : {"z1", "z2"}) {
        wire::ZoneUsage u = zu(z, {ub("a", 1), big, many}, t.f.now);
        u.hosts = 1;  // the API does not check entries against it (the decoders do)
        t.zone(u);
    }
    EXPECT_EQ(t.tick(), 2u);  // b, h
    EXPECT_EQ(held(t.run, "h").hosts, UINT64_MAX);
    EXPECT_EQ(held(t.run, "h").definitions.at(0).hosts, UINT64_MAX);
    t.advance();
    // 2^53 mrps, then 1 and 1: summed as doubles one by one, each 1 is lost (2^53 + 1 rounds
    // to 2^53), while the exact sum 2^53 + 2 is a double.
    big.offered_mrps = big.admitted_mrps = 1ULL << 53;
    wire::UsageBucket one = ub("b", 0, 1);
    one.offered_mrps = one.admitted_mrps = 1;
    t.zone(zu("z1", {ub("a", 1), big}, t.f.now));
    t.zone(zu("z2", {ub("a", 2), one}, t.f.now));
    t.zone(zu("z3", {ub("a", 2), one}, t.f.now));
    EXPECT_EQ(t.tick(), 1u);
    EXPECT_EQ(newest(t.run, "b"), 9007199254740992.0);
    t.advance();
    // h's two entries of 2^63 hosts wrapped its 64-bit sums and were taken out with the
    // usages above: its sums are exact again.
    t.zone(zu("z1", {ub("a", 1), ub("b", 3), ub("h", 1, 2)}, t.f.now));
    t.zone(zu("z2", {ub("a", 2), ub("b", 4), ub("h", 1, 2)}, t.f.now));
    t.zone(zu("z3", {ub("a", 2), ub("b", 5), ub("h", 1, 2)}, t.f.now));
    EXPECT_EQ(t.tick(), 0u);  // taken out exactly: the running sums hold again
    EXPECT_EQ(newest(t.run, "b"), 12000);
    EXPECT_EQ(held(t.run, "h").hosts, 6u);
}

// An entry none of whose hosts has a rate yet, carrying rates anyway (the decoders allow it):
// the rated entries' rates are then not the sums of all entries', so its bucket is walked
// while the entry is held, and read from the running sums again once it is replaced.
TEST(RunningSums, AnUnratedEntryWithRatesIsWalked) {
    Twins t;
    wire::UsageBucket unrated = ub("b", 7, 2);
    unrated.rated_hosts = 0;
    t.zone(zu("z1", {ub("a", 1), unrated}, t.f.now));
    t.zone(zu("z2", {ub("a", 2), ub("b", 3)}, t.f.now));
    EXPECT_EQ(t.tick(), 1u);  // b
    t.advance();
    t.zone(zu("z1", {ub("a", 1), ub("b", 4)}, t.f.now));
    t.zone(zu("z2", {ub("a", 2), ub("b", 3)}, t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(newest(t.run, "b"), 7000);
}

TEST(RunningSums, ADefinitionChangesOnSomeHosts) {
    Twins t;
    std::uint64_t k = 0;
    t.zone(zu("z1", abc(++k), t.f.now));
    t.zone(zu("z2", abc(++k), t.f.now));
    t.peer(peer_usage("ctl-b", "r2", abc(++k, 5), t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    // A reload on z1's hosts: a's limit 200 r/s there; then on a host of z2 only.
    t.advance();
    std::vector<wire::UsageBucket> z1 = abc(++k);
    z1[0] = ub("a", 11, 2, Scope::Global, 200);
    t.zone(zu("z1", z1, t.f.now));
    EXPECT_EQ(t.tick(), 1u);  // a
    t.advance();
    std::vector<wire::UsageBucket> z2 = abc(++k);
    z2[0].definitions = {{{Scope::Global, Mode::Deny, 200000}, 1},
                         {{Scope::Global, Mode::Deny, 100000}, 1}};
    t.zone(zu("z2", z2, t.f.now));
    EXPECT_EQ(t.tick(), 1u);
    // Every host of the region on the new definition, the other region on the old one: one
    // definition per side, counted, not walked; then the fleet on the new one.
    t.advance();
    z2[0] = ub("a", 13, 2, Scope::Global, 200);
    t.zone(zu("z2", z2, t.f.now));
    t.zone(zu("z1", z1, t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").limit_mrps, 100000u);  // 5 hosts against 4
    std::vector<wire::UsageBucket> p = abc(++k, 5);
    p[0] = ub("a", 3, 5, Scope::Global, 200);
    t.peer(peer_usage("ctl-b", "r2", p, t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").limit_mrps, 200000u);
    // The region on one definition, the other region on another: still counted, not walked.
    t.advance();
    p[0] = ub("a", 3, 5, Scope::Global, 300);
    t.peer(peer_usage("ctl-b", "r2", p, t.f.now));
    t.zone(zu("z2", z2, t.f.now));
    t.zone(zu("z1", z1, t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_EQ(held(t.run, "a").limit_mrps, 300000u);  // 5 hosts against 4
}

TEST(RunningSums, TheRareCasesAreWalked) {
    Twins t;
    std::uint64_t k = 0;
    auto all = [&](std::vector<wire::UsageBucket> extra1) {
        std::vector<wire::UsageBucket> z1 = abc(++k);
        for (auto& b : extra1) z1.push_back(b);
        std::sort(z1.begin(), z1.end(), [](const wire::UsageBucket& x, const wire::UsageBucket& y) {
            return x.name < y.name;
        });
        t.zone(zu("z1", z1, t.f.now));
        t.zone(zu("z2", abc(++k), t.f.now));
        t.peer(peer_usage("ctl-b", "r2", abc(++k, 5), t.f.now));
    };
    t.zone(zu("z0", {}, t.f.now));  // a zone without entries (a relay's, without hosts)
    all({});
    EXPECT_EQ(t.tick(), 0u);
    t.advance();
    t.zone(zu("z0", {}, t.f.now));
    all({ub("e", 4)});  // one zone only
    EXPECT_EQ(t.tick(), 1u);
    EXPECT_TRUE(has_event(t.last, "1 bucket(s) summed entry by entry"));
    t.advance();
    wire::UsageBucket zb = ub("f", 50, 2, Scope::Zone, 10);  // zone-scoped: per zone
    all({zb});
    EXPECT_EQ(t.tick(), 1u);
    t.advance();
    wire::UsageBucket keyed = ub("g", 9, 1);
    keyed.definitions[0].def.keyed = true;
    keyed.keys = {{1, "", 9000, 0, 1}};
    all({keyed});
    EXPECT_EQ(t.tick(), 1u);
    t.advance();
    wire::UsageBucket part = ub("a", 11, 2);
    part.rated_hosts = 1;  // partial rates: counted as incomplete, not walked
    wire::UsageBucket unrated = ub("b", 0, 2);
    unrated.rated_hosts = 0;  // the last rated entry stands in
    t.zone(zu("z1", {part, unrated, ub("c", 1, 2)}, t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    t.advance();
    // A collector restart: lower seq, fewer hosts than before (short of hosts for a while).
    wire::ZoneUsage restarted = zu("z2", abc(++k, 1), t.f.now);
    restarted.seq = 1;
    t.zone(restarted);
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_TRUE(held(t.run, "a").last_provisional);
    t.advance();
    // A usage naming a bucket twice (the decoders refuse it; the API does not): walk all.
    t.zone(zu("z1", {ub("a", 1), ub("a", 2), ub("b", 1), ub("c", 1)}, t.f.now));
    EXPECT_EQ(t.tick(), 3u);
    t.advance();
    all({});
    EXPECT_EQ(t.tick(), 0u);
    EXPECT_TRUE(has_event(t.last, "every bucket read from its running sums again"));
}

TEST(RunningSums, RunTimeBucketsAreWalked) {
    Twins t;
    wire::RuntimeMatch m;
    m.caller = "evil";
    m.scope = Scope::Zone;
    ASSERT_EQ(t.run.add_runtime("block-evil", m, 0, Mode::Deny, 0, t.f.now), "");
    ASSERT_EQ(t.walk.add_runtime("block-evil", m, 0, Mode::Deny, 0, t.f.now), "");
    t.zone(zu("z1", abc(1), t.f.now));
    t.zone(zu("z2", abc(2), t.f.now));
    EXPECT_EQ(t.tick(), 0u);
    t.advance();
    wire::UsageBucket be = ub("block-evil", 3, 1, Scope::Zone, 0);
    std::vector<wire::UsageBucket> z1 = abc(3);
    z1.insert(z1.begin() + 2, be);  // a, b, block-evil, c
    t.zone(zu("z1", z1, t.f.now));
    t.zone(zu("z2", abc(4), t.f.now));
    EXPECT_EQ(t.tick(), 1u);
}

// The running sums' controller ticks into the same TickOutput every time (Twins::tick), its
// messages and entries written over: what it publishes must not keep anything of an earlier
// tick when messages are cut into more parts or fewer, zones come and go, and an entry's slot
// passes from a keyed bucket or a run-time bucket to a plain one.
TEST(RunningSums, ATickOutputWrittenOverHoldsNothingOfTheLastTick) {
    Twins t;
    auto many = [](std::size_t n, double rps) {
        std::vector<wire::UsageBucket> v;
        char name[32];
        for (std::size_t i = 0; i < n; ++i) {
            std::snprintf(name, sizeof name, "b%05zu", i);
            v.push_back(ub(name, rps));
        }
        return v;
    };
    auto parts_of = [](const TickOutput& o, Scope scope) {
        std::size_t n = 0;
        for (const wire::Instructions& m : o.instructions) n += m.scope == scope;
        return n;
    };
    // 5,000 global buckets: the global message in two parts; a zone bucket in z2 only.
    std::vector<wire::UsageBucket> z2 = many(5000, 150);
    z2.push_back(ub("zz", 150, 1, Scope::Zone));
    t.zone(zu("z1", many(5000, 150), t.f.now));
    t.zone(zu("z2", z2, t.f.now));
    t.tick();
    EXPECT_EQ(parts_of(t.reused, Scope::Global), 2u);
    EXPECT_EQ(parts_of(t.reused, Scope::Zone), 2u);
    // A keyed bucket first, then a run-time one: both take the first entries' slots.
    t.advance();
    wire::UsageBucket keyed = ub("a-keyed", 9, 1);
    keyed.definitions[0].def.keyed = true;
    keyed.keys = {{2, "", 200000, 0, 1}};
    std::vector<wire::UsageBucket> z1 = many(10, 150);
    z1.insert(z1.begin(), keyed);
    t.zone(zu("z1", z1, t.f.now));
    t.zone(zu("z2", many(10, 150), t.f.now));
    t.tick();
    EXPECT_EQ(parts_of(t.reused, Scope::Global), 1u);
    ASSERT_NE(entry(t.reused, Scope::Global, "a-keyed"), nullptr);
    EXPECT_FALSE(entry(t.reused, Scope::Global, "a-keyed")->keys.empty());
    t.advance();
    ASSERT_EQ(t.run.add_runtime("a-bots", bots(), 20000, std::nullopt, 0, t.f.now), "");
    ASSERT_EQ(t.walk.add_runtime("a-bots", bots(), 20000, std::nullopt, 0, t.f.now), "");
    t.zone(zu("z1", many(10, 150), t.f.now));
    t.zone(zu("z2", many(10, 150), t.f.now));
    t.tick();
    ASSERT_NE(entry(t.reused, Scope::Global, "a-bots"), nullptr);
    EXPECT_TRUE(entry(t.reused, Scope::Global, "a-bots")->has_match);
    // Plain buckets in those slots again (a message's entries and a part's trade places at
    // every tick: each slot is written over every other tick), then in two parts; z2 goes
    // silent.
    ASSERT_EQ(t.run.remove_runtime("a-bots", t.f.now), "");
    ASSERT_EQ(t.walk.remove_runtime("a-bots", t.f.now), "");
    auto plain = [&] {
        for (const wire::Instructions& msg : t.reused.instructions) {
            for (const wire::Instruction& e : msg.buckets) {
                EXPECT_FALSE(e.keyed || e.has_match || !e.keys.empty()) << e.name;
                EXPECT_EQ(e.match, wire::RuntimeMatch{}) << e.name;
            }
        }
    };
    for (std::size_t n : {10, 10, 4500}) {
        t.advance();
        t.zone(zu("z1", many(n, 150), t.f.now));
        t.tick();
        plain();
    }
    EXPECT_EQ(parts_of(t.reused, Scope::Global), 2u);
    for (int i = 0; i < 4; ++i) {  // z2 stale: only z1's zone message is left
        t.advance();
        t.zone(zu("z1", many(20, 150), t.f.now));
        t.tick();
    }
    EXPECT_EQ(parts_of(t.reused, Scope::Global), 1u);
    EXPECT_EQ(parts_of(t.reused, Scope::Zone), 1u);
    EXPECT_EQ(t.reused.region_usage.buckets.size(), 20u);
}

// The daemon's intake (UsageIntake): parts read in place into the vector of the usage the
// zone's last one replaced, assembled and taken. Checked against a controller given each usage
// whole: a bucket renamed in any way a part can arrive must be taken by its new name.
struct PartsIntake {
    Fleet f;
    Controller subject{opts()};
    Controller reference{opts()};
    UsageIntake intake{subject, 1'000'000};

    static std::vector<std::string> encoded(const wire::ZoneUsage& u) {
        std::vector<std::string> bytes;
        EXPECT_TRUE(wire::encode_parts(u, bytes, 300));
        EXPECT_GE(bytes.size(), 3u);
        return bytes;
    }
    // Part `i` of `bytes`.
    void part(const std::vector<std::string>& bytes, std::size_t i) {
        std::string error;
        ASSERT_TRUE(intake.read_zone(bytes[i], error)) << error;
        const UsageIntake::Taken got = intake.take_zone(f.now);
        if (got.taken()) {
            ASSERT_EQ(got.accepted, Accepted::Yes);
        }
    }
    // The whole of `u`, its parts as sent or in reverse order.
    void send(const wire::ZoneUsage& u, bool reverse = false) {
        const std::vector<std::string> bytes = encoded(u);
        for (std::size_t j = 0; j < bytes.size(); ++j)
            part(bytes, reverse ? bytes.size() - 1 - j : j);
        ASSERT_EQ(reference.on_zone_usage(u, f.now), Accepted::Yes);
    }
    void same() {
        EXPECT_EQ(Twins::status(subject), Twins::status(reference));
        const TickOutput a = subject.tick(f.now), b = reference.tick(f.now);
        ASSERT_EQ(a.instructions.size(), b.instructions.size());
        for (std::size_t i = 0; i < a.instructions.size(); ++i)
            EXPECT_EQ(Twins::bytes(a.instructions[i]), Twins::bytes(b.instructions[i]));
        f.advance(1000);
    }
};

// Twelve buckets b00..b11 at rates that change with k; `renamed` gets an "x" (still in order).
wire::ZoneUsage twelve(const Clock& now, std::uint64_t k, const std::string& renamed = "") {
    std::vector<wire::UsageBucket> v;
    for (int i = 0; i < 12; ++i) {
        std::string name = "b0" + std::to_string(i);
        if (i >= 10) name = "b" + std::to_string(i);
        if (name == renamed) name += "x";
        v.push_back(ub(name, 10.0 * (i + 1) + static_cast<double>(k), 2));
    }
    return zu("z1", std::move(v), now);
}

TEST(UsageIntake, ABucketRenamedInAnyWayAPartArrivesIsTakenByItsNewName) {
    PartsIntake t;
    std::uint64_t k = 0;
    // Usages with the names held until the steady state.
    auto steady = [&](const std::string& renamed = "") {
        for (int i = 0; i < 3; ++i) {
            t.send(twelve(t.f.now, ++k, renamed));
            t.same();
        }
    };
    steady();
    // Renamed, read in place: the reader copies the new name; then renamed back.
    t.send(twelve(t.f.now, ++k, "b05"));
    t.same();
    steady("b05");
    t.send(twelve(t.f.now, ++k));
    t.same();
    steady();
    // Half a set with a renamed bucket in its first part, dropped for a newer set with the
    // names held.
    {
        const wire::ZoneUsage half = twelve(t.f.now, ++k, "b00");
        const std::vector<std::string> bytes = PartsIntake::encoded(half);
        t.part(bytes, 0);
        t.send(twelve(t.f.now, ++k));
        t.same();
    }
    // Parts out of order, one renamed.
    {
        steady();
        const wire::ZoneUsage u = twelve(t.f.now, ++k, "b11");
        t.send(u, true);
        t.same();
    }
    // A second collector of the zone (a failover) sends it renamed in between.
    steady();
    {
        wire::ZoneUsage other = twelve(t.f.now, ++k, "b03");
        other.source = "col-z1b";
        t.send(other);
        t.same();
        t.send(twelve(t.f.now, ++k));
        t.same();
    }
    // The zone's collector moved to a zone that holds other names, at as many places: sets are
    // held per zone and source, so its parts for z3 are read into a set of their own.
    steady();
    {
        wire::ZoneUsage z3 = twelve(t.f.now, ++k, "b07");
        z3.zone = "z3";
        z3.source = "col-z3";
        t.send(z3);
        wire::ZoneUsage moved = twelve(t.f.now, ++k);
        moved.zone = "z3";
        t.send(moved);
        t.same();
    }
    // Another zone's usage in between.
    for (int i = 0; i < 3; ++i) {
        wire::ZoneUsage other = twelve(t.f.now, ++k, "b03");
        other.zone = "z2";
        other.source = "col-z2";
        t.send(other);
        t.send(twelve(t.f.now, ++k));
        t.same();
    }
}

}  // namespace
}  // namespace grl::control
