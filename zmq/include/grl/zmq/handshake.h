// The handshakes of a ZeroMQ CURVE client socket, as its owner sees them through a socket
// monitor: which endpoints to connect again and when (Redial), when a change is worth one log
// line (Handshakes), and the words of that line (describe). Shared by the nginx module's
// reporter and the daemons' HandshakeWatch, with the monitor events of grl/zmq/monitor.h;
// pure logic, the caller supplies the clock.
//
// Redial: libzmq gives up on an endpoint for good when a handshake fails with a
// protocol error, which is what a refused CURVE key is: without help, a host
// or collector whose key is added to its peer's list later would never be
// admitted. The socket's owner feeds handshake results (from a socket monitor)
// in here, and at due() disconnects and connects the returned endpoints again.
// Backoff: `min_ms`, doubling per round to `max_ms`; back to `min_ms` after a
// success with nothing pending. Pure logic: the caller supplies the clock.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace grl {

class Redial {
  public:
    explicit Redial(std::vector<std::string> endpoints, std::uint64_t min_ms = 1000,
                    std::uint64_t max_ms = 30000);

    // A failed handshake with `address`. An address that is none of the
    // configured endpoints (resolved differently) marks all of them.
    void failed(const std::string& address, std::uint64_t now_ms);
    void succeeded();

    // The endpoints to connect again now (and forgets them); empty before the
    // retry time.
    std::vector<std::string> due(std::uint64_t now_ms);
    // When due() will next return something; 0 when nothing is pending.
    std::uint64_t next_ms() const { return pending_.empty() ? 0 : retry_at_; }
    const std::vector<std::string>& endpoints() const { return endpoints_; }

  private:
    void mark(const std::string& endpoint);

    std::vector<std::string> endpoints_;
    std::vector<std::string> pending_;
    std::uint64_t min_ms_, max_ms_, backoff_ms_;
    std::uint64_t retry_at_ = 0;
};

// How a handshake failed, from the monitor event (the caller maps libzmq's constants).
enum class HandshakeFailure {
    Refused,   // ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: the peer's ZAP handler said no
    NoCurve,   // protocol error ZMTP_MECHANISM_MISMATCH: the peer does not speak CURVE there
    Protocol,  // another protocol error (value: ZMQ_PROTOCOL_ERROR_*)
    Other,     // ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL (value: errno)
};

// Who is who in the log line.
struct HandshakeWording {
    std::string_view peer;        // "collector", "controller", "peer controller"
    std::string_view self;        // "this host", "this daemon"
    std::string_view server_key;  // where the peer's public key is configured
};

// The failure and its likely cause, e.g. `refused by the collector (ZAP status 400): is this
// host's public key in its --curve-clients?`.
std::string describe(HandshakeFailure f, std::uint32_t value, const HandshakeWording& w);

// The handshake results of one socket: feeds Redial, and says when to log.
class Handshakes {
  public:
    explicit Handshakes(std::vector<std::string> endpoints) : redial_(std::move(endpoints)) {}

    // Records one result; true when it changes what was last logged: the first failure, or
    // a success after failures (a first success is not news).
    bool record(bool ok, const std::string& address, std::uint64_t now_ms);
    // Endpoints to connect again now (see Redial::due).
    std::vector<std::string> due(std::uint64_t now_ms) { return redial_.due(now_ms); }
    std::uint64_t next_ms() const { return redial_.next_ms(); }

  private:
    Redial redial_;
    enum class Logged { Nothing, Working, Failing } logged_ = Logged::Nothing;
};

}  // namespace grl
