// grl-rlc synth: the shape of the synthetic history is the one asked for (weekly period,
// daily peak, trend, spikes and gaps where they were put), reproducible for a seed, and
// consistent with the limit.
#include "synth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace grl::rlc {
namespace {

constexpr std::int64_t kDay = 86400;
constexpr std::int64_t kWeek = 7 * kDay;
// 2026-11-30T12:34:00Z, a Monday: not aligned to a day, as "now" usually is not.
constexpr std::int64_t kEnd = 1796042040;

SynthSpec spec() {
    SynthSpec s;
    s.end_s = kEnd;
    return s;
}

std::map<std::int64_t, Sample> by_start(const std::vector<Sample>& v) {
    std::map<std::int64_t, Sample> m;
    for (const Sample& s : v) m[s.start_s] = s;
    return m;
}

TEST(RlcSynth, CoversTheWeeksEndingAtEndInAscendingIntervals) {
    SynthSpec s = spec();
    s.weeks = 2;
    std::vector<Sample> v = synthesize(s);
    ASSERT_EQ(v.size(), static_cast<std::size_t>(2 * 7 * 1440));
    EXPECT_EQ(v.front().start_s, kEnd - kEnd % 60 - 2 * kWeek);
    EXPECT_EQ(v.back().start_s + 60, kEnd - kEnd % 60);
    for (std::size_t i = 1; i < v.size(); ++i) ASSERT_EQ(v[i].start_s, v[i - 1].start_s + 60);
    EXPECT_EQ(v[0].length_s, 60);
    EXPECT_EQ(v[0].ticks, 60);
}

TEST(RlcSynth, SameSeedSameHistoryOtherSeedOther) {
    SynthSpec s = spec();
    s.weeks = 1;
    std::vector<Sample> a = synthesize(s), b = synthesize(s);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].offered.mean, b[i].offered.mean);
        ASSERT_EQ(a[i].offered.peak, b[i].offered.peak);
    }
    s.seed = 2;
    std::vector<Sample> c = synthesize(s);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < a.size(); ++i) differ += a[i].offered.mean != c[i].offered.mean;
    EXPECT_GT(differ, a.size() * 9 / 10);
    InstanceKey k1{"a", Scope::Global, "", ""}, k2{"b", Scope::Global, "", ""};
    EXPECT_NE(instance_seed(1, k1), instance_seed(1, k2));
    EXPECT_EQ(instance_seed(1, k1), instance_seed(1, k1));
}

TEST(RlcSynth, WithoutTrendAndNoiseEveryWeekRepeatsTheFirst) {
    SynthSpec s = spec();
    s.trend = 0;
    s.noise = 0;
    auto m = by_start(synthesize(s));
    const std::int64_t t0 = m.begin()->first;
    int compared = 0;
    for (std::int64_t t = t0; t < t0 + kWeek; t += 3600 + 60) {  // every 61 minutes
        for (int w = 1; w < s.weeks; ++w) {
            ASSERT_NEAR(m.at(t + w * kWeek).offered.mean, m.at(t).offered.mean, 1e-6);
            ++compared;
        }
    }
    EXPECT_GT(compared, 400);
    // ...and it is not flat: the week does vary.
    EXPECT_GT(std::fabs(m.at(t0 + kDay / 2).offered.mean - m.at(t0).offered.mean), 10);
}

TEST(RlcSynth, DailyPeakAt15UtcWeeklyHighOnWednesdayNoonLowAtSundayMidnight) {
    SynthSpec s = spec();
    s.trend = 0;
    s.noise = 0;
    s.weeks = 1;
    auto argmax_min = [](const std::vector<Sample>& v, std::int64_t period) {
        const Sample* hi = &v[0];
        const Sample* lo = &v[0];
        for (const Sample& x : v) {
            if (x.offered.mean > hi->offered.mean) hi = &x;
            if (x.offered.mean < lo->offered.mean) lo = &x;
        }
        // Monday 00:00 is 4 days after a multiple of a week since 1970 (a Thursday).
        auto pos = [period](std::int64_t t) { return (t + 3 * kDay) % period; };
        return std::make_pair(pos(hi->start_s), pos(lo->start_s));
    };
    SynthSpec daily = s;
    daily.weekly = 0;
    auto [hi, lo] = argmax_min(synthesize(daily), kDay);
    EXPECT_EQ(hi, 15 * 3600);
    EXPECT_EQ(lo, 3 * 3600);
    SynthSpec weekly = s;
    weekly.daily = 0;
    auto [whi, wlo] = argmax_min(synthesize(weekly), kWeek);
    EXPECT_EQ(whi, 2 * kDay + 12 * 3600);  // Wednesday 12:00
    EXPECT_EQ(wlo, 6 * kDay);              // Sunday 00:00
}

TEST(RlcSynth, TrendGrowsEachWeeksMeanLinearly) {
    SynthSpec s = spec();
    s.trend = 0.1;
    std::vector<double> sum(static_cast<std::size_t>(s.weeks), 0);
    std::vector<int> n(static_cast<std::size_t>(s.weeks), 0);
    const std::int64_t t0 = synth_start_s(s);
    for (const Sample& x : synthesize(s)) {
        std::size_t w = static_cast<std::size_t>((x.start_s - t0) / kWeek);
        sum[w] += x.offered.mean;
        n[w]++;
    }
    for (int w = 0; w < s.weeks; ++w) {
        double mean = sum[static_cast<std::size_t>(w)] / n[static_cast<std::size_t>(w)];
        // Seasonality averages out over a whole week; what is left is the trend.
        EXPECT_NEAR(mean, s.base * (1 + s.trend * (w + 0.5)), 0.01 * s.base) << "week " << w;
    }
}

TEST(RlcSynth, NoiseHasTheRequestedSpreadAndPeaksAreAboveMeans) {
    SynthSpec s = spec();
    s.weeks = 1;
    s.noise = 0.05;
    double sq = 0;
    std::size_t n = 0;
    for (const Sample& x : synthesize(s)) {
        double rel = x.offered.mean / synth_level(s, x.start_s) - 1;
        sq += rel * rel;
        ++n;
        ASSERT_GE(x.offered.peak, x.offered.mean * (1 + s.burst));
        ASSERT_LE(x.offered.peak, x.offered.mean * (1 + s.burst * 4));
    }
    EXPECT_NEAR(std::sqrt(sq / n), 0.05, 0.003);
}

TEST(RlcSynth, TheSpikeIsWhereItWasPutAndNowhereElse) {
    SynthSpec s = spec();
    s.noise = 0;
    SynthSpec spiked = s;
    spiked.spikes.push_back({10, 14, 3.0});
    auto plain = by_start(synthesize(s)), m = by_start(synthesize(spiked));
    const std::int64_t day0 = synth_start_s(s) - synth_start_s(s) % kDay;
    const std::int64_t from = day0 + 10 * kDay + 14 * 3600;
    int in = 0;
    for (auto& [t, x] : m) {
        double expect = plain.at(t).offered.mean * (t >= from && t < from + 3600 ? 3.0 : 1.0);
        ASSERT_NEAR(x.offered.mean, expect, 1e-6) << t;
        in += t >= from && t < from + 3600;
    }
    EXPECT_EQ(in, 60);
}

TEST(RlcSynth, AGapIsMissingRowsAndShiftsNothingElse) {
    SynthSpec s = spec();
    SynthSpec gapped = s;
    gapped.gaps.push_back({12, 6, 4});
    gapped.gaps.push_back(parse_gap("20:2").value);  // DAY:HOURS: from 00:00
    auto plain = by_start(synthesize(s));
    std::vector<Sample> v = synthesize(gapped);
    EXPECT_EQ(v.size(), plain.size() - 4 * 60 - 2 * 60);
    const std::int64_t day0 = synth_start_s(s) - synth_start_s(s) % kDay;
    const std::int64_t g1 = day0 + 12 * kDay + 6 * 3600, g2 = day0 + 20 * kDay;
    for (const Sample& x : v) {
        ASSERT_FALSE(x.start_s >= g1 && x.start_s < g1 + 4 * 3600) << x.start_s;
        ASSERT_FALSE(x.start_s >= g2 && x.start_s < g2 + 2 * 3600) << x.start_s;
        ASSERT_EQ(x.offered.mean, plain.at(x.start_s).offered.mean);  // same draws
    }
    auto m = by_start(v);
    EXPECT_TRUE(m.count(g1 - 60));
    EXPECT_TRUE(m.count(g1 + 4 * 3600));
}

TEST(RlcSynth, DenyDropsWhatIsOverTheLimitShadowOnlyCountsIt) {
    SynthSpec s = spec();
    s.weeks = 1;
    s.limit_rps = 350;
    std::size_t over = 0;
    for (const Sample& x : synthesize(s)) {
        ASSERT_LE(x.admitted.mean, 350 + 1e-9);
        ASSERT_LE(x.admitted.peak, 350 + 1e-9);
        ASSERT_NEAR(x.admitted.mean + x.dropped.mean, x.offered.mean, 1e-9);
        ASSERT_NEAR(x.admitted.peak + x.dropped.peak, x.offered.peak, 1e-9);
        ASSERT_EQ(x.shadow_dropped.mean, 0);
        ASSERT_EQ(x.limit_rps, 350);
        ASSERT_NEAR(x.ratio, std::max(0.0, (x.offered.mean - 350) / x.offered.mean), 1e-12);
        over += x.dropped.mean > 0;
    }
    EXPECT_GT(over, 100u);  // the daily peaks exceed 350 r/s
    s.mode = Mode::Shadow;
    for (const Sample& x : synthesize(s)) {
        ASSERT_EQ(x.admitted.mean, x.offered.mean);
        ASSERT_EQ(x.dropped.peak, 0);
        ASSERT_NEAR(x.shadow_dropped.peak, std::max(0.0, x.offered.peak - 350), 1e-9);
        ASSERT_EQ(x.mode, Mode::Shadow);
    }
    s.limit_rps = -1;
    for (const Sample& x : synthesize(s)) {
        ASSERT_EQ(x.limit_rps, -1);
        ASSERT_EQ(x.dropped.mean, 0);
        ASSERT_EQ(x.admitted.peak, x.offered.peak);
    }
}

TEST(RlcSynth, ACandidateBesideTheLimitRecordsItsWouldDrops) {
    SynthSpec s = spec();
    s.weeks = 1;
    s.limit_rps = 500;
    s.candidate_rps = 300;
    std::size_t over = 0;
    for (const Sample& x : synthesize(s)) {
        ASSERT_EQ(x.candidate_limit_rps, 300);
        ASSERT_NEAR(x.candidate_would_drop.mean, std::max(0.0, x.offered.mean - 300), 1e-9);
        ASSERT_NEAR(x.candidate_would_drop.peak, std::max(0.0, x.offered.peak - 300), 1e-9);
        ASSERT_EQ(x.mode, Mode::Deny);  // the limit in force is unchanged
        over += x.candidate_would_drop.mean > 0;
    }
    EXPECT_GT(over, 100u);
    s.candidate_rps = -1;
    for (const Sample& x : synthesize(s)) ASSERT_EQ(x.candidate_limit_rps, -1);
}

TEST(RlcSynth, SpikeAndGapArgumentsAreParsedOrRefusedByName) {
    Parsed<Spike> sp = parse_spike("10:14:2.5");
    ASSERT_TRUE(sp) << sp.error;
    EXPECT_EQ(sp.value.day, 10);
    EXPECT_EQ(sp.value.hour, 14);
    EXPECT_EQ(sp.value.factor, 2.5);
    for (const char* bad : {"10:24:2", "10:14", "x:1:2", "1:2:abc", "-1:2:3", "1:2:3:4", ""}) {
        Parsed<Spike> p = parse_spike(bad);
        EXPECT_FALSE(p) << bad;
        EXPECT_NE(p.error.find(std::string("\"") + bad + "\""), std::string::npos) << p.error;
    }
    Parsed<Gap> g = parse_gap("3:5");
    ASSERT_TRUE(g);
    EXPECT_EQ(g.value.hour, 0);
    EXPECT_EQ(g.value.hours, 5);
    for (const char* bad : {"3", "3:0", "3:25:1", "a:b", "1:2:3:4"})
        EXPECT_FALSE(parse_gap(bad)) << bad;
    SynthSpec s = spec();
    s.spikes.push_back({40, 1, 2});
    EXPECT_NE(validate(s).find("--spike day 40"), std::string::npos) << validate(s);
    s = spec();
    s.daily = 1.5;
    EXPECT_NE(validate(s).find("--daily"), std::string::npos);
    EXPECT_EQ(validate(spec()), "");
}

}  // namespace
}  // namespace grl::rlc
