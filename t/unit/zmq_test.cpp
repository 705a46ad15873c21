// Unit tests of grl_zmq (zmq/): receiving a message's frames, the checks of an instruction
// message's frames, and handshake monitor events, decoded from bytes and from real sockets
// (inproc and loopback TCP; no fixed ports).
#include <gtest/gtest.h>
#include <zmq.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "grl/zmq/monitor.h"
#include "grl/zmq/socket.h"

namespace grl::zmq {
namespace {

struct Ctx {
    void* ctx = zmq_ctx_new();
    std::vector<void*> sockets;
    ~Ctx() {
        for (void* s : sockets) zmq_close(s);
        zmq_ctx_term(ctx);
    }
    void* socket(int type) {
        void* s = zmq_socket(ctx, type);
        int zero = 0;
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
        sockets.push_back(s);
        return s;
    }
};

std::string head(std::uint16_t event, std::uint32_t value) {
    std::string h(6, '\0');
    std::memcpy(h.data(), &event, 2);
    std::memcpy(h.data() + 2, &value, 4);
    return h;
}

// Waits (up to 5 s, never asserted as a speed) for the next event on a monitor's PAIR socket.
// Binds a PULL socket to a loopback port chosen by the kernel; its endpoint, or "" on failure.
std::string bind_pull(Ctx& c) {
    void* server = c.socket(ZMQ_PULL);
    if (zmq_bind(server, "tcp://127.0.0.1:*") != 0) return "";
    char ep[256];
    std::size_t len = sizeof(ep);
    if (zmq_getsockopt(server, ZMQ_LAST_ENDPOINT, ep, &len) != 0) return "";
    return ep;
}

bool wait_event(void* pair, std::vector<Frame>& frames, HandshakeEvent& e) {
    zmq_pollitem_t item{pair, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 5000) != 1) return false;
    return next_handshake_event(pair, frames, e);
}

wire::Instructions zone_instructions() {
    wire::Instructions m;
    m.source = "controller eu #1";
    m.seq = 7;
    m.ts_ms = 1000;
    m.ttl_ms = 30000;
    m.scope = Scope::Zone;
    m.region = "eu";
    m.zone = "eu-a";
    wire::Instruction b;
    b.name = "api";
    b.ratio_ppm = 250000;
    b.limit_mrps = 100000;
    m.buckets.push_back(b);
    return m;
}

TEST(MonitorEvent, SuccessAndEachKindOfFailure) {
    HandshakeEvent ok = decode_monitor_event(head(ZMQ_EVENT_HANDSHAKE_SUCCEEDED, 0), "tcp://a:1");
    EXPECT_TRUE(ok.ok);
    EXPECT_EQ(ok.address, "tcp://a:1");

    HandshakeEvent refused = decode_monitor_event(head(ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, 400), "x");
    EXPECT_FALSE(refused.ok);
    EXPECT_EQ(refused.failure, HandshakeFailure::Refused);
    EXPECT_EQ(refused.value, 400u);

    HandshakeEvent nocurve = decode_monitor_event(
        head(ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH), "x");
    EXPECT_EQ(nocurve.failure, HandshakeFailure::NoCurve);

    HandshakeEvent protocol = decode_monitor_event(
        head(ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC), "x");
    EXPECT_EQ(protocol.failure, HandshakeFailure::Protocol);
    EXPECT_EQ(protocol.value, static_cast<std::uint32_t>(ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC));

    HandshakeEvent other =
        decode_monitor_event(head(ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL, ECONNRESET), "x");
    EXPECT_FALSE(other.ok);
    EXPECT_EQ(other.failure, HandshakeFailure::Other);
    EXPECT_EQ(other.value, static_cast<std::uint32_t>(ECONNRESET));
}

TEST(MonitorEvent, FramesOfAnyEvent) {
    const std::string h = head(ZMQ_EVENT_ACCEPTED, 17);
    MonitorEvent e = decode_monitor_frames(h, "tcp://127.0.0.1:5");
    EXPECT_EQ(e.event, ZMQ_EVENT_ACCEPTED);
    EXPECT_EQ(e.value, 17u);  // the connection's file descriptor
    EXPECT_EQ(e.address, "tcp://127.0.0.1:5");
    EXPECT_EQ(decode_monitor_frames(std::string(5, '\x01'), "x").event, 0);  // too short
}

// The events a bound endpoint's connection limit follows, from a real server socket: one
// connection's accept, handshake and close, named by its file descriptor where libzmq does.
TEST(MonitorEvent, RealServerEventsOfOneConnection) {
    Ctx c;
    void* server = c.socket(ZMQ_PULL);
    monitor_events(server, "inproc://t-server",
                   ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
    void* pair = c.socket(ZMQ_PAIR);
    ASSERT_EQ(zmq_connect(pair, "inproc://t-server"), 0);
    ASSERT_EQ(zmq_bind(server, "tcp://127.0.0.1:*"), 0);
    char ep[256];
    std::size_t len = sizeof(ep);
    ASSERT_EQ(zmq_getsockopt(server, ZMQ_LAST_ENDPOINT, ep, &len), 0);
    void* client = c.socket(ZMQ_PUSH);
    ASSERT_EQ(zmq_connect(client, ep), 0);
    std::vector<Frame> frames;
    auto next = [&](MonitorEvent& e) {
        zmq_pollitem_t item{pair, 0, ZMQ_POLLIN, 0};
        return zmq_poll(&item, 1, 5000) == 1 && next_monitor_event(pair, frames, e);
    };
    MonitorEvent e;
    ASSERT_TRUE(next(e));
    EXPECT_EQ(e.event, ZMQ_EVENT_ACCEPTED);
    EXPECT_EQ(e.address, ep);
    const std::uint32_t fd = e.value;
    EXPECT_GT(fd, 2u);
    ASSERT_TRUE(next(e));
    EXPECT_EQ(e.event, ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    EXPECT_EQ(e.value, 0u);  // names no connection
    zmq_close(client);
    c.sockets.erase(std::find(c.sockets.begin(), c.sockets.end(), client));
    ASSERT_TRUE(next(e));
    EXPECT_EQ(e.event, ZMQ_EVENT_DISCONNECTED);
    EXPECT_EQ(e.value, fd);
}

TEST(MonitorEvent, AShortHeadIsAFailureOfNoKnownKind) {
    HandshakeEvent e = decode_monitor_event(std::string(5, '\x01'), "tcp://a:1");
    EXPECT_FALSE(e.ok);
    EXPECT_EQ(e.failure, HandshakeFailure::Other);
    EXPECT_EQ(e.value, 0u);
    EXPECT_EQ(e.address, "tcp://a:1");
}

TEST(MonitorEvent, DescribeUsesTheWordingOfTheCaller) {
    HandshakeEvent e = decode_monitor_event(head(ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, 400), "x");
    EXPECT_EQ(describe(e, {"collector", "this host", "grl_curve_server_key"}),
              "refused by the collector (ZAP status 400): is this host's public key in its "
              "--curve-clients?");
}

// A real handshake, watched as the module and the daemons watch theirs.
TEST(MonitorEvent, RealHandshakeSucceeds) {
    Ctx c;
    const std::string ep = bind_pull(c);
    ASSERT_FALSE(ep.empty());
    void* client = c.socket(ZMQ_PUSH);
    monitor_handshakes(client, "inproc://t-ok", false);
    void* pair = c.socket(ZMQ_PAIR);
    ASSERT_EQ(zmq_connect(pair, "inproc://t-ok"), 0);
    ASSERT_EQ(zmq_connect(client, ep.c_str()), 0);
    std::vector<Frame> frames;
    HandshakeEvent e;
    ASSERT_TRUE(wait_event(pair, frames, e));
    EXPECT_TRUE(e.ok);
    EXPECT_EQ(e.address, ep);
}

TEST(MonitorEvent, RealCurveClientOfAPlainServerIsNoCurve) {
    Ctx c;
    const std::string ep = bind_pull(c);
    ASSERT_FALSE(ep.empty());
    char pub[41], sec[41], server_pub[41], server_sec[41];
    ASSERT_EQ(zmq_curve_keypair(pub, sec), 0);
    ASSERT_EQ(zmq_curve_keypair(server_pub, server_sec), 0);
    void* client = c.socket(ZMQ_PUSH);
    make_curve_client(client, {pub, sec}, server_pub);
    monitor_handshakes(client, "inproc://t-fail", true);
    void* pair = c.socket(ZMQ_PAIR);
    ASSERT_EQ(zmq_connect(pair, "inproc://t-fail"), 0);
    ASSERT_EQ(zmq_connect(client, ep.c_str()), 0);
    std::vector<Frame> frames;
    HandshakeEvent e;
    ASSERT_TRUE(wait_event(pair, frames, e));
    EXPECT_FALSE(e.ok);
    EXPECT_EQ(e.failure, HandshakeFailure::NoCurve);
    EXPECT_EQ(e.address, ep);
}

TEST(MonitorEvent, BadOptionsAndEndpointsAreNamed) {
    Ctx c;
    void* s = c.socket(ZMQ_PUSH);
    try {
        make_curve_client(s, {"short", "short"}, "short");
        FAIL() << "a 5-character key was accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("ZMQ_CURVE_SERVERKEY"), std::string::npos);
    }
    try {
        monitor_handshakes(s, "tcp://127.0.0.1:1", true);  // monitors need inproc
        FAIL() << "a tcp monitor endpoint was accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("tcp://127.0.0.1:1"), std::string::npos);
    }
}

TEST(RecvFrames, KeepsAtMostMaxAndCountsTheRest) {
    Ctx c;
    void* a = c.socket(ZMQ_PAIR);
    void* b = c.socket(ZMQ_PAIR);
    ASSERT_EQ(zmq_bind(a, "inproc://t-frames"), 0);
    ASSERT_EQ(zmq_connect(b, "inproc://t-frames"), 0);
    std::vector<Frame> frames;
    EXPECT_EQ(recv_frames(a, frames, 2), 0u);
    EXPECT_EQ(zmq_errno(), EAGAIN);
    zmq_send(b, "one", 3, ZMQ_SNDMORE);
    zmq_send(b, "two", 3, ZMQ_SNDMORE);
    zmq_send(b, "three", 5, 0);
    zmq_send(b, "next", 4, 0);
    EXPECT_EQ(recv_frames(a, frames, 2), 3u);
    EXPECT_EQ(frames[0].view(), "one");
    EXPECT_EQ(frames[1].view(), "two");
    EXPECT_EQ(recv_frames(a, frames, 2), 1u);  // the surplus frame went with its message
    EXPECT_EQ(frames[0].view(), "next");
}

TEST(ReadInstruction, TopicAndBodyOfTheSameScope) {
    wire::Instructions m = zone_instructions(), got;
    std::string body, error;
    wire::encode(m, body);
    ASSERT_TRUE(read_instruction(2, wire::topic(Scope::Zone, "eu", "eu-a"), body, got, error))
        << error;
    EXPECT_EQ(got.zone, "eu-a");
    ASSERT_EQ(got.buckets.size(), 1u);
    EXPECT_EQ(got.buckets[0].ratio_ppm, 250000u);
}

TEST(ReadInstruction, EachFaultIsNamed) {
    wire::Instructions m = zone_instructions(), got;
    std::string body, error;
    wire::encode(m, body);
    const std::string topic = wire::topic(Scope::Zone, "eu", "eu-a");

    EXPECT_FALSE(read_instruction(1, topic, "", got, error));
    EXPECT_EQ(error, "one frame, expected topic and body");
    EXPECT_FALSE(read_instruction(3, topic, body, got, error));
    EXPECT_EQ(error, "more than two frames");

    const std::string other = wire::topic(Scope::Zone, "eu", "eu-b");
    EXPECT_FALSE(read_instruction(2, other, body, got, error));
    EXPECT_EQ(error, "topic \"" + other + "\" does not match the message's scope");

    m.buckets[0].ratio_ppm = 1000001;  // out of range: the decoder names the field
    body.clear();
    wire::encode(m, body);
    EXPECT_FALSE(read_instruction(2, topic, body, got, error));
    EXPECT_NE(error.find("ratio"), std::string::npos) << error;
}

}  // namespace
}  // namespace grl::zmq
