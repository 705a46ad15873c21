// The daemons' event loop and ZeroMQ's edge-triggered ZMQ_FD (daemon/include/grl/daemon/loop.h):
// a socket's handler runs while it has messages, whatever took the signal of their arrival.
#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "grl/daemon/loop.h"
#include "grl/daemon/zmq.h"
#include "grl/zmq/socket.h"

namespace grl::daemon {
namespace {

// A handler that takes one message a call: the others stay queued, and their arrival was
// signalled once, to the receive that took the first.
TEST(Loop, AHandlerThatLeavesMessagesRunsAgainWithoutAnotherSignal) {
    Context ctx;
    Socket pull(ctx, ZMQ_PULL), push(ctx, ZMQ_PUSH);
    const std::string ep = pull.bind("tcp://127.0.0.1:*");
    push.connect(ep);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(push.send("m" + std::to_string(i)));
    // All five in the pull socket's queue before the loop starts (their arrival was signalled
    // before the loop's first turn).
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Loop loop;
    std::vector<std::string> got;
    std::vector<zmq::Frame> frames;
    loop.on_socket(pull.get(), [&] {
        if (pull.recv_frames(frames, 1) == 1) got.emplace_back(frames[0].view());
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
    Context ctx;
    Socket dealer(ctx, ZMQ_DEALER), router(ctx, ZMQ_ROUTER);
    const std::string ep = router.bind("tcp://127.0.0.1:*");
    dealer.connect(ep);
    // The router learns the dealer's identity from a first message.
    ASSERT_TRUE(dealer.send("hello"));
    std::vector<zmq::Frame> frames;
    std::size_t n = 0;
    for (int i = 0; i < 500 && (n = router.recv_frames(frames, 2)) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(n, 2u);
    const std::string identity(frames[0].view());

    Loop loop;
    std::vector<std::string> got;
    std::vector<zmq::Frame> in;
    loop.on_socket(dealer.get(), [&] {
        while (dealer.recv_frames(in, 1) == 1) got.emplace_back(in[0].view());
        if (!got.empty()) loop.stop();
    });
    loop.after(50, [&] {
        // The reply reaches the dealer's queue while this handler runs; then the dealer's send
        // takes the command that announced it (its descriptor is no longer readable).
        ASSERT_TRUE(router.send_frames({identity, "reply"}));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ASSERT_TRUE(dealer.send("more"));
    });
    loop.after(5000, [&] { loop.stop(); });  // a bound, never a speed: the test fails below
    loop.run();
    EXPECT_EQ(got, (std::vector<std::string>{"reply"}));
}

}  // namespace
}  // namespace grl::daemon
