#include "controller_daemon.h"

#include <malloc.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "grl/control/batch_budget.h"
#include "grl/daemon/files.h"
#include "grl/daemon/metrics.h"
#include "grl/common/ratio.h"
#include "grl/wire/usage_reader.h"

namespace grl::controller {

using daemon::LogLevel;
using daemon::mono_ms;
using daemon::wall_ms;

namespace {

constexpr std::size_t kMaxPerWakeup = 256;
constexpr std::uint64_t kAdminTickGapDivisor = 8;
// Upper bounds of grl_controller_tick_seconds' histogram buckets, in microseconds.
constexpr std::uint64_t kTickBucketsUs[] = {1000,  2500,   5000,   10000,  25000,
                                            50000, 100000, 250000, 1000000};

// CPU time of this thread: a tick's wall time on a busy machine includes time others ran.
std::uint64_t thread_cpu_us() {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000 +
           static_cast<std::uint64_t>(ts.tv_nsec) / 1000;
}

// Hands the memory of dropped usage sets back to the system (glibc keeps freed memory in its
// arenas otherwise): rare, after a set expired or was dropped as too large.
void release_memory() {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

std::uint64_t parts_timeout_ms(const control::Options& o) {
    return std::uint64_t{o.stale_intervals} * o.interval_ms;
}

constexpr std::size_t kMaxZoneKeys =
    10000;  // CURVE keys bound to zones  // admin ticks at most 8 per interval

// An admin change in words, for the audit line.
std::string describe(const wire::AdminRequest& q) {
    std::string s = std::string(to_string(q.op));
    if (q.limit_mrps) {
        char rate[48];
        std::snprintf(rate, sizeof(rate), " limit %g r/s",
                      static_cast<double>(*q.limit_mrps) / 1000);
        s += rate;
    }
    if (q.mode) s += " mode " + std::string(to_string(*q.mode));
    if (q.op == wire::AdminOp::Clear) {
        s += q.clear_limit && !q.clear_mode   ? " limit"
             : q.clear_mode && !q.clear_limit ? " mode"
                                              : "";
    }
    if (q.for_ms) s += " for " + std::to_string(q.for_ms / 1000) + "s";
    if (q.has_match) {
        s += " match caller " + (q.match.caller.empty() ? std::string("*") : q.match.caller) +
             " procedure " + (q.match.procedure.empty() ? std::string("*") : q.match.procedure);
    }
    return s;
}

}  // namespace

Daemon::Daemon(Config cfg, daemon::Context& ctx, daemon::Loop& loop)
    : cfg_(std::move(cfg)),
      loop_(loop),
      ctl_(cfg_.opts),
      zap_(std::make_unique<daemon::ZapHandler>(ctx)),
      curve_(cfg_.keypair.has_value()),
      pull_(ctx, ZMQ_PULL),
      pub_(ctx, ZMQ_PUB),
      admin_(ctx, ZMQ_ROUTER),
      // A set's parts are sent back to back, but a busy controller may take a while to read
      // them: a set is given as long as its source's usage stays fresh. (One interval let a
      // backlog expire sets faster than they completed.)
      intake_(ctl_, parts_timeout_ms(cfg_.opts)),
      malformed_log_(10000),
      ignored_log_(10000),
      future_log_(10000),
      hosts_log_(10000),
      full_log_(10000),
      overrides_log_(10000),
      send_log_(10000),
      batch_log_(10000),
      // A binding lapses when its zone would have left the sums.
      zone_keys_(kMaxZoneKeys, std::uint64_t{cfg_.opts.stale_intervals} * cfg_.opts.interval_ms),
      // A connection's controller may be replaced by another name once it has been silent
      // as long as a peer is held in the global sums.
      peer_sources_(std::max<std::size_t>(cfg_.peers.size(), 1),
                    std::max(std::uint64_t{cfg_.opts.stale_intervals} * cfg_.opts.interval_ms,
                             cfg_.opts.peer_hold_ms)) {
    if (std::string e = check(cfg_); !e.empty()) throw std::runtime_error(e);
    const std::int64_t max = daemon::kTransportMaxBytes;
    pull_.set(ZMQ_MAXMSGSIZE, max);
    // Per collector connection: 16 s of usage at 250 ms in whole messages, 4 sets of 16 parts.
    // A controller that falls behind then drops at the collector (counted there) instead of
    // queueing without bound (10000 parts of 0.5 MB each grew it to 7 GB in
    // bench/control_plane/controller_scale.py); a backlog's old sets are ignored anyway.
    pull_.set(ZMQ_RCVHWM, 64);
    pub_.set(ZMQ_SNDHWM, 10000);
    admin_.set(ZMQ_MAXMSGSIZE, max);
    admin_.set(ZMQ_ROUTER_MANDATORY, 0);
    // grlctl waits for each answer: a deep queue per client only holds a flood.
    admin_.set(ZMQ_RCVHWM, 64);
    for (const std::string& ep : cfg_.peers) {
        auto p = std::make_unique<Peer>(Peer{ep, daemon::Socket(ctx, ZMQ_SUB), nullptr});
        p->sock.set(ZMQ_MAXMSGSIZE, max);
        // A peer's usage (at most 16 parts) per interval: 64 holds four sets, and bounds what
        // one peer can make this controller hold (64 x 4 MiB; was 1000 x 4 MiB).
        p->sock.set(ZMQ_RCVHWM, 64);
        peers_.push_back(std::move(p));
    }
    loop_.on_socket(zap_->socket().get(), [this] { zap_->handle(); });
    usage_limit_ =
        std::make_unique<daemon::EndpointLimit>(ctx, pull_.get(), "usage", cfg_.max_connections);
    publish_limit_ =
        std::make_unique<daemon::EndpointLimit>(ctx, pub_.get(), "publish", cfg_.max_connections);
    admin_limit_ =
        std::make_unique<daemon::EndpointLimit>(ctx, admin_.get(), "admin", cfg_.max_connections);
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
            sock->set(ZMQ_ZAP_DOMAIN, std::string_view(domain));
        }
    }
    if (curve_) {
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
            p->watch = std::make_unique<daemon::HandshakeWatch>(
                ctx, p->sock.get(), "peer controller", std::vector<std::string>{p->endpoint},
                std::move(own_key));
            daemon::HandshakeWatch* w = p->watch.get();
            loop_.on_socket(w->monitor(), [w] { w->handle(daemon::mono_ms()); });
            loop_.every(250, [w] { w->handle(daemon::mono_ms()); });
        }
    }
    usage_ep_ = pull_.bind(cfg_.usage_bind);
    publish_ep_ = pub_.bind(cfg_.publish_bind);
    admin_ep_ = admin_.bind(cfg_.admin_bind);
    usage_limit_->set_address(usage_ep_);
    publish_limit_->set_address(publish_ep_);
    admin_limit_->set_address(admin_ep_);
    for (auto& p : peers_) {
        p->sock.set(ZMQ_SUBSCRIBE, wire::kPeerTopic);
        p->sock.connect(p->endpoint);
    }

    if (cfg_.limits_etcd) {
        start_etcd();
    } else if (!cfg_.limits_file.empty()) {
        daemon::LimitsLoad l = daemon::load_limits_file(cfg_.limits_file);
        if (!l.ok) throw std::runtime_error("limits file rejected: " + l.error);
        limits_id_ = limits_file_id();
        ctl_.set_limits(std::move(l.limits), now());
        limits_loaded_wall_ = wall_ms();
        if (cfg_.limits_poll_ms) loop_.every(cfg_.limits_poll_ms, [this] { watch_limits(); });
    }

    restore_state();

    loop_.on_socket(pull_.get(), [this] { on_usage(); });
    for (auto& p : peers_) {
        Peer* peer = p.get();
        loop_.on_socket(peer->sock.get(), [this, peer] { on_peers(*peer); });
    }
    loop_.on_socket(admin_.get(), [this] { on_admin(); });
    loop_.every(cfg_.opts.interval_ms, [this] { tick(); });
    loop_.every(std::max<std::uint64_t>(cfg_.opts.interval_ms / kAdminTickGapDivisor, 1), [this] {
        if (admin_tick_pending_) admin_tick();
    });
    if (!cfg_.metrics_bind.empty()) {
        // History: one point per interval, at least a second apart, for 15 minutes (at most
        // 900 points of 500 instances: under 9 MB, docs/dashboard.md).
        control::History::Options h;
        h.step_ms = std::max<std::uint64_t>(cfg_.opts.interval_ms, 1000);
        dashboard_ = std::make_unique<Dashboard>(h);
        http_ = std::make_unique<daemon::MetricsServer>(
            loop_, cfg_.metrics_bind, [this] { return metrics(); },
            [d = dashboard_.get()](const daemon::RequestHead& r) { return d->route(r); });
    }
    std::string peers;
    for (const std::string& p : cfg_.peers) peers += (peers.empty() ? "" : ", ") + p;
    daemon::log_info(
        "controller " + cfg_.opts.name + " for region " + cfg_.opts.region + ": usage on " +
        usage_ep_ + ", publish on " + publish_ep_ + ", admin on " + admin_ep_ +
        (http_ ? ", metrics on http://" + http_->address() + "/metrics, dashboard on http://" +
                     http_->address() + "/"
               : "") +
        ", peers: " + (peers.empty() ? "none" : peers) + ", interval " +
        std::to_string(cfg_.opts.interval_ms) + " ms, ttl " + std::to_string(cfg_.opts.ttl_ms) +
        " ms, window " + std::to_string(cfg_.opts.window) +
        (cfg_.limits_file.empty()
             ? ""
             : ", limits " + cfg_.limits_file + " (" +
                   std::to_string(ctl_.limits().buckets.size()) + " buckets, version " +
                   (ctl_.limits().version.empty() ? std::string("-") : ctl_.limits().version) +
                   ", digest " + ctl_.limits_digest() + ")") +
        (curve_ ? ", CURVE on" : "") + ", at most " + std::to_string(cfg_.max_connections) +
        " connections per endpoint");
    if (!curve_) {
        daemon::log_warn("CURVE is off (no --curve-keypair): anyone who can reach " + usage_ep_ +
                         " or " + admin_ep_ + " can send usage for any zone or change limits" +
                         (cfg_.insecure ? " (--insecure: reachable beyond loopback)"
                                        : " (bound to loopback only)"));
    } else if (cfg_.admin_clients.empty()) {
        daemon::log_warn("admin endpoint " + admin_ep_ +
                         " admits no one: no --curve-admin-clients (operators' keys)");
    }
}

control::Clock Daemon::now() const {
    return {mono_ms(), wall_ms()};
}

std::vector<std::pair<std::string, std::string>> Daemon::endpoints() const {
    std::vector<std::pair<std::string, std::string>> e = {
        {"usage", usage_ep_}, {"publish", publish_ep_}, {"admin", admin_ep_}};
    if (http_) e.emplace_back("metrics", http_->address());
    return e;
}

void Daemon::on_usage() {
    std::string error;
    BatchBudget batch(kMaxPerWakeup, batch_budget_ms(cfg_.opts.interval_ms));
    batch.start(mono_ms());
    while (batch.more(mono_ms())) {
        std::size_t n = usage_limit_->recv_frames(frames_, 1);
        if (n == 0) return;
        const control::Clock t = now();
        if (n != 1 || !intake_.read_zone(frames_[0].view(), error)) {
            ++malformed_["zone_usage"];
            malformed_log_.hit(LogLevel::Warn, {},
                               "dropped malformed zone usage: " +
                                   (n != 1 ? std::string("more than one frame") : error),
                               t.mono_ms);
            continue;
        }
        const wire::ZoneUsage& zone_usage = intake_.zone();
        ++received_["zone_usage"];
        ++usage_versions_[{"zone_usage", zone_usage.v}];
        if (curve_) {
            // CURVE: a collector's key may speak for one zone only.
            const std::string key = frames_[0].meta("User-Id");
            CurveKeyBindings::Result b = zone_keys_.check(key, zone_usage.zone, t.mono_ms);
            if (b != CurveKeyBindings::Result::Ok) {
                ++ignored_[std::string("zone_usage/") + std::string(to_string(b))];
                ignored_log_.hit(
                    LogLevel::Warn, {},
                    "zone usage for zone " + zone_usage.zone + " from key " + key +
                        " ignored: " + std::string(to_string(b)) +
                        (b == CurveKeyBindings::Result::NotListed
                             ? " (removed from --curve-clients by a reload; its "
                               "connection predates it)"
                             : " (the key sends for zone \"" + zone_keys_.name_of(key) + "\")"),
                    t.mono_ms);
                continue;
            }
        }
        const std::uint64_t v = zone_usage.v;
        const std::string zone = zone_usage.zone, source = zone_usage.source,
                          region = zone_usage.region;
        const control::UsageIntake::Taken taken = intake_.take_zone(t, &why_);
        if (!assembled(taken, "zone_usage", t)) continue;
        const control::Accepted a = taken.accepted;
        const bool new_rates = taken.early.new_rates;
        const Change change = taken.early.change;
        const bool early = new_rates || change != Change::None;
        if (a == control::Accepted::Yes) {
            note_usage_version(zone_usage_v_, zone, "zone " + zone + " (" + source + ")",
                               "zone usage", v);
        }
        if (a == control::Accepted::Yes && early) {
            // First rates of a bucket (after a start or a restart), or a bucket's rate well
            // above or below its last (a step, a surge, its end): publish now, not at the
            // next tick. Rate-limited to four extra ticks per interval, and to a 40th of the
            // time (a tick of a large fleet is long: EarlyTick).
            const bool was_deferring = early_tick_.deferring();
            if (early_tick_.due(t.mono_ms, tick_last_us_)) {
                if (was_deferring) {
                    daemon::log_info("early ticks again: the last tick took " +
                                     std::to_string(tick_last_us_ / 1000) + " ms");
                }
                ++(new_rates                ? early_ticks_new_rates_
                   : change == Change::Rise ? early_ticks_rise_
                                            : early_ticks_fall_);
                tick();
            } else if (early_tick_.deferring() && !was_deferring) {
                daemon::log_warn("early ticks deferred: the last tick took " +
                                 std::to_string(tick_last_us_ / 1000) +
                                 " ms, and early ticks may take at most a 40th of the time "
                                 "(new rates and changes wait for the next tick)");
            }
        }
        if (a != control::Accepted::Yes) {
            ++ignored_[std::string("zone_usage/").append(to_string(a))];
            log_refusal(a, t);
            if (a == control::Accepted::WrongRegion) {
                ignored_log_.hit(LogLevel::Warn, {},
                                 "zone usage from " + source + " for region " + region +
                                     " ignored: this controller serves " + cfg_.opts.region,
                                 t.mono_ms);
            }
        }
    }
    count_cut(batch, pull_, "zone_usage");
}

// A batch stopped at its time budget with messages still queued: messages come faster than
// they are handled (a flood). The rest waits in the queue (at most 64 per connection) while
// the loop ticks and serves /metrics and its other sockets.
void Daemon::count_cut(const BatchBudget& b, const daemon::Socket& s, const char* kind) {
    if (!b.cut() || !s.readable()) return;
    ++batches_cut_[kind];
    batch_log_.hit(LogLevel::Warn, {},
                   std::string(kind) +
                       " arrives faster than it is handled: a batch stopped after " +
                       std::to_string(b.max_ms()) + " ms (" + std::to_string(b.taken()) +
                       " messages) so that the tick is not delayed; each connection queues at "
                       "most 64 here, then its sender waits or drops",
                   mono_ms());
}

void Daemon::on_peers(Peer& p) {
    std::string error;
    BatchBudget batch(kMaxPerWakeup, batch_budget_ms(cfg_.opts.interval_ms));
    batch.start(mono_ms());
    while (batch.more(mono_ms())) {
        std::size_t n = p.sock.recv_frames(frames_, 2);
        if (n == 0) return;
        control::Clock t = now();
        bool ok = n == 2 && frames_[0].view() == wire::kPeerTopic;
        if (!ok) error = "expected two frames, topic \"grl/p/\" and body";
        if (ok) ok = intake_.read_region(frames_[1].view(), error);
        if (!ok) {
            ++malformed_["region_usage"];
            malformed_log_.hit(LogLevel::Warn, {}, "dropped malformed region usage: " + error,
                               t.mono_ms);
            continue;
        }
        const wire::RegionUsage& region_usage = intake_.region();
        ++received_["region_usage"];
        ++usage_versions_[{"region_usage", region_usage.v}];
        // A connection speaks for one controller: a message naming another (a peer speaking
        // for someone else), or naming a controller another connection speaks for, is
        // refused whole, overrides included.
        CurveKeyBindings::Result b =
            peer_sources_.check(p.endpoint, region_usage.source, t.mono_ms);
        if (b != CurveKeyBindings::Result::Ok) {
            ++ignored_[std::string("region_usage/") + std::string(to_string(b))];
            std::string why;
            switch (b) {
                case CurveKeyBindings::Result::KeyTaken:
                    why =
                        "that connection speaks for \"" + peer_sources_.name_of(p.endpoint) + "\"";
                    break;
                case CurveKeyBindings::Result::NameTaken:
                    why = region_usage.source + " speaks on another connection";
                    break;
                default: why = "--max-peers connections bound"; break;
            }
            ignored_log_.hit(LogLevel::Warn, {},
                             "region usage from " + region_usage.source + " (region " +
                                 region_usage.region + ") on the connection to " + p.endpoint +
                                 " ignored: " + std::string(to_string(b)) + " (" + why + ")",
                             t.mono_ms);
            continue;
        }
        const std::uint64_t refused_before = ctl_.overrides_rejected();
        const std::uint64_t v = region_usage.v;
        const std::string source = region_usage.source, region = region_usage.region;
        const control::UsageIntake::Taken taken = intake_.take_region(t, &why_);
        if (!assembled(taken, "region_usage", t)) continue;
        const control::Accepted a = taken.accepted;
        if (a == control::Accepted::Yes) {
            note_usage_version(peer_usage_v_, source, "peer " + source + " (region " + region + ")",
                               "region usage", v);
        } else {
            ++ignored_[std::string("region_usage/").append(to_string(a))];
        }
        log_refusal(a, t);
        if (ctl_.overrides_rejected() != refused_before) {
            overrides_log_.hit(LogLevel::Warn, {}, why_, t.mono_ms);
        }
    }
    count_cut(batch, p.sock, "region_usage");
}

// One line when a zone or peer starts sending usage of an older protocol version, and when it
// sends the current one again; and when the last sender of an older version is gone (a rolling
// upgrade's end, docs/operations.md "Upgrading").
void Daemon::note_usage_version(std::map<std::string, std::uint64_t>& last, const std::string& key,
                                const std::string& who, const char* what, std::uint64_t v) {
    auto [it, added] = last.try_emplace(key, v);
    if (!added && it->second == v) return;
    const std::uint64_t before = added ? wire::kUsageVersion : it->second;
    it->second = v;
    if (v < wire::kUsageVersion) {
        daemon::log_warn(who + " sends " + what + " of protocol version " + std::to_string(v) +
                         " (its sender is older, or runs with --usage-version " +
                         std::to_string(v) + "): read as such until it sends version " +
                         std::to_string(wire::kUsageVersion));
        return;
    }
    if (before == v) return;
    daemon::log_info(who + " sends " + what + " of protocol version " + std::to_string(v) +
                     " again (was " + std::to_string(before) + ")");
    log_if_no_older_usage();
}

void Daemon::log_if_no_older_usage() const {
    auto older = [](const std::map<std::string, std::uint64_t>& m) {
        for (const auto& [k, kv] : m) {
            if (kv < wire::kUsageVersion) return true;
        }
        return false;
    };
    if (!older(zone_usage_v_) && !older(peer_usage_v_)) {
        daemon::log_info("no zone or peer sends usage of a protocol version older than " +
                         std::to_string(wire::kUsageVersion) +
                         " any more: --usage-version 1 may go from collectors and controllers");
    }
}

// The versions of zones and peers the controller has forgotten (silent for its forget
// interval) go with them: a zone retired while it still sent version 1 must not hold back
// the line that says the upgrade is done, nor stay in memory for ever.
void Daemon::forget_usage_versions() {
    bool older_gone = false;
    auto prune = [&](std::map<std::string, std::uint64_t>& m, auto&& known) {
        for (auto it = m.begin(); it != m.end();) {
            if (known(it->first)) {
                ++it;
                continue;
            }
            older_gone = older_gone || it->second < wire::kUsageVersion;
            it = m.erase(it);
        }
    };
    prune(zone_usage_v_, [&](const std::string& zone) { return ctl_.knows_zone(zone); });
    prune(peer_usage_v_, [&](const std::string& source) { return ctl_.knows_peer(source); });
    if (older_gone) log_if_no_older_usage();
}

// Refused messages are counted in /metrics; their log lines are rate-limited per reason, so
// that a flood of one kind neither floods the log nor hides another kind.
void Daemon::log_refusal(control::Accepted a, const control::Clock& t) {
    switch (a) {
        case control::Accepted::Future: future_log_.hit(LogLevel::Warn, {}, why_, t.mono_ms); break;
        case control::Accepted::TooManyHosts:
            hosts_log_.hit(LogLevel::Warn, {}, why_, t.mono_ms);
            break;
        case control::Accepted::Full:
        case control::Accepted::TooManyBuckets:
            full_log_.hit(LogLevel::Warn, {}, why_, t.mono_ms);
            break;
        default: break;
    }
}

void Daemon::on_admin() {
    std::string error;
    BatchBudget batch(kMaxPerWakeup, batch_budget_ms(cfg_.opts.interval_ms));
    batch.start(mono_ms());
    while (batch.more(mono_ms())) {
        std::size_t n = admin_limit_->recv_frames(frames_, 3);
        if (n == 0) return;
        // REQ clients send [identity, "", body]; DEALER clients [identity, body].
        std::size_t body = n == 3 && frames_[1].view().empty() ? 2 : 1;
        if (n < 2 || n > 3 || (n == 3 && body != 2)) {
            ++malformed_["admin_request"];
            continue;  // no reply possible for a message we cannot frame
        }
        std::string identity(frames_[0].view());
        // Who asked, for the audit line of every change: the CURVE key, else the address.
        std::string key = frames_[body].meta("User-Id");
        std::string addr = frames_[body].meta("Peer-Address");
        std::string who = key.empty() ? (addr.empty() ? "an unknown peer" : addr)
                                      : "key " + key + (addr.empty() ? "" : " from " + addr);
        wire::AdminRequest q;
        wire::AdminReply r;
        if (curve_ && !key.empty() && cfg_.admin_clients.count(key) == 0) {
            // ZAP admitted the key at the handshake; a reload has removed it since.
            ++ignored_["admin_request/key_not_listed"];
            ignored_log_.hit(LogLevel::Warn, {},
                             "admin request from " + who +
                                 " refused: key_not_listed (removed from --curve-admin-clients "
                                 "by a reload; its connection predates it)",
                             mono_ms());
            r.ok = false;
            r.error = "key not listed in --curve-admin-clients (removed by a reload)";
        } else if (!wire::decode(frames_[body].view(), q, error)) {
            ++malformed_["admin_request"];
            r.ok = false;
            r.error = "malformed request: " + error;
        } else {
            ++received_["admin_request"];
            ++admin_requests_;
            r = handle(q, who);
            r.seq = q.seq;
        }
        r.ts_ms = wall_ms();
        r.source = cfg_.opts.name;
        r.region = cfg_.opts.region;
        r.interval_ms = cfg_.opts.interval_ms;
        r.ttl_ms = cfg_.opts.ttl_ms;
        wire::encode(r, buf_);
        if (buf_.size() > wire::kMaxMessageBytes) {
            for (auto& b : r.buckets) b.host_names.clear();
            r.error = "host names left out: the reply would exceed " +
                      std::to_string(wire::kMaxMessageBytes) + " bytes";
            wire::encode(r, buf_);
        }
        // grlctl keys over many instances (--top up to 1024 each): the first instances' keys.
        while (buf_.size() > wire::kMaxMessageBytes && r.keys.size() > 1) {
            r.keys.resize(r.keys.size() / 2);
            r.error = "keys cut to " + std::to_string(r.keys.size()) + ": the reply would exceed " +
                      std::to_string(wire::kMaxMessageBytes) + " bytes (ask with a smaller --top)";
            wire::encode(r, buf_);
        }
        std::vector<std::string_view> out = {identity};
        if (body == 2) out.emplace_back();
        out.emplace_back(buf_);
        if (!admin_.send_frames(out)) ++messages_dropped_;
    }
    count_cut(batch, admin_, "admin_request");
}

wire::AdminReply Daemon::handle(const wire::AdminRequest& q, const std::string& who) {
    wire::AdminReply r;
    control::Clock t = now();
    std::string err;
    bool change = false;
    switch (q.op) {
        case wire::AdminOp::Status:
            r.zones = ctl_.zones(t);
            r.peers = ctl_.peers(t);
            r.limits = limits_status();
            return r;
        case wire::AdminOp::Buckets: r.buckets = ctl_.status(q.bucket, q.hosts); return r;
        case wire::AdminOp::Set:
            err = ctl_.set_override(q.bucket, q.limit_mrps, q.mode, q.for_ms, t);
            change = true;
            break;
        case wire::AdminOp::Clear:
            err = ctl_.clear_override(q.bucket, q.clear_limit, q.clear_mode, t);
            change = true;
            break;
        case wire::AdminOp::Add:
            if (!q.limit_mrps) {
                err = "a run-time bucket needs a limit";
            } else {
                err = ctl_.add_runtime(q.bucket, q.match, *q.limit_mrps, q.mode, q.for_ms, t);
            }
            change = true;
            break;
        case wire::AdminOp::Remove:
            err = ctl_.remove_runtime(q.bucket, t);
            change = true;
            break;
        case wire::AdminOp::Keys:
            err = ctl_.keys(q.bucket, q.top, r.keys);
            if (err.empty()) return r;
            break;
    }
    if (!err.empty()) {
        r.ok = false;
        r.error = err;
        daemon::log(LogLevel::Info, q.bucket,
                    "admin " + std::string(to_string(q.op)) + " by " + who + " refused: " + err);
        return r;
    }
    if (change) {
        ++admin_changes_;
        daemon::log(LogLevel::Info, q.bucket, "admin " + describe(q) + " by " + who);
        save_state();  // durable before the operator hears "done"
        admin_tick();
    }
    r.buckets = ctl_.status(q.bucket, false);
    // An override of a name no host reports is kept (the bucket may be deployed later), but a
    // typo must not pass for done: say so in the reply's note.
    if (q.op == wire::AdminOp::Set && r.buckets.empty()) {
        r.error = "no host reports bucket \"" + q.bucket +
                  "\": the override waits until one does (a typo? see grlctl buckets)";
    }
    return r;
}

// Publish at once: a new run-time bucket or limit reaches nginx now, not at the next tick
// (the extra sample in the smoothing window is of the same usage). A change within the
// minimum gap of the previous admin tick waits for the gap's end (maybe_admin_tick), so a
// flood of admin requests cannot make the controller tick (and publish) per request.
void Daemon::admin_tick() {
    const std::uint64_t gap =
        std::max<std::uint64_t>(cfg_.opts.interval_ms / kAdminTickGapDivisor, 1);
    const std::uint64_t t = mono_ms();
    if (last_admin_tick_ != 0 && t < last_admin_tick_ + gap) {
        if (!admin_tick_pending_) ++admin_ticks_deferred_;
        admin_tick_pending_ = true;
        return;
    }
    last_admin_tick_ = t;
    tick();
}

// The state file holds the override table (run-time buckets included) as a region_usage
// message (docs/protocol.md) with no usage: one codec, one source of truth. A controller
// with no peer to learn them from gets its emergency limits back after a restart.
void Daemon::restore_state() {
    if (cfg_.state_file.empty()) return;
    std::optional<std::string> text;
    std::string error;
    wire::RegionUsage saved;
    try {
        text = daemon::read_file_if_exists(cfg_.state_file);
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (error.empty() && !text) {
        daemon::log_info("state file " + cfg_.state_file + " does not exist yet: no overrides");
        return;
    }
    if (error.empty() && !wire::decode(*text, saved, error)) {
        error = cfg_.state_file + ": " + error;
    }
    if (!error.empty()) {
        // Kept aside for a human, never overwritten; the controller starts without it.
        const std::string aside = cfg_.state_file + ".bad";
        std::rename(cfg_.state_file.c_str(), aside.c_str());
        state_ok_ = false;
        daemon::log_error("state file rejected, starting without overrides (moved to " + aside +
                          "): " + error);
        return;
    }
    const std::size_t n = ctl_.restore_overrides(saved.overrides, now());
    state_saved_ = *text;
    daemon::log_info("state file " + cfg_.state_file + ": " + std::to_string(n) + " of " +
                     std::to_string(saved.overrides.size()) +
                     " overrides restored (expired ones lapse at the first tick)");
}

void Daemon::save_state() {
    if (cfg_.state_file.empty()) return;
    wire::RegionUsage state;
    state.v = cfg_.usage_version;  // readable by the release before during an upgrade
    state.source = cfg_.opts.name;
    state.region = cfg_.opts.region;
    state.interval_ms = cfg_.opts.interval_ms;
    state.ts_ms = 1;  // fixed, so that the bytes change only when the table does
    state.seq = 1;
    for (const auto& [name, o] : ctl_.overrides()) state.overrides.push_back(o);
    std::string bytes;
    wire::encode(state, bytes);
    if (bytes == state_saved_) return;
    try {
        daemon::write_file_atomically(cfg_.state_file, bytes, 0600);
        state_saved_ = std::move(bytes);
        ++state_writes_;
        if (!state_ok_) daemon::log_info("state file " + cfg_.state_file + " written again");
        state_ok_ = true;
    } catch (const std::exception& e) {
        if (state_ok_) daemon::log_error(std::string("state file not written: ") + e.what());
        state_ok_ = false;
    }
}

void Daemon::tick() {
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t cpu0 = thread_cpu_us();
    admin_tick_pending_ = false;
    expire_parts(now());
    control::TickOutput& out = tick_out_;  // written over: its storage kept from tick to tick
    ctl_.tick(now(), out);
    ++ticks_;
    forget_usage_versions();
    for (const control::Event& e : out.events) {
        daemon::log(e.level == control::Event::Level::Warn ? LogLevel::Warn : LogLevel::Info,
                    e.bucket, e.text);
    }
    publish(out);
    record_tick(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                               std::chrono::steady_clock::now() - t0)
                                               .count()),
                thread_cpu_us() - cpu0);
    save_state();  // admin changes, peers' changes and expiries all pass through a tick
    publish_dashboard();
}

// The tick's whole share of the dashboard: a copy of what `grlctl buckets` and `grlctl status`
// would answer, moved to the dashboard's thread (controller/dashboard.h), when it wants one.
void Daemon::publish_dashboard() {
    if (!dashboard_) return;
    const control::Clock t = now();
    if (!dashboard_->wants_snapshot(t.mono_ms)) return;
    DashboardSnapshot s;
    s.mono_ms = t.mono_ms;
    s.wall_ms = t.wall_ms;
    s.controller = cfg_.opts.name;
    s.region = cfg_.opts.region;
    s.interval_ms = cfg_.opts.interval_ms;
    s.ttl_ms = cfg_.opts.ttl_ms;
    s.buckets = ctl_.status("", false);
    s.zones = ctl_.zones(t);
    s.peers = ctl_.peers(t);
    s.limits = limits_status();
    s.hosts_fresh = ctl_.fresh_hosts();
    s.hosts_stale = ctl_.stale_hosts();
    if (last_publish_mono_) s.instruction_age_ms = t.mono_ms - last_publish_mono_;
    s.held_regions = ctl_.held_regions();
    for (const auto& [name, o] : ctl_.overrides()) {
        if (!o.tombstone() && (o.expires_ms == 0 || t.wall_ms < o.expires_ms))
            s.overrides.push_back(o);
    }
    dashboard_->publish(std::move(s));
    // The history's one degraded mode: more instances than it charts.
    const std::uint64_t uncharted = dashboard_->series_refused();
    if (uncharted != 0 && dashboard_uncharted_ == 0) {
        daemon::log_warn("dashboard: " + std::to_string(uncharted) +
                         " bucket instances get no history chart (the history holds 500 at most; "
                         "they stay in the table)");
    } else if (uncharted == 0 && dashboard_uncharted_ != 0) {
        daemon::log_info("dashboard: every bucket instance has its history chart again");
    }
    dashboard_uncharted_ = uncharted;
}

// A usage message that is one part of several is held until its set is complete; the whole
// usage then goes on as if it had come in one message. Counted per result; what cannot be
// assembled is logged, rate-limited.
bool Daemon::assembled(const control::UsageIntake::Taken& taken, const char* kind,
                       const control::Clock& t) {
    const wire::PartResult r = taken.part;
    if (r == wire::PartResult::Whole) return true;
    ++parts_[std::string(kind) + "/" + std::string(to_string(r))];
    if (r == wire::PartResult::TooLarge) release_memory();
    if (r == wire::PartResult::Inconsistent || r == wire::PartResult::Stale ||
        r == wire::PartResult::Full || r == wire::PartResult::TooLarge) {
        parts_log_.hit(LogLevel::Warn, {}, std::string(kind) + " parts: " + why_, t.mono_ms);
    }
    return taken.taken();
}

// An incomplete set older than --stale-intervals x --interval will not complete (the sender
// sends its parts back to back): the source's last whole usage stays in force until it goes
// stale.
void Daemon::expire_parts(const control::Clock& t) {
    const auto [z, p] = intake_.expire(t.mono_ms);
    if (z + p > 0) {
        release_memory();
        incomplete_log_.hit(LogLevel::Warn, {},
                            "usage in parts dropped incomplete after " +
                                std::to_string(parts_timeout_ms(cfg_.opts)) +
                                " ms: " + std::to_string(z) + " zone usage, " + std::to_string(p) +
                                " region usage",
                            t.mono_ms);
    }
}

void Daemon::record_tick(std::uint64_t us, std::uint64_t cpu_us) {
    tick_cpu_us_ += cpu_us;
    if (tick_le_us_.empty()) tick_le_us_.assign(std::size(kTickBucketsUs), 0);
    for (std::size_t i = 0; i < std::size(kTickBucketsUs); ++i) {
        if (us <= kTickBucketsUs[i]) ++tick_le_us_[i];
    }
    tick_sum_us_ += us;
    ++tick_count_;
    tick_last_us_ = us;
    tick_max_us_ = std::max(tick_max_us_, us);
}

// Region usage in as few parts as fit (docs/protocol.md "Usage in parts").
void Daemon::publish_region_usage(const wire::RegionUsage& ru) {
    bool fits = wire::encode_parts(ru, region_parts_);
    if (!fits) {
        // Keyed buckets' key lists (busiest first) are halved until it fits: the least busy
        // keys go before the whole usage does.
        wire::RegionUsage cut = ru;
        std::size_t max_keys = wire::kMaxUsageKeys;
        while (!fits && max_keys > 0) {
            max_keys /= 2;
            for (auto& b : cut.buckets) {
                if (b.keys.size() > max_keys) b.keys.resize(max_keys);
            }
            fits = wire::encode_parts(cut, region_parts_);
        }
        if (fits) {
            send_log_.hit(LogLevel::Warn, {},
                          "region usage too large: keys cut to the busiest " +
                              std::to_string(max_keys) + " per bucket",
                          mono_ms());
        }
    }
    if (!fits) {
        ++region_usage_unsent_;
        send_log_.hit(LogLevel::Warn, {},
                      "region usage not sent: " + std::to_string(ru.buckets.size()) +
                          " buckets do not fit " + std::to_string(wire::kMaxParts) + " parts",
                      mono_ms());
        return;
    }
    region_usage_bytes_ = 0;
    region_usage_parts_ = region_parts_.size();
    for (const std::string& part : region_parts_) {
        region_usage_bytes_ += part.size();
        if (!pub_.send_frames({wire::kPeerTopic, part})) ++messages_dropped_;
    }
}

void Daemon::publish(control::TickOutput& out) {
    for (const wire::Instructions& m : out.instructions) {
        wire::encode(m, buf_);
        std::string topic = wire::topic(m.scope, m.region, m.zone);
        if (pub_.send_frames({topic, buf_})) {
            ++instructions_published_;
        } else {
            ++messages_dropped_;
            send_log_.hit(LogLevel::Warn, {}, "instructions not queued: " + daemon::zmq_error(),
                          mono_ms());
        }
    }
    out.region_usage.v = cfg_.usage_version;
    publish_region_usage(out.region_usage);
    last_publish_mono_ = mono_ms();
}

wire::LimitsStatus Daemon::limits_status() const {
    wire::LimitsStatus l;
    l.file = cfg_.limits_file;
    l.ok = limits_ok_;
    l.error = limits_error_;
    l.digest = ctl_.limits_digest();
    l.loaded_ms = limits_loaded_wall_;
    l.buckets = ctl_.limits().buckets.size();
    l.version = ctl_.limits().version;
    if (cfg_.limits_etcd && !etcd_up_) l.store_error = etcd_error_;
    return l;
}

Daemon::FileId Daemon::limits_file_id() const {
    struct stat st;
    FileId id;
    if (stat(cfg_.limits_file.c_str(), &st) == 0) {
        id = {st.st_dev, st.st_ino, st.st_size,
              static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    }
    return id;
}

void Daemon::watch_limits() {
    if (limits_file_id() == limits_id_) return;
    reload_limits("file changed");
}

void Daemon::reload_keys(const char* why) {
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
                   daemon::Socket& sock, const std::string& ep, const std::string& option) {
        if (!removed_connected) return;
        daemon::cut_removed_keys(*zap_, domain, limit, option, why, [&](daemon::RebindDone done) {
            daemon::rebind(loop_, sock.get(), ep, std::move(done));
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

void Daemon::reload_limits(const char* why) {
    if (cfg_.limits_file.empty()) {
        daemon::log_info(std::string(why) + ": no limits file configured");
        return;
    }
    if (cfg_.limits_etcd) {
        daemon::log_info(std::string(why) + ": the limits come from " + cfg_.limits_file +
                         ", watched: nothing to reload");
        return;
    }
    limits_id_ =
        limits_file_id();  // read before loading: a write during the load is seen next time
    take_limits(daemon::load_limits_file(cfg_.limits_file), why);
}

bool Daemon::take_limits(daemon::LimitsLoad l, const std::string& why) {
    const char* what = cfg_.limits_etcd ? "limits" : "limits file";
    if (!l.ok) {
        ++limits_reloads_rejected_;
        limits_ok_ = false;
        limits_error_ = l.error;
        daemon::log_error(std::string(what) + " rejected (" + why +
                          "), the last good limits stay in force: " + l.error);
        return false;
    }
    std::string old = ctl_.limits_digest();
    std::string old_version = ctl_.limits().version;
    ctl_.set_limits(std::move(l.limits), now());
    ++limits_reloads_ok_;
    limits_ok_ = true;
    limits_error_.clear();
    limits_loaded_wall_ = wall_ms();
    const std::string& version = ctl_.limits().version;
    daemon::log_info(std::string(what) + " loaded (" + why +
                     "): " + std::to_string(ctl_.limits().buckets.size()) + " buckets, digest " +
                     ctl_.limits_digest() + ", version " + (version.empty() ? "-" : version) +
                     (old == ctl_.limits_digest() && old_version == version ? " (unchanged)" : ""));
    return true;
}

// The key is read once here, synchronously: a value that does not parse is fatal (as a bad
// file is: there is no last good one). A missing key or an unreachable etcd is not: the
// controller starts with nginx.conf's limits (and overrides), says so, and the watch takes
// the key when it appears or etcd comes back. A region whose controllers cannot restart
// during an etcd outage would fail open entirely.
void Daemon::start_etcd() {
    const daemon::etcd::Url& url = *cfg_.limits_etcd;
    std::optional<daemon::etcd::RangeReply> r;
    try {
        r = daemon::etcd::Client(url, cfg_.etcd_access).get();
    } catch (const std::runtime_error& e) {
        etcd_error_ = e.what();
        ++etcd_losses_;
        daemon::log_warn(
            "limits: etcd unreachable at start, nginx.conf's limits apply until it answers "
            "(retrying): " +
            etcd_error_);
    }
    etcd_up_ = r.has_value();
    if (r && r->kv.exists) {
        daemon::LimitsLoad l = daemon::parse_limits(
            r->kv.value, url.text() + "@" + std::to_string(r->kv.mod_revision));
        if (!l.ok) throw std::runtime_error("limits rejected: " + l.error);
        ctl_.set_limits(std::move(l.limits), now());
        limits_loaded_wall_ = wall_ms();
        etcd_revision_ = r->kv.mod_revision;
    } else if (r) {
        etcd_revision_ = 0;
        daemon::log_warn("limits: no key " + url.key + " in etcd at " + url.host + ":" +
                         std::to_string(url.port) +
                         " yet: nginx.conf's limits apply until it is written");
    }
    etcd_ = std::make_unique<daemon::etcd::KeyWatch>(
        loop_, url, cfg_.etcd_access, r ? r->revision : 0,
        [this](const daemon::etcd::WatchEvent& e) { on_etcd(e); });
}

// Runs in the loop's thread (KeyWatch hands events over). One line when etcd is lost, one
// when it answers again; values already in force (a get after a reconnection) are skipped.
void Daemon::on_etcd(const daemon::etcd::WatchEvent& e) {
    const std::string& url = cfg_.limits_file;
    if (e.kind == daemon::etcd::WatchEvent::Kind::Lost) {
        if (etcd_up_) {
            ++etcd_losses_;
            daemon::log_warn("limits: " + url +
                             " unreachable, the last good limits stay in force (version " +
                             (ctl_.limits().version.empty() ? "-" : ctl_.limits().version) +
                             ", digest " + ctl_.limits_digest() + "): " + e.error);
        }
        etcd_up_ = false;
        etcd_error_ = e.error;
        return;
    }
    if (!etcd_up_) {
        etcd_up_ = true;
        etcd_error_.clear();
        daemon::log_info("limits: " + url + " reachable again");
    }
    if (e.kv.exists && e.kv.mod_revision == etcd_revision_) return;  // in force already
    if (!e.kv.exists) {
        if (etcd_revision_ > 0) {
            // A deleted key is more likely a mistake than an intent: keep the last good limits
            // (an empty value or "buckets: {}" clears them).
            daemon::log_warn("limits: key " + cfg_.limits_etcd->key +
                             " deleted in etcd: the last good limits stay in force");
            etcd_revision_ = 0;
        }
        return;
    }
    etcd_revision_ = e.kv.mod_revision;
    take_limits(daemon::parse_limits(e.kv.value, url + "@" + std::to_string(e.kv.mod_revision)),
                "etcd revision " + std::to_string(e.kv.mod_revision));
}

std::string Daemon::metrics() {
    const control::Clock t = now();
    daemon::MetricsText m;
    daemon::write_build_info(m, "controller");
    const auto& insts = ctl_.instances();
    struct Gauge {
        const char* name;
        const char* help;
        double (*get)(const control::Instance&);
    };
    static const Gauge gauges[] = {
        {"grl_bucket_offered_rps",
         "Requests per second offered to the bucket (smoothed), per scope instance.",
         [](const control::Instance& i) { return i.offered_mrps / 1000.0; }},
        {"grl_bucket_admitted_rps", "Requests per second admitted by the bucket (smoothed).",
         [](const control::Instance& i) { return i.admitted_mrps / 1000.0; }},
        {"grl_bucket_shadow_dropped_rps",
         "Requests per second a shadow bucket would have dropped (smoothed).",
         [](const control::Instance& i) { return i.shadow_dropped_mrps / 1000.0; }},
        {"grl_bucket_limit_rps", "Effective limit of the bucket.",
         [](const control::Instance& i) { return i.limit_mrps / 1000.0; }},
        {"grl_bucket_ratio", "Drop ratio published for the bucket.",
         [](const control::Instance& i) { return i.ratio_ppm / 1e6; }},
        {"grl_bucket_shadow", "1 when the bucket's effective mode is shadow.",
         [](const control::Instance& i) { return i.mode == Mode::Shadow ? 1.0 : 0.0; }},
        {"grl_bucket_hosts", "Hosts reporting the bucket (all regions for a global bucket).",
         [](const control::Instance& i) { return static_cast<double>(i.hosts); }},
        {"grl_bucket_disagreeing_hosts",
         "Hosts whose nginx.conf definition of the bucket differs from the one in force.",
         [](const control::Instance& i) { return static_cast<double>(i.disagreeing_hosts); }},
        {"grl_bucket_definitions",
         "Distinct definitions of the bucket among its hosts (more than 1: they disagree).",
         [](const control::Instance& i) { return static_cast<double>(i.definitions.size()); }},
    };
    for (const Gauge& g : gauges) {
        m.family(g.name, "gauge", g.help);
        for (const auto& [key, i] : insts) {
            m.sample(g.name,
                     {{"bucket", i.bucket}, {"scope", to_string(i.scope)}, {"zone", i.zone}},
                     g.get(i));
        }
    }
    // Keyed buckets (docs/per-key.md): per instance, never per key.
    m.family("grl_bucket_keys_limited", "gauge",
             "Keys of a keyed bucket with a drop ratio (over their per-key limit), per instance.");
    for (const auto& [key, i] : insts) {
        if (!i.keyed) continue;
        m.sample("grl_bucket_keys_limited",
                 {{"bucket", i.bucket}, {"scope", to_string(i.scope)}, {"zone", i.zone}},
                 static_cast<double>(i.keys.limited()));
    }
    m.family("grl_bucket_keys", "gauge",
             "Keys of a keyed bucket the controller holds sums for, per instance.");
    for (const auto& [key, i] : insts) {
        if (!i.keyed) continue;
        m.sample("grl_bucket_keys",
                 {{"bucket", i.bucket}, {"scope", to_string(i.scope)}, {"zone", i.zone}},
                 static_cast<double>(i.keys.size()));
    }
    m.family("grl_controller_keys_refused_total", "counter",
             "Keys of keyed buckets refused because an instance's key table was full "
             "(--max-instance-keys).");
    m.sample("grl_controller_keys_refused_total", static_cast<double>(ctl_.keys_refused()));
    m.family("grl_controller_bucket_names", "gauge",
             "Distinct bucket names in the usage held (at most --max-bucket-names; a usage naming "
             "more is refused: messages_ignored_total reason too_many_buckets).");
    m.sample("grl_controller_bucket_names", static_cast<double>(ctl_.bucket_names()));
    m.family("grl_controller_buckets_walked", "gauge",
             "Buckets the last tick summed entry by entry, the running sums not saying enough of "
             "them (one zone only, several definitions, keys, zone scope, run-time buckets): 0 "
             "in a steady fleet.");
    m.sample("grl_controller_buckets_walked", static_cast<double>(ctl_.buckets_walked()));
    m.family("grl_bucket_limit_source", "gauge",
             "Where the effective limit comes from (1 for the source in force).");
    for (const auto& [key, i] : insts) {
        m.sample("grl_bucket_limit_source",
                 {{"bucket", i.bucket},
                  {"scope", to_string(i.scope)},
                  {"zone", i.zone},
                  {"source", control::to_string(i.limit_source)}},
                 1);
    }

    // Candidates (the limits file's `candidate:`): only instances that have one, so that a
    // series exists exactly while a candidate is soaking.
    m.family("grl_bucket_candidate_limit_rps", "gauge",
             "Candidate limit evaluated beside the limit in force (limits file), never enforced.");
    for (const auto& [key, i] : insts) {
        if (!i.candidate_mrps) continue;
        m.sample("grl_bucket_candidate_limit_rps",
                 {{"bucket", i.bucket}, {"scope", to_string(i.scope)}, {"zone", i.zone}},
                 static_cast<double>(*i.candidate_mrps) / 1000.0);
    }
    m.family("grl_bucket_candidate_would_drop_rps", "gauge",
             "Requests per second the candidate limit would drop (smoothed offered - candidate).");
    for (const auto& [key, i] : insts) {
        if (!i.candidate_mrps) continue;
        m.sample("grl_bucket_candidate_would_drop_rps",
                 {{"bucket", i.bucket}, {"scope", to_string(i.scope)}, {"zone", i.zone}},
                 i.candidate_would_drop_mrps / 1000.0);
    }

    // Which region the instances above belong to: the labels of region-scope and
    // zone-scope instances do not say it, and grl-rlc record needs it to name them.
    m.family("grl_controller_info", "gauge", "This controller's region and name (always 1).");
    m.sample("grl_controller_info", {{"region", cfg_.opts.region}, {"name", cfg_.opts.name}}, 1);
    std::vector<wire::ZoneStatus> zones = ctl_.zones(t);
    std::size_t fresh = 0;
    for (const auto& z : zones) fresh += z.fresh;
    m.family("grl_controller_zones", "gauge",
             "Zones of this region known to the controller, by state.");
    m.sample("grl_controller_zones", {{"state", "fresh"}}, static_cast<double>(fresh));
    m.sample("grl_controller_zones", {{"state", "stale"}},
             static_cast<double>(zones.size() - fresh));
    m.family(
        "grl_controller_hosts", "gauge",
        "Hosts of this region by state (fresh: in the sums; stale: silent, or in a silent zone).");
    m.sample("grl_controller_hosts", {{"state", "fresh"}}, static_cast<double>(ctl_.fresh_hosts()));
    m.sample("grl_controller_hosts", {{"state", "stale"}}, static_cast<double>(ctl_.stale_hosts()));
    m.family("grl_controller_zone_usage_age_seconds", "gauge",
             "Age of the last zone usage from each zone.");
    for (const auto& z : zones)
        m.sample("grl_controller_zone_usage_age_seconds", {{"zone", z.zone}}, z.age_ms / 1000.0);
    std::vector<wire::PeerStatus> peers = ctl_.peers(t);
    m.family("grl_controller_peer_age_seconds", "gauge",
             "Age of the last region usage from each peer controller.");
    for (const auto& p : peers)
        m.sample("grl_controller_peer_age_seconds", {{"peer", p.source}, {"region", p.region}},
                 p.age_ms / 1000.0);
    m.family("grl_controller_zone_usage_version", "gauge",
             "Protocol version (\"v\") of the last zone usage accepted from each zone: 1 while "
             "its collector is older or runs with --usage-version 1.");
    for (const auto& z : zones) {
        auto v = zone_usage_v_.find(z.zone);
        if (v != zone_usage_v_.end()) {
            m.sample("grl_controller_zone_usage_version", {{"zone", z.zone}},
                     static_cast<double>(v->second));
        }
    }
    m.family("grl_controller_peer_usage_version", "gauge",
             "Protocol version (\"v\") of the last region usage accepted from each peer.");
    for (const auto& p : peers) {
        auto v = peer_usage_v_.find(p.source);
        if (v != peer_usage_v_.end()) {
            m.sample("grl_controller_peer_usage_version",
                     {{"peer", p.source}, {"region", p.region}}, static_cast<double>(v->second));
        }
    }
    m.family("grl_controller_peer_limits_mismatch", "gauge",
             "1 when a peer's limits file differs from ours.");
    for (const auto& p : peers) {
        m.sample("grl_controller_peer_limits_mismatch", {{"peer", p.source}, {"region", p.region}},
                 p.limits_digest != ctl_.limits_digest() ? 1 : 0);
    }
    m.family("grl_controller_messages_total", "counter", "Valid messages received, by kind.");
    for (const char* k : {"zone_usage", "region_usage", "admin_request"})
        m.sample("grl_controller_messages_total", {{"kind", k}}, static_cast<double>(received_[k]));
    m.family("grl_controller_usage_received_total", "counter",
             "Valid zone_usage and region_usage messages received, by kind and protocol version "
             "(v); v=\"1\" stays flat once every collector and controller sends version 2.");
    for (const char* k : {"zone_usage", "region_usage"}) {
        for (std::uint64_t v = wire::kMinUsageVersion; v <= wire::kUsageVersion; ++v) {
            auto n = usage_versions_.find({k, v});
            m.sample("grl_controller_usage_received_total", {{"kind", k}, {"v", std::to_string(v)}},
                     n == usage_versions_.end() ? 0.0 : static_cast<double>(n->second));
        }
    }
    m.family("grl_controller_messages_malformed_total", "counter",
             "Messages dropped as malformed, truncated, oversized or of a wrong version, by kind.");
    for (const char* k : {"zone_usage", "region_usage", "admin_request"})
        m.sample("grl_controller_messages_malformed_total", {{"kind", k}},
                 static_cast<double>(malformed_[k]));
    m.family(
        "grl_controller_messages_ignored_total", "counter",
        "Valid messages not used (older than the one held, other region, our own) or "
        "refused (future: stamped too far ahead of our clock; too_many_hosts; full: a new zone or "
        "peer while --max-zones / --max-peers are held; too_many_buckets: a new bucket name while "
        "--max-bucket-names are held).");
    for (const auto& [k, n] : ignored_) {
        auto slash = k.find('/');
        m.sample("grl_controller_messages_ignored_total",
                 {{"kind", std::string_view(k).substr(0, slash)},
                  {"reason", std::string_view(k).substr(slash + 1)}},
                 static_cast<double>(n));
    }
    m.family("grl_controller_batches_cut_total", "counter",
             "Batches of received messages stopped at their time budget (a fifth of the interval, "
             "at most 50 ms) with more queued, by kind: messages arrive faster than they are "
             "handled; the rest waits, bounded per connection, while the tick goes on.");
    for (const char* k : {"zone_usage", "region_usage", "admin_request"})
        m.sample("grl_controller_batches_cut_total", {{"kind", k}},
                 static_cast<double>(batches_cut_[k]));
    m.family("grl_controller_messages_dropped_total", "counter",
             "Messages that could not be queued for sending.");
    m.sample("grl_controller_messages_dropped_total", static_cast<double>(messages_dropped_));
    m.family("grl_controller_instructions_published_total", "counter",
             "Instruction messages published (heartbeats included).");
    m.sample("grl_controller_instructions_published_total",
             static_cast<double>(instructions_published_));
    m.family("grl_controller_last_instruction_age_seconds", "gauge",
             "Time since instructions were last published (no sample before the first).");
    if (last_publish_mono_)
        m.sample("grl_controller_last_instruction_age_seconds",
                 (t.mono_ms - last_publish_mono_) / 1000.0);
    m.family(
        "grl_controller_limits_file_ok", "gauge",
        "0 when the last load of the limits file was rejected (the last good one is in force).");
    m.sample("grl_controller_limits_file_ok", limits_ok_ ? 1 : 0);
    m.family("grl_controller_limits_reloads_total", "counter",
             "Loads of the limits file after start-up, by result.");
    m.sample("grl_controller_limits_reloads_total", {{"result", "ok"}},
             static_cast<double>(limits_reloads_ok_));
    m.sample("grl_controller_limits_reloads_total", {{"result", "rejected"}},
             static_cast<double>(limits_reloads_rejected_));
    m.family("grl_controller_limits_info", "gauge",
             "The limits in force: their version label (\"\" without one) and digest (always 1).");
    m.sample("grl_controller_limits_info",
             {{"version", ctl_.limits().version}, {"digest", ctl_.limits_digest()}}, 1);
    if (cfg_.limits_etcd) {
        m.family("grl_controller_limits_store_up", "gauge",
                 "1 while etcd (--limits etcd://...) answers; 0: the last good limits stay in "
                 "force.");
        m.sample("grl_controller_limits_store_up", etcd_up_ ? 1 : 0);
        m.family("grl_controller_limits_store_losses_total", "counter",
                 "Times etcd became unreachable (at start included).");
        m.sample("grl_controller_limits_store_losses_total", static_cast<double>(etcd_losses_));
    }
    std::size_t overrides = 0, runtime = 0;
    for (const auto& [name, o] : ctl_.overrides()) {
        bool active = !o.tombstone() && (o.expires_ms == 0 || t.wall_ms < o.expires_ms);
        if (!active) continue;
        (o.has_match ? runtime : overrides)++;
    }
    m.family("grl_controller_overrides", "gauge",
             "Overrides in force, by kind (runtime: run-time buckets).");
    m.sample("grl_controller_overrides", {{"kind", "override"}}, static_cast<double>(overrides));
    m.sample("grl_controller_overrides", {{"kind", "runtime"}}, static_cast<double>(runtime));
    m.family("grl_controller_override_tombstones_dropped_total", "counter",
             "Removed overrides (tombstones, expired entries) dropped before their 24 h "
             "to make room for a live override.");
    m.sample("grl_controller_override_tombstones_dropped_total",
             static_cast<double>(ctl_.tombstones_dropped()));
    m.family("grl_controller_overrides_rejected_total", "counter",
             "Override entries from peers refused: set_ms too far ahead of our clock.");
    m.sample("grl_controller_overrides_rejected_total",
             static_cast<double>(ctl_.overrides_rejected()));
    m.family("grl_controller_admin_requests_total", "counter",
             "Admin requests served (changes: set, clear, add, remove that succeeded).");
    m.sample("grl_controller_admin_requests_total", {{"kind", "all"}},
             static_cast<double>(admin_requests_));
    m.sample("grl_controller_admin_requests_total", {{"kind", "changes"}},
             static_cast<double>(admin_changes_));
    m.family("grl_controller_peer_regions_held", "gauge",
             "Other regions whose peers all went silent, their last usage held in the global "
             "sums (--peer-hold).");
    m.sample("grl_controller_peer_regions_held", static_cast<double>(ctl_.held_regions()));
    m.family("grl_controller_peer_regions_lost_total", "counter",
             "Regions that stayed silent past --peer-hold and left the global sums.");
    m.sample("grl_controller_peer_regions_lost_total", static_cast<double>(ctl_.regions_lost()));
    if (!cfg_.state_file.empty()) {
        m.family("grl_controller_state_file_ok", "gauge",
                 "1 when the state file (--state-file) was read and is being written; 0 after a "
                 "rejected file at start or a failed write.");
        m.sample("grl_controller_state_file_ok", state_ok_ ? 1.0 : 0.0);
        m.family("grl_controller_state_file_writes_total", "counter",
                 "Times the override table was written to the state file.");
        m.sample("grl_controller_state_file_writes_total", static_cast<double>(state_writes_));
    }
    m.family("grl_controller_admin_ticks_deferred_total", "counter",
             "Admin changes published with the next admin tick rather than at once (several "
             "changes within an eighth of an interval).");
    m.sample("grl_controller_admin_ticks_deferred_total",
             static_cast<double>(admin_ticks_deferred_));
    if (dashboard_) {
        m.family("grl_controller_dashboard_uncharted_instances", "gauge",
                 "Bucket instances the dashboard's history leaves out (it charts 500 at most).");
        m.sample("grl_controller_dashboard_uncharted_instances",
                 static_cast<double>(dashboard_->series_refused()));
        m.family("grl_controller_dashboard_snapshots_total", "counter",
                 "Tick snapshots handed to the dashboard (one per history step, every tick while "
                 "/api/state is read).");
        m.sample("grl_controller_dashboard_snapshots_total",
                 static_cast<double>(dashboard_->snapshots()));
        m.family("grl_controller_dashboard_snapshots_skipped_total", "counter",
                 "Tick snapshots replaced before the dashboard's thread took them (it lags).");
        m.sample("grl_controller_dashboard_snapshots_skipped_total",
                 static_cast<double>(dashboard_->snapshots_skipped()));
    }
    std::vector<const daemon::HandshakeWatch*> peer_watches;
    for (const auto& p : peers_)
        if (p->watch) peer_watches.push_back(p->watch.get());
    if (!peer_watches.empty()) daemon::write_client_metrics(m, "peer", peer_watches);
    scale_metrics(m);
    if (curve_) {
        zap_->write_metrics(m);
        daemon::write_binding_metrics(m, "collector", zone_keys_);
        daemon::write_reload_metrics(m, {&client_list_, &admin_list_});
    }
    daemon::write_connection_metrics(
        m, {usage_limit_.get(), publish_limit_.get(), admin_limit_.get()});
    return m.text();
}

// The controller's own cost at scale: tick duration, usage in parts, region usage size.
void Daemon::scale_metrics(daemon::MetricsText& m) const {
    m.family("grl_controller_tick_seconds", "histogram",
             "Duration of a tick: ratios computed, instructions and region usage encoded and "
             "queued.");
    for (std::size_t i = 0; i < std::size(kTickBucketsUs); ++i) {
        char le[32];
        std::snprintf(le, sizeof(le), "%g", static_cast<double>(kTickBucketsUs[i]) / 1e6);
        m.sample("grl_controller_tick_seconds_bucket", {{"le", le}},
                 static_cast<double>(tick_le_us_.empty() ? 0 : tick_le_us_[i]));
    }
    m.sample("grl_controller_tick_seconds_bucket", {{"le", "+Inf"}},
             static_cast<double>(tick_count_));
    m.sample("grl_controller_tick_seconds_sum", static_cast<double>(tick_sum_us_) / 1e6);
    m.sample("grl_controller_tick_seconds_count", static_cast<double>(tick_count_));
    m.family("grl_controller_tick_cpu_seconds_total", "counter",
             "CPU time the controller's thread spent in ticks (divided by the ticks: a tick's "
             "cost, without the time other processes ran).");
    m.sample("grl_controller_tick_cpu_seconds_total", static_cast<double>(tick_cpu_us_) / 1e6);
    m.family("grl_controller_early_ticks_total", "counter",
             "Ticks before their time, by reason: new_rates (a zone usage with a bucket's "
             "first rates), rise or fall (a bucket's offered rate well above or below the "
             "zone's last usage).");
    m.sample("grl_controller_early_ticks_total", {{"reason", "new_rates"}},
             static_cast<double>(early_ticks_new_rates_));
    m.sample("grl_controller_early_ticks_total", {{"reason", "rise"}},
             static_cast<double>(early_ticks_rise_));
    m.sample("grl_controller_early_ticks_total", {{"reason", "fall"}},
             static_cast<double>(early_ticks_fall_));
    m.family("grl_controller_early_ticks_deferred_total", "counter",
             "Early ticks (a zone usage with a bucket's first rates, a rise or a fall) not taken "
             "because the last tick was long: early ticks take at most a 40th of the time.");
    m.sample("grl_controller_early_ticks_deferred_total",
             static_cast<double>(early_tick_.deferred()));
    m.family("grl_controller_tick_last_seconds", "gauge", "Duration of the last tick.");
    m.sample("grl_controller_tick_last_seconds", static_cast<double>(tick_last_us_) / 1e6);
    m.family("grl_controller_tick_max_seconds", "gauge",
             "Longest tick since the controller started.");
    m.sample("grl_controller_tick_max_seconds", static_cast<double>(tick_max_us_) / 1e6);
    m.family("grl_controller_usage_parts_total", "counter",
             "Usage messages received as parts of a larger usage, by kind and result (pending: "
             "held for the rest of its set; complete: it completed the set; stale, "
             "inconsistent, full: dropped).");
    for (const auto& [k, n] : parts_) {
        auto slash = k.find('/');
        m.sample("grl_controller_usage_parts_total",
                 {{"kind", std::string_view(k).substr(0, slash)},
                  {"result", std::string_view(k).substr(slash + 1)}},
                 static_cast<double>(n));
    }
    m.family("grl_controller_usage_sets_incomplete_total", "counter",
             "Usage sent in parts whose set never completed (a newer set came first, or an "
             "interval passed): the source's last whole usage stays in force.");
    m.sample("grl_controller_usage_sets_incomplete_total", {{"kind", "zone_usage"}},
             static_cast<double>(intake_.incomplete_zone_sets()));
    m.sample("grl_controller_usage_sets_incomplete_total", {{"kind", "region_usage"}},
             static_cast<double>(intake_.incomplete_region_sets()));
    m.family("grl_controller_region_usage_bytes", "gauge",
             "Size of the last region usage published, all parts together.");
    m.sample("grl_controller_region_usage_bytes", static_cast<double>(region_usage_bytes_));
    m.family("grl_controller_region_usage_parts", "gauge",
             "Parts the last region usage was published in (1: one whole message).");
    m.sample("grl_controller_region_usage_parts", static_cast<double>(region_usage_parts_));
    m.family("grl_controller_region_usage_unsent_total", "counter",
             "Region usage not published: too large for 16 parts.");
    m.sample("grl_controller_region_usage_unsent_total", static_cast<double>(region_usage_unsent_));
}

}  // namespace grl::controller
