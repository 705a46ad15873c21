// --max-connections: the connection limit of one bound endpoint (grl/connection_limit.h). A
// socket monitor follows the endpoint's connections (accepted, handshaken, disconnected); the
// daemon's ZAP handler asks admit() at each new connection's handshake (ZMQ_ZAP_DOMAIN is set
// on the socket, with or without CURVE) and refuses it while the endpoint is full. A
// connection takes a slot from its handshake; those still in theirs are pending, and closed by
// libzmq after kHandshakeMs. Used on the daemon loop's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "grl/connection_limit.h"
#include "grl/daemon/log.h"
#include "grl/daemon/metrics.h"
#include "grl/daemon/zmq.h"

namespace grl::daemon {

class EndpointLimit {
  public:
    // How long a connection may take to complete its handshake (ZMQ_HANDSHAKE_IVL).
    static constexpr int kHandshakeMs = 2000;
    // `name` labels the endpoint in metrics and log lines ("report", "usage"). Create it
    // before the socket binds.
    EndpointLimit(Context& ctx, void* socket, std::string name, std::size_t max);
    EndpointLimit(const EndpointLimit&) = delete;
    EndpointLimit& operator=(const EndpointLimit&) = delete;

    void set_address(std::string address) { address_ = std::move(address); }  // after bind
    const std::string& address() const { return address_; }
    void* monitor() const { return monitor_.get(); }  // readable when events are queued
    void handle();                                    // takes the queued events
    // A new connection's handshake: false (counted; one warning per burst of refusals) while
    // the endpoint holds its limit of handshaken connections.
    bool admit();
    // Closes every connection of the endpoint: `rebind` (run by the thread that owns the
    // socket) unbinds it and binds it again, which makes libzmq close the sessions accepted
    // through it. Returns how many connections were cut (counted). When `rebind` throws, the
    // failure is counted (cut_failures()) and the exception passed on.
    std::size_t cut(const std::function<void()>& rebind);

    const std::string& name() const { return name_; }
    const ConnectionLimit& count() const { return count_; }
    std::uint64_t cut_total() const { return cut_; }
    std::uint64_t cut_failures() const { return cut_failures_; }

  private:
    Socket monitor_;
    std::string name_;
    std::string address_;
    ConnectionLimit count_;
    std::uint64_t cut_ = 0;
    std::uint64_t cut_failures_ = 0;
    std::vector<zmq::Frame> frames_;
    LogLimiter pending_log_;
};

// Unbinds `socket` from `endpoint` (its resolved address) and binds it there again; libzmq
// closes the connections accepted through the old listener (each once the socket has taken
// its session's termination, at its next poll, send or receive). Tries again for up to 2 s while
// the old listener still holds the port. Throws std::runtime_error naming the endpoint.
void rebind(void* socket, const std::string& endpoint);

// grl_connections{endpoint}, grl_connections_pending{endpoint}, grl_connections_max{endpoint},
// grl_connections_refused_total{endpoint}, grl_connections_unhandshaken_total{endpoint},
// grl_curve_connections_cut_total{endpoint}, grl_curve_connections_cut_failures_total{endpoint}.
void write_connection_metrics(MetricsText& m, const std::vector<const EndpointLimit*>& limits);

}  // namespace grl::daemon
