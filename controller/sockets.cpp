#include "sockets.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "grl/daemon/log.h"
#include "grl/wire/wire_control.h"

namespace grl::controller {

using daemon::mono_ms;

namespace {
constexpr std::size_t kMaxZoneKeys = 10000;  // CURVE keys bound to zones
}  // namespace

Sockets::Sockets(Config& cfg, ::zmq::context_t& ctx, daemon::Loop& loop)
    : cfg_(cfg),
      loop_(loop),
      zap_(std::make_unique<daemon::ZapHandler>(ctx)),
      curve_(cfg_.keypair.has_value()),
      pull_(ctx, ZMQ_PULL),
      pub_(ctx, ZMQ_PUB),
      admin_(ctx, ZMQ_ROUTER),
      // A binding lapses when its zone would have left the sums.
      zone_keys_(kMaxZoneKeys, std::uint64_t{cfg_.opts.stale_intervals} * cfg_.opts.interval_ms),
      // A connection's controller may be replaced by another name once it has been silent
      // as long as a peer is held in the global sums.
      peer_sources_(std::max<std::size_t>(cfg_.peers.size(), 1),
                    std::max(std::uint64_t{cfg_.opts.stale_intervals} * cfg_.opts.interval_ms,
                             cfg_.opts.peer_hold_ms)) {
    set_options(ctx);
    loop_.on_socket(zap_->socket().handle(), [this] { zap_->handle(); });
    limit_connections(ctx);
    if (curve_) start_curve(ctx);
    bind_and_connect();
}

void Sockets::set_options(::zmq::context_t& ctx) {
    const std::int64_t max = daemon::kTransportMaxBytes;
    pull_.set(::zmq::sockopt::maxmsgsize, max);
    // Per collector connection: 16 s of usage at 250 ms in whole messages, 4 sets of 16 parts.
    // A controller that falls behind then drops at the collector (counted there) instead of
    // queueing without bound (10000 parts of 0.5 MB each grew it to 7 GB in
    // bench/control_plane/controller_scale.py); a backlog's old sets are ignored anyway.
    pull_.set(::zmq::sockopt::rcvhwm, 64);
    pub_.set(::zmq::sockopt::sndhwm, 10000);
    admin_.set(::zmq::sockopt::maxmsgsize, max);
    admin_.set(::zmq::sockopt::router_mandatory, false);
    // grlctl waits for each answer: a deep queue per client only holds a flood.
    admin_.set(::zmq::sockopt::rcvhwm, 64);
    for (const std::string& ep : cfg_.peers) {
        auto p = std::make_unique<Peer>(Peer{ep, ::zmq::socket_t(ctx, ZMQ_SUB), nullptr});
        p->sock.set(::zmq::sockopt::maxmsgsize, max);
        // A peer's usage (at most 16 parts) per interval: 64 holds four sets, and bounds what
        // one peer can make this controller hold (64 x 4 MiB; was 1000 x 4 MiB).
        p->sock.set(::zmq::sockopt::rcvhwm, 64);
        peers_.push_back(std::move(p));
    }
}

void Sockets::limit_connections(::zmq::context_t& ctx) {
    usage_limit_ =
        std::make_unique<daemon::EndpointLimit>(ctx, pull_, "usage", cfg_.max_connections);
    publish_limit_ =
        std::make_unique<daemon::EndpointLimit>(ctx, pub_, "publish", cfg_.max_connections);
    admin_limit_ =
        std::make_unique<daemon::EndpointLimit>(ctx, admin_, "admin", cfg_.max_connections);
    zap_->limit("collector", usage_limit_.get());
    zap_->limit("subscriber", publish_limit_.get());
    zap_->limit("admin", admin_limit_.get());
    for (daemon::EndpointLimit* l : {usage_limit_.get(), publish_limit_.get(), admin_limit_.get()})
        loop_.on_socket(l->monitor(), [l] { l->handle(); });
    daemon::bound_messages(loop_, {usage_limit_.get(), admin_limit_.get()}, {publish_limit_.get()});
    if (!curve_) {
        // Without CURVE, ZAP runs (NULL mechanism) when the socket has a domain: for the limit.
        for (auto [sock, domain] : {std::pair{&pull_, "collector"}, std::pair{&pub_, "subscriber"},
                                    std::pair{&admin_, "admin"}}) {
            zap_->allow_null(domain);
            sock->set(::zmq::sockopt::zap_domain, domain);
        }
    }
}

void Sockets::start_curve(::zmq::context_t& ctx) {
    zap_->allow("collector", curve::keys_of(cfg_.clients));
    zap_->allow("subscriber", curve::keys_of(cfg_.clients));
    zone_keys_.pin(cfg_.clients);
    zap_->allow("admin", cfg_.admin_clients);
    // First-come zone bindings lapse after their idle time (counted, logged).
    loop_.every(cfg_.opts.interval_ms, [this] {
        if (std::size_t n = zone_keys_.sweep(mono_ms()); n > 0) {
            daemon::log_info("CURVE: " + std::to_string(n) +
                             " zone binding(s) lapsed, unused for " +
                             std::to_string(zone_keys_.expiry_ms()) +
                             " ms: their keys may send usage for another zone now");
        }
    });
    daemon::make_curve_server(pull_, *cfg_.keypair, "collector");
    daemon::make_curve_server(pub_, *cfg_.keypair, "subscriber");
    daemon::make_curve_server(admin_, *cfg_.keypair, "admin");
    for (auto& p : peers_) {
        // Each peer's own key when given: one stolen controller key pair then
        // impersonates that controller only, not every peer.
        daemon::make_curve_client(p->sock, *cfg_.keypair, peer_key(cfg_, p->endpoint));
        std::map<std::string, std::string> own_key;  // names the =FILE in log lines
        if (cfg_.peer_keys.count(p->endpoint) > 0)
            own_key[p->endpoint] = peer_key(cfg_, p->endpoint);
        p->watch = std::make_unique<daemon::HandshakeWatch>(ctx, p->sock, "peer controller",
                                                            std::vector<std::string>{p->endpoint},
                                                            std::move(own_key));
        daemon::HandshakeWatch* w = p->watch.get();
        loop_.on_socket(w->monitor(), [w] { w->handle(daemon::mono_ms()); });
        loop_.every(250, [w] { w->handle(daemon::mono_ms()); });
    }
}

void Sockets::bind_and_connect() {
    usage_ep_ = daemon::bind(pull_, cfg_.usage_bind);
    publish_ep_ = daemon::bind(pub_, cfg_.publish_bind);
    admin_ep_ = daemon::bind(admin_, cfg_.admin_bind);
    usage_limit_->set_address(usage_ep_);
    publish_limit_->set_address(publish_ep_);
    admin_limit_->set_address(admin_ep_);
    for (auto& p : peers_) {
        p->sock.set(::zmq::sockopt::subscribe, wire::kPeerTopic);
        daemon::connect(p->sock, p->endpoint);
    }
}

void Sockets::reload_keys(const char* why) {
    if (!curve_) return;  // no CURVE: no lists
    // Each list on its own: a bad one is refused, the other may still be taken.
    auto load = [&](daemon::KeyListReloads& l, auto read) -> std::optional<decltype(read())> {
        if (l.path.empty()) return std::nullopt;
        try {
            auto v = read();
            ++l.ok;
            l.last_ok = true;
            return v;
        } catch (const std::exception& e) {
            ++l.rejected;
            l.last_ok = false;
            daemon::log_error(std::string(why) + ": " + l.option + " refused: " + e.what() +
                              "; the list in force stays");
            return std::nullopt;
        }
    };
    // ZAP only runs at the handshake: a removed key's connection would stay open, and a
    // subscriber go on receiving. The endpoints a removed key connected to are bound again,
    // which closes their connections; what it still had queued is refused (key_not_listed).
    // docs/control-plane.md "CURVE".
    auto cut = [&](bool removed_connected, const char* domain, daemon::EndpointLimit& limit,
                   ::zmq::socket_t& sock, const std::string& ep, const std::string& option) {
        if (!removed_connected) return;
        daemon::cut_removed_keys(*zap_, domain, limit, option, why, [&](daemon::RebindDone done) {
            daemon::rebind(loop_, sock, ep, std::move(done));
        });
    };
    if (auto list = load(client_list_, [&] { return daemon::load_key_list(client_list_.path); })) {
        std::set<std::string> keys = curve::keys_of(*list);
        const std::string change = daemon::describe_change(curve::keys_of(cfg_.clients), keys);
        const bool cut_usage = zap_->allow("collector", keys);
        const bool cut_publish = zap_->allow("subscriber", std::move(keys));
        const std::size_t dropped = zone_keys_.pin(*list);
        cfg_.clients = std::move(*list);
        daemon::log_info(std::string(why) + ": --curve-clients " + client_list_.path +
                         " reloaded (" + change + "; " + std::to_string(dropped) +
                         " zone binding(s) the new list contradicts dropped)");
        cut(cut_usage, "collector", *usage_limit_, pull_, usage_ep_, client_list_.option);
        cut(cut_publish, "subscriber", *publish_limit_, pub_, publish_ep_, client_list_.option);
    }
    if (auto keys = load(admin_list_, [&] { return daemon::load_authorized(admin_list_.path); })) {
        const std::string change = daemon::describe_change(cfg_.admin_clients, *keys);
        const bool cut_admin = zap_->allow("admin", *keys);
        cfg_.admin_clients = std::move(*keys);
        daemon::log_info(std::string(why) + ": --curve-admin-clients " + admin_list_.path +
                         " reloaded (" + change + ")");
        cut(cut_admin, "admin", *admin_limit_, admin_, admin_ep_, admin_list_.option);
    }
}

void Sockets::write_peer_metrics(daemon::MetricsText& m) const {
    std::vector<const daemon::HandshakeWatch*> peer_watches;
    for (const auto& p : peers_)
        if (p->watch) peer_watches.push_back(p->watch.get());
    if (!peer_watches.empty()) daemon::write_client_metrics(m, "peer", peer_watches);
}

void Sockets::write_metrics(daemon::MetricsText& m) const {
    if (curve_) {
        zap_->write_metrics(m);
        daemon::write_binding_metrics(m, "collector", zone_keys_);
        daemon::write_reload_metrics(m, {&client_list_, &admin_list_});
    }
    daemon::write_connection_metrics(
        m, {usage_limit_.get(), publish_limit_.get(), admin_limit_.get()});
}

}  // namespace grl::controller
