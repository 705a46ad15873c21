// Unit tests of grl::Redial (core/include/grl/redial.h): which endpoints are connected again
// after failed handshakes, and when.
#include "grl/redial.h"

#include <gtest/gtest.h>

namespace grl {
namespace {

using V = std::vector<std::string>;

TEST(Redial, NothingPendingNothingDue) {
    Redial r({"tcp://a:1"});
    EXPECT_TRUE(r.due(0).empty());
    EXPECT_EQ(r.next_ms(), 0u);
}

TEST(Redial, FailedEndpointIsDueAfterTheBackoffOnce) {
    Redial r({"tcp://a:1", "tcp://b:2"}, 1000, 30000);
    r.failed("tcp://b:2", 5000);
    r.failed("tcp://b:2", 5100);  // repeated failures within the round do not move the time
    EXPECT_EQ(r.next_ms(), 6000u);
    EXPECT_TRUE(r.due(5999).empty());
    EXPECT_EQ(r.due(6000), V{"tcp://b:2"});
    EXPECT_TRUE(r.due(6001).empty());  // handed out once
    EXPECT_EQ(r.next_ms(), 0u);
}

TEST(Redial, BackoffDoublesToTheCapAndResetsAfterSuccess) {
    Redial r({"tcp://a:1"}, 1000, 4000);
    std::uint64_t now = 0;
    std::vector<std::uint64_t> waits;
    for (int i = 0; i < 5; ++i) {
        r.failed("tcp://a:1", now);
        waits.push_back(r.next_ms() - now);
        now = r.next_ms();
        EXPECT_EQ(r.due(now), V{"tcp://a:1"});
    }
    EXPECT_EQ(waits, (std::vector<std::uint64_t>{1000, 2000, 4000, 4000, 4000}));
    r.succeeded();
    r.failed("tcp://a:1", now);
    EXPECT_EQ(r.next_ms() - now, 1000u);
}

TEST(Redial, SuccessOfAnotherEndpointKeepsPendingOnesAndTheirBackoff) {
    Redial r({"tcp://a:1", "tcp://b:2"}, 1000, 30000);
    r.failed("tcp://a:1", 0);
    EXPECT_EQ(r.due(1000), V{"tcp://a:1"});
    r.failed("tcp://a:1", 1000);
    r.succeeded();  // b is fine, a still pending: no reset
    EXPECT_EQ(r.next_ms(), 3000u);
}

TEST(Redial, UnknownAddressMarksEveryEndpoint) {
    Redial r({"tcp://collector.example:7001", "tcp://b:2"});
    r.failed("tcp://10.0.0.5:7001", 0);
    EXPECT_EQ(r.due(1000), (V{"tcp://collector.example:7001", "tcp://b:2"}));
}

}  // namespace
}  // namespace grl
