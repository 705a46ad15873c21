// ZeroMQ CURVE for the daemons' sockets: key files (layout and parsing in grl/common/curve_keys.h),
// server/client setup, and a ZAP handler that admits only listed client keys.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "grl/common/curve_keys.h"
#include "grl/control/curve_key_bindings.h"
#include "grl/daemon/connections.h"
#include "grl/daemon/log.h"
#include "grl/daemon/metrics.h"
#include "grl/daemon/zmq.h"
#include "grl/zmq/handshake.h"

namespace grl::daemon {

using KeyPair = curve::KeyPair;

// Each throws std::runtime_error naming the file and the line on any problem.
KeyPair load_keypair(const std::string& path);
std::string load_public_key(const std::string& path);
std::set<std::string> load_authorized(const std::string& path);
curve::KeyList load_key_list(const std::string& path);  // with the names keys speak for
KeyPair generate_keypair();
// Writes `<base>` (both keys, mode 0600) and `<base>.pub` (public key only).
void write_keypair(const std::string& base, const KeyPair& k);

// A CURVE server socket: clients must know `server`'s public key, and the ZAP handler decides
// which client keys are admitted (by `domain`).
void make_curve_server(::zmq::socket_ref s, const KeyPair& server, const std::string& domain);
// A CURVE client socket that talks only to the server holding `server_public`'s secret.
void make_curve_client(::zmq::socket_ref s, const KeyPair& client,
                       const std::string& server_public);

// The ZAP handler (RFC 27) of one context: a REP socket on inproc://zeromq.zap.01, served by
// the daemon's loop. A CURVE handshake is admitted when the client's key is listed for the
// socket's domain; a NULL one (no CURVE) when the domain is open (allow_null()); everything
// else is refused (and counted). A domain with a connection limit (limit()) also refuses
// any handshake while its endpoint is full.
class ZapHandler {
  public:
    explicit ZapHandler(::zmq::context_t& ctx);
    // The keys admitted for `domain` (replaces the domain's earlier list: a reload). True when
    // a key it removes was admitted for `domain` since the domain's last forget_admitted():
    // its connection may still be open (ZAP only runs at the handshake).
    bool allow(const std::string& domain, std::set<std::string> keys);
    // The domain's endpoint was cut (cut_removed_keys()): its keys connect anew.
    void forget_admitted(const std::string& domain) { admitted_.erase(domain); }
    // A domain of a socket without CURVE: its handshakes reach ZAP only for the limit.
    void allow_null(const std::string& domain) { null_domains_.insert(domain); }
    void limit(const std::string& domain, EndpointLimit* l) { limits_[domain] = l; }
    ::zmq::socket_t& socket() { return sock_; }
    void handle();  // when the socket is readable
    const std::map<std::string, std::uint64_t>& accepted() const { return accepted_; }
    const std::map<std::string, std::uint64_t>& denied() const { return denied_; }
    // grl_curve_handshakes_total{domain,result}, grl_curve_keys{domain}.
    void write_metrics(MetricsText& m) const;

  private:
    ::zmq::socket_t sock_;
    std::map<std::string, std::set<std::string>> keys_;
    std::map<std::string, std::set<std::string>> admitted_;  // listed keys, so bounded
    std::set<std::string> null_domains_;
    std::map<std::string, EndpointLimit*> limits_;
    std::map<std::string, std::uint64_t> accepted_;
    std::map<std::string, std::uint64_t> denied_;
    std::vector<zmq::Frame> frames_;
    LogLimiter refused_log_;
};

// After a reload of `domain`'s key list (`option`, "--curve-clients") that removed a key which
// had connected (ZapHandler::allow() said so): cuts the connections of `limit`'s endpoint
// (EndpointLimit::cut with `rebind`, run by the thread that owns the socket), so that the
// removed key's connection, and its subscriptions, end; listed peers connect again by
// themselves and handshake anew. One log line; an endpoint that cannot be bound again is
// logged as an error.
void cut_removed_keys(ZapHandler& zap, const std::string& domain, EndpointLimit& limit,
                      const std::string& option, const char* why, const RebindFn& rebind);

// Watches the CURVE handshakes of one client socket (zmq_socket_monitor): counts them, logs one
// line per change between working and failing, and connects endpoints whose handshake was
// refused again with a backoff (grl/zmq/handshake.h), since libzmq abandons them. It also tells
// whether the socket holds a handshaken connection (up()), so that a send that fails can say
// whether the peer is not reachable or its queue is full; without CURVE (`curve` false) that is
// all it does. Create it before the socket connects; use it on the thread that owns the socket.
class HandshakeWatch {
  public:
    // `peer` names the other side in log lines ("controller", "peer controller").
    // `server_keys` (endpoint -> public key) for a socket connected to servers with keys of
    // their own: each is set again before its endpoint is connected again.
    HandshakeWatch(::zmq::context_t& ctx, ::zmq::socket_ref socket, std::string peer,
                   std::vector<std::string> endpoints,
                   std::map<std::string, std::string> server_keys = {}, bool curve = true);
    HandshakeWatch(const HandshakeWatch&) = delete;
    HandshakeWatch& operator=(const HandshakeWatch&) = delete;

    void* monitor() { return monitor_.handle(); }  // readable when events are queued
    // Takes the queued events, then connects again whatever is due.
    void handle(std::uint64_t now_ms);
    // When handle() next has an endpoint to connect again (0: none pending).
    std::uint64_t next_ms() const { return handshakes_.next_ms(); }
    // A connection completed its handshake and has not closed since (events taken by handle()).
    bool up() const { return up_; }

    std::atomic<std::uint64_t> ok{0};
    std::atomic<std::uint64_t> failed{0};

  private:
    ::zmq::socket_ref socket_;
    ::zmq::socket_t monitor_;
    std::string peer_;
    std::map<std::string, std::string> server_keys_;
    Handshakes handshakes_;
    std::vector<zmq::Frame> frames_;
    bool curve_;
    bool up_ = false;
};

// A key list file (--curve-clients, --curve-admin-clients) read again while the daemon runs
// (SIGHUP): a file that cannot be read or parsed is refused whole, and the list in force stays.
struct KeyListReloads {
    std::string option;  // "--curve-clients"
    std::string path;
    std::uint64_t ok = 0;
    std::uint64_t rejected = 0;
    bool last_ok = true;  // false: the last reload was refused (the older list is in force)
};
// The keys added and removed between two lists, in words for the log line ("12 keys: 1 added,
// 2 removed").
std::string describe_change(const std::set<std::string>& before,
                            const std::set<std::string>& after);
// grl_curve_key_list_reloads_total{list,result}, grl_curve_key_list_ok{list}.
void write_reload_metrics(MetricsText& m, const std::vector<const KeyListReloads*>& lists);
// grl_curve_key_bindings{domain} (first-come bindings held) and
// grl_curve_key_bindings_lapsed_total{domain}.
void write_binding_metrics(MetricsText& m, std::string_view domain, const CurveKeyBindings& b);

// grl_curve_client_handshakes_total{peer,result}: the sums over `watches` (those not null).
void write_client_metrics(MetricsText& m, std::string_view peer,
                          const std::vector<const HandshakeWatch*>& watches);

}  // namespace grl::daemon
