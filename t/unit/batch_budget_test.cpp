// grl/control/batch_budget.h: the receive loops' message and time budgets, driven by a fake clock.
#include "grl/control/batch_budget.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace grl {
namespace {

TEST(BatchBudget, TimeBudgetIsAFifthOfTheIntervalAtMost50Ms) {
    EXPECT_EQ(batch_budget_ms(1000), 50u);
    EXPECT_EQ(batch_budget_ms(250), 50u);
    EXPECT_EQ(batch_budget_ms(100), 20u);
    EXPECT_EQ(batch_budget_ms(50), 10u);
    EXPECT_EQ(batch_budget_ms(3), 1u);
    EXPECT_EQ(batch_budget_ms(60000), 50u);
}

TEST(BatchBudget, SmallMessagesStopAtTheMessageBudgetUncut) {
    BatchBudget b(256, 50);
    b.start(1000);
    std::size_t taken = 0;
    while (b.more(1000 + taken / 100)) ++taken;  // 256 messages in 2 ms
    EXPECT_EQ(taken, 256u);
    EXPECT_FALSE(b.cut());
}

TEST(BatchBudget, SlowMessagesStopAtTheTimeBudgetAndTheBatchIsCut) {
    BatchBudget b(256, 50);
    std::uint64_t now = 1000;
    b.start(now);
    std::size_t taken = 0;
    while (b.more(now)) {
        ++taken;
        now += 7;  // each message takes 7 ms to handle
    }
    EXPECT_EQ(taken, 8u);  // 0, 7, ..., 49 ms: the ninth would start at 56 ms
    EXPECT_EQ(b.taken(), 8u);
    EXPECT_TRUE(b.cut());
    // A new batch starts afresh.
    b.start(now);
    EXPECT_FALSE(b.cut());
    EXPECT_TRUE(b.more(now));
}

TEST(BatchBudget, TheFirstMessageIsAlwaysTaken) {
    // A loop that got to the socket late still handles one message per wakeup.
    BatchBudget b(256, 10);
    b.start(1000);
    EXPECT_TRUE(b.more(5000));
    EXPECT_FALSE(b.more(5000));
    EXPECT_TRUE(b.cut());
}

// How the budgets keep the ticks on time under a flood: Loop.AFloodDelaysTheTickByOneBudgetAtMost
// (loop_test.cpp), with Loop::run itself.

}  // namespace
}  // namespace grl
