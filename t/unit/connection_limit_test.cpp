// grl/control/connection_limit.h: an endpoint's connections followed from its monitor's events
// (with an injected time), a slot taken at the handshake, and handshakes refused while the
// handshaken connections make the limit.
#include "grl/control/connection_limit.h"

#include <gtest/gtest.h>

namespace grl {
namespace {

using V = ConnectionLimit::Verdict;
constexpr std::uint64_t kHandshakeMs = 2000;

// A connection accepted, admitted by ZAP and handshaken, as libzmq reports one.
void connect(ConnectionLimit& c, int fd, std::uint64_t now) {
    c.accepted(fd, now);
    ASSERT_EQ(c.handshake(now), V::Admit);
    c.handshake_succeeded(now);
}

TEST(ConnectionLimit, RefusesHandshakesOverTheLimitOncePerBurst) {
    ConnectionLimit c(2, kHandshakeMs);
    connect(c, 10, 0);
    connect(c, 11, 0);
    c.accepted(12, 1);  // the third: over the limit
    EXPECT_EQ(c.handshake(1), V::RefuseFirstOfBurst);
    c.disconnected(12, 2);  // libzmq closes the refused connection
    c.accepted(13, 3);
    EXPECT_EQ(c.handshake(3), V::Refuse);  // the same burst: logged once
    c.disconnected(13, 4);
    EXPECT_EQ(c.established(), 2u);
    EXPECT_EQ(c.refused(), 2u);
    EXPECT_EQ(c.unhandshaken(), 2u);
    // One of the two held closes: the next is admitted, and the burst is over.
    c.disconnected(10, 5);
    c.accepted(14, 6);
    EXPECT_EQ(c.handshake(6), V::AdmitAfterBurst);
    EXPECT_EQ(c.last_burst(), 2u);
    c.handshake_succeeded(6);
    c.accepted(15, 7);
    EXPECT_EQ(c.handshake(7), V::RefuseFirstOfBurst);  // a new burst
}

TEST(ConnectionLimit, BareConnectionsHoldNoSlot) {
    ConnectionLimit c(2, kHandshakeMs);
    // A flood of connections that never start their handshake, renewed as libzmq closes them.
    int fd = 100;
    for (std::uint64_t t = 0; t < 10000; t += 500) {
        for (int i = 0; i < 50; ++i) c.accepted(fd++, t);
        for (int old = fd - 250; old < fd - 200 && old >= 100; ++old) c.disconnected(old, t);
        EXPECT_EQ(c.established(), 0u) << t;
    }
    EXPECT_EQ(c.pending(), 200u);
    EXPECT_GT(c.unhandshaken(), 0u);
    // A peer among them handshakes: admitted, and the next one too.
    c.accepted(7, 10000);
    EXPECT_EQ(c.handshake(10000), V::Admit);
    c.accepted(8, 10000);
    EXPECT_EQ(c.handshake(10000), V::Admit);
    c.accepted(9, 10001);
    EXPECT_EQ(c.handshake(10001), V::RefuseFirstOfBurst);  // two admitted, successes on the way
    c.handshake_succeeded(10002);
    c.handshake_succeeded(10002);
    EXPECT_EQ(c.established(), 2u);
}

TEST(ConnectionLimit, AdmissionsWhoseSuccessNeverComesLapse) {
    ConnectionLimit c(1, kHandshakeMs);
    c.accepted(5, 0);
    EXPECT_EQ(c.handshake(0), V::Admit);
    c.accepted(6, 1);
    EXPECT_EQ(c.handshake(1), V::RefuseFirstOfBurst);  // 5's success has not arrived
    c.disconnected(5, 10);                             // 5 failed after ZAP admitted it
    c.accepted(7, kHandshakeMs + 1);
    EXPECT_EQ(c.handshake(kHandshakeMs + 1), V::AdmitAfterBurst);
}

TEST(ConnectionLimit, AWrongGuessIsCorrectedAfterTheHandshakeInterval) {
    ConnectionLimit c(5, kHandshakeMs);
    c.accepted(1, 0);          // a peer: handshakes at 3 ms
    c.accepted(2, 1);          // bare, accepted before the peer's success arrives
    c.handshake_succeeded(3);  // taken as 2's (the newest pending)
    EXPECT_EQ(c.established(), 1u);
    EXPECT_EQ(c.pending(), 1u);
    c.disconnected(2, kHandshakeMs + 1);  // libzmq closes the bare one
    EXPECT_EQ(c.established(), 0u);       // wrong for a moment
    c.settle(kHandshakeMs + ConnectionLimit::kGraceMs);
    EXPECT_EQ(c.established(), 1u);  // 1 is still open after the interval: handshaken
    EXPECT_EQ(c.pending(), 0u);
}

TEST(ConnectionLimit, EventsAreCountedByDescriptor) {
    ConnectionLimit c(1, kHandshakeMs);
    c.accepted(7, 0);
    c.accepted(7, 0);  // a repeated event counts once
    EXPECT_EQ(c.open(), 1u);
    c.disconnected(8, 0);  // never accepted here
    EXPECT_EQ(c.open(), 1u);
    c.disconnected(7, 0);
    EXPECT_EQ(c.open(), 0u);
    c.handshake_succeeded(0);  // of no connection known here
    EXPECT_EQ(c.established(), 0u);
}

TEST(ConnectionLimit, ACutForgetsEveryConnection) {
    ConnectionLimit c(2, kHandshakeMs);
    connect(c, 1, 0);
    connect(c, 2, 0);
    c.accepted(3, 1);
    EXPECT_EQ(c.cut(), 3u);
    EXPECT_EQ(c.open(), 0u);
    EXPECT_EQ(c.established(), 0u);
    connect(c, 1, 2);  // the listed peers connect again
    connect(c, 2, 2);
    EXPECT_EQ(c.established(), 2u);
}

}  // namespace
}  // namespace grl
