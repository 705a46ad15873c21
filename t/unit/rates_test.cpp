// Unit tests of grl::rates: rates from cumulative counters, driven by an explicit clock.
#include "grl/control/rates.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace grl::rates {
namespace {

struct B {
    const char* name;
    std::uint64_t offered;
    std::uint64_t dropped = 0;
    std::uint64_t shadow = 0;
    Scope scope = Scope::Global;
    Mode mode = Mode::Deny;
    std::uint64_t limit = 100000;
};

wire::Report report(const std::string& host, std::uint64_t epoch, std::uint64_t seq,
                    std::uint64_t ts_ms, const std::vector<B>& buckets,
                    std::uint64_t interval_ms = 1000) {
    wire::Report r;
    r.host = host;
    r.zone = "z1";
    r.region = "r1";
    r.epoch = epoch;
    r.seq = seq;
    r.ts_ms = ts_ms;
    r.interval_ms = interval_ms;
    for (const B& b : buckets) {
        wire::ReportBucket e;
        e.name = b.name;
        e.scope = b.scope;
        e.mode = b.mode;
        e.limit_mrps = b.limit;
        e.offered = b.offered;
        e.dropped = b.dropped;
        e.admitted = b.offered - b.dropped;
        e.shadow_dropped = b.shadow;
        r.buckets.push_back(e);
    }
    return r;
}

wire::ZoneUsage usage(const Table& t) {
    wire::ZoneUsage u;
    t.usage(u);
    return u;
}

const wire::UsageBucket* find(const wire::ZoneUsage& u, const std::string& name) {
    for (const auto& b : u.buckets) {
        if (b.name == name) return &b;
    }
    return nullptr;
}

std::uint64_t offered(const Table& t, const std::string& name) {
    wire::ZoneUsage u = usage(t);
    const wire::UsageBucket* b = find(u, name);
    return b ? b->offered_mrps : UINT64_MAX;
}

constexpr std::uint64_t T0 = 1'700'000'000'000;  // sender wall clock
constexpr std::uint64_t M0 = 50'000;             // receiver monotonic clock

TEST(Rates, FirstReportIsABaselineOnly) {
    Table t;
    EXPECT_EQ(t.add(report("h1", 7, 1, T0, {{"api", 5000}}), M0), Verdict::First);
    wire::ZoneUsage u = usage(t);
    ASSERT_EQ(u.buckets.size(), 1u);
    EXPECT_EQ(u.hosts, 1u);
    EXPECT_EQ(u.buckets[0].hosts, 1u);
    EXPECT_EQ(u.buckets[0].offered_mrps, 0u);  // no rate from a single sample
    EXPECT_EQ(u.buckets[0].rated_hosts, 0u);   // ...and the usage says so
    t.add(report("h1", 7, 2, T0 + 1000, {{"api", 5100}}), M0 + 1000);
    EXPECT_EQ(usage(t).buckets[0].rated_hosts, 1u);
    EXPECT_EQ(usage(t).buckets[0].offered_mrps, 100000u);
}

TEST(Rates, RecentCountsGiveARateFromTheFirstReport) {
    // A collector that just (re)started: the host's report carries its last interval's counts.
    Table t;
    wire::Report r = report("h1", 7, 41, T0, {{"api", 90000, 3000, 500}, {"new", 10}}, 250);
    r.recent_ms = 250;
    r.buckets[0].has_recent = true;
    r.buckets[0].recent = {50, 40, 10, 5};  // 200 r/s offered over the last 250 ms
    EXPECT_EQ(t.add(r, M0), Verdict::First);
    wire::ZoneUsage u = usage(t);
    const wire::UsageBucket* api = find(u, "api");
    ASSERT_NE(api, nullptr);
    EXPECT_EQ(api->offered_mrps, 200000u);
    EXPECT_EQ(api->admitted_mrps, 160000u);
    EXPECT_EQ(api->dropped_mrps, 40000u);
    EXPECT_EQ(api->shadow_dropped_mrps, 20000u);
    EXPECT_EQ(api->rated_hosts, 1u);
    EXPECT_EQ(find(u, "new")->rated_hosts, 0u);  // no recent counts: baseline only
    // The next report is rated from the cumulative counters as usual.
    wire::Report r2 = report("h1", 7, 42, T0 + 250, {{"api", 90025, 3000, 500}, {"new", 20}}, 250);
    EXPECT_EQ(t.add(r2, M0 + 250), Verdict::Accepted);
    EXPECT_EQ(offered(t, "api"), 100000u);
    EXPECT_EQ(offered(t, "new"), 40000u);
}

TEST(Rates, CountedSumsTheDifferencesOfAcceptedReports) {
    // The collector's grl_bucket_*_total: what two hosts counted between accepted reports,
    // never going back when a host restarts, and let go when no host reports the name.
    Options o;
    o.stale_intervals = 3;
    o.forget_intervals = 5;
    Table t(o);
    t.add(report("h1", 7, 1, T0, {{"api", 1000, 100, 10}}), M0);  // baseline only
    t.add(report("h2", 9, 1, T0, {{"api", 50}, {"old", 5}}), M0);
    EXPECT_EQ(t.counted().size(), 2u);
    EXPECT_EQ(t.counted()[0].c[0], 0u);
    t.add(report("h1", 7, 2, T0 + 1000, {{"api", 1300, 130, 15}}), M0 + 1000);
    t.add(report("h2", 9, 2, T0 + 1000, {{"api", 70}, {"old", 5}}), M0 + 1000);
    std::vector<Table::Counted> c = t.counted();
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].bucket, "api");
    EXPECT_EQ(c[0].c[0], 320u);       // offered: 300 + 20
    EXPECT_EQ(c[0].c[1], 320u - 30);  // admitted
    EXPECT_EQ(c[0].c[2], 30u);        // dropped
    EXPECT_EQ(c[0].c[3], 5u);         // shadow_dropped
    EXPECT_EQ(c[1].bucket, "old");
    // h1 restarts (new epoch, counters from zero; the old epoch silent for 1.5 intervals): a new
    // baseline, the sum does not go back.
    EXPECT_EQ(t.add(report("h1", 8, 1, T0 + 2500, {{"api", 10}}), M0 + 2500), Verdict::Restarted);
    EXPECT_EQ(t.counted()[0].c[0], 320u);
    t.add(report("h1", 8, 2, T0 + 3500, {{"api", 110}}), M0 + 3500);
    EXPECT_EQ(t.counted()[0].c[0], 420u);
    // h2 (the only host with "old") goes silent and is forgotten: "old" goes with it.
    for (std::uint64_t k = 4; k <= 8; ++k) {
        t.add(report("h1", 8, k - 1, T0 + 1000 * k, {{"api", 110 + 10 * (k - 3)}}), M0 + 1000 * k);
        t.sweep(M0 + 1000 * k);
    }
    c = t.counted();
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].bucket, "api");
    EXPECT_EQ(c[0].c[0], 470u);
}

TEST(Rates, AReportSoonAfterTheBaselineKeepsIt) {
    // nginx reports at once when it reconnects, then again at its next tick, maybe 30 ms
    // later: a rate over 30 ms would be noise, so the baseline stays.
    Table t;
    wire::Report r = report("h1", 7, 10, T0, {{"api", 1000}}, 250);
    r.recent_ms = 250;
    r.buckets[0].has_recent = true;
    r.buckets[0].recent = {25, 25, 0, 0};  // 100 r/s
    t.add(r, M0);
    EXPECT_EQ(t.add(report("h1", 7, 11, T0 + 30, {{"api", 1000}}, 250), M0 + 30), Verdict::TooSoon);
    EXPECT_EQ(offered(t, "api"), 100000u);  // not 0 r/s from 30 ms without a request
    EXPECT_EQ(t.add(report("h1", 7, 11, T0 + 40, {{"api", 1001}}, 250), M0 + 40),
              Verdict::Duplicate);  // its seq still counts
    EXPECT_EQ(t.add(report("h1", 7, 12, T0 + 280, {{"api", 1028}}, 250), M0 + 280),
              Verdict::Accepted);
    EXPECT_EQ(offered(t, "api"), 100000u);  // 28 over 280 ms
}

TEST(Rates, AShorterIntervalAfterAReloadIsNotTooSoon) {
    Table t;
    t.add(report("h1", 7, 1, T0, {{"api", 0}}, 1000), M0);
    t.add(report("h1", 7, 2, T0 + 1000, {{"api", 100}}, 1000), M0 + 1000);
    // grl_report_interval 1s -> 250ms: reports now come every 250 ms.
    EXPECT_EQ(t.add(report("h1", 7, 3, T0 + 1250, {{"api", 150}}, 250), M0 + 1250),
              Verdict::Accepted);
    EXPECT_EQ(offered(t, "api"), 200000u);
    EXPECT_EQ(t.add(report("h1", 7, 4, T0 + 1500, {{"api", 200}}, 250), M0 + 1500),
              Verdict::Accepted);
}

TEST(Rates, RecentCountsRateABucketNewToTheHost) {
    Table t;
    t.add(report("h1", 7, 1, T0, {{"api", 100}}), M0);
    wire::Report r = report("h1", 7, 2, T0 + 1000, {{"api", 200}, {"emergency", 30}});
    r.recent_ms = 1000;
    r.buckets[1].has_recent = true;
    r.buckets[1].recent = {30, 30, 0, 0};
    EXPECT_EQ(t.add(r, M0 + 1000), Verdict::Accepted);
    EXPECT_EQ(offered(t, "emergency"), 30000u);
    EXPECT_EQ(offered(t, "api"), 100000u);
}

TEST(Rates, RateIsCounterDeltaOverSenderTime) {
    Table t;
    t.add(report("h1", 7, 1, T0, {{"api", 1000, 100, 7}}), M0);
    // 150 more offered, 50 more dropped, 30 more shadow drops in 1.5 s (sender clock), received
    // 1.6 s later (queueing at the receiver must not distort the rate).
    EXPECT_EQ(t.add(report("h1", 7, 2, T0 + 1500, {{"api", 1150, 150, 37}}), M0 + 1600),
              Verdict::Accepted);
    wire::ZoneUsage u = usage(t);
    const wire::UsageBucket* b = find(u, "api");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->offered_mrps, 100000u);  // 150 / 1.5 s = 100 r/s
    EXPECT_EQ(b->dropped_mrps, 33333u);   // 50 / 1.5 s
    EXPECT_EQ(b->admitted_mrps, 100000u - 33333u);
    EXPECT_EQ(b->shadow_dropped_mrps, 20000u);  // 30 / 1.5 s
}

TEST(Rates, DuplicatesAndReorderedReportsChangeNothing) {
    Table t;
    t.add(report("h1", 7, 1, T0, {{"api", 0}}), M0);
    t.add(report("h1", 7, 2, T0 + 1000, {{"api", 100}}), M0 + 1000);
    t.add(report("h1", 7, 3, T0 + 2000, {{"api", 300}}), M0 + 2000);
    EXPECT_EQ(offered(t, "api"), 200000u);
    // The same report again, and an older one arriving late.
    EXPECT_EQ(t.add(report("h1", 7, 3, T0 + 2000, {{"api", 300}}), M0 + 2100), Verdict::Duplicate);
    EXPECT_EQ(t.add(report("h1", 7, 2, T0 + 1000, {{"api", 100}}), M0 + 2200), Verdict::Duplicate);
    EXPECT_EQ(offered(t, "api"), 200000u);
    // The next report still measures from seq 3.
    t.add(report("h1", 7, 4, T0 + 3000, {{"api", 350}}), M0 + 3000);
    EXPECT_EQ(offered(t, "api"), 50000u);
}

TEST(Rates, LostReportsOnlyWidenTheInterval) {
    Table t;
    t.add(report("h1", 7, 1, T0, {{"api", 1000}}), M0);
    // seq 2..4 lost; 4 s later 800 more requests: 200 r/s, not 800.
    t.add(report("h1", 7, 5, T0 + 4000, {{"api", 1800}}), M0 + 4000);
    EXPECT_EQ(offered(t, "api"), 200000u);
}

TEST(Rates, NewEpochIsACounterResetAndHoldsTheLastRate) {
    Table t;
    t.add(report("h1", 7, 10, T0, {{"api", 5000}}), M0);
    t.add(report("h1", 7, 11, T0 + 1000, {{"api", 5100}}), M0 + 1000);
    EXPECT_EQ(offered(t, "api"), 100000u);
    // nginx restarted: new epoch, counters from zero, seq from 1. No negative rate, no spike:
    // the last rate is held until the new epoch has two samples.
    EXPECT_EQ(t.add(report("h1", 8, 1, T0 + 2500, {{"api", 30}}), M0 + 2500), Verdict::Restarted);
    EXPECT_EQ(offered(t, "api"), 100000u);
    EXPECT_EQ(t.add(report("h1", 8, 2, T0 + 3500, {{"api", 90}}), M0 + 3500), Verdict::Accepted);
    EXPECT_EQ(offered(t, "api"), 60000u);
    // A late report of the previous run is held aside, not taken.
    EXPECT_EQ(t.add(report("h1", 7, 11, T0 + 1000, {{"api", 5100}}), M0 + 3550), Verdict::OldEpoch);
    EXPECT_EQ(t.add(report("h1", 7, 12, T0 + 1900, {{"api", 5190}}), M0 + 3600), Verdict::Pending);
    EXPECT_EQ(offered(t, "api"), 60000u);
}

// Forged reports with a real host's name, new epochs and a long interval must not silence
// the host: while its genuine epoch keeps reporting they are held aside (Pending), never taken,
// however many there are; an epoch that keeps reporting beside it is a conflict.
TEST(Rates, ForgedEpochsDoNotSilenceAHostThatKeepsReporting) {
    Table t;
    std::uint64_t c = 5000;
    std::uint64_t seq = 10;
    for (int i = 0; i < 3; ++i, c += 100) {
        t.add(report("h1", 7, seq++, T0 + i * 1000, {{"api", c}}), M0 + i * 1000);
    }
    EXPECT_EQ(offered(t, "api"), 100000u);
    for (std::uint64_t e = 99; e < 109; ++e) {
        EXPECT_EQ(t.add(report("h1", e, 1, T0 + 2500, {{"api", 0}}, 60000), M0 + 2500),
                  Verdict::Pending);
    }
    // The genuine host goes on (and its load rises to 300 r/s): rated at once.
    c += 200;
    EXPECT_EQ(t.add(report("h1", 7, seq++, T0 + 3000, {{"api", c}}), M0 + 3000), Verdict::Accepted);
    c += 300;
    EXPECT_EQ(t.add(report("h1", 7, seq++, T0 + 4000, {{"api", c}}), M0 + 4000), Verdict::Accepted);
    EXPECT_EQ(offered(t, "api"), 300000u);
    auto sums = t.summaries(M0 + 4000);
    ASSERT_EQ(sums.size(), 1u);
    EXPECT_EQ(sums[0].epoch, 7u);
    EXPECT_EQ(sums[0].interval_ms, 1000u);
    // A forger that keeps sending: counted as a conflict, never switching.
    EXPECT_EQ(t.add(report("h1", 108, 2, T0 + 4200, {{"api", 0}}, 60000), M0 + 4200),
              Verdict::Pending);
    // ...also with a short claimed interval: an epoch that reported twice is judged by its own.
    for (std::uint64_t k = 1; k <= 2; ++k) {
        EXPECT_EQ(t.add(report("h1", 200, k, T0 + 4100 + 200 * k, {{"api", 0}}, 100),
                        M0 + 4100 + 200 * k),
                  Verdict::Pending);
    }
    EXPECT_EQ(t.add(report("h1", 200, 3, T0 + 4700, {{"api", 0}}, 100), M0 + 4700),
              Verdict::Conflict);
    c += 300;
    EXPECT_EQ(t.add(report("h1", 7, seq++, T0 + 5000, {{"api", c}}), M0 + 5000), Verdict::Accepted);
    EXPECT_EQ(offered(t, "api"), 300000u);
}

// A forged epoch that came while the host was silent takes it; the genuine epoch takes it back
// at its first report an interval after the forged one's, and is rated again at the next.
TEST(Rates, AForgedEpochTakenDuringASilenceIsTakenBack) {
    Table t;
    t.add(report("h1", 7, 1, T0, {{"api", 1000}}), M0);
    t.add(report("h1", 7, 2, T0 + 1000, {{"api", 1100}}), M0 + 1000);
    EXPECT_EQ(t.add(report("h1", 99, 1, T0 + 2600, {{"api", 0}}, 60000), M0 + 2600),
              Verdict::Restarted);
    EXPECT_EQ(t.add(report("h1", 98, 1, T0 + 2700, {{"api", 0}}, 60000), M0 + 2700),
              Verdict::Pending);
    EXPECT_EQ(t.add(report("h1", 7, 3, T0 + 3000, {{"api", 1300}}), M0 + 3000),
              Verdict::Pending);  // the forged epoch reported 0.4 s ago
    EXPECT_EQ(t.add(report("h1", 7, 4, T0 + 4000, {{"api", 1400}}), M0 + 4000), Verdict::Reclaimed);
    EXPECT_EQ(t.add(report("h1", 7, 5, T0 + 5000, {{"api", 1500}}), M0 + 5000), Verdict::Accepted);
    EXPECT_EQ(offered(t, "api"), 100000u);
    EXPECT_EQ(t.summaries(M0 + 5000)[0].epoch, 7u);
}

// A genuine restart whose old epoch is really gone is taken (the old rate held meanwhile), and
// an old epoch that reports again once the new one reports steadily is a conflict.
TEST(Rates, EstablishedEpochIsNotReclaimed) {
    Table t;
    t.add(report("h1", 7, 1, T0, {{"api", 1000}}), M0);
    t.add(report("h1", 7, 2, T0 + 1000, {{"api", 1100}}), M0 + 1000);
    // nginx restarts at once: its first report comes before the old epoch's silence.
    EXPECT_EQ(t.add(report("h1", 8, 1, T0 + 1200, {{"api", 5}}), M0 + 1200), Verdict::Pending);
    EXPECT_EQ(t.add(report("h1", 8, 2, T0 + 2200, {{"api", 10}}), M0 + 2200), Verdict::Pending);
    EXPECT_EQ(offered(t, "api"), 100000u);  // held
    EXPECT_EQ(t.add(report("h1", 8, 3, T0 + 3200, {{"api", 60}}), M0 + 3200), Verdict::Restarted);
    for (int i = 1; i <= 3; ++i) {
        t.add(report("h1", 8, 3 + i, T0 + 3200 + i * 1000, {{"api", 60 + 50u * i}}),
              M0 + 3200 + i * 1000);
    }
    EXPECT_EQ(offered(t, "api"), 50000u);
    EXPECT_EQ(t.add(report("h1", 7, 3, T0 + 6300, {{"api", 1200}}), M0 + 6300), Verdict::Pending);
    t.add(report("h1", 8, 7, T0 + 6800, {{"api", 300}}), M0 + 6800);
    EXPECT_EQ(t.add(report("h1", 7, 4, T0 + 7300, {{"api", 1300}}), M0 + 7300), Verdict::Conflict);
    EXPECT_EQ(t.summaries(M0 + 7300)[0].epoch, 8u);
}

// The table's bytes are bounded: hosts of many buckets are refused once max_bytes is held,
// the hosts held keep being rated, and a forgotten host returns its bytes.
TEST(Rates, MemoryIsBoundedInBytes) {
    Options o;
    o.max_bytes = 4 << 20;
    o.forget_intervals = 3;
    Table t(o);
    t.add(report("genuine", 7, 1, T0, {{"api", 1000}}), M0);
    std::vector<B> many;
    std::vector<std::string> names;
    for (int i = 0; i < 4096; ++i) names.push_back("n" + std::to_string(i));
    for (const std::string& n : names) many.push_back({n.c_str(), 1});
    int refused = 0;
    for (int h = 0; h < 40; ++h) {
        Verdict v = t.add(report("inv" + std::to_string(h), 1, 1, T0, many), M0);
        refused += v == Verdict::MemoryFull;
    }
    EXPECT_GT(refused, 0);
    EXPECT_LE(t.bytes_held(), o.max_bytes);
    EXPECT_GT(t.bytes_held(), o.max_bytes / 2);
    EXPECT_EQ(t.add(report("genuine", 7, 2, T0 + 1000, {{"api", 1100}}), M0 + 1000),
              Verdict::Accepted);
    // The invented hosts fall silent and are forgotten: their bytes are returned.
    for (std::uint64_t k = 2; k <= 5; ++k) {
        t.add(report("genuine", 7, k + 1, T0 + 1000 * k, {{"api", 1000 + 100 * k}}), M0 + 1000 * k);
        t.sweep(M0 + 1000 * k);
    }
    EXPECT_EQ(t.hosts(), 1u);
    EXPECT_LT(t.bytes_held(), 64u * 1024);
}

// A flood of invented host names cannot grow the table past max_hosts: new hosts are
// refused, known ones keep being rated, and a forgotten host makes room.
TEST(Rates, HostsBeyondTheMaximumAreRefused) {
    Options o;
    o.max_hosts = 2;
    Table t(o);
    EXPECT_EQ(t.add(report("h1", 1, 1, T0, {{"api", 0}}), M0), Verdict::First);
    EXPECT_EQ(t.add(report("h2", 1, 1, T0, {{"api", 0}}), M0), Verdict::First);
    EXPECT_EQ(t.add(report("h3", 1, 1, T0, {{"api", 0}}), M0), Verdict::Full);
    EXPECT_EQ(t.hosts(), 2u);
    EXPECT_EQ(t.add(report("h1", 1, 2, T0 + 1000, {{"api", 100}}), M0 + 1000), Verdict::Accepted);
    EXPECT_EQ(offered(t, "api"), 100000u);
    // h2 silent: forgotten after 30 intervals; then h3 gets in.
    t.add(report("h1", 1, 3, T0 + 40000, {{"api", 4000}}), M0 + 40000);
    t.sweep(M0 + 40000);
    EXPECT_EQ(t.hosts(), 1u);
    EXPECT_EQ(t.add(report("h3", 1, 1, T0 + 40000, {{"api", 0}}), M0 + 40000), Verdict::First);
}

// The cut of a zone usage to the message's bucket limit keeps the buckets most hosts
// report, not the first names: "aaa-junk" buckets of one host cannot push "zz-api" out.
TEST(Rates, UsageCutKeepsTheBucketsWithTheMostHosts) {
    std::vector<wire::UsageBucket> b(5);
    const char* names[] = {"aaa-junk1", "aaa-junk2", "aaa-junk3", "zz-api", "zz-web"};
    const std::uint64_t hosts[] = {1, 1, 2, 40, 40};
    for (int i = 0; i < 5; ++i) {
        b[i].name = names[i];
        b[i].hosts = hosts[i];
    }
    EXPECT_EQ(keep_busiest(b, 3), 2u);
    ASSERT_EQ(b.size(), 3u);
    EXPECT_EQ(b[0].name, "aaa-junk3");
    EXPECT_EQ(b[1].name, "zz-api");
    EXPECT_EQ(b[2].name, "zz-web");
    EXPECT_EQ(keep_busiest(b, 3), 0u);
}

TEST(Rates, CounterGoingBackwardsWithinAnEpochIsAResetOfThatBucket) {
    Table t;
    t.add(report("h1", 7, 1, T0, {{"api", 1000}, {"web", 1000}}), M0);
    t.add(report("h1", 7, 2, T0 + 1000, {{"api", 1100}, {"web", 1200}}), M0 + 1000);
    t.add(report("h1", 7, 3, T0 + 2000, {{"api", 1200}, {"web", 5}}), M0 + 2000);
    EXPECT_EQ(offered(t, "api"), 100000u);
    EXPECT_EQ(offered(t, "web"), 200000u);  // held, not an underflow
    t.add(report("h1", 7, 4, T0 + 3000, {{"api", 1300}, {"web", 55}}), M0 + 3000);
    EXPECT_EQ(offered(t, "web"), 50000u);
}

TEST(Rates, SenderClockStepsFallBackToReceiverTime) {
    Table t;
    t.add(report("h1", 7, 1, T0, {{"api", 0}}), M0);
    // Sender's clock stepped back by a minute: our 1 s is used.
    t.add(report("h1", 7, 2, T0 - 60000, {{"api", 100}}), M0 + 1000);
    EXPECT_EQ(offered(t, "api"), 100000u);
    // ...and forward by an hour: again ours.
    t.add(report("h1", 7, 3, T0 + 3600000, {{"api", 300}}), M0 + 2000);
    EXPECT_EQ(offered(t, "api"), 200000u);
}

TEST(Rates, NoTimeElapsedKeepsTheBaseline) {
    Table t;
    t.add(report("h1", 7, 1, T0, {{"api", 0}}), M0);
    EXPECT_EQ(t.add(report("h1", 7, 2, T0, {{"api", 50}}), M0), Verdict::NoTime);
    t.add(report("h1", 7, 3, T0 + 1000, {{"api", 100}}), M0 + 1000);
    EXPECT_EQ(offered(t, "api"), 100000u);  // 100 over 1 s from seq 1's baseline
}

TEST(Rates, HostsAreSummedWithDefinitionsAndHostNames) {
    Table t;
    for (std::uint64_t s = 1; s <= 2; ++s) {
        std::uint64_t k = s - 1;
        t.add(report("h1", 1, s, T0 + 1000 * k, {{"api", 100 * k}, {"web", 10 * k}}),
              M0 + 1000 * k);
        t.add(report("h2", 2, s, T0 + 1000 * k, {{"api", 300 * k}}), M0 + 1000 * k);
        B odd{"api", 0};
        odd.limit = 50000;  // h3 disagrees on the limit
        odd.offered = 600 * k;
        t.add(report("h3", 3, s, T0 + 1000 * k, {odd}), M0 + 1000 * k);
    }
    wire::ZoneUsage u = usage(t);
    EXPECT_EQ(u.hosts, 3u);
    EXPECT_EQ(u.host_names, (std::vector<std::string>{"h1", "h2", "h3"}));
    const wire::UsageBucket* api = find(u, "api");
    ASSERT_NE(api, nullptr);
    EXPECT_EQ(api->offered_mrps, 1000000u);
    EXPECT_EQ(api->hosts, 3u);
    EXPECT_TRUE(api->host_names.empty());  // every host reports it
    ASSERT_EQ(api->definitions.size(), 2u);
    EXPECT_EQ(api->definitions[0].hosts, 2u);  // most common first
    EXPECT_EQ(api->definitions[0].def.limit_mrps, 100000u);
    EXPECT_EQ(api->definitions[1].hosts, 1u);
    EXPECT_EQ(api->definitions[1].def.limit_mrps, 50000u);
    const wire::UsageBucket* web = find(u, "web");
    ASSERT_NE(web, nullptr);
    EXPECT_EQ(web->offered_mrps, 10000u);
    EXPECT_EQ(web->host_names, (std::vector<std::string>{"h1"}));  // a subset: named
}

TEST(Rates, SilentHostsLeaveTheSumsThenAreForgotten) {
    Options o;
    o.stale_intervals = 3;
    o.forget_intervals = 10;
    Table t(o);
    for (std::uint64_t k = 0; k < 2; ++k) {
        t.add(report("h1", 1, k + 1, T0 + 1000 * k, {{"api", 100 * k}}), M0 + 1000 * k);
        t.add(report("h2", 2, k + 1, T0 + 1000 * k, {{"api", 100 * k}}, 250), M0 + 1000 * k);
    }
    EXPECT_EQ(offered(t, "api"), 200000u);
    // h2 reports every 250 ms: silent for 800 ms it is stale, h1 (1 s) is not.
    SweepResult s = t.sweep(M0 + 1000 + 800);
    EXPECT_EQ(s.went_stale, std::vector<std::string>{"h2"});
    EXPECT_EQ(offered(t, "api"), 100000u);
    wire::ZoneUsage u = usage(t);
    EXPECT_EQ(u.hosts, 1u);
    EXPECT_EQ(u.stale_hosts, 1u);
    EXPECT_TRUE(t.sweep(M0 + 1000 + 900).went_stale.empty());  // reported once
    // h2 comes back: fresh again at once, its next delta measured from its last baseline.
    t.add(report("h2", 2, 3, T0 + 2000, {{"api", 200}}, 250), M0 + 2000);
    EXPECT_EQ(offered(t, "api"), 200000u);
    // Both silent: stale, then forgotten (h2 after 10 x 250 ms, h1 after 10 s).
    s = t.sweep(M0 + 2000 + 2600);
    EXPECT_EQ(s.forgotten, std::vector<std::string>{"h2"});
    EXPECT_EQ(t.hosts(), 1u);
    s = t.sweep(M0 + 1000 + 10001);
    EXPECT_EQ(s.forgotten, std::vector<std::string>{"h1"});
    EXPECT_EQ(t.hosts(), 0u);
    EXPECT_TRUE(usage(t).buckets.empty());
}

TEST(Rates, ReloadAddingRemovingAndReorderingBuckets) {
    Table t;
    t.add(report("h1", 1, 1, T0, {{"a", 0}, {"b", 0}, {"c", 0}}), M0);
    t.add(report("h1", 1, 2, T0 + 1000, {{"a", 10}, {"b", 20}, {"c", 30}}), M0 + 1000);
    EXPECT_EQ(t.entries(), 3u);
    // Reload: c removed, d added, order changed; same epoch.
    t.add(report("h1", 1, 3, T0 + 2000, {{"d", 5}, {"b", 40}, {"a", 11}}), M0 + 2000);
    wire::ZoneUsage u = usage(t);
    ASSERT_EQ(u.buckets.size(), 3u);
    EXPECT_EQ(find(u, "a")->offered_mrps, 1000u);
    EXPECT_EQ(find(u, "b")->offered_mrps, 20000u);
    EXPECT_EQ(find(u, "d")->offered_mrps, 0u);  // new: baseline only
    EXPECT_EQ(find(u, "c"), nullptr);
    t.add(report("h1", 1, 4, T0 + 3000, {{"d", 25}, {"b", 40}, {"a", 11}}), M0 + 3000);
    EXPECT_EQ(offered(t, "d"), 20000u);
}

TEST(Rates, ManyHostsJoiningAndLeaving) {
    Options o;
    o.forget_intervals = 5;
    Table t(o);
    // 200 hosts at 10 r/s each; every 10th host restarts once in the middle; half leave.
    for (std::uint64_t k = 0; k < 6; ++k) {
        for (int h = 0; h < 200; ++h) {
            if (k >= 4 && h % 2 == 1) continue;  // odd hosts stop reporting after k = 3
            std::uint64_t epoch = (h % 10 == 0 && k >= 3) ? 2000 + h : 1000 + h;
            std::uint64_t base = (h % 10 == 0 && k >= 3) ? (k - 3) * 10 : k * 10;
            std::uint64_t seq = (h % 10 == 0 && k >= 3) ? k - 2 : k + 1;
            t.add(report("h" + std::to_string(h), epoch, seq, T0 + 1000 * k, {{"api", base}}),
                  M0 + 1000 * k);
        }
        t.sweep(M0 + 1000 * k);
    }
    EXPECT_EQ(offered(t, "api"), 200u * 10000u);  // odd hosts still within 3 intervals
    t.sweep(M0 + 5000 + 1500);                    // odd hosts silent for 3.5 s: out of the sums
    EXPECT_EQ(t.fresh_hosts(), 100u);
    EXPECT_EQ(offered(t, "api"), 100u * 10000u);
    t.sweep(M0 + 3000 + 5001);  // ...and forgotten after 5 s
    EXPECT_EQ(t.hosts(), 100u);
}

}  // namespace
}  // namespace grl::rates
