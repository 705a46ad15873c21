// Unit tests of how well a limit held (grl/control/accuracy.h): admitted over limit over the
// last minute while over, and the time a change in demand takes to settle within 10%.
#include "grl/control/accuracy.h"

#include <gtest/gtest.h>

namespace grl::control {
namespace {

const InstanceKey kApi{"api", Scope::Global, "", ""};

std::vector<std::pair<InstanceKey, AccuracySample>> at(double offered, double admitted,
                                                       double limit = 100, bool enforcing = true) {
    return {{kApi, AccuracySample{offered, admitted, limit, enforcing}}};
}

TEST(Accuracy, HeldIsAdmittedOverLimitWhileOverInTheLastMinute) {
    Accuracy a;
    a.record(1000, at(50, 50));  // under the limit: not counted
    EXPECT_FALSE(a.result(kApi)->held.has_value());
    a.record(2000, at(300, 120));
    a.record(3000, at(300, 100));
    ASSERT_TRUE(a.result(kApi)->held.has_value());
    EXPECT_DOUBLE_EQ(*a.result(kApi)->held, 1.10);
    a.record(4000, at(60, 60));  // under again: the window keeps the two over
    EXPECT_DOUBLE_EQ(*a.result(kApi)->held, 1.10);
    a.record(62000, at(300, 100));  // a minute on: the sample at 2000 has left the window
    EXPECT_DOUBLE_EQ(*a.result(kApi)->held, 1.00);
    a.record(200000, at(60, 60));
    EXPECT_FALSE(a.result(kApi)->held.has_value());
}

TEST(Accuracy, SettleIsFromTheChangeInDemandToWithinTenPercent) {
    Accuracy a;
    a.record(1000, at(80, 80));
    a.record(2000, at(400, 250));  // demand rises over the limit: a change starts
    EXPECT_EQ(a.result(kApi)->settling_since_ms, std::optional<std::uint64_t>(2000));
    a.record(3000, at(800, 150));  // still ramping: the same change
    a.record(4000, at(1000, 112));
    EXPECT_FALSE(a.result(kApi)->settle_seconds.has_value());
    a.record(5000, at(1000, 108));  // within 10% of 100
    EXPECT_EQ(a.result(kApi)->settle_seconds, std::optional<double>(3.0));
    EXPECT_FALSE(a.result(kApi)->settling_since_ms.has_value());
    // Steady over the limit: no new change; a step of more than a quarter is one.
    a.record(6000, at(1100, 101));
    EXPECT_FALSE(a.result(kApi)->settling_since_ms.has_value());
    a.record(7000, at(2000, 140));
    EXPECT_EQ(a.result(kApi)->settling_since_ms, std::optional<std::uint64_t>(7000));
    a.record(7500, at(2000, 95));
    EXPECT_EQ(a.result(kApi)->settle_seconds, std::optional<double>(0.5));
}

TEST(Accuracy, DemandFallingBackEndsAChangeUnsettled) {
    Accuracy a;
    a.record(1000, at(400, 250));
    a.record(2000, at(90, 90));
    EXPECT_FALSE(a.result(kApi)->settling_since_ms.has_value());
    EXPECT_FALSE(a.result(kApi)->settle_seconds.has_value());
}

TEST(Accuracy, ShadowKeyedOrUnlimitedInstancesAreNotJudged) {
    Accuracy a;
    a.record(1000, at(400, 400, 100, false));
    EXPECT_FALSE(a.result(kApi)->held.has_value());
    EXPECT_FALSE(a.result(kApi)->settling_since_ms.has_value());
    a.record(2000, at(400, 400, 0, true));
    EXPECT_FALSE(a.result(kApi)->held.has_value());
}

TEST(Accuracy, InstancesAbsentFromARecordAreForgotten) {
    Accuracy a;
    a.record(1000, at(400, 100));
    EXPECT_EQ(a.instances(), 1u);
    a.record(2000, {});
    EXPECT_EQ(a.instances(), 0u);
    EXPECT_FALSE(a.result(kApi).has_value());
    a.record(3000, at(400, 100));  // back: judged afresh
    EXPECT_DOUBLE_EQ(*a.result(kApi)->held, 1.0);
    EXPECT_EQ(a.result(kApi)->settle_seconds, std::optional<double>(0.0));
}

TEST(Accuracy, InstancesComeAndGoInAnyOrder) {
    Accuracy a;
    const InstanceKey b{"b", Scope::Global, "", ""}, c{"c", Scope::Zone, "", "z1"};
    a.record(1000, {{c, {400, 100, 100, true}}, {kApi, {400, 100, 100, true}}});  // unsorted
    EXPECT_EQ(a.instances(), 2u);
    a.record(2000, {{kApi, {400, 120, 100, true}}, {b, {50, 50, 100, true}}});
    EXPECT_EQ(a.instances(), 2u);
    EXPECT_FALSE(a.result(c).has_value());
    EXPECT_DOUBLE_EQ(*a.result(kApi)->held, 1.10);  // kept across records
    EXPECT_FALSE(a.result(b)->held.has_value());
}

}  // namespace
}  // namespace grl::control
