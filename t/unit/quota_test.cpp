// Quotas over long windows: the windows (UTC boundaries, months, offsets) and the controller's
// running use (docs/design/008-quotas.md).
#include <gtest/gtest.h>

#include "grl/common/quota.h"
#include "grl/control/quota_ledger.h"
#include "grl/wire/wire.h"
#include "grl/wire/wire_control.h"

namespace grl {
namespace {

constexpr std::uint64_t kDay = 86400000;
// 2026-02-10T13:45:30.250Z
constexpr std::uint64_t kT = 1770731130250;

QuotaSpec spec(std::uint64_t n, Period p, std::uint64_t off = 0) {
    return {n, p, off};
}

TEST(QuotaParse, AcceptsThePeriodsAndRefusesTheRest) {
    auto q = parse_quota("600/hour");
    ASSERT_TRUE(q) << q.error;
    EXPECT_EQ(q.value.n, 600u);
    EXPECT_EQ(q.value.period, Period::Hour);
    EXPECT_TRUE(parse_quota("1/month"));
    EXPECT_EQ(parse_quota("10/fortnight").error,
              "invalid quota \"10/fortnight\", expected N/minute, N/hour, N/day or N/month with N "
              "in 1-1099511627776");
    EXPECT_FALSE(parse_quota("0/day"));
    EXPECT_FALSE(parse_quota("day"));
    EXPECT_FALSE(parse_quota("-1/day"));
    EXPECT_FALSE(parse_quota("5/"));
    EXPECT_EQ(parse_window_offset("90m", Period::Hour).error,
              "window_offset \"90m\" is not shorter than a hour");
    EXPECT_EQ(parse_window_offset("5x", Period::Hour).error,
              "invalid window_offset \"5x\", expected e.g. 30s, 5m or 2h");
    EXPECT_EQ(parse_window_offset("30s", Period::Minute).value, 30000u);
}

TEST(QuotaWindow, MinuteHourDayOnUtcBoundaries) {
    EXPECT_EQ(window_at(spec(1, Period::Minute), kT), (Window{kT - 30250, kT - 30250 + 60000}));
    EXPECT_EQ(window_at(spec(1, Period::Hour), kT).start_ms, kT - (45 * 60000 + 30250));
    const Window d = window_at(spec(1, Period::Day), kT);
    EXPECT_EQ(d.start_ms % kDay, 0u);
    EXPECT_EQ(d.end_ms - d.start_ms, kDay);
    EXPECT_LE(d.start_ms, kT);
    EXPECT_GT(d.end_ms, kT);
    // The end is the next window's start.
    EXPECT_EQ(
        window_at(spec(1, Period::Hour), window_at(spec(1, Period::Hour), kT).end_ms).start_ms,
        window_at(spec(1, Period::Hour), kT).end_ms);
}

TEST(QuotaWindow, MonthsHaveTheirLengthsLeapYearsIncluded) {
    // 2026-02-10: February of a common year, 28 days from 2026-02-01 (day 20485).
    const Window feb = window_at(spec(1, Period::Month), kT);
    EXPECT_EQ(feb.start_ms, 20485 * kDay);
    EXPECT_EQ(feb.end_ms - feb.start_ms, 28 * kDay);
    // 2024-02-29 (leap): February 2024 has 29 days, from day 19754.
    const Window leap = window_at(spec(1, Period::Month), 19782 * kDay + 5);
    EXPECT_EQ(leap.start_ms, 19754 * kDay);
    EXPECT_EQ(leap.end_ms - leap.start_ms, 29 * kDay);
    // December rolls into January of the next year: 2025-12-31 -> 2026-01-01 (day 20454).
    const Window dec = window_at(spec(1, Period::Month), 20453 * kDay + 1);
    EXPECT_EQ(dec.end_ms, 20454 * kDay);
    EXPECT_EQ(dec.end_ms - dec.start_ms, 31 * kDay);
}

TEST(QuotaWindow, OffsetShiftsTheBoundaries) {
    // A day starting at 06:00 UTC: at 05:00 the window is the one that began yesterday 06:00.
    const std::uint64_t six = 6 * 3600000;
    const std::uint64_t day0 = 20494 * kDay;
    EXPECT_EQ(window_at(spec(1, Period::Day, six), day0 + 5 * 3600000),
              (Window{day0 - kDay + six, day0 + six}));
    EXPECT_EQ(window_at(spec(1, Period::Day, six), day0 + six),
              (Window{day0 + six, day0 + kDay + six}));
    // A month starting on the 2nd at 00:00 UTC.
    const Window m = window_at(spec(1, Period::Month, kDay), 20485 * kDay + 1);  // 2026-02-01
    EXPECT_EQ(m.start_ms, 20455 * kDay);                                         // 2026-01-02
    EXPECT_EQ(m.end_ms, 20486 * kDay);                                           // 2026-02-02
}

wire::ZoneUsage usage(const std::string& zone, std::uint64_t ts, std::uint64_t admitted_mrps,
                      const QuotaSpec& q, std::uint64_t interval = 1000) {
    wire::ZoneUsage u;
    u.zone = zone;
    u.region = "r1";
    u.ts_ms = ts;
    u.interval_ms = interval;
    wire::UsageBucket b;
    b.name = "api";
    b.admitted_mrps = admitted_mrps;
    u.buckets.push_back(b);
    u.quotas.push_back({"api", Scope::Global, q});
    return u;
}

const control::InstanceKey kApi{"api", Scope::Global, "", ""};

// A peer's region_usage with one quota entry for "api" (global) in window w0.
wire::RegionUsage peer_use(const std::string& source, const std::string& region, std::uint64_t ts,
                           const QuotaSpec& q, std::uint64_t w0, std::uint64_t use_mu) {
    wire::RegionUsage p;
    p.source = source;
    p.region = region;
    p.ts_ms = ts;
    p.quotas.push_back({"api", Scope::Global, "", q, w0, use_mu, ts});
    return p;
}

// A usage taken when this controller's clock reads its stamp.
void take(control::QuotaLedger& l, const wire::ZoneUsage& u) {
    l.take_zone(u, u.ts_ms);
}

std::uint64_t used(const control::QuotaLedger& l, std::uint64_t wall) {
    control::QuotaLedger::Answer a;
    EXPECT_TRUE(l.at(kApi, wall, a));
    return a.used;
}

// Quota uses through the state file's codec, as the daemon saves and reads them.
std::vector<wire::QuotaUse> through_state_file(const std::vector<wire::QuotaUse>& saved) {
    wire::RegionUsage state;
    state.source = "c1";
    state.region = "r1";
    state.quotas = saved;
    std::string bytes, error;
    wire::encode(state, bytes);
    wire::RegionUsage read;
    EXPECT_TRUE(wire::decode(bytes, read, error)) << error;
    EXPECT_EQ(read.quotas, saved);
    return read.quotas;
}

TEST(QuotaLedger, IntegratesAdmittedRatesPerZoneAndRollsAtTheWindow) {
    const QuotaSpec q = spec(1000, Period::Minute);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger l("r1", 4);
    // Two zones at 10 r/s each, a usage a second: 20 units a second once both are seen.
    for (std::uint64_t s = 1; s <= 10; ++s) {
        take(l, usage("a", w0 + s * 1000, 10000, q));
        take(l, usage("b", w0 + s * 1000 + 300, 10000, q));
    }
    EXPECT_EQ(used(l, w0 + 11000), 200u);  // each zone's first usage counts its interval
    // The next window starts from 0, also before any usage of it arrived.
    EXPECT_EQ(used(l, w0 + 60000), 0u);
    take(l, usage("a", w0 + 60500, 10000, q));
    EXPECT_EQ(used(l, w0 + 61000), 5u);  // only the part of the span inside the new window
    // A late usage of the window that ended changes nothing.
    take(l, usage("b", w0 + 59000, 10000, q));
    EXPECT_EQ(used(l, w0 + 61000), 5u);
}

TEST(QuotaLedger, TwoControllersTakingTheSameUsagesAgreeWhateverTheOrder) {
    const QuotaSpec q = spec(100000, Period::Hour);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger one("r1", 4), two("r1", 4);
    std::vector<wire::ZoneUsage> a, b;
    for (std::uint64_t s = 1; s <= 50; ++s) {
        a.push_back(usage("a", w0 + s * 250, 7000 + s * 13, q, 250));
        b.push_back(usage("b", w0 + s * 250 + 90, 3000 + s * 7, q, 250));
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        take(one, a[i]);
        take(one, b[i]);
    }
    for (std::size_t i = 0; i < a.size(); ++i) take(two, b[i]);  // zone b's first
    for (std::size_t i = 0; i < a.size(); ++i) take(two, a[i]);
    EXPECT_EQ(used(one, w0 + 20000), used(two, w0 + 20000));
    std::vector<wire::QuotaUse> u1, u2;
    one.own_use(u1);
    two.own_use(u2);
    EXPECT_EQ(u1, u2);
}

TEST(QuotaLedger, ARestartKeepsTheUseAndFillsTheGapOnce) {
    const QuotaSpec q = spec(100000, Period::Hour);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger before("r1", 4);
    for (std::uint64_t s = 1; s <= 30; ++s) take(before, usage("a", w0 + s * 1000, 10000, q));
    EXPECT_EQ(used(before, w0 + 30000), 300u);
    std::vector<wire::QuotaUse> saved;
    before.own_use(saved);
    // Down 5 s; the first usage after the restart counts from the save, at its rate.
    control::QuotaLedger after("r1", 4);
    after.restore(through_state_file(saved));
    EXPECT_EQ(used(after, w0 + 31000), 300u);
    take(after, usage("a", w0 + 35000, 10000, q));
    EXPECT_EQ(used(after, w0 + 35000), 350u);
    take(after, usage("a", w0 + 36000, 10000, q));
    EXPECT_EQ(used(after, w0 + 36000), 360u);
}

TEST(QuotaLedger, PeersAddOtherRegionsAndTwinsDoNotDoubleCount) {
    const QuotaSpec q = spec(1000, Period::Day);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger l("r1", 4);
    for (std::uint64_t s = 1; s <= 10; ++s) take(l, usage("a", w0 + s * 1000, 10000, q));
    const wire::RegionUsage peer = peer_use("ctl-r2", "r2", w0 + 10000, q, w0, 40000);
    l.take_peer(peer, peer.ts_ms);
    // The same again, or from r2's second controller: max, not a sum.
    l.take_peer(peer, peer.ts_ms);
    EXPECT_EQ(used(l, w0 + 10000), 140u);
    // This region's other controller held more (this one restarted).
    const wire::RegionUsage twin = peer_use("ctl-r1-b", "r1", w0 + 10000, q, w0, 120000);
    l.take_peer(twin, twin.ts_ms);
    EXPECT_EQ(used(l, w0 + 10000), 160u);
}

// A peer (or anyone who reaches the peer port) adds use to instances this controller's zones
// define, in their window: it cannot create instances, move one to another window, set N, or
// grow one instance's list of regions without bound. Each refusal is counted and described.
TEST(QuotaLedger, APeerOnlyAddsUseToOurInstancesInOurWindow) {
    const QuotaSpec q = spec(1000, Period::Day);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger l("r1", 2);
    take(l, usage("a", w0 + 1000, 10000, q));
    ASSERT_EQ(l.size(), 1u);
    auto from = [&](const std::string& region, std::vector<wire::QuotaUse> qs) {
        wire::RegionUsage p;
        p.source = "ctl-" + region;
        p.region = region;
        p.ts_ms = w0 + 2000;
        p.quotas = std::move(qs);
        l.take_peer(p, p.ts_ms);
    };
    std::vector<wire::QuotaUse> strangers;
    for (int i = 0; i < 100; ++i) {
        strangers.push_back({"b" + std::to_string(i), Scope::Global, "", q, w0, 5000, w0 + 2000});
    }
    from("r2", strangers);
    EXPECT_EQ(l.size(), 1u);
    EXPECT_EQ(l.refused().not_ours, 100u);
    EXPECT_NE(l.last_refused().find("\"b99\""), std::string::npos) << l.last_refused();
    EXPECT_NE(l.last_refused().find("peer ctl-r2 (region r2)"), std::string::npos);
    // Another N is ours to set, not the peer's; another period, or a window that is not one of
    // ours (a start off the boundary, or one that has not begun by the message), is refused.
    from("r2", {{"api", Scope::Global, "", spec(1, Period::Day), w0, 7000, w0 + 2000}});
    from("r2", {{"api", Scope::Global, "", spec(1000, Period::Hour), w0, 7000, w0 + 2000}});
    from("r2", {{"api", Scope::Global, "", q, w0 + 5, 7000, w0 + 2000}});
    from("r2", {{"api", Scope::Global, "", q, w0 + 2 * 86400000ULL, 0, w0 + 2000}});
    // The next window, from a peer whose clock is a little ahead: left for later, not refused,
    // and the window in force stays.
    from("r2", {{"api", Scope::Global, "", q, w0 + 86400000ULL, 0, w0 + 2000}});
    EXPECT_EQ(l.refused().other_window, 3u);
    control::QuotaLedger::Answer a;
    ASSERT_TRUE(l.at(kApi, w0 + 2000, a));
    EXPECT_EQ(a.spec, q);
    EXPECT_EQ(a.used, 17u);  // ours (10) + r2's 7 taken with our N: the window was not moved
    // Two other regions at most per instance.
    from("r3", {{"api", Scope::Global, "", q, w0, 1000, w0 + 2000}});
    from("r4", {{"api", Scope::Global, "", q, w0, 1000, w0 + 2000}});
    EXPECT_EQ(l.refused().too_many_regions, 1u);
    ASSERT_TRUE(l.at(kApi, w0 + 2000, a));
    EXPECT_EQ(a.used, 18u);
    EXPECT_EQ(l.refused().total(), 104u);
}

// Windows follow this controller's clock: a usage stamped in the next window (a collector's
// clock ahead, or a sender stamping up to the skew allowed) cannot end the one in force.
TEST(QuotaLedger, NoSenderEndsTheWindowInForceEarly) {
    const QuotaSpec q = spec(1000, Period::Minute);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger l("r1", 4);
    for (std::uint64_t s = 1; s <= 10; ++s) take(l, usage("a", w0 + s * 1000, 10000, q));
    l.take_zone(usage("b", w0 + 60500, 10000, q), w0 + 10500);  // 50 s ahead of our clock
    EXPECT_EQ(used(l, w0 + 10500), 100u);
    take(l, usage("a", w0 + 11000, 10000, q));
    EXPECT_EQ(used(l, w0 + 11000), 110u);
    // Once our clock is there, the next window counts from its start.
    take(l, usage("a", w0 + 60500, 10000, q));
    EXPECT_EQ(used(l, w0 + 60500), 5u);
}

TEST(QuotaLedger, APeerSpeaksForTheRegionItFirstNamedAndItsUseSaturates) {
    const QuotaSpec q = spec(1000, Period::Day);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger l("r1", 4);
    take(l, usage("a", w0 + 1000, 10000, q));
    wire::RegionUsage p = peer_use("ctl-x", "r2", w0 + 2000, q, w0, 5000);
    l.take_peer(p, p.ts_ms);
    for (const char* other : {"r3", "r4", "r5"}) {
        p.region = other;
        l.take_peer(p, p.ts_ms);
    }
    EXPECT_EQ(l.refused().other_region, 3u);
    EXPECT_NE(l.last_refused().find("it spoke for region r2 before"), std::string::npos)
        << l.last_refused();
    EXPECT_EQ(used(l, w0 + 2000), 15u);  // ours 10 + r2's 5, not r3..r5's
    p.region = "r2";
    p.quotas[0].use_mu = ~std::uint64_t{0};
    l.take_peer(p, p.ts_ms);
    EXPECT_GE(used(l, w0 + 2000), 1000u);  // saturated, not wrapped
    std::vector<wire::QuotaUse> own;
    l.own_use(own);
    EXPECT_EQ(own[0].use_mu, 10000u);
}

TEST(QuotaLedger, AZoneDefinesOnlyItsOwnBucketsAndANewNKeepsTheUse) {
    const QuotaSpec q = spec(1000, Period::Hour);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger l("r1", 4);
    wire::ZoneUsage u = usage("a", w0 + 1000, 10000, q);
    u.quotas.push_back({"zzz", Scope::Global, q});  // no such bucket in the usage
    take(l, u);
    EXPECT_EQ(l.size(), 1u);
    EXPECT_EQ(l.refused().unlisted, 1u);
    // Another N, once every zone had kQuotaVoteHoldMs to send its own: the use stays.
    take(l, usage("a", w0 + 2000, 10000, spec(500, Period::Hour)));
    control::QuotaLedger::Answer a;
    ASSERT_TRUE(l.at(kApi, w0 + 2000, a));
    EXPECT_EQ(a.spec.n, 1000u);
    take(l, usage("a", w0 + 1000 + control::kQuotaVoteHoldMs, 10000, spec(500, Period::Hour)));
    ASSERT_TRUE(l.at(kApi, w0 + 12000, a));
    EXPECT_EQ(a.spec.n, 500u);
    EXPECT_EQ(a.used, 110u);
    // Another window that holds the old one's start (the hour lies in its day): the use stays.
    take(l, usage("a", w0 + 12000, 10000, spec(500, Period::Day)));
    ASSERT_TRUE(l.at(kApi, w0 + 12000, a));
    EXPECT_EQ(a.spec.period, Period::Day);
    EXPECT_EQ(a.used, 120u);
}

// A change of window rolling out zone by zone: the instance keeps the window most zones send,
// its use growing with every zone's admitted units whichever window each zone sends, and
// switches once; two controllers taking the usages in another order hold the same.
TEST(QuotaLedger, AWindowChangeRollingOutSwitchesOnceWhenMostZonesHaveIt) {
    const QuotaSpec hour = spec(100000, Period::Hour), day = spec(100000, Period::Day);
    const std::uint64_t w0 = window_at(hour, kT).start_ms;
    const std::uint64_t d0 = window_at(day, kT).start_ms;
    ASSERT_LT(d0, w0);
    control::QuotaLedger one("r1", 4), two("r1", 4);
    std::uint64_t s = 0;
    // Zones a, b, c at 10 r/s each, a usage a second each; the first `changed` send `to`.
    auto second = [&](std::size_t changed, const QuotaSpec& to, const QuotaSpec& from) {
        ++s;
        std::vector<wire::ZoneUsage> u;
        for (std::size_t z = 0; z < 3; ++z) {
            u.push_back(usage(std::string(1, static_cast<char>('a' + z)), w0 + s * 1000 + z * 10,
                              10000, z < changed ? to : from));
        }
        for (const auto& x : u) take(one, x);
        for (auto x = u.rbegin(); x != u.rend(); ++x) take(two, *x);
    };
    auto in_force = [&](const control::QuotaLedger& l) {
        control::QuotaLedger::Answer a;
        EXPECT_TRUE(l.at(kApi, w0 + s * 1000 + 100, a));
        return a;
    };
    for (int i = 0; i < 5; ++i) second(0, day, hour);
    EXPECT_EQ(in_force(one).used, 150u);
    for (int i = 0; i < 10; ++i) {  // a alone: the hour stays, and a's units count in it
        second(1, day, hour);
        EXPECT_EQ(in_force(one).spec.period, Period::Hour);
        EXPECT_EQ(in_force(two).spec.period, Period::Hour);
    }
    EXPECT_EQ(in_force(one).used, 450u);
    second(2, day, hour);  // most zones send the day now: its window, keeping the hour's use
    for (const auto* l : {&one, &two}) {
        const control::QuotaLedger::Answer a = in_force(*l);
        EXPECT_EQ(a.spec.period, Period::Day);
        EXPECT_EQ(a.window.start_ms, d0);
        EXPECT_EQ(a.used, 480u);
    }
    second(3, day, hour);
    EXPECT_EQ(in_force(one).used, 510u);
    // Back to the hour: the day's use began before this hour, so the hour's starts afresh at
    // the switch. Which usage of that second made the switch depends on the order: the twins
    // differ by a usage's units at most, and their region_usage brings both to the larger.
    second(2, hour, day);
    EXPECT_EQ(in_force(one).spec.period, Period::Hour);
    EXPECT_EQ(in_force(two).spec.period, Period::Hour);
    EXPECT_LE(in_force(one).used, 10u);
    EXPECT_LE(in_force(two).used, 10u);
    second(2, hour, day);
    EXPECT_GE(in_force(one).used, 30u);
    EXPECT_LE(in_force(one).used, 40u);
}

// One zone cannot decide the definition: not with its clock ahead (a stamp up to the skew
// allowed in the future), nor as the first heard after a restart.
TEST(QuotaLedger, OneZoneAheadOrHeardFirstDoesNotDecideTheDefinition) {
    const QuotaSpec day = spec(1000000, Period::Day), minute = spec(1, Period::Minute);
    const std::uint64_t d0 = window_at(day, kT).start_ms;
    control::QuotaLedger l("r1", 4);
    std::uint64_t now = kT;
    for (int s = 0; s < 20; ++s, now += 1000) {
        for (const char* z : {"a", "b", "c", "d", "e"}) l.take_zone(usage(z, now, 10000, day), now);
        l.take_zone(usage("evil", now + control::kMaxQuotaSpanMs, 10000, minute), now);
    }
    control::QuotaLedger::Answer a;
    ASSERT_TRUE(l.at(kApi, now, a));
    EXPECT_EQ(a.spec, day);
    EXPECT_EQ(a.window.start_ms, d0);
    EXPECT_GE(a.used, 5 * 10 * 19u);
    // Restored with a day's use, then the one zone still on the hour is heard first.
    std::vector<wire::QuotaUse> saved;
    l.own_use(saved);
    control::QuotaLedger after("r1", 4);
    after.restore(saved);
    const QuotaSpec hour = spec(1000000, Period::Hour);
    for (int s = 0; s < 20; ++s, now += 1000) {
        after.take_zone(usage("a", now, 10000, hour), now);
        after.take_zone(usage("b", now, 10000, day), now);
        after.take_zone(usage("c", now, 10000, day), now);
    }
    ASSERT_TRUE(after.at(kApi, now, a));
    EXPECT_EQ(a.spec, day);
    EXPECT_GE(a.used, 5 * 10 * 19u + 3 * 10 * 19u);
}

// A zone that fell silent for longer than kMaxQuotaSpanMs no longer votes for its definition.
TEST(QuotaLedger, ASilentZoneNoLongerHoldsItsDefinitionInForce) {
    const QuotaSpec hour = spec(1000, Period::Hour), day = spec(1000, Period::Day);
    const std::uint64_t w0 = window_at(hour, kT).start_ms;
    control::QuotaLedger l("r1", 4);
    take(l, usage("a", w0 + 1000, 10000, hour));  // a tie, to the hour (the shorter period)
    take(l, usage("b", w0 + 1100, 10000, day));
    control::QuotaLedger::Answer a;
    ASSERT_TRUE(l.at(kApi, w0 + 2000, a));
    EXPECT_EQ(a.spec.period, Period::Hour);
    take(l, usage("b", w0 + 1100 + control::kMaxQuotaSpanMs + 1000, 10000, day));
    ASSERT_TRUE(l.at(kApi, w0 + 70000, a));
    EXPECT_EQ(a.spec.period, Period::Day);
}

// ---------------------------------------------------------------------------------------------
// Per-key quotas (docs/design/009-per-key-quotas.md)

// A zone usage of the keyed quota bucket "api" whose keys used `units` each since the zone's
// previous usage.
wire::ZoneUsage key_usage(const std::string& zone, std::uint64_t ts, const QuotaSpec& q,
                          const std::vector<std::pair<std::uint64_t, std::uint64_t>>& units) {
    wire::ZoneUsage u = usage(zone, ts, 0, q);
    for (const auto& [hash, n] : units) {
        wire::KeyRate k;
        k.hash = hash;
        k.used = n;
        u.buckets[0].keys.push_back(k);
    }
    return u;
}

std::vector<std::uint64_t> used_up(const control::QuotaLedger& l, std::uint64_t wall) {
    std::vector<std::uint64_t> out;
    l.used_up(kApi, wall, out);
    return out;
}

TEST(QuotaLedger, EachKeysUseAddsUpOverZonesAndUsedUpKeysAreListed) {
    const QuotaSpec q = spec(10, Period::Hour);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger l("r1", 4);
    take(l, key_usage("a", w0 + 1000, q, {{100, 4}, {101, 1}}));
    take(l, key_usage("b", w0 + 1100, q, {{100, 5}, {102, 12}}));
    EXPECT_EQ(l.key_used(kApi, 100, w0 + 2000), 9u);
    EXPECT_EQ(used_up(l, w0 + 2000), std::vector<std::uint64_t>({102}));
    take(l, key_usage("a", w0 + 2000, q, {{100, 1}}));
    EXPECT_EQ(used_up(l, w0 + 2000), std::vector<std::uint64_t>({102, 100}));  // most used first
    EXPECT_EQ(l.keys(), 3u);
    // A usage stamped in the next window by a clock ahead of this controller's still counts
    // its units, in the window in force.
    l.take_zone(key_usage("b", w0 + 3600000 + 100, q, {{101, 2}}), w0 + 3599950);
    EXPECT_EQ(l.key_used(kApi, 101, w0 + 3599990), 3u);
    // The next window: nothing used, nothing held; a late usage of the window that ended
    // counts nothing.
    take(l, key_usage("a", w0 + 3600000 + 500, q, {{101, 1}}));
    take(l, key_usage("b", w0 + 3599000, q, {{101, 50}}));
    EXPECT_TRUE(used_up(l, w0 + 3600000 + 500).empty());
    EXPECT_EQ(l.key_used(kApi, 101, w0 + 3600000 + 500), 1u);
    EXPECT_EQ(l.keys(), 1u);
}

TEST(QuotaLedger, KeysSurviveARestartAndPeersAddTheirRegionsOnce) {
    const QuotaSpec q = spec(100, Period::Day);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger before("r1", 4);
    take(before, key_usage("a", w0 + 1000, q, {{100, 40}, {101, 3}}));
    std::vector<wire::QuotaUse> saved;
    before.own_use(saved);
    ASSERT_EQ(saved.size(), 1u);
    EXPECT_EQ(saved[0].keys, (std::vector<wire::KeyUse>{{100, 40}, {101, 3}}));
    control::QuotaLedger after("r1", 4);
    after.restore(through_state_file(saved));
    take(after, key_usage("a", w0 + 2000, q, {{100, 10}}));
    EXPECT_EQ(after.key_used(kApi, 100, w0 + 2000), 50u);
    // Region r2's use of key 100, twice (its two controllers): added once. A twin of r1 that
    // holds more raises ours to it.
    wire::RegionUsage r2 = peer_use("ctl-r2", "r2", w0 + 2000, q, w0, 0);
    r2.quotas[0].keys = {{100, 30}, {102, 100}};
    after.take_peer(r2, r2.ts_ms);
    after.take_peer(r2, r2.ts_ms);
    EXPECT_EQ(after.key_used(kApi, 100, w0 + 2000), 80u);
    wire::RegionUsage twin = peer_use("ctl-r1-b", "r1", w0 + 2000, q, w0, 0);
    twin.quotas[0].keys = {{100, 60}};
    after.take_peer(twin, twin.ts_ms);
    EXPECT_EQ(after.key_used(kApi, 100, w0 + 2000), 90u);
    EXPECT_EQ(used_up(after, w0 + 2000), std::vector<std::uint64_t>({102}));
    // What this region publishes is its own use only.
    after.own_use(saved);
    EXPECT_EQ(saved[0].keys, (std::vector<wire::KeyUse>{{100, 60}, {101, 3}}));
}

TEST(QuotaLedger, KeysBeyondTheBoundAreRefusedButKeysWithUseAreNeverDropped) {
    const QuotaSpec q = spec(5, Period::Day);
    const std::uint64_t w0 = window_at(q, kT).start_ms;
    control::QuotaLedger l("r1", 4, 2);
    take(l, key_usage("a", w0 + 1000, q, {{100, 5}, {101, 1}, {102, 9}}));
    EXPECT_EQ(l.keys(), 2u);
    EXPECT_EQ(l.refused().keys, 1u);
    EXPECT_EQ(l.refused().key_units, 9u);
    EXPECT_NE(l.last_refused().find("1 key(s) of quota of bucket \"api\" (global) from zone a "
                                    "refused: the ledger holds 2 keys"),
              std::string::npos)
        << l.last_refused();
    // Hours later in the same day, the used-up key is still held and still rejected.
    l.forget(w0 + 5 * 3600000);
    take(l, key_usage("a", w0 + 5 * 3600000, q, {{101, 1}}));
    EXPECT_EQ(used_up(l, w0 + 5 * 3600000), std::vector<std::uint64_t>({100}));
    // Once the day ended, its keys leave (room for other instances), usage or not.
    l.forget(w0 + 86400000 + 1000);
    EXPECT_EQ(l.keys(), 0u);
}

TEST(QuotaWire, ReportAndInstructionCarryTheQuota) {
    wire::Report r;
    r.host = "h";
    r.zone = "z";
    r.region = "r";
    wire::ReportBucket b;
    b.name = "api";
    b.quota = spec(600, Period::Hour, 60000);
    r.buckets.push_back(b);
    std::string bytes, error;
    wire::encode(r, bytes);
    wire::Report back;
    ASSERT_TRUE(wire::decode(bytes, back, error)) << error;
    EXPECT_EQ(back.buckets[0].quota, b.quota);

    wire::Instructions m;
    m.source = "c";
    wire::Instruction in;
    in.name = "api";
    in.quota = 600;
    in.quota_used = 600;
    in.quota_reset_ms = kT;
    in.ratio_ppm = 500000;
    m.buckets.push_back(in);
    wire::encode(m, bytes);
    wire::Instructions got;
    EXPECT_FALSE(wire::decode(bytes, got, error));  // used up needs ratio 1
    m.buckets[0].ratio_ppm = 1000000;
    wire::encode(m, bytes);
    ASSERT_TRUE(wire::decode(bytes, got, error)) << error;
    EXPECT_EQ(got.buckets[0].quota_reset_ms, kT);
}

}  // namespace
}  // namespace grl
