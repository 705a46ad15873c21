// What-if: replaying history against limits, with known answers.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "rlc_fixtures.h"
#include "whatif.h"

using namespace grl;
using namespace grl::rlc;
using namespace grl::rlc::fixtures;

namespace {

constexpr std::int64_t kT0 = kEpoch + 4 * kWeek;

TEST(WhatIf, FlatTrafficOverTheLimit) {
    Series s = make_series(global("api"), kT0, kT0 + kDay, flat(100));
    Replay r = replay({&s}, 80000, kT0, kT0 + kDay);
    EXPECT_DOUBLE_EQ(r.drop_fraction, 0.2);  // 20 of every 100 r/s
    EXPECT_DOUBLE_EQ(r.offered, 100.0 * 86400);
    EXPECT_DOUBLE_EQ(r.minutes_over, 1440);
    EXPECT_DOUBLE_EQ(r.worst_overshoot, 0.25);
    EXPECT_EQ(r.worst_at_s, kT0);
    EXPECT_EQ(r.worst_instance, "global");
    Replay under = replay({&s}, 100000, kT0, kT0 + kDay);
    EXPECT_DOUBLE_EQ(under.drop_fraction, 0);
    EXPECT_DOUBLE_EQ(under.minutes_over, 0);
    EXPECT_EQ(under.worst_at_s, 0);
}

TEST(WhatIf, WeeklyPatternOverOnlyAtItsPeaks) {
    // 200 r/s for two hours on each of five weekdays, 100 r/s otherwise; limit 150 r/s.
    Series s = make_series(global("api"), kT0, kT0 + kWeek, weekly(100, 100));
    Replay r = replay({&s}, 150000, kT0, kT0 + kWeek);
    double offered = 100.0 * kWeek + 100.0 * 5 * 2 * kHour;
    EXPECT_NEAR(r.drop_fraction, 50.0 * 5 * 2 * kHour / offered, 1e-12);
    EXPECT_DOUBLE_EQ(r.minutes_over, 600);
    EXPECT_NEAR(r.worst_overshoot, 1.0 / 3, 1e-12);
    EXPECT_EQ(r.worst_at_s, kT0 + 12 * kHour);  // Monday 12:00
}

TEST(WhatIf, ZoneInstancesEachGetTheLimit) {
    Series a = make_series(zone("api", "eu", "a"), kT0, kT0 + kHour, flat(100));
    Series b = make_series(zone("api", "eu", "b"), kT0, kT0 + kHour, flat(300));
    Replay r = replay({&a, &b}, 200000, kT0, kT0 + kHour);
    EXPECT_DOUBLE_EQ(r.drop_fraction, 0.25);  // 100 of 400 r/s, all from b
    EXPECT_DOUBLE_EQ(r.minutes_over, 60);     // minutes, not instance-minutes
    EXPECT_EQ(r.worst_instance, "zone eu/b");
}

TEST(WhatIf, PeaksCountMinutesOverMeansCountVolume) {
    Series s = make_series(global("api"), kT0, kT0 + kHour, flat(100));
    for (auto& smp : s.samples) smp.offered.peak = 130;  // bursts within each minute
    Replay r = replay({&s}, 120000, kT0, kT0 + kHour);
    EXPECT_DOUBLE_EQ(r.drop_fraction, 0);
    EXPECT_DOUBLE_EQ(r.minutes_over, 60);
    EXPECT_NEAR(r.worst_overshoot, 10.0 / 120, 1e-12);
}

TEST(WhatIf, GapsAndTheWindowAreRespected) {
    Series s = make_series(global("api"), kT0, kT0 + 2 * kHour, flat(100));
    for (std::size_t i = 0; i < 30; ++i) s.samples[i].ticks = 0;  // a gap, not zero traffic
    Replay r = replay({&s}, 50000, kT0, kT0 + kHour);
    EXPECT_DOUBLE_EQ(r.minutes_over, 30);
    EXPECT_DOUBLE_EQ(r.offered, 100.0 * 30 * 60);
    Replay zero = replay({&s}, 0, kT0, kT0 + 2 * kHour);
    EXPECT_DOUBLE_EQ(zero.drop_fraction, 1);
    EXPECT_TRUE(std::isinf(zero.worst_overshoot));
}

TEST(WhatIf, OldFromTheLimitsFileNewFromTheProposal) {
    std::vector<Series> h = {make_series(global("api"), kT0, kT0 + kDay, flat(100)),
                             make_series(global("search"), kT0, kT0 + kDay, flat(10))};
    h[1].samples.back().limit_rps = 5;  // recorded, not in the file
    control::Limits current, proposed;
    current.buckets["api"].limit_mrps = 150000;
    proposed.buckets["api"].limit_mrps = 80000;
    WhatIf w = what_if(h, current, proposed, kT0, kT0 + kDay);
    ASSERT_EQ(w.rows.size(), 2u);
    EXPECT_EQ(*w.rows[0].old_mrps, 150000u);
    EXPECT_EQ(*w.rows[0].new_mrps, 80000u);
    EXPECT_DOUBLE_EQ(w.rows[0].old_replay->drop_fraction, 0);
    EXPECT_DOUBLE_EQ(w.rows[0].new_replay->drop_fraction, 0.2);
    EXPECT_EQ(*w.rows[1].old_mrps, 5000u);
    EXPECT_EQ(*w.rows[1].new_mrps, 5000u);  // not in the proposal: unchanged
    EXPECT_DOUBLE_EQ(w.rows[1].new_replay->drop_fraction, 0.5);

    std::string table = render_whatif_table(w);
    EXPECT_NE(table.find("api     global  150r/s  80r/s  0.000%     20.000%    1440.0"),
              std::string::npos)
        << table;

    auto j = nlohmann::json::parse(render_whatif_json(w));
    EXPECT_EQ(j["buckets"][0]["bucket"], "api");
    EXPECT_EQ(j["buckets"][0]["new_limit"], "80r/s");
    EXPECT_DOUBLE_EQ(j["buckets"][0]["new"]["drop_fraction"].get<double>(), 0.2);
    EXPECT_DOUBLE_EQ(j["buckets"][0]["new"]["minutes_over"].get<double>(), 1440);

    std::string html = render_whatif_html(w);
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_NE(html.find("<polyline"), std::string::npos);
    EXPECT_NE(html.find("stroke=\"#d62728\""), std::string::npos);  // the new limit's line
    EXPECT_NE(html.find("stroke=\"#666\""), std::string::npos);     // the old limit's line
    EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST(WhatIf, ReadInSlicesItIsTheSameAsReadWhole) {
    std::vector<Series> h = {make_series(global("api"), kT0, kT0 + kDay, flat(100)),
                             make_series(zone("edge", "eu", "a"), kT0, kT0 + kDay, flat(30)),
                             make_series(zone("edge", "eu", "b"), kT0, kT0 + kDay, weekly(10, 90)),
                             make_series(global("search"), kT0, kT0 + kDay, flat(10))};
    h[3].samples.back().limit_rps = 5;
    control::Limits current, proposed;
    current.buckets["api"].limit_mrps = 150000;
    proposed.buckets["api"].limit_mrps = 80000;
    proposed.buckets["edge"].limit_mrps = 50000;
    WhatIf whole = what_if(h, current, proposed, kT0, kT0 + kDay);
    ASSERT_EQ(whole.rows.size(), 3u);
    for (std::size_t slice : {1, 2, 50}) {
        MemoryHistory source(h);
        WhatIf w = what_if(source, current, proposed, kT0, kT0 + kDay, slice);
        EXPECT_EQ(render_whatif_json(w), render_whatif_json(whole)) << "slice " << slice;
        EXPECT_EQ(render_whatif_html(w), render_whatif_html(whole)) << "slice " << slice;
        std::size_t read = 0;
        for (const auto& r : source.reads) {
            EXPECT_LE(r.size(), slice);
            read += r.size();
        }
        EXPECT_EQ(read, 3u);
    }
    // The chart keeps the busiest instance per step, not the history: edge's eu/b peaks at
    // 100 r/s on Monday 12:00-14:00 UTC (kT0 is a Monday), eu/a's 30 r/s otherwise.
    const WhatIfRow& edge = whole.rows[1];
    ASSERT_EQ(edge.chart_peak.size(), kChartSteps);
    double top = 0, low = 1e9;
    for (double v : edge.chart_peak) {
        top = std::max(top, v);
        if (v >= 0) low = std::min(low, v);
    }
    EXPECT_DOUBLE_EQ(top, 100);
    EXPECT_DOUBLE_EQ(low, 30);
}

}  // namespace
