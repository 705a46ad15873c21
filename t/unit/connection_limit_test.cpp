// grl/connection_limit.h: an endpoint's connections counted from its monitor's events, and
// handshakes refused while it holds more than its limit.
#include "grl/connection_limit.h"

#include <gtest/gtest.h>

namespace grl {
namespace {

using V = ConnectionLimit::Verdict;

TEST(ConnectionLimit, RefusesHandshakesOverTheLimitOncePerBurst) {
    ConnectionLimit c(2);
    c.accepted(10);
    EXPECT_EQ(c.handshake(), V::Admit);
    c.accepted(11);
    EXPECT_EQ(c.handshake(), V::Admit);
    c.accepted(12);  // the third: over the limit
    EXPECT_EQ(c.handshake(), V::RefuseFirstOfBurst);
    c.disconnected(12);  // libzmq closes the refused connection
    c.accepted(13);
    EXPECT_EQ(c.handshake(), V::Refuse);  // the same burst: logged once
    c.disconnected(13);
    EXPECT_EQ(c.open(), 2u);
    EXPECT_EQ(c.refused(), 2u);
    // One of the two held closes: the next is admitted, and the burst is over.
    c.disconnected(10);
    c.accepted(14);
    EXPECT_EQ(c.handshake(), V::AdmitAfterBurst);
    EXPECT_EQ(c.last_burst(), 2u);
    c.accepted(15);
    EXPECT_EQ(c.handshake(), V::RefuseFirstOfBurst);  // a new burst
}

TEST(ConnectionLimit, EventsAreCountedByDescriptor) {
    ConnectionLimit c(1);
    c.accepted(7);
    c.accepted(7);  // a repeated event counts once
    EXPECT_EQ(c.open(), 1u);
    c.disconnected(8);  // never accepted here
    EXPECT_EQ(c.open(), 1u);
    c.disconnected(7);
    EXPECT_EQ(c.open(), 0u);
}

}  // namespace
}  // namespace grl
