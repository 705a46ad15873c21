#include "grl/daemon/curve.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "grl/daemon/files.h"
#include "grl/daemon/log.h"
#include "grl/daemon/loop.h"
#include "grl/zmq/monitor.h"

namespace grl::daemon {

namespace {

std::string read_text(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error(path + ": cannot read");
    std::ostringstream text;
    text << f.rdbuf();
    return text.str();
}

}  // namespace

KeyPair load_keypair(const std::string& path) {
    return curve::parse_keypair(read_text(path), path);
}

std::string load_public_key(const std::string& path) {
    return curve::parse_public_key(read_text(path), path);
}

std::set<std::string> load_authorized(const std::string& path) {
    return curve::parse_authorized(read_text(path), path);
}

curve::KeyList load_key_list(const std::string& path) {
    return curve::parse_key_list(read_text(path), path);
}

KeyPair generate_keypair() {
    char pub[41], sec[41];
    if (zmq_curve_keypair(pub, sec) != 0) {
        throw std::runtime_error("zmq_curve_keypair: " + std::string(::zmq::error_t().what()) +
                                 " (libzmq without CURVE?)");
    }
    return {pub, sec};
}

void write_keypair(const std::string& base, const KeyPair& k) {
    // An existing key pair is never replaced: it may be the only copy of a secret that
    // peers' key lists name.
    struct stat st;
    if (lstat(base.c_str(), &st) == 0) {
        throw std::runtime_error(base + ": exists; remove it first to replace the key pair");
    }
    std::string head = "#   grl CURVE key pair (ZeroMQ certificate layout)\ncurve\n";
    write_file_atomically(base,
                          head + "    public-key = \"" + k.public_key + "\"\n    secret-key = \"" +
                              k.secret_key + "\"\n",
                          0600);
    write_file_atomically(
        base + ".pub",
        "#   grl CURVE public key\ncurve\n    public-key = \"" + k.public_key + "\"\n", 0644);
}

void make_curve_server(::zmq::socket_ref s, const KeyPair& server, const std::string& domain) {
    s.set(::zmq::sockopt::curve_server, true);
    s.set(::zmq::sockopt::curve_secretkey, server.secret_key);
    s.set(::zmq::sockopt::zap_domain, domain);
}

void make_curve_client(::zmq::socket_ref s, const KeyPair& client,
                       const std::string& server_public) {
    zmq::make_curve_client(s.handle(), client, server_public);
}

ZapHandler::ZapHandler(::zmq::context_t& ctx) : sock_(ctx, ZMQ_REP) {
    bind(sock_, "inproc://zeromq.zap.01");
}

bool ZapHandler::allow(const std::string& domain, std::set<std::string> keys) {
    bool removed_connected = false;
    auto admitted = admitted_.find(domain);
    if (admitted != admitted_.end()) {
        for (auto it = admitted->second.begin(); it != admitted->second.end();) {
            if (keys.count(*it) > 0) {
                ++it;
            } else {
                removed_connected = true;
                it = admitted->second.erase(it);
            }
        }
    }
    keys_[domain] = std::move(keys);
    return removed_connected;
}

void cut_removed_keys(ZapHandler& zap, const std::string& domain, EndpointLimit& limit,
                      const std::string& option, const char* why, const RebindFn& rebind) {
    const std::string what = std::string(why) + ": " + option +
                             ": a removed key had connected to the " + limit.name() + " endpoint " +
                             limit.address();
    zap.forget_admitted(domain);
    const std::size_t n = limit.cut(rebind, [what](const std::string& error, bool delayed) {
        if (!error.empty()) {
            log_error(what + ": binding it again failed: " + error);
        } else if (delayed) {
            log_info(what + ": bound again once the old listener let go of the port");
        }
    });
    log_info(what + ": cut its " + std::to_string(n) +
             " connection(s); listed peers connect again by themselves");
}

void ZapHandler::handle() {
    for (int guard = 0; guard < 256; ++guard) {
        std::size_t n = zmq::recv_frames(sock_.handle(), frames_, 8);
        if (n == 0) return;
        // version, request id, domain, address, identity, mechanism, credentials...
        std::string version, request_id, domain, address, mechanism, key;
        if (n >= 6) {
            version = std::string(frames_[0].view());
            request_id = std::string(frames_[1].view());
            domain = std::string(frames_[2].view());
            address = std::string(frames_[3].view());
            mechanism = std::string(frames_[5].view());
        }
        bool ok = false;
        if (n >= 6 && version == "1.0" && mechanism == "NULL") {
            // No CURVE on this socket: ZAP runs for the connection limit only.
            bool admitted = null_domains_.count(domain) > 0;
            auto l = limits_.find(domain);
            bool full = admitted && l != limits_.end() && !l->second->admit();
            send_frames(sock_, {"1.0", request_id,
                                admitted && !full ? "200"
                                : full            ? "300"
                                                  : "400",
                                admitted && !full ? "OK"
                                : full            ? "connection limit reached"
                                                  : "NULL not allowed",
                                "", ""});
            continue;
        }
        if (n >= 7 && version == "1.0" && mechanism == "CURVE" && frames_[6].view().size() == 32) {
            char z85[41];
            zmq_z85_encode(z85, reinterpret_cast<const std::uint8_t*>(frames_[6].view().data()),
                           32);
            key = z85;
            auto it = keys_.find(domain);
            ok = it != keys_.end() && it->second.count(key) > 0;
        }
        if (ok) {
            // A listed key, but the endpoint is full: refused for now (not a key problem).
            auto l = limits_.find(domain);
            if (l != limits_.end() && !l->second->admit()) {
                send_frames(sock_, {"1.0", request_id, "300", "connection limit reached", "", ""});
                continue;
            }
            admitted_[domain].insert(key);
        }
        (ok ? accepted_ : denied_)[domain.empty() ? "-" : domain]++;
        if (!ok) {
            refused_log_.hit(LogLevel::Warn, {},
                             "CURVE: refused " +
                                 (mechanism.empty() ? std::string("a") : mechanism) + " client " +
                                 (key.empty() ? std::string("?") : key) + " from " +
                                 (address.empty() ? std::string("?") : address) + " on " +
                                 (domain.empty() ? std::string("?") : domain),
                             mono_ms());
        }
        send_frames(sock_, {"1.0", request_id, ok ? "200" : "400",
                            ok ? "OK" : "client key not authorised", ok ? key : "", ""});
    }
}

HandshakeWatch::HandshakeWatch(::zmq::context_t& ctx, ::zmq::socket_ref socket, std::string peer,
                               std::vector<std::string> endpoints,
                               std::map<std::string, std::string> server_keys, bool curve)
    : socket_(socket),
      monitor_(ctx, ZMQ_PAIR),
      peer_(std::move(peer)),
      server_keys_(std::move(server_keys)),
      handshakes_(std::move(endpoints)),
      curve_(curve) {
    static std::atomic<int> next{0};
    std::string ep = "inproc://grl-handshake-watch-" + std::to_string(next++);
    zmq::monitor_events(socket_.handle(), ep,
                        ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                            ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_DISCONNECTED);
    connect(monitor_, ep);
}

void HandshakeWatch::handle(std::uint64_t now_ms) {
    zmq::MonitorEvent m;
    for (int guard = 0; guard < 1000 && zmq::next_monitor_event(monitor_.handle(), frames_, m);
         ++guard) {
        if (m.event == ZMQ_EVENT_DISCONNECTED) {
            up_ = false;
            continue;
        }
        const zmq::HandshakeEvent e = zmq::handshake_event(m);
        up_ = e.ok;
        if (!curve_) continue;
        (e.ok ? ok : failed).fetch_add(1, std::memory_order_relaxed);
        if (!handshakes_.record(e.ok, e.address, now_ms)) continue;
        if (e.ok) {
            log_info("CURVE handshake with the " + peer_ + " at " + e.address + " succeeded");
        } else {
            log_error("CURVE handshake with the " + peer_ + " at " + e.address + " " +
                      zmq::describe(e, {peer_, "this daemon",
                                        server_keys_.empty() ? "--curve-server-key"
                                                             : "EP=FILE or --curve-server-key"}) +
                      "; retrying with backoff");
        }
    }
    for (const std::string& e : handshakes_.due(now_ms)) {
        zmq_disconnect(socket_.handle(), e.c_str());  // ENOENT when libzmq already dropped it
        // A connection takes the socket's options as they are when it is made.
        try {
            auto key = server_keys_.find(e);
            if (key != server_keys_.end())
                socket_.set(::zmq::sockopt::curve_serverkey, key->second);
            socket_.connect(e);
        } catch (const ::zmq::error_t& x) {
            log_error("connect " + e + ": " + x.what());
        }
    }
}

void ZapHandler::write_metrics(MetricsText& m) const {
    m.family("grl_curve_handshakes_total", "counter", "CURVE handshakes by ZAP domain and result.");
    for (const auto& [d, n] : accepted_)
        m.sample("grl_curve_handshakes_total", {{"domain", d}, {"result", "accepted"}},
                 static_cast<double>(n));
    for (const auto& [d, n] : denied_)
        m.sample("grl_curve_handshakes_total", {{"domain", d}, {"result", "denied"}},
                 static_cast<double>(n));
    m.family("grl_curve_keys", "gauge", "CURVE client keys admitted, by ZAP domain.");
    for (const auto& [d, keys] : keys_)
        m.sample("grl_curve_keys", {{"domain", d}}, static_cast<double>(keys.size()));
}

std::string describe_change(const std::set<std::string>& before,
                            const std::set<std::string>& after) {
    std::size_t added = 0, removed = 0;
    for (const std::string& k : after) added += before.count(k) == 0 ? 1 : 0;
    for (const std::string& k : before) removed += after.count(k) == 0 ? 1 : 0;
    return std::to_string(after.size()) + " keys: " + std::to_string(added) + " added, " +
           std::to_string(removed) + " removed";
}

void write_reload_metrics(MetricsText& m, const std::vector<const KeyListReloads*>& lists) {
    m.family("grl_curve_key_list_reloads_total", "counter",
             "Reloads of a CURVE key list file (SIGHUP), by list and result (rejected: the file "
             "could not be read or parsed; the list in force stays).");
    for (const KeyListReloads* l : lists) {
        m.sample("grl_curve_key_list_reloads_total", {{"list", l->option}, {"result", "ok"}},
                 static_cast<double>(l->ok));
        m.sample("grl_curve_key_list_reloads_total", {{"list", l->option}, {"result", "rejected"}},
                 static_cast<double>(l->rejected));
    }
    m.family("grl_curve_key_list_ok", "gauge",
             "0 when the last reload of the key list was rejected (the older list is in force).");
    for (const KeyListReloads* l : lists)
        m.sample("grl_curve_key_list_ok", {{"list", l->option}}, l->last_ok ? 1 : 0);
}

void write_binding_metrics(MetricsText& m, std::string_view domain, const CurveKeyBindings& b) {
    m.family("grl_curve_key_bindings", "gauge",
             "CURVE keys listed without names and bound, first come, to the name they speak for.");
    m.sample("grl_curve_key_bindings", {{"domain", domain}}, static_cast<double>(b.size()));
    m.family("grl_curve_key_bindings_lapsed_total", "counter",
             "First-come key bindings dropped after going unused for their idle time.");
    m.sample("grl_curve_key_bindings_lapsed_total", {{"domain", domain}},
             static_cast<double>(b.lapsed()));
}

void write_client_metrics(MetricsText& m, std::string_view peer,
                          const std::vector<const HandshakeWatch*>& watches) {
    std::uint64_t ok = 0, failed = 0;
    for (const HandshakeWatch* w : watches) {
        if (w == nullptr) continue;
        ok += w->ok.load(std::memory_order_relaxed);
        failed += w->failed.load(std::memory_order_relaxed);
    }
    m.family("grl_curve_client_handshakes_total", "counter",
             "CURVE handshakes of this daemon's connections to its peers, by result.");
    m.sample("grl_curve_client_handshakes_total", {{"peer", peer}, {"result", "ok"}},
             static_cast<double>(ok));
    m.sample("grl_curve_client_handshakes_total", {{"peer", peer}, {"result", "failed"}},
             static_cast<double>(failed));
}

}  // namespace grl::daemon
