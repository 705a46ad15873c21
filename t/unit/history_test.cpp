// Unit tests of the dashboard's history ring (grl/history.h): one point per step, bounded by
// capacity x max_series, instances coming and going, the monotonic clock for spacing.
#include "grl/control/history.h"

#include <gtest/gtest.h>

#include <cmath>

namespace grl::control {
namespace {

using Now = std::vector<std::pair<InstanceKey, HistoryPoint>>;

HistoryPoint pt(float offered) {
    return {offered, offered / 2, 100, 0.5f, 0};
}

Now one(const std::string& bucket, float offered) {
    return {{InstanceKey{bucket, Scope::Global, "", ""}, pt(offered)}};
}

History::Options opts(std::uint64_t span, std::uint64_t step, std::size_t max_series) {
    History::Options o;
    o.span_ms = span;
    o.step_ms = step;
    o.max_series = max_series;
    return o;
}

TEST(History, OnePointPerStepOnTheMonotonicClock) {
    History h(opts(10000, 1000, 10));
    EXPECT_EQ(h.capacity(), 10u);
    EXPECT_TRUE(h.record(1000, 5000000, one("api", 1)));
    EXPECT_FALSE(h.record(1250, 5000250, one("api", 2)));  // a quarter step later: no point
    EXPECT_TRUE(h.record(1950, 5000950, one("api", 3)));   // 95% of a step: ticks jitter
    // The wall clock stepped back an hour: the history goes on, labelled as given.
    EXPECT_TRUE(h.record(2950, 5000950 - 3600000, one("api", 4)));
    EXPECT_EQ(h.points(), 3u);
    EXPECT_EQ(h.recorded(), 3u);
    EXPECT_EQ(h.times(), (std::vector<std::uint64_t>{5000000, 5000950, 5000950 - 3600000}));
    auto all = h.all();
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].key->bucket, "api");
    ASSERT_EQ(all[0].points.size(), 3u);
    EXPECT_EQ(all[0].points[0].offered_rps, 1);
    EXPECT_EQ(all[0].points[1].offered_rps, 3);
    EXPECT_EQ(all[0].points[2].offered_rps, 4);
    EXPECT_EQ(all[0].points[2].admitted_rps, 2);
}

TEST(History, TheRingKeepsTheLastCapacityPoints) {
    History h(opts(5000, 1000, 10));
    for (int i = 0; i < 12; ++i) {
        ASSERT_TRUE(h.record(1000u * (i + 1), 1000u * (i + 1), one("api", static_cast<float>(i))));
    }
    EXPECT_EQ(h.points(), 5u);
    EXPECT_EQ(h.recorded(), 12u);
    EXPECT_EQ(h.times(), (std::vector<std::uint64_t>{8000, 9000, 10000, 11000, 12000}));
    auto all = h.all();
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].points.front().offered_rps, 7);
    EXPECT_EQ(all[0].points.back().offered_rps, 11);
}

TEST(History, AbsentInstancesAreNaNAndForgottenAfterTheSpan) {
    History h(opts(3000, 1000, 10));
    Now both = one("api", 1);
    both.push_back({InstanceKey{"api-zone", Scope::Zone, "", "z1"}, pt(2)});
    h.record(1000, 1000, both);
    h.record(2000, 2000, one("api", 1));  // api-zone gone
    auto all = h.all();
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[1].key->zone, "z1");
    EXPECT_EQ(all[1].points[0].offered_rps, 2);
    EXPECT_TRUE(std::isnan(all[1].points[1].offered_rps));
    // A newcomer's earlier points are NaN too.
    h.record(3000, 3000, both);
    h.record(4000, 4000, one("api", 1));
    h.record(5000, 5000, one("api", 1));
    EXPECT_EQ(h.series(), 2u);  // api-zone's point at 3000 is still held
    h.record(6000, 6000, one("api", 1));
    EXPECT_EQ(h.series(), 1u);  // now all NaN: forgotten
}

TEST(History, MaxSeriesBoundsMemoryAndCountsTheInstancesLeftOut) {
    History h(opts(900000, 1000, 2));
    EXPECT_EQ(h.max_bytes(), 900u * (2 * sizeof(HistoryPoint) + sizeof(std::uint64_t)));
    Now three = one("a", 1);
    three.push_back({InstanceKey{"b", Scope::Global, "", ""}, pt(1)});
    three.push_back({InstanceKey{"c", Scope::Global, "", ""}, pt(1)});
    h.record(1000, 1000, three);
    EXPECT_EQ(h.series(), 2u);
    EXPECT_EQ(h.series_refused(), 1u);
    h.record(2000, 2000, one("a", 1));
    EXPECT_EQ(h.series_refused(), 0u);  // per point: nothing left out this time
}

TEST(History, DefaultBoundIsUnderTenMegabytes) {
    History h{History::Options{}};
    EXPECT_EQ(h.capacity(), 900u);  // 15 min of 1 s steps
    EXPECT_LT(h.max_bytes(), 10u * 1024 * 1024);
}

}  // namespace
}  // namespace grl::control
