// When the daemons send before their tick (core/control/include/grl/control/early.h).
#include "grl/control/early.h"

#include <gtest/gtest.h>

namespace grl {
namespace {

TEST(EarlyUsage, WaitsHalfAnIntervalAfterTheStartThenSendsWhenRatesArrive) {
    EarlyUsage e(1000, 5000);  // 1 s intervals, started at 5 s
    EXPECT_TRUE(e.warming());
    EXPECT_FALSE(e.due(5100)) << "nothing pending";
    e.rates_arrived();
    EXPECT_FALSE(e.due(5100)) << "hosts are still reconnecting: part of the load only";
    EXPECT_TRUE(e.due(5500));
    e.sent(5500, true);
    e.rates_arrived();
    EXPECT_FALSE(e.due(5600)) << "at most eight a interval";
    EXPECT_TRUE(e.due(5625));
    e.sent(5625, false);
    e.rates_arrived();
    EXPECT_TRUE(e.due(5750)) << "the first two intervals are warming whatever the buckets";
    e.sent(7000, false);  // every bucket rated, two intervals on: warm
    EXPECT_FALSE(e.warming());
    e.rates_arrived();
    EXPECT_FALSE(e.due(8000)) << "warm: usage goes out at the tick only";
    e.sent(8000, true);  // hosts new to the collector: warming again
    e.rates_arrived();
    EXPECT_TRUE(e.due(8200));
}

TEST(Rise, WellAboveIsAFactorBeyondTheNoiseOfTheLastSample) {
    // 1,000 r/s at 1 s (1,000 requests a sample, noise ~3%): the factor decides.
    EXPECT_FALSE(rose_well_above(1'000'000, 1'240'000, 1000));
    EXPECT_TRUE(rose_well_above(1'000'000, 1'250'000, 1000));
    // A 1.5x step seen in part by the report of a host with 70% of the load.
    EXPECT_TRUE(rose_well_above(500'000, 710'000, 1000));
    // Falls and noise are not rises.
    EXPECT_FALSE(rose_well_above(1'000'000, 500'000, 1000));
    EXPECT_FALSE(rose_well_above(1'000'000, 1'030'000, 250));
    // 20 r/s at 250 ms (5 requests a sample): 3 sigmas + 3 requests asks for 9.7 more.
    EXPECT_FALSE(rose_well_above(20'000, 50'000, 250)) << "7.5 more requests: noise";
    EXPECT_TRUE(rose_well_above(20'000, 60'000, 250));
    // From nothing, 3 requests a sample.
    EXPECT_FALSE(rose_well_above(0, 10'000, 250));
    EXPECT_TRUE(rose_well_above(0, 12'000, 250));
}

// The controller's early ticks: a rise well above the last sample, or a fall well below it
// (the last sample well above this one); noise either way is neither.
TEST(Change, ARiseOrAFallWellBeyondTheLastSample) {
    EXPECT_EQ(changed_well(500'000, 710'000, 1000), Change::Rise);
    EXPECT_EQ(changed_well(1'000'000, 1'100'000, 1000), Change::None);
    EXPECT_EQ(changed_well(1'000'000, 900'000, 1000), Change::None);
    // A 15x surge's end, and 1.5 L -> 0.5 L (L = 1,000 r/s), even seen in part.
    EXPECT_EQ(changed_well(7'500'000, 500'000, 1000), Change::Fall);
    EXPECT_EQ(changed_well(1'500'000, 1'150'000, 1000), Change::Fall);
    // The usage after a load-balancer shift's transient (its losing host reported at last).
    EXPECT_EQ(changed_well(2'100'000, 1'500'000, 250), Change::Fall);
    // 60 -> 20 r/s at 250 ms (15 -> 5 requests): 3 sigmas of 5 + 3 is 9.7, the fall 10.
    EXPECT_EQ(changed_well(60'000, 20'000, 250), Change::Fall);
    EXPECT_EQ(changed_well(50'000, 20'000, 250), Change::None) << "7.5 fewer: noise";
    EXPECT_EQ(changed_well(0, 0, 1000), Change::None);
}

TEST(EarlyTick, AtMostFourExtraTicksAnInterval) {
    EarlyTick t(1000);
    EXPECT_TRUE(t.due(100));
    EXPECT_FALSE(t.due(300));
    EXPECT_TRUE(t.due(350));
    int ticks = 0;
    for (std::uint64_t ms = 1000; ms < 2000; ms += 10) ticks += t.due(ms) ? 1 : 0;
    EXPECT_EQ(ticks, 4);
}

// A tick of 30 ms (50 zones x 10,000 buckets): early ticks at least 1.2 s apart, so that
// they take at most a 40th of the loop; the refusals are counted.
TEST(EarlyTick, ALongTickDefersEarlyTicks) {
    EarlyTick t(250);
    EXPECT_TRUE(t.due(1000, 30000));
    EXPECT_FALSE(t.due(1050, 30000));  // within a quarter interval: not a deferral
    EXPECT_EQ(t.deferred(), 0u);
    EXPECT_FALSE(t.due(1300, 30000));
    EXPECT_TRUE(t.deferring());
    int ticks = 0;
    for (std::uint64_t ms = 1300; ms < 3700; ms += 10) ticks += t.due(ms, 30000) ? 1 : 0;
    EXPECT_EQ(ticks, 2);  // at 2200 and 3400
    EXPECT_GT(t.deferred(), 100u);
    // Short ticks again: four an interval.
    ticks = 0;
    for (std::uint64_t ms = 4000; ms < 4250; ms += 10) ticks += t.due(ms, 500) ? 1 : 0;
    EXPECT_EQ(ticks, 4);
    EXPECT_FALSE(t.deferring());
}

}  // namespace
}  // namespace grl
