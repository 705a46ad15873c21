// The controller's sockets and their CURVE wiring: the usage PULL, the PUB (instructions and
// region usage), the admin ROUTER and one SUB per peer; ZAP (which CURVE keys may connect, at
// most --max-connections per endpoint); which zone a collector's key speaks for and which
// controller a peer connection speaks for; the key lists read again on SIGHUP.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grl/control/curve_key_bindings.h"
#include "grl/daemon/connections.h"
#include "grl/daemon/curve.h"
#include "grl/daemon/loop.h"
#include "grl/daemon/metrics.h"
#include "grl/daemon/zmq.h"
#include "config.h"

namespace grl::controller {

// One SUB socket per --peer: what arrives on a connection comes from that endpoint (and,
// with CURVE, from the holder of the server key), so each connection is bound to the one
// controller it first speaks for and cannot speak for another (Sockets::peer_sources).
struct Peer {
    std::string endpoint;
    ::zmq::socket_t sock;
    std::unique_ptr<daemon::HandshakeWatch> watch;  // with CURVE
};

struct Sockets {
    // Binds and connects; `cfg` must outlive it (a reload of the key lists writes its lists).
    Sockets(Config& cfg, ::zmq::context_t& ctx, daemon::Loop& loop);
    // SIGHUP: reads --curve-clients and --curve-admin-clients again; a bad file is refused
    // whole (its old list stays).
    void reload_keys(const char* why);
    // Peer handshakes (with CURVE).
    void write_peer_metrics(daemon::MetricsText& m) const;
    // ZAP, bindings and key list reloads (with CURVE), connection limits (always).
    void write_metrics(daemon::MetricsText& m) const;

    Config& cfg_;
    daemon::Loop& loop_;
    // Always: ZAP admits CURVE keys (curve_) and enforces --max-connections.
    std::unique_ptr<daemon::ZapHandler> zap_;
    bool curve_ = false;  // --curve-keypair
    std::unique_ptr<daemon::EndpointLimit> usage_limit_, publish_limit_, admin_limit_;
    ::zmq::socket_t pull_;
    ::zmq::socket_t pub_;
    ::zmq::socket_t admin_;
    std::vector<std::unique_ptr<Peer>> peers_;
    std::string usage_ep_, publish_ep_, admin_ep_;
    // With CURVE: which zone each collector key sends usage for (first come, one to one).
    CurveKeyBindings zone_keys_;
    daemon::KeyListReloads client_list_{"--curve-clients", cfg_.clients_file};
    daemon::KeyListReloads admin_list_{"--curve-admin-clients", cfg_.admin_clients_file};
    // Which controller (source) each peer connection speaks for.
    CurveKeyBindings peer_sources_;

  private:
    void set_options(::zmq::context_t& ctx);
    void limit_connections(::zmq::context_t& ctx);
    void start_curve(::zmq::context_t& ctx);
    void bind_and_connect();
};

}  // namespace grl::controller
