// The policies on synthetic histories with known answers (docs/rlc.md, "Policies").
#include <gtest/gtest.h>

#include <cstdio>
#include <unistd.h>

#include <fstream>

#include "policy.h"
#include "rlc_fixtures.h"

using namespace grl;
using namespace grl::rlc;
using namespace grl::rlc::fixtures;

namespace {

constexpr std::int64_t kUntil = kEpoch + 5 * kWeek;  // the end of every window here
constexpr std::int64_t kSince = kUntil - 4 * kWeek;  // four weeks of history

Params params(std::initializer_list<std::pair<const char*, const char*>> kv) {
    Params p;
    for (auto [k, v] : kv) p[k] = Param{v, std::string("test: field \"") + k + "\""};
    return p;
}

Proposal run(const std::string& policy, const Params& p, const std::vector<Series>& history,
             Current current = {}, bool force = false, std::int64_t since = kSince) {
    auto pol = find_policy(policy)->make(p, PolicyEnv{"", "test rule", 0.5});
    PolicyInput in;
    in.bucket = history.empty() ? "b" : history.front().key.bucket;
    for (const auto& s : history) in.instances.push_back(&s);
    in.since_s = since;
    in.until_s = kUntil;
    in.current = current;
    in.force = force;
    return pol->propose(in);
}

std::uint64_t rps(double v) {
    return static_cast<std::uint64_t>(v * 1000);
}

// ---- peak -----------------------------------------------------------------------------

TEST(PeakPolicy, FlatHistoryGivesTheRatePlusTheBuffer) {
    auto p = run("peak", {}, {make_series(global("api"), kSince, kUntil, flat(100))});
    ASSERT_TRUE(p.new_mrps) << p.declined;
    EXPECT_EQ(*p.new_mrps, rps(120));  // 100 x (1 + 0.2)
    EXPECT_EQ(p.policy, "peak");
    EXPECT_EQ(p.evidence.bound_by, "global");
    EXPECT_EQ(p.evidence.samples, static_cast<std::size_t>(4 * kWeek / 60));
    EXPECT_DOUBLE_EQ(p.evidence.basis_rps, 100);
    EXPECT_EQ(p.evidence.basis, "p99.9 of peak offered");
    EXPECT_EQ(p.evidence.since_s, kSince);
    EXPECT_EQ(p.evidence.until_s, kUntil);
}

TEST(PeakPolicy, WeeklyPatternIsCoveredByItsPeak) {
    // 200 r/s two hours every weekday (6% of the samples) over a base of 100.
    auto p = run("peak", params({{"buffer", "0.25"}}),
                 {make_series(global("api"), kSince, kUntil, weekly(100, 100))});
    ASSERT_TRUE(p.new_mrps) << p.declined;
    EXPECT_EQ(*p.new_mrps, rps(250));
}

TEST(PeakPolicy, OneOffSpikeIsIgnoredByAPercentileButNotByMax) {
    // A 10-minute spike to 1000 r/s: 10 of 40,320 samples, under the top 0.1% (40 samples).
    std::vector<Series> h = {make_series(global("api"), kSince, kUntil,
                                         spike(100, kSince + 10 * kDay, 10 * kMin, 1000))};
    auto pct = run("peak", params({{"percentile", "99.9"}}), h);
    auto max = run("peak", params({{"percentile", "max"}}), h);
    ASSERT_TRUE(pct.new_mrps && max.new_mrps);
    EXPECT_EQ(*pct.new_mrps, rps(120));
    EXPECT_EQ(*max.new_mrps, rps(1200));
    EXPECT_EQ(max.evidence.basis, "max of peak offered");
}

TEST(PeakPolicy, GrowthRampGivesTheLatestPeak) {
    // 100 -> 200 r/s over four weeks: the highest samples are the last ones.
    auto p = run("peak", params({{"percentile", "max"}, {"buffer", "0"}}),
                 {make_series(global("api"), kSince, kUntil, ramp(kSince, 100, 25))});
    ASSERT_TRUE(p.new_mrps) << p.declined;
    EXPECT_EQ(*p.new_mrps, rps(200));  // 199.99... rounded up to whole r/s
}

TEST(PeakPolicy, SmallGapsAreToleratedLargeOnesDecline) {
    // One minute in 20 missing (95% coverage), then one in 2 (50%).
    auto few = run("peak", {},
                   {make_series(global("api"), kSince, kUntil, flat(100),
                                [](std::int64_t t) { return (t / 60) % 20 != 0; })});
    ASSERT_TRUE(few.new_mrps) << few.declined;
    EXPECT_EQ(*few.new_mrps, rps(120));
    EXPECT_NEAR(few.evidence.coverage, 0.95, 0.001);

    auto many = run("peak", {},
                    {make_series(global("api"), kSince, kUntil, flat(100),
                                 [](std::int64_t t) { return (t / 60) % 2 != 0; })});
    EXPECT_FALSE(many.new_mrps);
    EXPECT_NE(many.declined.find("gaps: samples cover 50.0%"), std::string::npos) << many.declined;
    EXPECT_NE(many.declined.find("global"), std::string::npos) << many.declined;
}

TEST(PeakPolicy, CounterResetsAreExcludedAndCounted) {
    Series s = make_series(global("api"), kSince, kUntil, flat(100));
    // Three restarts read as negative rates, with huge peaks: must not count.
    for (std::size_t i : {1000u, 2000u, 3000u}) {
        s.samples[i].offered = {-50000, 1e9};
        s.samples[i].admitted = {-50000, 1e9};
    }
    auto p = run("peak", params({{"percentile", "max"}}), {s});
    ASSERT_TRUE(p.new_mrps) << p.declined;
    EXPECT_EQ(*p.new_mrps, rps(120));
    EXPECT_EQ(p.evidence.resets, 3u);

    // More than 5% of the samples inconsistent: the history is not trusted.
    for (std::size_t i = 0; i < s.samples.size(); i += 10) s.samples[i].admitted = {1000, 1000};
    auto bad = run("peak", {}, {s});
    EXPECT_FALSE(bad.new_mrps);
    EXPECT_NE(bad.declined.find("counter resets"), std::string::npos) << bad.declined;
}

TEST(PeakPolicy, NewBucketWithOneDayOfHistoryDeclines) {
    auto p = run("peak", {}, {make_series(global("new"), kUntil - kDay, kUntil, flat(100))});
    EXPECT_FALSE(p.new_mrps);
    EXPECT_NE(p.declined.find("too little history: 1.0 d"), std::string::npos) << p.declined;
    // ...unless the rule accepts one day.
    auto ok = run("peak", params({{"min_history", "1d"}}),
                  {make_series(global("new"), kUntil - kDay, kUntil, flat(100))});
    ASSERT_TRUE(ok.new_mrps) << ok.declined;
    EXPECT_EQ(*ok.new_mrps, rps(120));
}

TEST(PeakPolicy, ZoneBucketIsBoundByTheBusiestInstance) {
    auto p = run("peak", {},
                 {make_series(zone("api", "eu", "a"), kSince, kUntil, flat(100)),
                  make_series(zone("api", "eu", "b"), kSince, kUntil, flat(300)),
                  make_series(zone("api", "eu", "c"), kSince, kUntil, flat(50))});
    ASSERT_TRUE(p.new_mrps) << p.declined;
    EXPECT_EQ(*p.new_mrps, rps(360));
    EXPECT_EQ(p.evidence.bound_by, "zone eu/b");
    EXPECT_EQ(p.scope, Scope::Zone);
}

TEST(PeakPolicy, AnInstanceGoneQuietIsIgnoredAYoungOneDeclines) {
    // Zone c stopped two weeks ago (removed): ignored, named in the evidence.
    auto gone = run("peak", {},
                    {make_series(zone("api", "eu", "a"), kSince, kUntil, flat(100)),
                     make_series(zone("api", "eu", "c"), kSince, kUntil - 2 * kWeek, flat(500))});
    ASSERT_TRUE(gone.new_mrps) << gone.declined;
    EXPECT_EQ(*gone.new_mrps, rps(120));
    ASSERT_EQ(gone.evidence.notes.size(), 1u);
    EXPECT_EQ(gone.evidence.notes[0].first, "ignored zone eu/c");
    // Zone d joined yesterday: the limit cannot vouch for it yet.
    auto young = run("peak", {},
                     {make_series(zone("api", "eu", "a"), kSince, kUntil, flat(100)),
                      make_series(zone("api", "eu", "d"), kUntil - kDay, kUntil, flat(50))});
    EXPECT_FALSE(young.new_mrps);
    EXPECT_EQ(young.declined.rfind("zone eu/d: too little history", 0), 0u) << young.declined;
}

TEST(PeakPolicy, StepGuardLimitsTheChangeUnlessForced) {
    std::vector<Series> h = {make_series(global("api"), kSince, kUntil, flat(300))};
    Current old{rps(100), Mode::Deny};
    auto guarded = run("peak", {}, h, old);
    ASSERT_TRUE(guarded.new_mrps);
    EXPECT_EQ(*guarded.new_mrps, rps(150));  // +50% of 100 r/s
    ASSERT_EQ(guarded.evidence.clamps.size(), 1u);
    EXPECT_EQ(guarded.evidence.clamps[0], "step guard +50% of 100r/s");
    EXPECT_DOUBLE_EQ(guarded.evidence.raw_rps, 360);

    auto forced = run("peak", {}, h, old, /*force=*/true);
    EXPECT_EQ(*forced.new_mrps, rps(360));
    EXPECT_EQ(forced.evidence.clamps[0], "step guard +50% of 100r/s overridden by --force");

    auto down = run("peak", params({{"step", "20%"}}),
                    {make_series(global("api"), kSince, kUntil, flat(10))}, old);
    EXPECT_EQ(*down.new_mrps, rps(80));  // -20% of 100 r/s
}

TEST(PeakPolicy, SmallChangesKeepTheOldLimit) {
    std::vector<Series> h = {make_series(global("api"), kSince, kUntil, flat(100))};  // 120 r/s
    auto p = run("peak", {}, h, Current{rps(124), Mode::Deny});
    EXPECT_EQ(*p.new_mrps, rps(124));  // -3.2%: under the 5% dead band
    ASSERT_EQ(p.evidence.clamps.size(), 1u);
    EXPECT_EQ(p.evidence.clamps[0], "within 5% of 124r/s: unchanged (min_change)");
    EXPECT_EQ(*run("peak", {}, h, Current{rps(127), Mode::Deny}).new_mrps, rps(120));  // -5.5%
    EXPECT_EQ(
        *run("peak", params({{"min_change", "0"}}), h, Current{rps(124), Mode::Deny}).new_mrps,
        rps(120));
}

TEST(PeakPolicy, FloorAndCeilingAreHardBounds) {
    auto low = run("peak", params({{"floor", "50r/s"}}),
                   {make_series(global("a"), kSince, kUntil, flat(10))});
    EXPECT_EQ(*low.new_mrps, rps(50));
    EXPECT_EQ(low.evidence.clamps.at(0), "floor 50r/s");
    auto high = run("peak", params({{"ceiling", "100r/s"}}),
                    {make_series(global("a"), kSince, kUntil, flat(1000))});
    EXPECT_EQ(*high.new_mrps, rps(100));
    EXPECT_EQ(high.evidence.clamps.at(0), "ceiling 100r/s");
}

TEST(PeakPolicy, SlowBucketsAreRoundedUpToWholeRequestsPerMinute) {
    auto p = run("peak", params({{"buffer", "0"}}),
                 {make_series(global("a"), kSince, kUntil, flat(0.1))});
    ASSERT_TRUE(p.new_mrps);
    EXPECT_EQ(format_limit(*p.new_mrps), "6r/m");
}

TEST(PeakPolicy, BadParametersNameTheirOrigin) {
    try {
        run("peak", params({{"buffer", "lots"}}), {});
        FAIL() << "accepted buffer: lots";
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("test: field \"buffer\": invalid value \"lots\"", 0),
                  0u)
            << e.what();
    }
    try {
        run("peak", params({{"bufer", "0.1"}}), {});
        FAIL() << "accepted an unknown parameter";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("unknown parameter for policy peak"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_THROW(run("peak", params({{"percentile", "101"}}), {}), ConfigError);
    EXPECT_THROW(run("peak", params({{"floor", "5/s"}}), {}), ConfigError);
}

// ---- forecast -------------------------------------------------------------------------

TEST(ForecastPolicy, FlatHistoryForecastsTheSame) {
    auto p = run("forecast", {}, {make_series(global("api"), kSince, kUntil, flat(100))});
    ASSERT_TRUE(p.new_mrps) << p.declined;
    EXPECT_EQ(*p.new_mrps, rps(120));
    EXPECT_EQ(p.evidence.basis, "forecast peak of the next 7 d");
}

TEST(ForecastPolicy, GrowthRampIsCarriedIntoNextWeek) {
    // 100 r/s growing 25 r/s a week: by the end of next week 100 + 5 x 25 = 225 r/s,
    // above anything seen (peak says 200).
    std::vector<Series> h = {make_series(global("api"), kSince, kUntil, ramp(kSince, 100, 25))};
    auto f = run("forecast", params({{"buffer", "0"}}), h);
    ASSERT_TRUE(f.new_mrps) << f.declined;
    EXPECT_NEAR(f.evidence.basis_rps, 225, 0.1);
    EXPECT_EQ(*f.new_mrps, rps(225));
    auto peak = run("peak", params({{"buffer", "0"}, {"percentile", "max"}}), h);
    EXPECT_EQ(*peak.new_mrps, rps(200));
    bool trend = false;
    for (const auto& [k, v] : f.evidence.notes) trend |= k == "trend" && v == "+25.00 r/s per week";
    EXPECT_TRUE(trend);
}

TEST(ForecastPolicy, WeeklyPatternKeepsItsPeakHour) {
    auto p = run("forecast", params({{"buffer", "0"}}),
                 {make_series(global("api"), kSince, kUntil, weekly(100, 100))});
    ASSERT_TRUE(p.new_mrps) << p.declined;
    EXPECT_EQ(*p.new_mrps, rps(200));
    // kUntil is a Monday 00:00: the first peak hour of next week is Monday 12:00.
    bool hour = false;
    for (const auto& [k, v] : p.evidence.notes)
        hour |= k == "peak hour" && v == "+12 h after the window";
    EXPECT_TRUE(hour);
}

TEST(ForecastPolicy, OneOffSpikeIsOutvotedByTheOtherWeeks) {
    auto p = run(
        "forecast", params({{"buffer", "0"}}),
        {make_series(global("api"), kSince, kUntil, spike(100, kSince + 10 * kDay, kHour, 1000))});
    ASSERT_TRUE(p.new_mrps) << p.declined;
    // The trend moves by the spike's weight in one week's mean (900 / 168 r/s) only.
    EXPECT_LT(*p.new_mrps, rps(110));
}

TEST(ForecastPolicy, ShortHistoryFallsBackToPeakAndSaysSo) {
    auto p = run("forecast", params({{"min_history", "1d"}}),
                 {make_series(global("new"), kUntil - 10 * kDay, kUntil, flat(100))});
    ASSERT_TRUE(p.new_mrps) << p.declined;
    EXPECT_EQ(*p.new_mrps, rps(120));
    EXPECT_EQ(p.evidence.basis, "p99.9 of peak offered");
    ASSERT_FALSE(p.evidence.notes.empty());
    EXPECT_EQ(p.evidence.notes.back().first, "fell back to peak");
    EXPECT_NE(p.evidence.notes.back().second.find("10.0 d of history, forecast needs 2 weeks"),
              std::string::npos);
    // One day of history: peak declines too.
    auto one = run("forecast", {}, {make_series(global("new"), kUntil - kDay, kUntil, flat(100))});
    EXPECT_FALSE(one.new_mrps);
    EXPECT_NE(one.declined.find("too little history"), std::string::npos);
}

TEST(ForecastPolicy, GapsDecline) {
    auto p = run("forecast", {},
                 {make_series(global("api"), kSince, kUntil, flat(100),
                              [](std::int64_t t) { return (t / kHour) % 3 != 0; })});
    EXPECT_FALSE(p.new_mrps);
    EXPECT_NE(p.declined.find("gaps"), std::string::npos) << p.declined;
}

// ---- fixed ----------------------------------------------------------------------------

std::string write_temp(const std::string& text) {
    char name[] = "/tmp/rlc-quota-XXXXXX";
    int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    ::close(fd);
    std::ofstream(name) << text;
    return name;
}

TEST(FixedPolicy, QuotaFromTheFileWhateverTheTraffic) {
    std::string f = write_temp("quotas:\n  partner-acme: 200r/s\n  partner-beta: 90r/m\n");
    auto pol = make_fixed_policy({}, PolicyEnv{f, "rule 1", 0.5});
    Series s = make_series(global("partner-acme"), kSince, kUntil, flat(5000));
    PolicyInput in;
    in.bucket = "partner-acme";
    in.instances = {&s};
    in.since_s = kSince;
    in.until_s = kUntil;
    in.current = {rps(10), Mode::Deny};
    auto p = pol->propose(in);
    ASSERT_TRUE(p.new_mrps) << p.declined;
    EXPECT_EQ(*p.new_mrps, rps(200));  // no step guard, no buffer: a contract
    EXPECT_EQ(p.evidence.basis, "quota at " + f + ":2");
    in.bucket = "partner-beta";
    EXPECT_EQ(format_limit(*pol->propose(in).new_mrps), "90r/m");  // 1.5 r/s
    in.bucket = "other";
    auto none = pol->propose(in);
    EXPECT_FALSE(none.new_mrps);
    EXPECT_EQ(none.declined, "no quota for this bucket in " + f);
    std::remove(f.c_str());
}

TEST(FixedPolicy, BadQuotaFileNamesFileLineAndBucket) {
    auto err = [](const std::string& text) {
        try {
            parse_quotas(text, "quotas.yaml");
        } catch (const ConfigError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_EQ(
        err("quotas:\n  a: 1r/s\n  b: 50/s\n"),
        "quotas.yaml:3: bucket \"b\": invalid rate \"50/s\", expected e.g. 100r/s, 600r/m or 0");
    EXPECT_EQ(err("quotas:\n  a: 1r/s\n  a: 2r/s\n"), "quotas.yaml:3: bucket \"a\": is duplicate");
    EXPECT_EQ(err("quota:\n  a: 1r/s\n"),
              "quotas.yaml:1: unknown field \"quota\" (expected quotas)");
    EXPECT_EQ(err("quotas:\n  \"bad name\": 1r/s\n"),
              "quotas.yaml:2: invalid bucket name \"bad name\", expected 1-63 of [A-Za-z0-9_.:-]");
    EXPECT_EQ(err("quotas:\n  a: [1r/s]\n"),
              "quotas.yaml:2: bucket \"a\": expected a rate (e.g. 200r/s, 600r/m or 0)");
    EXPECT_EQ(err("quotas: [\n").rfind("quotas.yaml:2:", 0), 0u);
    EXPECT_THROW(make_fixed_policy({}, PolicyEnv{"", "rule 1", 0.5}), ConfigError);
    EXPECT_THROW(make_fixed_policy({}, PolicyEnv{"/nonexistent/q.yaml", "rule 1", 0.5}),
                 ConfigError);
}

}  // namespace
