// The collector's relay (collector/relay.h) on real sockets: a rebind of its publish socket
// runs on the relay's thread and answers on the caller's loop; a reply that comes after the
// caller gave up on its request is never taken for the answer to the next one.
#include "collector/relay.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include <string>
#include <vector>

#include "grl/daemon/loop.h"
#include "grl/zmq/socket.h"

namespace grl::collector {
namespace {

struct Result {
    bool ended = false;
    std::string error;
};

TEST(Relay, ALateRebindReplyIsNotTheAnswerToTheNextRequest) {
    ::zmq::context_t ctx = daemon::make_context();
    ::zmq::socket_t sub(ctx, ZMQ_SUB);
    ::zmq::socket_t pub(ctx, ZMQ_XPUB);
    const std::string ep = daemon::bind(pub, "tcp://127.0.0.1:*");
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

// A controller's tick of more than 4,096 buckets in one scope is several messages with the
// same ts_ms: a subscriber that arrives later gets every one of them again, not only the last
// (its other buckets would wait for the next tick), and only the newest tick's.
wire::Instructions part(std::uint64_t ts_ms, const std::vector<std::string>& names) {
    wire::Instructions m;
    m.source = "ctl";
    m.ts_ms = ts_ms;
    m.ttl_ms = 60000;
    m.scope = Scope::Global;
    for (const std::string& n : names) {
        wire::Instruction e;
        e.name = n;
        e.ratio_ppm = 250000;
        e.limit_mrps = 100000;
        m.buckets.push_back(e);
    }
    return m;
}

// The bucket names of every message `s` receives until none comes within `wait_ms`.
std::vector<std::string> names_received(::zmq::socket_t& s, int wait_ms) {
    std::vector<std::string> names;
    std::vector<zmq::Frame> frames;
    wire::Instructions m;
    std::string error;
    for (;;) {
        zmq_pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, wait_ms) <= 0) return names;
        const std::size_t n = zmq::recv_frames(s.handle(), frames, 2);
        EXPECT_TRUE(
            zmq::read_instruction(n, frames[0].view(), n >= 2 ? frames[1].view() : "", m, error))
            << error;
        for (const wire::Instruction& e : m.buckets) names.push_back(e.name);
    }
}

TEST(Relay, ANewSubscriberGetsEveryMessageOfTheLastTick) {
    ::zmq::context_t ctx = daemon::make_context();
    ::zmq::socket_t controller(ctx, ZMQ_PUB);
    const std::string publish = daemon::bind(controller, "tcp://127.0.0.1:*");
    ::zmq::socket_t sub(ctx, ZMQ_SUB);
    sub.set(::zmq::sockopt::subscribe, "grl/g/");
    daemon::connect(sub, publish);
    ::zmq::socket_t pub(ctx, ZMQ_XPUB);
    const std::string relayed = daemon::bind(pub, "tcp://127.0.0.1:*");
    std::string topics[3] = {"grl/g/", "grl/r/r1/", "grl/z/r1/z1/"};
    Relay relay(ctx, std::move(sub), std::move(pub), topics);
    relay.start();
    std::string body;
    auto send = [&](const wire::Instructions& m) {
        wire::encode(m, body);
        ASSERT_TRUE(daemon::send_frames(controller, {"grl/g/", body}));
    };
    // Until the relay's subscription has reached the controller's socket (a bound of 5 s).
    for (int i = 0; i < 500 && relay.relayed.load() == 0; ++i) {
        send(part(1, {"warmup"}));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GT(relay.relayed.load(), 0u);
    const std::uint64_t before = relay.relayed.load();
    send(part(2000, {"a1", "a2"}));
    send(part(2000, {"b1"}));
    send(part(2000, {"c1", "c2"}));
    for (int i = 0; i < 500 && relay.relayed.load() < before + 3; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_EQ(relay.relayed.load(), before + 3);

    auto late_subscriber = [&] {
        ::zmq::socket_t s(ctx, ZMQ_SUB);
        s.set(::zmq::sockopt::subscribe, "grl/g/");
        daemon::connect(s, relayed);
        return names_received(s, 1000);
    };
    EXPECT_EQ(late_subscriber(), (std::vector<std::string>{"a1", "a2", "b1", "c1", "c2"}));
    const std::map<std::string, Relay::Entry> held = relay.entries(daemon::mono_ms());
    for (const char* n : {"a1", "a2", "b1", "c1", "c2"}) {
        ASSERT_EQ(held.count(n), 1u) << n;
        EXPECT_EQ(held.at(n).ratio_ppm, 250000u);
    }

    // The next tick replaces the set: its one message only.
    send(part(2250, {"d1"}));
    for (int i = 0; i < 500 && relay.relayed.load() < before + 4; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(late_subscriber(), (std::vector<std::string>{"d1"}));
    EXPECT_EQ(relay.entries(daemon::mono_ms()).count("a1"), 0u);
    EXPECT_EQ(relay.entries(daemon::mono_ms()).count("d1"), 1u);
    relay.stop();
}

}  // namespace
}  // namespace grl::collector
