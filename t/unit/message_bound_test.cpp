#include "grl/control/message_bound.h"

#include <gtest/gtest.h>

namespace grl {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

TEST(MessageBound, AConnectionThatNeverEndsItsMessageIsOverTheBound) {
    MessageBound b(2 * kMiB, 66 * kMiB);
    b.opened(7);
    EXPECT_FALSE(b.over(7, 100, false));  // its greeting
    EXPECT_FALSE(b.over(7, 2 * kMiB, false));
    EXPECT_TRUE(b.over(7, 1 + 2 * kMiB, false));
    EXPECT_EQ(b.last_excess(), 1 + 2 * kMiB);
}

TEST(MessageBound, EverythingAConnectionSentBeforeItsFirstLookCounts) {
    MessageBound b(2 * kMiB, 66 * kMiB);
    b.opened(7);
    EXPECT_TRUE(b.over(7, 30 * kMiB, false));
}

TEST(MessageBound, EachMessageTakenStartsAgain) {
    MessageBound b(2 * kMiB, 66 * kMiB);
    b.opened(7);
    std::uint64_t read = 0;
    EXPECT_FALSE(b.over(7, read, false));
    for (int i = 0; i < 100; ++i) {  // 1 MiB messages, each taken: 100 MiB in all
        read += kMiB + 9;
        b.taken(7);
        EXPECT_FALSE(b.over(7, read, false));
    }
}

TEST(MessageBound, BehindTheLargerBoundHolds) {
    MessageBound b(2 * kMiB, 66 * kMiB);
    b.opened(7);
    EXPECT_FALSE(b.over(7, 0, true));
    EXPECT_FALSE(b.over(7, 64 * kMiB, true));  // 64 whole messages queued
    EXPECT_TRUE(b.over(7, 64 * kMiB, false));  // caught up and nothing taken: one message
}

TEST(MessageBound, AReusedDescriptorStartsAfresh) {
    MessageBound b(2 * kMiB, 66 * kMiB);
    b.opened(7);
    b.taken(7);
    EXPECT_FALSE(b.over(7, 50 * kMiB, false));
    b.closed(7);
    b.opened(7);  // another connection
    EXPECT_FALSE(b.over(7, 10, false));
    b.taken(7);
    EXPECT_FALSE(b.over(7, 20 * kMiB, false));
    // Read going back without the events between: also another connection, counted from there.
    EXPECT_FALSE(b.over(7, 5, false));
    EXPECT_FALSE(b.over(7, 5 + 2 * kMiB, false));
    EXPECT_TRUE(b.over(7, 6 + 2 * kMiB, false));
}

TEST(MessageBound, ACutConnectionIsForgotten) {
    MessageBound b(kMiB, kMiB);
    b.opened(3);
    b.opened(4);
    b.over(3, 0, false);
    EXPECT_TRUE(b.over(3, 2 * kMiB, false));
    EXPECT_TRUE(b.over(3, 2 * kMiB, false));  // until closed
    b.closed(3);
    int n = 0;
    b.each([&](int) { ++n; });
    EXPECT_EQ(n, 1);
}

}  // namespace
}  // namespace grl
