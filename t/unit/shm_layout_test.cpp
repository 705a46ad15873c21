// Zone layout, slot assignment across reloads, the per-request decision with
// its sampling statistics, and the data-plane side of the control loop.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <set>
#include <vector>

#include "grl/plane/cost.h"
#include "grl/plane/decision.h"
#include "grl/plane/plane.h"
#include "grl/common/ratio.h"
#include "grl/plane/shm_layout.h"

namespace grl {
namespace {

struct ZoneFixture : ::testing::Test {
    static constexpr std::uint32_t kCap = 8 + shm::kRuntimeSlots;  // 8 configurable
    std::unique_ptr<void, decltype(&std::free)> mem{std::aligned_alloc(64, shm::bytes_for(kCap)),
                                                    &std::free};
    shm::View z{mem.get()};
    void SetUp() override { z.format(kCap, 42); }
};

TEST(Ratio, FixedPointConversions) {
    EXPECT_EQ(ppm_to_threshold(0), 0u);
    EXPECT_EQ(ppm_to_threshold(1000000), 1ULL << 32);
    EXPECT_EQ(ppm_to_threshold(500000), 1ULL << 31);
    for (std::uint32_t ppm : {0u, 1u, 330000u, 999999u, 1000000u}) {
        EXPECT_EQ(threshold_to_ppm(ppm_to_threshold(ppm)), ppm);
    }
}

TEST(Ratio, DropRatioFormula) {
    EXPECT_EQ(drop_ratio_ppm(0, 100000), 0u);
    EXPECT_EQ(drop_ratio_ppm(100000, 100000), 0u);
    EXPECT_EQ(drop_ratio_ppm(50000, 100000), 0u);
    EXPECT_EQ(drop_ratio_ppm(150000, 100000), 333333u);   // 1.5x the limit
    EXPECT_EQ(drop_ratio_ppm(1500000, 100000), 933333u);  // 15x surge
    EXPECT_EQ(drop_ratio_ppm(~0ULL, 1), 999999u);         // no overflow
}

TEST_F(ZoneFixture, FormatThenCompatible) {
    EXPECT_EQ(z.check_compatible(), "");
    EXPECT_EQ(z.header().epoch, 42u);
    EXPECT_EQ(z.header().capacity, kCap);
    z.header().layout_version = 99;
    EXPECT_NE(z.check_compatible().find("layout version 99"), std::string::npos);
    z.header().magic = 0;
    EXPECT_NE(z.check_compatible().find("bad magic"), std::string::npos);
}

TEST(ZoneSizing, CapacityAndBytesAgree) {
    for (std::uint32_t cap : {1u, 10u, 300u})
        EXPECT_EQ(shm::capacity_for(shm::bytes_for(cap)), cap);
    EXPECT_EQ(shm::capacity_for(10), 0u);
    // 1 MiB holds a useful number of buckets (documented in docs/directives.md).
    EXPECT_GE(shm::capacity_for(1 << 20), 400u);
}

TEST_F(ZoneFixture, ReloadKeepsSlotsCountersAndRatios) {
    std::vector<std::uint16_t> slots;
    std::uint64_t gen = 0;
    ASSERT_EQ(z.assign({"a", "b"}, slots, gen), "");
    z.activate(gen);
    std::uint16_t a = slots[0], b = slots[1];
    EXPECT_NE(a, b);
    z.counters(a, 0).offered = 7;
    z.slot(a).threshold = 123;

    // Reload: b removed, c added, order changed; a keeps its slot and state.
    ASSERT_EQ(z.assign({"c", "a"}, slots, gen), "");
    z.activate(gen);
    EXPECT_EQ(slots[1], a);
    EXPECT_NE(slots[0], b) << "a removed bucket's slot is not reused while old workers may run";
    EXPECT_EQ(z.totals(a).offered, 7u);
    EXPECT_EQ(z.slot(a).threshold.load(), 123u);
}

// offered() (surge damping's 10 ms read) is totals().offered over every worker line, the
// wrapped ones included, and reads no other bucket's lines.
TEST_F(ZoneFixture, OfferedSumsEveryWorkerLineOfOneBucket) {
    std::vector<std::uint16_t> slots;
    std::uint64_t gen = 0;
    ASSERT_EQ(z.assign({"a", "b"}, slots, gen), "");
    z.counters(slots[0], 0).offered = 3;
    z.counters(slots[0], shm::kWorkerSlots - 1).offered = 4;
    z.counters(slots[0], shm::kWorkerSlots + 5).offered += 5;  // worker 37 wraps onto line 5
    z.counters(slots[0], 0).dropped = 2;
    z.counters(slots[1], 1).offered = 100;
    EXPECT_EQ(z.offered(slots[0]), 12u);
    EXPECT_EQ(z.offered(slots[0]), z.totals(slots[0]).offered);
    EXPECT_EQ(z.offered(slots[1]), 100u);
}

TEST_F(ZoneFixture, RemovedBucketSlotIsFreedWhenNoRunningConfigurationHasIt) {
    std::vector<std::uint16_t> slots;
    std::uint64_t gen = 0;
    ASSERT_EQ(z.assign({"old"}, slots, gen), "");
    z.activate(gen);
    std::uint16_t old = slots[0];
    z.counters(old, 3).offered = 5;
    ASSERT_EQ(z.assign({"x"}, slots, gen), "");  // "old" still used by the previous workers
    z.activate(gen);
    EXPECT_EQ(z.totals(old).offered, 5u);
    ASSERT_EQ(z.assign({"y"}, slots, gen), "");  // still the previous configuration's
    z.activate(gen);
    EXPECT_TRUE(z.slot(old).in_use);
    ASSERT_EQ(z.assign({"z"}, slots, gen), "");  // two running configurations ago: freed
    EXPECT_STRNE(z.slot(old).name, "old");       // freed (and possibly taken by "z")
    EXPECT_EQ(z.totals(old).offered, 0u);
    z.activate(gen);
    ASSERT_EQ(z.assign({"old"}, slots, gen), "");
    EXPECT_EQ(z.totals(slots[0]).offered, 0u) << "a re-added bucket after removal starts fresh";
}

// Which fake pids run: the registry's liveness check, injected.
std::set<std::uint32_t> g_running;
bool fake_alive(std::uint32_t pid) {
    return g_running.count(pid) != 0;
}

TEST_F(ZoneFixture, AnOldWorkerStillRunningKeepsItsSlotsAcrossManyReloads) {
    g_running = {100};
    std::vector<std::uint16_t> slots;
    std::uint64_t gen = 0;
    ASSERT_EQ(z.assign({"a"}, slots, gen, fake_alive), "");
    z.activate(gen);
    ASSERT_TRUE(z.register_worker(100, gen, fake_alive));
    const std::uint16_t a = slots[0];
    // Worker 100 finishes a long request while three reloads replace its configuration;
    // each reload's worker is killed by the next reload (no unregister: a dead entry).
    std::uint32_t previous = 0;
    for (std::uint32_t pid : {200u, 300u, 400u}) {
        ASSERT_EQ(z.assign({"b"}, slots, gen, fake_alive), "");
        z.activate(gen);
        g_running.insert(pid);
        ASSERT_TRUE(z.register_worker(pid, gen, fake_alive));
        g_running.erase(previous);
        previous = pid;
    }
    // A new bucket must not take the slot worker 100 still counts into.
    ASSERT_EQ(z.assign({"c"}, slots, gen, fake_alive), "");
    EXPECT_NE(slots[0], a);
    EXPECT_STREQ(z.slot(a).name, "a");
    EXPECT_EQ(z.oldest_running_gen(fake_alive), 1u);
    // Once it exits, the next reload frees the slot.
    z.unregister_worker(100);
    g_running.erase(100);
    z.activate(gen);
    ASSERT_EQ(z.assign({"c"}, slots, gen, fake_alive), "");
    EXPECT_FALSE(z.slot(a).in_use);
}

TEST_F(ZoneFixture, AKilledWorkersEntryIsRecognisedAndReused) {
    g_running = {1, 2};
    ASSERT_TRUE(z.register_worker(1, 5, fake_alive));
    ASSERT_TRUE(z.register_worker(2, 7, fake_alive));
    EXPECT_EQ(z.oldest_running_gen(fake_alive), 5u);
    g_running.erase(1);  // SIGKILL: no unregister
    EXPECT_EQ(z.oldest_running_gen(fake_alive), 7u);
    // Without a liveness check every registered worker counts as running.
    EXPECT_EQ(z.oldest_running_gen(nullptr), 5u);
    // Fill the registry with running workers; the dead one's entry is reused, then it is full.
    for (std::uint32_t pid = 10; pid < 10 + shm::kWorkerRegs - 1; ++pid) {
        g_running.insert(pid);
        ASSERT_TRUE(z.register_worker(pid, 8, fake_alive)) << pid;
    }
    EXPECT_EQ(z.header().worker_regs_full.load(), 0u);
    g_running.insert(9999);
    EXPECT_FALSE(z.register_worker(9999, 8, fake_alive));
    EXPECT_EQ(z.header().worker_regs_full.load(), 1u);
    EXPECT_EQ(z.oldest_running_gen(fake_alive), 7u);
    // A worker exits: its entry is free for the next one.
    z.unregister_worker(2);
    EXPECT_TRUE(z.register_worker(9999, 9, fake_alive));
    EXPECT_EQ(z.oldest_running_gen(fake_alive), 8u);
}

TEST_F(ZoneFixture, FailedReloadsFreeNothingTheRunningWorkersUse) {
    std::vector<std::uint16_t> slots;
    std::uint64_t gen = 0;
    ASSERT_EQ(z.assign({"x", "y"}, slots, gen), "");
    z.activate(gen);
    std::uint16_t x = slots[0];
    z.counters(x, 0).offered = 10;
    // Three reloads without x that never start workers (e.g. they failed later).
    for (int i = 0; i < 3; ++i) ASSERT_EQ(z.assign({"y"}, slots, gen), "");
    EXPECT_EQ(z.totals(x).offered, 10u);
    EXPECT_TRUE(z.slot(x).in_use);
}

TEST_F(ZoneFixture, TooManyBucketsIsAnError) {
    std::vector<std::string> names;
    for (std::uint32_t i = 0; i <= kCap; ++i) names.push_back("b" + std::to_string(i));
    std::vector<std::uint16_t> slots;
    std::uint64_t gen = 0;
    std::string err = z.assign(names, slots, gen);
    EXPECT_NE(err.find("too small: no free slot"), std::string::npos) << err;
    EXPECT_NE(err.find("\"b8\""), std::string::npos) << err;
}

TEST_F(ZoneFixture, TotalsSumWorkersAndDeriveAdmitted) {
    z.counters(1, 0).offered = 10;
    z.counters(1, 1).offered = 5;
    z.counters(1, 1).dropped = 2;
    z.counters(1, 40).shadow_dropped = 3;  // worker 40 wraps onto slot 8
    auto t = z.totals(1);
    EXPECT_EQ(t.offered, 15u);
    EXPECT_EQ(t.dropped, 2u);
    EXPECT_EQ(t.admitted, 13u);
    EXPECT_EQ(t.shadow_dropped, 3u);
}

void set_ratio(shm::View& z, std::uint16_t slot, std::uint32_t ppm, Mode mode,
               std::uint64_t expires) {
    z.slot(slot).threshold = ppm_to_threshold(ppm);
    z.slot(slot).mode = static_cast<std::uint32_t>(mode);
    z.slot(slot).expires_ms = expires;
}

TEST_F(ZoneFixture, NoRatioPassesAndCounts) {
    Prng rng(1);
    std::uint16_t m[] = {0, 1};
    Outcome o = decide(z, m, 2, 0, 1000, rng);
    EXPECT_EQ(o.decision, Decision::Pass);
    EXPECT_EQ(z.totals(0).offered, 1u);
    EXPECT_EQ(z.totals(1).offered, 1u);
    EXPECT_EQ(decide(z, m, 0, 0, 1000, rng).decision, Decision::None);
}

// Binomial bound: |k - np| <= 5 sqrt(np(1-p)), a false alarm once in ~3.5 million runs.
void expect_binomial(std::uint64_t k, std::uint64_t n, double p) {
    double mean = n * p, sd = std::sqrt(n * p * (1 - p));
    EXPECT_LE(std::fabs(static_cast<double>(k) - mean), 5 * sd + 1)
        << k << " of " << n << " at p=" << p;
}

TEST_F(ZoneFixture, DenyDropsWithTheRatio) {
    Prng rng(7);
    set_ratio(z, 0, 330000, Mode::Deny, 5000);
    std::uint16_t m[] = {0};
    std::uint64_t drops = 0;
    const std::uint64_t n = 200000;
    for (std::uint64_t i = 0; i < n; ++i) {
        Outcome o = decide(z, m, 1, static_cast<std::uint32_t>(i % 3), 1000, rng);
        if (o.decision == Decision::Drop) {
            ++drops;
            EXPECT_EQ(o.threshold, ppm_to_threshold(330000));
        }
    }
    expect_binomial(drops, n, 0.33);
    auto t = z.totals(0);
    EXPECT_EQ(t.offered, n);
    EXPECT_EQ(t.dropped, drops);
    EXPECT_EQ(t.admitted, n - drops);
}

TEST_F(ZoneFixture, ShadowPassesAndCountsWouldBeDrops) {
    Prng rng(9);
    set_ratio(z, 2, 330000, Mode::Shadow, 5000);
    std::uint16_t m[] = {2};
    const std::uint64_t n = 100000;
    std::uint64_t shadow = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
        Outcome o = decide(z, m, 1, 0, 1000, rng);
        ASSERT_NE(o.decision, Decision::Drop);
        if (o.decision == Decision::ShadowDrop) ++shadow;
    }
    auto t = z.totals(2);
    EXPECT_EQ(t.dropped, 0u);
    EXPECT_EQ(t.shadow_dropped, shadow);
    expect_binomial(shadow, n, 0.33);
}

// grl_dry_run: a deny bucket is evaluated as shadow; the same bucket enforces without it.
TEST_F(ZoneFixture, DryRunEvaluatesDenyBucketsInShadow) {
    Prng rng(11);
    set_ratio(z, 0, 1000000, Mode::Deny, 5000);
    std::uint16_t m[] = {0};
    for (int i = 0; i < 10; ++i) {
        Outcome o = decide(z, m, 1, 0, 1000, rng, true);
        EXPECT_EQ(o.decision, Decision::ShadowDrop);
        EXPECT_EQ(o.threshold, ppm_to_threshold(1000000));
    }
    EXPECT_EQ(decide(z, m, 1, 0, 1000, rng).decision, Decision::Drop);
    auto t = z.totals(0);
    EXPECT_EQ(t.offered, 11u);
    EXPECT_EQ(t.dropped, 1u);
    EXPECT_EQ(t.shadow_dropped, 10u);
}

TEST_F(ZoneFixture, ExpiredRatioFailsOpen) {
    Prng rng(3);
    set_ratio(z, 0, 1000000, Mode::Deny, 5000);
    std::uint16_t m[] = {0};
    EXPECT_EQ(decide(z, m, 1, 0, 4999, rng).decision, Decision::Drop);
    EXPECT_EQ(decide(z, m, 1, 0, 5000, rng).decision, Decision::Pass);
}

TEST_F(ZoneFixture, AnyDenyDropRejectsAndEveryBucketCountsIt) {
    Prng rng(5);
    set_ratio(z, 0, 1000000, Mode::Deny, 5000);    // always drops
    set_ratio(z, 1, 1000000, Mode::Shadow, 5000);  // shadow always "would drop"
    std::uint16_t m[] = {1, 3, 0};                 // 3 has no ratio
    Outcome o = decide(z, m, 3, 0, 1000, rng);
    EXPECT_EQ(o.decision, Decision::Drop);
    EXPECT_EQ(o.decided_by, 2);
    for (std::uint16_t s : m) {
        EXPECT_EQ(z.totals(s).offered, 1u);
        EXPECT_EQ(z.totals(s).dropped, 1u) << "offered = admitted + dropped in bucket " << s;
    }
    EXPECT_EQ(z.totals(1).shadow_dropped, 1u);
}

TEST(Prng, UniformEnoughForSampling) {
    Prng rng(11);
    std::uint64_t buckets[16] = {};
    const int n = 160000;
    for (int i = 0; i < n; ++i) ++buckets[rng.next32() >> 28];
    for (std::uint64_t b : buckets) expect_binomial(b, n, 1.0 / 16);
}

// ---- the control loop's data-plane side ----

struct PlaneFixture : ZoneFixture {
    BucketTable table;
    Identity id{"h1", "z1", "r1"};
    std::uint64_t gen = 0;
    void SetUp() override {
        ZoneFixture::SetUp();
        BucketDef a;
        a.name = "api";
        a.limit_mrps = 100000;
        BucketDef s;
        s.name = "shadowed";
        s.mode = Mode::Shadow;
        s.scope = Scope::Zone;
        s.limit_mrps = 5000;
        table.defs = {a, s};
        ASSERT_EQ(z.assign({"api", "shadowed"}, table.slots, gen), "");
    }
    wire::Instructions instr(std::uint64_t ts, std::uint32_t ppm, std::uint64_t ttl = 3000) {
        wire::Instructions m;
        m.source = "c1";
        m.seq = ts;
        m.ts_ms = ts;
        m.ttl_ms = ttl;
        for (auto [name, limit] :
             {std::pair<const char*, std::uint64_t>{"api", 100000}, {"unknown", 1}}) {
            wire::Instruction b;
            b.name = name;
            b.ratio_ppm = ppm;
            b.limit_mrps = limit;
            m.buckets.push_back(b);
        }
        return m;
    }
};

TEST_F(PlaneFixture, ReportCarriesCumulativeCountersAndIdentity) {
    z.counters(table.slots[0], 0).offered = 10;
    z.counters(table.slots[0], 1).dropped = 4;
    z.counters(table.slots[0], 0).offered += 0;
    wire::Report r;
    build_report(z, table, id, 250, 1700000000000, r);
    EXPECT_EQ(r.host, "h1");
    EXPECT_EQ(r.epoch, 42u);
    EXPECT_EQ(r.seq, 1u);
    ASSERT_EQ(r.buckets.size(), 2u);
    EXPECT_EQ(r.buckets[0].offered, 10u);
    EXPECT_EQ(r.buckets[0].dropped, 4u);
    EXPECT_EQ(r.buckets[0].admitted, 6u);
    EXPECT_EQ(r.buckets[1].mode, Mode::Shadow);
    EXPECT_EQ(r.buckets[1].scope, Scope::Zone);
    build_report(z, table, id, 250, 1700000000250, r);
    EXPECT_EQ(r.seq, 2u) << "sequence increases per report and lives in the zone";
}

TEST_F(PlaneFixture, ReportCarriesTheCountsSinceThePreviousOne) {
    wire::Report prev, r;
    build_report(z, table, id, 250, 1700000000000, prev);
    add_recent(prev, wire::Report{}, 250);  // the reporter's first report: nothing to add
    EXPECT_EQ(prev.recent_ms, 0u);
    z.counters(table.slots[0], 0).offered += 10;
    z.counters(table.slots[0], 1).dropped += 4;
    z.counters(table.slots[1], 0).shadow_dropped += 2;
    build_report(z, table, id, 250, 1700000000250, r);
    add_recent(r, prev, 260);
    EXPECT_EQ(r.recent_ms, 260u);
    ASSERT_EQ(r.buckets.size(), 2u);
    EXPECT_TRUE(r.buckets[0].has_recent);
    EXPECT_EQ(r.buckets[0].recent, (std::array<std::uint64_t, 4>{10, 6, 4, 0}));
    EXPECT_EQ(r.buckets[1].recent, (std::array<std::uint64_t, 4>{0, 0, 0, 2}));
    // Reordered buckets are found by name; a new one or one whose counters went back
    // gets none; another epoch gives nothing at all.
    wire::Report old = prev;
    std::swap(old.buckets[0], old.buckets[1]);
    old.buckets[0].shadow_dropped = 5;  // now "above" the current value of bucket 1
    old.buckets.push_back(old.buckets[1]);
    old.buckets.back().name = "gone";
    add_recent(r, old, 250);
    EXPECT_TRUE(r.buckets[0].has_recent);
    EXPECT_EQ(r.buckets[0].recent[0], 10u);
    EXPECT_FALSE(r.buckets[1].has_recent);
    old.epoch = 43;
    add_recent(r, old, 250);
    EXPECT_EQ(r.recent_ms, 0u);
    EXPECT_FALSE(r.buckets[0].has_recent);
}

TEST_F(PlaneFixture, ApplyFreshestWinsAndTtlIsCapped) {
    const shm::BucketSlot& s = z.slot(table.slots[0]);
    EXPECT_EQ(apply_instructions(z, table, instr(2000, 500000), 100, 10000), 1u);
    EXPECT_EQ(s.expires_ms.load(), 3100u);
    EXPECT_EQ(z.header().instructions_unknown_bucket.load(), 1u);
    // An older computation (another controller, or reordered) does not win.
    EXPECT_EQ(apply_instructions(z, table, instr(1000, 100000), 200, 10000), 0u);
    EXPECT_EQ(s.threshold.load(), ppm_to_threshold(500000));
    // A newer one does; the local TTL caps the message's.
    EXPECT_EQ(apply_instructions(z, table, instr(3000, 100000, 60000), 300, 1000), 1u);
    EXPECT_EQ(s.threshold.load(), ppm_to_threshold(100000));
    EXPECT_EQ(s.expires_ms.load(), 1300u);
    // Once expired, even an older-stamped message applies (a restarted controller).
    EXPECT_EQ(apply_instructions(z, table, instr(500, 200000), 5000, 1000), 1u);
    EXPECT_EQ(s.threshold.load(), ppm_to_threshold(200000));
}

TEST_F(PlaneFixture, StatesWaitingActiveExpired) {
    const shm::BucketSlot& s = z.slot(table.slots[0]);
    EXPECT_EQ(bucket_state(s, 0), shm::PlaneState::Waiting);
    EXPECT_EQ(plane_state(z, 50, 1000), shm::PlaneState::Waiting);
    apply_instructions(z, table, instr(1, 1), 100, 1000);
    EXPECT_EQ(bucket_state(s, 500), shm::PlaneState::Active);
    EXPECT_EQ(plane_state(z, 500, 1000), shm::PlaneState::Active);
    EXPECT_EQ(bucket_state(s, 1100), shm::PlaneState::Expired);
    EXPECT_EQ(plane_state(z, 1100, 1000), shm::PlaneState::Expired);
}

TEST_F(PlaneFixture, StatusRendersBucketsAndPlane) {
    z.counters(table.slots[0], 0).offered = 9;
    z.counters(table.slots[0], 0).dropped = 3;
    apply_instructions(z, table, instr(1, 330000), 100, 5000);
    StatusInput in;
    in.shm = &z;
    in.table = &table;
    in.id = id;
    in.shm_name = "grl";
    in.now_ms = 350;
    in.ttl_ms = 5000;
    std::string j = render_status_json(in);
    EXPECT_NE(j.find("\"name\":\"api\""), std::string::npos) << j;
    EXPECT_NE(j.find("\"offered\":9,\"admitted\":6,\"dropped\":3"), std::string::npos) << j;
    EXPECT_NE(j.find("\"ratio\":0.330000,\"ratio_state\":\"active\",\"ratio_age_ms\":250"),
              std::string::npos)
        << j;
    EXPECT_NE(j.find("\"state\":\"active\""), std::string::npos) << j;
    std::string p = render_status_prometheus(in);
    EXPECT_NE(p.find("grl_bucket_offered_total{bucket=\"api\",scope=\"global\",mode=\"deny\"} 9\n"),
              std::string::npos)
        << p;
    EXPECT_NE(p.find("grl_bucket_ratio{bucket=\"api\"} 0.330000\n"), std::string::npos) << p;
    EXPECT_NE(p.find("grl_bucket_ratio{bucket=\"shadowed\"} 0.000000\n"), std::string::npos) << p;
    EXPECT_NE(p.find("grl_control_plane_state{state=\"active\"} 1\n"), std::string::npos) << p;
    EXPECT_NE(p.find("grl_instructions_unknown_bucket_total 1\n"), std::string::npos) << p;
}

}  // namespace
}  // namespace grl

namespace grl {
namespace {

wire::Instruction runtime_entry(std::string name, std::string caller, std::uint32_t ppm) {
    wire::Instruction in;
    in.name = std::move(name);
    in.ratio_ppm = ppm;
    in.limit_mrps = 5000;
    in.mode = Mode::Deny;
    in.has_match = true;
    in.match.caller = std::move(caller);
    in.match.caller_kind = MatchKind::Exact;
    in.match.procedure = "/search";
    in.match.procedure_kind = MatchKind::Prefix;
    in.match.scope = Scope::Region;
    return in;
}

struct RuntimeFixture : PlaneFixture {
    wire::Instructions msg(std::vector<wire::Instruction> entries, std::uint64_t ts = 1) {
        wire::Instructions m;
        m.source = "c1";
        m.seq = ts;
        m.ts_ms = ts;
        m.ttl_ms = 1000;
        m.buckets = std::move(entries);
        return m;
    }
};

TEST_F(RuntimeFixture, MatchDefinesARuntimeBucketEveryWorkerCanLoad) {
    std::uint64_t gen0 = 0;
    EXPECT_TRUE(load_runtime(z, gen0).empty());
    EXPECT_EQ(
        apply_instructions(z, table, msg({runtime_entry("bots", "crawler", 500000)}), 100, 5000),
        1u);
    std::uint64_t gen1 = 0;
    auto rt = load_runtime(z, gen1);
    EXPECT_GT(gen1, gen0);
    ASSERT_EQ(rt.size(), 1u);
    EXPECT_EQ(rt[0].def.name, "bots");
    EXPECT_EQ(rt[0].def.caller.kind, MatchKind::Exact);
    EXPECT_EQ(rt[0].def.caller.value, "crawler");
    EXPECT_EQ(rt[0].def.procedure.kind, MatchKind::Prefix);
    EXPECT_EQ(rt[0].def.scope, Scope::Region);
    EXPECT_EQ(rt[0].def.limit_mrps, 5000u);
    EXPECT_GE(rt[0].slot, kCap - shm::kRuntimeSlots) << "run-time buckets use reserved slots";
    EXPECT_EQ(z.slot(rt[0].slot).threshold.load(), ppm_to_threshold(500000));

    // Counted and reported like a configured bucket.
    z.counters(rt[0].slot, 0).offered = 4;
    wire::Report r;
    build_report(z, table, id, 250, 1, r);
    ASSERT_EQ(r.buckets.size(), 3u);
    EXPECT_EQ(r.buckets[2].name, "bots");
    EXPECT_EQ(r.buckets[2].scope, Scope::Region);
    EXPECT_EQ(r.buckets[2].offered, 4u);

    StatusInput in;
    in.shm = &z;
    in.table = &table;
    in.now_ms = 200;
    in.ttl_ms = 5000;
    EXPECT_NE(render_status_json(in).find("\"name\":\"bots\",\"runtime\":true"), std::string::npos);

    // The same definition again changes nothing; a new match bumps the generation.
    apply_instructions(z, table, msg({runtime_entry("bots", "crawler", 400000)}, 2), 150, 5000);
    std::uint64_t gen2 = 0;
    load_runtime(z, gen2);
    EXPECT_EQ(gen2, gen1);
    apply_instructions(z, table, msg({runtime_entry("bots", "scraper", 400000)}, 3), 160, 5000);
    std::uint64_t gen3 = 0;
    rt = load_runtime(z, gen3);
    EXPECT_GT(gen3, gen2);
    EXPECT_EQ(rt[0].def.caller.value, "scraper");
}

TEST_F(RuntimeFixture, ConfiguredNameWinsOverAMatch) {
    apply_instructions(z, table, msg({runtime_entry("api", "x", 250000)}), 100, 5000);
    std::uint64_t gen = 0;
    EXPECT_TRUE(load_runtime(z, gen).empty());
    EXPECT_EQ(z.slot(table.slots[0]).threshold.load(), ppm_to_threshold(250000));
}

TEST_F(RuntimeFixture, ExpiredRuntimeBucketsAreRemoved) {
    apply_instructions(z, table, msg({runtime_entry("bots", "c", 500000)}), 100, 5000);
    EXPECT_TRUE(expire_runtime(z, 1099).empty());
    auto removed = expire_runtime(z, 1100);  // ttl 1000 from receipt at 100
    ASSERT_EQ(removed.size(), 1u);
    EXPECT_EQ(removed[0], "bots");
    std::uint64_t gen = 0;
    EXPECT_TRUE(load_runtime(z, gen).empty());
    wire::Report r;
    build_report(z, table, id, 250, 1, r);
    EXPECT_EQ(r.buckets.size(), 2u);
}

// A reporter killed between the two stores of the sequence lock leaves it odd. The first
// instruction for the bucket a second after the claim (the control plane republishes it
// every interval) takes the lock over and writes the definition again: the bucket is
// enforced again, not silently dropped for ever.
TEST_F(RuntimeFixture, DefinitionLeftLockedByAKilledWriterRecovers) {
    auto m = msg({runtime_entry("bots", "crawler", 500000)});
    apply_instructions(z, table, m, 100, 5000);
    std::uint64_t g = 0;
    ASSERT_EQ(load_runtime(z, g).size(), 1u);
    z.header().runtime[0].seq.fetch_add(1);   // killed after its first store
    EXPECT_TRUE(load_runtime(z, g).empty());  // torn: skipped, not read
    m.seq = m.ts_ms = 2;
    apply_instructions(z, table, m, 350, 5000);  // could be a live writer: not yet
    EXPECT_TRUE(load_runtime(z, g).empty());
    m.seq = m.ts_ms = 3;
    apply_instructions(z, table, m, 1100, 5000);  // locked for a second: a dead writer
    EXPECT_EQ(z.header().runtime[0].takeovers.load(), 1u);
    // Its possibly torn definition was wiped and the bucket defined afresh (once).
    EXPECT_EQ(z.header().runtime[0].seq.load() % 2, 0u);
    auto rt = load_runtime(z, g);
    ASSERT_EQ(rt.size(), 1u);
    EXPECT_EQ(rt[0].def.name, "bots");
    // Expiry takes a stuck lock over too (a definition whose instruction stopped).
    z.header().runtime[0].seq.fetch_add(1);
    ASSERT_EQ(expire_runtime(z, 10000).size(), 1u);
    EXPECT_EQ(z.header().runtime[0].seq.load() % 2, 0u);
    EXPECT_TRUE(load_runtime(z, g).empty());
}

// Two reporters at once (the old and the new worker 0 during a reload) write the same
// definition: writers serialise, a reader never copies a mixed definition, and the
// sequence ends even.
TEST_F(RuntimeFixture, TwoWritersNeverLeaveATornOrLockedDefinition) {
    auto initial = runtime_entry("bots", "aaaaaaaaaaaaaaaa", 1000);
    initial.match.procedure = "/aaaaaaaaaaaaaaaa";
    apply_instructions(z, table, msg({initial}), 100, 5000);
    std::atomic<bool> stop{false};
    std::atomic<int> torn{0};
    auto writer = [&](const char* caller, std::uint64_t first) {
        auto e = runtime_entry("bots", caller, 1000);
        e.match.procedure = std::string("/") + caller;
        for (std::uint64_t i = 0; i < 3000; ++i) {
            apply_instructions(z, table, msg({e}, first + 2 * i), 100, 5000);
            e.match.caller_kind = i % 2 ? MatchKind::Exact : MatchKind::Prefix;
        }
    };
    std::thread reader([&] {
        while (!stop.load()) {
            std::uint64_t g = 0;
            for (const RuntimeBucket& b : load_runtime(z, g)) {
                const std::string& c = b.def.caller.value;
                const std::string& p = b.def.procedure.value;
                if (p != "/" + c) torn.fetch_add(1);
            }
        }
    });
    std::thread a(writer, "aaaaaaaaaaaaaaaa", 10);
    std::thread b(writer, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", 11);
    a.join();
    b.join();
    stop = true;
    reader.join();
    EXPECT_EQ(torn.load(), 0);
    EXPECT_EQ(z.header().runtime[0].seq.load() % 2, 0u);
    std::uint64_t g = 0;
    EXPECT_EQ(load_runtime(z, g).size(), 1u);
}

TEST_F(RuntimeFixture, BoundedNumberOfRuntimeBuckets) {
    std::vector<wire::Instruction> many;
    for (std::uint32_t i = 0; i <= shm::kRuntimeSlots; ++i) {
        many.push_back(runtime_entry("rt" + std::to_string(i), "c", 1000));
    }
    EXPECT_EQ(apply_instructions(z, table, msg(many), 100, 5000), shm::kRuntimeSlots);
    EXPECT_EQ(z.header().runtime_rejected.load(), 1u);
    EXPECT_EQ(z.header().instructions_unknown_bucket.load(), 1u);
}

}  // namespace
}  // namespace grl

namespace grl {
namespace {

// grl_bucket cost=: a request counts as its units in each matched bucket's offered, dropped and
// shadow-dropped sums; the decision itself is one draw per request, as without costs.
TEST_F(ZoneFixture, CostsCountUnitsInEveryCounter) {
    Prng rng(3);
    set_ratio(z, 0, 1000000, Mode::Deny, 5000);    // drops everything
    set_ratio(z, 1, 1000000, Mode::Shadow, 5000);  // would drop everything
    std::uint16_t m[] = {0, 1, 2};
    const std::uint32_t cost[] = {10, 3, 0};
    Outcome o = decide(z, m, 3, 0, 1000, rng, false, cost);
    EXPECT_EQ(o.decision, Decision::Drop);
    EXPECT_EQ(z.totals(0).offered, 10u);
    EXPECT_EQ(z.totals(0).dropped, 10u);
    EXPECT_EQ(z.totals(1).offered, 3u);
    EXPECT_EQ(z.totals(1).dropped, 3u);  // rejected by bucket 0: dropped in every one
    EXPECT_EQ(z.totals(1).shadow_dropped, 3u);
    EXPECT_EQ(z.totals(2).offered, 0u);  // cost 0: matched, counts nothing
    decide(z, m, 3, 0, 1000, rng);       // no costs: 1 each
    EXPECT_EQ(z.totals(0).offered, 11u);
    EXPECT_EQ(z.totals(2).offered, 1u);
}

TEST(Cost, ReadsDigitsSaturatesAndRefusesTheRest) {
    std::uint32_t v = 7;
    EXPECT_TRUE(read_cost("0", v));
    EXPECT_EQ(v, 0u);
    EXPECT_TRUE(read_cost("1500", v));
    EXPECT_EQ(v, 1500u);
    EXPECT_TRUE(read_cost("4294967295", v));
    EXPECT_EQ(v, kMaxCost);
    EXPECT_TRUE(read_cost("4294967296", v));
    EXPECT_EQ(v, kMaxCost);
    EXPECT_TRUE(read_cost("99999999999999999999999999", v));  // would overflow 64 bits
    EXPECT_EQ(v, kMaxCost);
    v = 7;
    for (const char* bad : {"", "-1", "1.5", "abc", " 3", "3 ", "0x10", "1e3"}) {
        EXPECT_FALSE(read_cost(bad, v)) << bad;
        EXPECT_EQ(v, 7u) << bad;  // left as it was
    }
}

}  // namespace
}  // namespace grl
