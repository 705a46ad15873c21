// The daemons' event loop and ZeroMQ's edge-triggered ZMQ_FD (daemon/include/grl/daemon/loop.h):
// a socket's handler runs while it has messages, whatever took the signal of their arrival; a
// flooded socket's batches leave the timers their turn.
//
// The sockets are connected over inproc://, where a send puts the message into the peer's queue
// before it returns: each race below is set up by the order of the calls, not by sleeping.
#include <gtest/gtest.h>
#include <zmq.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "grl/control/batch_budget.h"
#include "grl/daemon/loop.h"
#include "grl/daemon/zmq.h"
#include "grl/zmq/socket.h"

namespace grl::daemon {
namespace {

// A handler that takes one message a call: the others stay queued, and their arrival was
// signalled once, to the receive that took the first.
TEST(Loop, AHandlerThatLeavesMessagesRunsAgainWithoutAnotherSignal) {
    ::zmq::context_t ctx = daemon::make_context();
    ::zmq::socket_t pull(ctx, ZMQ_PULL), push(ctx, ZMQ_PUSH);
    daemon::bind(pull, "inproc://loop-leaves");
    daemon::connect(push, "inproc://loop-leaves");
    // All five in the pull socket's queue, their arrival signalled, before the loop's first turn.
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(daemon::send_frames(push, {"m" + std::to_string(i)}));
    Loop loop;
    std::vector<std::string> got;
    std::vector<zmq::Frame> frames;
    loop.on_socket(pull.handle(), [&] {
        if (zmq::recv_frames(pull.handle(), frames, 1) == 1) got.emplace_back(frames[0].view());
        if (got.size() == 5) loop.stop();
    });
    loop.after(5000, [&] { loop.stop(); });  // a bound, never a speed: the test fails below
    loop.run();
    EXPECT_EQ(got, (std::vector<std::string>{"m0", "m1", "m2", "m3", "m4"}));
}

// A message that arrives on a socket while another handler (here a later) sends on it: the send
// takes the command that would have made the socket's descriptor readable, so only reading its
// ZMQ_EVENTS after that handler finds the message.
TEST(Loop, AMessageWhoseSignalASendFromAnotherHandlerTookIsHandled) {
    ::zmq::context_t ctx = daemon::make_context();
    ::zmq::socket_t dealer(ctx, ZMQ_DEALER), router(ctx, ZMQ_ROUTER);
    daemon::bind(router, "inproc://loop-took");
    daemon::connect(dealer, "inproc://loop-took");
    // The router learns the dealer's identity from a first message.
    ASSERT_TRUE(daemon::send_frames(dealer, {"hello"}));
    std::vector<zmq::Frame> frames;
    ASSERT_EQ(zmq::recv_frames(router.handle(), frames, 2), 2u);
    const std::string identity(frames[0].view());

    Loop loop;
    std::vector<std::string> got;
    std::vector<zmq::Frame> in;
    loop.on_socket(dealer.handle(), [&] {
        while (zmq::recv_frames(dealer.handle(), in, 1) == 1) got.emplace_back(in[0].view());
        if (!got.empty()) loop.stop();
    });
    loop.after(50, [&] {
        // The reply is in the dealer's queue when the router's send returns; then the dealer's
        // send takes the command that announced it (its descriptor is no longer readable).
        ASSERT_TRUE(daemon::send_frames(router, {identity, "reply"}));
        ASSERT_TRUE(daemon::send_frames(dealer, {"more"}));
    });
    loop.after(5000, [&] { loop.stop(); });  // a bound, never a speed: the test fails below
    loop.run();
    EXPECT_EQ(got, (std::vector<std::string>{"reply"}));
}

// The controller's receive loop under Loop::run, on a fake clock: a tick every 250 ms, between
// ticks one batch per wakeup from a socket that never empties (a flood) whose messages take
// 5 ms each. With the message budget alone (256 messages: 1.28 s) ticks were due long before
// they ran; with the time budget a tick runs at most one budget and one message late.
std::uint64_t worst_tick_delay(bool with_time_budget) {
    const std::uint64_t interval = 250, per_message = 5;
    std::uint64_t now = 1000;
    ::zmq::context_t ctx = daemon::make_context();
    ::zmq::socket_t pull(ctx, ZMQ_PULL), push(ctx, ZMQ_PUSH);
    // No high-water mark: the sender learns of the receiver's reads only in batches, and the
    // flood must never find the queue full.
    pull.set(::zmq::sockopt::rcvhwm, 0);
    push.set(::zmq::sockopt::sndhwm, 0);
    daemon::bind(pull, "inproc://loop-flood");
    daemon::connect(push, "inproc://loop-flood");
    for (int i = 0; i < 8; ++i) EXPECT_TRUE(daemon::send_frames(push, {"flood"}));
    Loop loop([&] { return now; });
    BatchBudget batch(256, with_time_budget ? batch_budget_ms(interval) : UINT64_MAX / 2);
    std::vector<zmq::Frame> frames;
    loop.on_socket(pull.handle(), [&] {
        batch.start(now);
        while (batch.more(now) && zmq::recv_frames(pull.handle(), frames, 1) == 1) {
            now += per_message;
            EXPECT_TRUE(daemon::send_frames(push, {"flood"}));  // the queue never empties
        }
    });
    std::uint64_t due = now + interval, worst = 0;
    int ticks = 0;
    loop.every(interval, [&] {
        worst = std::max(worst, now - due);
        due += interval;
        if (due <= now) due = now + interval;  // Loop::run skips missed periods
        if (++ticks == 10) loop.stop();
    });
    loop.run();
    return worst;
}

TEST(Loop, AFloodDelaysTheTickByOneBudgetAtMost) {
    EXPECT_GT(worst_tick_delay(false), 250u);  // a whole interval missed
    EXPECT_LE(worst_tick_delay(true), batch_budget_ms(250) + 5);
}

}  // namespace
}  // namespace grl::daemon
