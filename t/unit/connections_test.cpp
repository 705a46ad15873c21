// grl/daemon/connections.h on real sockets (loopback TCP, a port chosen by the kernel): an
// endpoint's connections followed from its monitor, and a cut (rebind) that closes them, after
// which a client connects again by itself.
#include "grl/daemon/connections.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "grl/daemon/metrics.h"
#include "grl/zmq/monitor.h"

namespace grl::daemon {
namespace {

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
std::uint16_t next_event(Socket& pair, Socket& server, std::vector<zmq::Frame>& frames) {
    zmq::MonitorEvent e;
    for (int i = 0; i < 500; ++i) {
        zmq_pollitem_t items[2] = {{pair.get(), 0, ZMQ_POLLIN, 0},
                                   {server.get(), 0, ZMQ_POLLIN, 0}};
        zmq_poll(items, 2, 10);
        if (zmq::next_monitor_event(pair.get(), frames, e)) return e.event;
    }
    return 0;
}

TEST(EndpointLimit, ACutClosesTheConnectionsAndClientsConnectAgain) {
    Context ctx;
    Socket server(ctx, ZMQ_PULL);
    EndpointLimit limit(ctx, server.get(), "report", 10);
    const std::string ep = server.bind("tcp://127.0.0.1:*");
    limit.set_address(ep);
    Socket client(ctx, ZMQ_PUSH);
    zmq::monitor_events(client.get(), "inproc://t-cut-client",
                        ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
    Socket pair(ctx, ZMQ_PAIR);
    pair.connect("inproc://t-cut-client");
    client.connect(ep);
    std::vector<zmq::Frame> frames;
    ASSERT_EQ(next_event(pair, server, frames), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    ASSERT_TRUE(wait_for(limit, [&] { return limit.count().established() == 1; }));

    EXPECT_EQ(limit.cut([&] { rebind(server.get(), ep); }), 1u);
    EXPECT_EQ(limit.cut_total(), 1u);
    EXPECT_EQ(limit.count().open(), 0u);
    // The client's connection was closed by the server, and it connects again by itself.
    EXPECT_EQ(next_event(pair, server, frames), ZMQ_EVENT_DISCONNECTED);
    EXPECT_EQ(next_event(pair, server, frames), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    ASSERT_TRUE(client.send("after the cut"));
    zmq_pollitem_t item{server.get(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq_poll(&item, 1, 5000), 1);
    ASSERT_EQ(server.recv_frames(frames, 1), 1u);
    EXPECT_EQ(frames[0].view(), "after the cut");
    EXPECT_TRUE(wait_for(limit, [&] { return limit.count().established() == 1; }));
}

TEST(EndpointLimit, ARebindOfAnEndpointNotBoundIsNamed) {
    Context ctx;
    Socket server(ctx, ZMQ_PULL);
    try {
        rebind(server.get(), "tcp://127.0.0.1:1");
        FAIL() << "an endpoint never bound was bound again";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("unbind tcp://127.0.0.1:1"), std::string::npos)
            << e.what();
    }
}

// A cut whose rebind fails (here the unbind: the endpoint was never bound there; in a daemon,
// most likely the port taken in between, which leaves the endpoint unbound until a restart) is
// a degraded mode: besides its error line, a counter says so.
TEST(EndpointLimit, ACutThatFailsIsCounted) {
    Context ctx;
    Socket server(ctx, ZMQ_PULL);
    EndpointLimit limit(ctx, server.get(), "report", 10);
    limit.set_address(server.bind("tcp://127.0.0.1:*"));
    MetricsText before;
    write_connection_metrics(before, {&limit});
    EXPECT_NE(before.text().find("grl_curve_connections_cut_failures_total{endpoint=\"report\"} 0"),
              std::string::npos)
        << before.text();
    EXPECT_THROW(limit.cut([&] { rebind(server.get(), "tcp://127.0.0.1:1"); }), std::runtime_error);
    MetricsText after;
    write_connection_metrics(after, {&limit});
    EXPECT_NE(after.text().find("grl_curve_connections_cut_failures_total{endpoint=\"report\"} 1"),
              std::string::npos)
        << after.text();
}

}  // namespace
}  // namespace grl::daemon
