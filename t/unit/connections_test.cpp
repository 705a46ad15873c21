// grl/daemon/connections.h on real sockets (loopback TCP, a port chosen by the kernel): an
// endpoint's connections followed from its monitor, and a cut (rebind) that closes them, after
// which a client connects again by itself.
#include "grl/daemon/connections.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>

#include "grl/daemon/loop.h"
#include "grl/daemon/metrics.h"
#include "grl/zmq/monitor.h"

namespace grl::daemon {
namespace {

// A rebind run to its end on this thread (the port is free at once here, or within 2 s).
void rebind_now(::zmq::socket_ref socket, const std::string& ep, const RebindDone& done) {
    Rebind r(socket, ep, mono_ms());
    while (r.retry(mono_ms()) == Rebind::State::Waiting) {
        std::this_thread::sleep_for(std::chrono::milliseconds(Rebind::kRetryMs));
    }
    done(r.error(), r.tries() > 1);
}

// Waits (up to 5 s, never asserted as a speed) until `done`, taking the endpoint's events.
bool wait_for(EndpointLimit& l, const std::function<bool()>& done) {
    for (int i = 0; i < 500; ++i) {
        l.handle();
        if (done()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

// The next event of the client's monitor, up to 5 s. The server socket is polled meanwhile, as
// the daemons' loops poll theirs: a session closes its connection once the socket has taken
// its termination (libzmq's commands are processed within a call on the socket).
std::uint16_t next_event(::zmq::socket_t& pair, ::zmq::socket_t& server,
                         std::vector<zmq::Frame>& frames) {
    zmq::MonitorEvent e;
    for (int i = 0; i < 500; ++i) {
        zmq_pollitem_t items[2] = {{pair.handle(), 0, ZMQ_POLLIN, 0},
                                   {server.handle(), 0, ZMQ_POLLIN, 0}};
        zmq_poll(items, 2, 10);
        if (zmq::next_monitor_event(pair.handle(), frames, e)) return e.event;
    }
    return 0;
}

TEST(EndpointLimit, ACutClosesTheConnectionsAndClientsConnectAgain) {
    ::zmq::context_t ctx = daemon::make_context();
    ::zmq::socket_t server(ctx, ZMQ_PULL);
    EndpointLimit limit(ctx, server, "report", 10);
    const std::string ep = daemon::bind(server, "tcp://127.0.0.1:*");
    limit.set_address(ep);
    ::zmq::socket_t client(ctx, ZMQ_PUSH);
    zmq::monitor_events(client.handle(), "inproc://t-cut-client",
                        ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
    ::zmq::socket_t pair(ctx, ZMQ_PAIR);
    daemon::connect(pair, "inproc://t-cut-client");
    daemon::connect(client, ep);
    std::vector<zmq::Frame> frames;
    ASSERT_EQ(next_event(pair, server, frames), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    ASSERT_TRUE(wait_for(limit, [&] { return limit.count().established() == 1; }));

    std::string error = "not ended";
    EXPECT_EQ(limit.cut([&](const RebindDone& done) { rebind_now(server, ep, done); },
                        [&](const std::string& e, bool) { error = e; }),
              1u);
    EXPECT_EQ(error, "");
    EXPECT_EQ(limit.cut_total(), 1u);
    EXPECT_EQ(limit.count().open(), 0u);
    // The client's connection was closed by the server, and it connects again by itself.
    EXPECT_EQ(next_event(pair, server, frames), ZMQ_EVENT_DISCONNECTED);
    EXPECT_EQ(next_event(pair, server, frames), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    ASSERT_TRUE(daemon::send_frames(client, {"after the cut"}));
    zmq_pollitem_t item{server.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq_poll(&item, 1, 5000), 1);
    ASSERT_EQ(zmq::recv_frames(server.handle(), frames, 1), 1u);
    EXPECT_EQ(frames[0].view(), "after the cut");
    EXPECT_TRUE(wait_for(limit, [&] { return limit.count().established() == 1; }));
}

TEST(EndpointLimit, ARebindOfAnEndpointNotBoundIsNamed) {
    ::zmq::context_t ctx = daemon::make_context();
    ::zmq::socket_t server(ctx, ZMQ_PULL);
    Rebind r(server, "tcp://127.0.0.1:1", mono_ms());
    EXPECT_EQ(r.state(), Rebind::State::Failed);
    EXPECT_NE(r.error().find("unbind tcp://127.0.0.1:1"), std::string::npos) << r.error();
}

// A listener of our own on a port the kernel chose: the port a rebind finds held (as libzmq's
// old listener holds it for a moment after an unbind).
struct HeldPort {
    int fd = -1;
    std::string endpoint;
    HeldPort() {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t n = sizeof(a);
        if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), n) != 0 || listen(fd, 1) != 0 ||
            getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) {
            throw std::runtime_error("cannot listen on loopback");
        }
        endpoint = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    }
    void release() {
        if (fd >= 0) close(fd);
        fd = -1;
    }
    ~HeldPort() { release(); }
};

// While the port is held the rebind waits on the loop, which goes on turning (a timer of
// 1 ms keeps firing), and binds once the port is free; it would have given up after 2 s.
TEST(Rebind, APortStillHeldIsBoundOnALaterLoopTurnWithoutBlockingTheLoop) {
    ::zmq::context_t ctx = daemon::make_context();
    ::zmq::socket_t server(ctx, ZMQ_PULL);
    HeldPort held;
    Loop loop;
    std::uint64_t turns = 0, turns_at_release = 0;
    loop.every(1, [&] { ++turns; });
    auto r = std::make_shared<Rebind>(server, held.endpoint, mono_ms(), false);
    ASSERT_EQ(r->state(), Rebind::State::Waiting);
    std::string error = "not ended";
    bool delayed = false;
    loop.after(60, [&] {
        turns_at_release = turns;
        held.release();
    });
    finish_on(loop, r, [&](const std::string& e, bool d) {
        error = e;
        delayed = d;
        loop.stop();
    });
    loop.after(5000, [&] { loop.stop(); });  // a bound, never a speed: the test fails below
    loop.run();
    EXPECT_EQ(error, "");
    EXPECT_TRUE(delayed);
    EXPECT_GT(r->tries(), 1u);
    EXPECT_GT(turns_at_release, 0u);  // the loop turned while the rebind waited
    // Bound: a client's message arrives.
    ::zmq::socket_t client(ctx, ZMQ_PUSH);
    daemon::connect(client, held.endpoint);
    ASSERT_TRUE(daemon::send_frames(client, {"bound again"}));
    zmq_pollitem_t item{server.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq_poll(&item, 1, 5000), 1);
}

TEST(Rebind, APortHeldForTwoSecondsIsAFailureNamingTheEndpoint) {
    ::zmq::context_t ctx = daemon::make_context();
    ::zmq::socket_t server(ctx, ZMQ_PULL);
    HeldPort held;
    const std::uint64_t t0 = 1000;
    Rebind r(server, held.endpoint, t0, false);
    ASSERT_EQ(r.state(), Rebind::State::Waiting);
    EXPECT_EQ(r.next_ms(), t0 + Rebind::kRetryMs);
    EXPECT_EQ(r.retry(t0 + 1), Rebind::State::Waiting);  // not due: not tried
    EXPECT_EQ(r.tries(), 1u);
    EXPECT_EQ(r.retry(t0 + 5), Rebind::State::Waiting);
    EXPECT_EQ(r.retry(t0 + Rebind::kGiveUpMs), Rebind::State::Failed);
    EXPECT_EQ(r.error().rfind("bind " + held.endpoint + " again: ", 0), 0u) << r.error();
    EXPECT_NE(r.error().find("(3 tries in 2000 ms)"), std::string::npos) << r.error();
}

// A cut whose rebind fails (here the unbind: the endpoint was never bound there; in a daemon,
// most likely the port taken in between, which leaves the endpoint unbound until a restart) is
// a degraded mode: besides its error line, a counter says so; one that had to wait for the port
// is counted too.
TEST(EndpointLimit, ACutThatFailsIsCounted) {
    ::zmq::context_t ctx = daemon::make_context();
    ::zmq::socket_t server(ctx, ZMQ_PULL);
    EndpointLimit limit(ctx, server, "report", 10);
    limit.set_address(daemon::bind(server, "tcp://127.0.0.1:*"));
    MetricsText before;
    write_connection_metrics(before, {&limit});
    EXPECT_NE(before.text().find("grl_curve_connections_cut_failures_total{endpoint=\"report\"} 0"),
              std::string::npos)
        << before.text();
    std::string error;
    limit.cut([&](const RebindDone& done) { rebind_now(server, "tcp://127.0.0.1:1", done); },
              [&](const std::string& e, bool) { error = e; });
    EXPECT_NE(error.find("unbind tcp://127.0.0.1:1"), std::string::npos) << error;
    limit.cut([](const RebindDone& done) { done("", true); }, nullptr);
    MetricsText after;
    write_connection_metrics(after, {&limit});
    EXPECT_NE(after.text().find("grl_curve_connections_cut_failures_total{endpoint=\"report\"} 1"),
              std::string::npos)
        << after.text();
    EXPECT_NE(after.text().find("grl_curve_connections_cut_delayed_total{endpoint=\"report\"} 1"),
              std::string::npos)
        << after.text();
}

}  // namespace
}  // namespace grl::daemon
