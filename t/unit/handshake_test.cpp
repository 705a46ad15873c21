// Unit tests of zmq/include/grl/zmq/handshake.h: which endpoints are connected again after failed
// handshakes and when (Redial), when a change is logged (Handshakes), and the words (describe).
#include "grl/zmq/handshake.h"

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

TEST(Handshakes, LogsTheFirstFailureAndTheRecoveryOnly) {
    Handshakes h({"tcp://c:1"});
    EXPECT_FALSE(h.record(true, "tcp://c:1", 0));  // working from the start: not news
    EXPECT_TRUE(h.record(false, "tcp://c:1", 10));
    EXPECT_FALSE(h.record(false, "tcp://c:1", 20));  // still failing: one line, not one per try
    EXPECT_EQ(h.next_ms(), 1010u);
    EXPECT_EQ(h.due(1010), V{"tcp://c:1"});
    EXPECT_TRUE(h.record(true, "tcp://c:1", 1100));
    EXPECT_FALSE(h.record(true, "tcp://c:1", 1200));
    Handshakes g({"tcp://c:1"});
    EXPECT_TRUE(g.record(false, "tcp://c:1", 0));  // failing from the start is news
}

TEST(Handshakes, DescribesEachFailure) {
    const HandshakeWording nginx{"collector", "this host", "grl_curve_server_key"};
    EXPECT_EQ(describe(HandshakeFailure::Refused, 400, nginx),
              "refused by the collector (ZAP status 400): is this host's public key in its "
              "--curve-clients?");
    EXPECT_EQ(describe(HandshakeFailure::NoCurve, 0, nginx),
              "failed: the collector does not speak CURVE on this endpoint");
    const HandshakeWording daemon{"controller", "this daemon", "--curve-server-key"};
    EXPECT_EQ(describe(HandshakeFailure::Protocol, 0x11000001, daemon),
              "failed (protocol error 0x11000001): does the controller hold the key pair whose "
              "public key --curve-server-key names?");
    EXPECT_EQ(describe(HandshakeFailure::Other, 32, daemon),
              "failed (Broken pipe): does the controller hold the key pair whose public key "
              "--curve-server-key names?");
}

}  // namespace
}  // namespace grl
