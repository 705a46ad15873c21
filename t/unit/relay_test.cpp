// The collector's relay (collector/relay.h) on real sockets: a rebind of its publish socket
// runs on the relay's thread and answers on the caller's loop; a reply that comes after the
// caller gave up on its request is never taken for the answer to the next one.
#include "collector/relay.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace grl::collector {
namespace {

struct Result {
    bool ended = false;
    std::string error;
};

TEST(Relay, ALateRebindReplyIsNotTheAnswerToTheNextRequest) {
    daemon::Context ctx;
    daemon::Socket sub(ctx, ZMQ_SUB);
    daemon::Socket pub(ctx, ZMQ_XPUB);
    const std::string ep = pub.bind("tcp://127.0.0.1:*");
    std::string topics[3] = {"grl/g/", "grl/r/r1/", "grl/z/r1/z1/"};
    Relay relay(ctx, std::move(sub), std::move(pub), topics);
    relay.start();
    daemon::Loop loop;
    loop.on_socket(relay.replies(), [&] { relay.on_replies(); });
    loop.after(5000, [&] { loop.stop(); });  // a bound, never a speed: the test fails below
    // A request the relay refuses (nothing is bound there), given up on at once: its reply
    // ("unbind ...: ...") comes after the caller stopped waiting for it.
    Result first, second, third;
    relay.rebind_publish(
        "tcp://127.0.0.1:1",
        [&](const std::string& e, bool) {
            first = {true, e};
            // The next request at once: the late reply arrives while it waits for its own.
            relay.rebind_publish(
                ep,
                [&](const std::string& e2, bool) {
                    second = {true, e2};
                    relay.rebind_publish(
                        "tcp://127.0.0.1:1",
                        [&](const std::string& e3, bool) {
                            third = {true, e3};
                            loop.stop();
                        },
                        loop);
                },
                loop);
        },
        loop, 0);
    loop.run();
    ASSERT_TRUE(first.ended && second.ended && third.ended);
    const bool gave_up = first.error == "the relay did not answer within 0 ms";
    if (!gave_up) {
        EXPECT_EQ(first.error.rfind("unbind tcp://127.0.0.1:1", 0), 0u) << first.error;
    }
    EXPECT_EQ(second.error, "");  // its own answer, not the first request's
    EXPECT_EQ(relay.stale_replies(), gave_up ? 1u : 0u);
    EXPECT_EQ(third.error.rfind("unbind tcp://127.0.0.1:1", 0), 0u) << third.error;
    relay.stop();
}

}  // namespace
}  // namespace grl::collector
