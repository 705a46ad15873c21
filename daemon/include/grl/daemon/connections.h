// --max-connections: the connection limit of one bound endpoint (grl/connection_limit.h). A
// socket monitor counts the endpoint's connections; the daemon's ZAP handler asks admit() at
// each new connection's handshake (ZMQ_ZAP_DOMAIN is set on the socket, with or without
// CURVE) and refuses it while the endpoint is full. Used on the daemon loop's thread.
#pragma once

#include <cstdint>
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
    void* monitor() const { return monitor_.get(); }  // readable when events are queued
    void handle();                                    // takes the queued events
    // A new connection's handshake: false (counted; one warning per burst of refusals) while
    // the endpoint holds more than its limit.
    bool admit();

    const std::string& name() const { return name_; }
    const ConnectionLimit& count() const { return count_; }

  private:
    Socket monitor_;
    std::string name_;
    std::string address_;
    ConnectionLimit count_;
    std::vector<zmq::Frame> frames_;
};

// grl_connections{endpoint}, grl_connections_max{endpoint},
// grl_connections_refused_total{endpoint}.
void write_connection_metrics(MetricsText& m, const std::vector<const EndpointLimit*>& limits);

}  // namespace grl::daemon
