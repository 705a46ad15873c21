#include "collector.h"

#include "grl/wire/usage_parts.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "grl/control/batch_budget.h"
#include "grl/daemon/metrics.h"
#include "grl/common/ratio.h"
#include "grl/wire/usage_parts.h"

namespace grl::collector {

using daemon::LogLevel;
using daemon::mono_ms;
using daemon::wall_ms;

namespace {

constexpr std::size_t kMaxPerWakeup = 20000;  // reports handled per batch
constexpr std::size_t kMaxWrongZoneHosts = 1000;
constexpr std::size_t kMaxHostKeys = 100000;  // CURVE keys bound to hosts
constexpr int kReportQueue = 64;              // reports queued per nginx connection
constexpr int kPublishQueue = 1024;           // instructions queued per nginx connection
constexpr int kUsageQueue = 2 * static_cast<int>(wire::kMaxParts);  // usage per controller

std::string list_names(const std::vector<std::string>& names) {
    std::string s;
    for (std::size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
    if (names.size() > 5) s += " and " + std::to_string(names.size() - 5) + " more";
    return s;
}

}  // namespace

Collector::Collector(Config cfg, ::zmq::context_t& ctx, daemon::Loop& loop)
    : cfg_(std::move(cfg)),
      loop_(loop),
      zap_(std::make_unique<daemon::ZapHandler>(ctx)),
      curve_(!cfg_.nginx_clients.empty()),
      pull_(ctx, ZMQ_PULL),
      table_(cfg_.rates),
      // A binding lapses when its host would be forgotten (silent that long).
      host_keys_(kMaxHostKeys, std::uint64_t{cfg_.rates.forget_intervals} * cfg_.interval_ms) {
    if (std::string e = check(cfg_); !e.empty()) throw std::runtime_error(e);
    start_mono_ = mono_ms();
    early_ = EarlyUsage(cfg_.interval_ms, start_mono_);
    ::zmq::socket_t pub(ctx, ZMQ_XPUB);  // sees subscriptions: the relay answers them at once
    ::zmq::socket_t sub(ctx, ZMQ_SUB);
    serve_nginx(ctx, pub);
    // CURVE towards the controllers is on when their public keys are given.
    const bool curve_up = curve_to_controllers(cfg_);
    std::unique_ptr<daemon::HandshakeWatch> sub_watch = subscribe(ctx, sub, curve_up);
    push_to_controllers(ctx, curve_up);
    relay_ =
        std::make_unique<Relay>(ctx, std::move(sub), std::move(pub), topics_, std::move(sub_watch));
    relay_->start();
    loop_.on_socket(relay_->replies(), [this] { relay_->on_replies(); });
    if (curve_up) {  // refused controllers are connected again when due
        loop_.every(250, [this] {
            for (auto& c : upstreams_) c->watch->handle(daemon::mono_ms());
        });
    }

    if (cfg_.batch_ms > 0) {
        loop_.every(cfg_.batch_ms, [this] { on_reports(); });
    } else {
        loop_.on_socket(pull_.handle(), [this] { on_reports(); });
    }
    loop_.every(cfg_.interval_ms, [this] { tick(); });
    loop_.every(std::max<std::uint64_t>(cfg_.interval_ms / 8, 1), [this] { maybe_send_early(); });
    if (!cfg_.metrics_bind.empty()) {
        http_ = std::make_unique<daemon::MetricsServer>(loop_, cfg_.metrics_bind,
                                                        [this] { return metrics(); });
    }
    log_start(curve_up);
}

// nginx -> collector: reports; collector -> nginx: relayed instructions (the relay's thread
// owns `pub` once it starts). Both behind ZAP: CURVE keys and --max-connections.
void Collector::serve_nginx(::zmq::context_t& ctx, ::zmq::socket_t& pub) {
    // nginx -> collector: reports. The high-water mark is per connection (one per nginx),
    // and an nginx sends one report per interval, so a short queue holds many intervals of
    // a busy loop; it bounds what a flood can make the collector hold (docs/control-plane.md
    // "Memory under a flood"): 100000 per connection let one 8 s flood grow it to 900 MB.
    pull_.set(::zmq::sockopt::maxmsgsize, daemon::kTransportMaxBytes);
    pull_.set(::zmq::sockopt::rcvhwm, kReportQueue);
    // collector -> nginx: relayed instructions. A tick relays at most 3 topics x 8 sources x 16
    // messages (Relay), one message each in most fleets; a newer message supersedes an older
    // one, so a subscriber that does not read gets no more than kPublishQueue messages queued
    // (10,000 let one that never read hold 500 MiB of the collector's memory).
    pub.set(::zmq::sockopt::sndhwm, kPublishQueue);
    pub.set(::zmq::sockopt::xpub_verbose, true);  // every subscription, also to topics others hold
    loop_.on_socket(zap_->socket().handle(), [this] { zap_->handle(); });
    // ZAP domains: "nginx" for reports, "subscriber" for instructions (one per endpoint, so
    // that ZAP knows which endpoint a handshake is for).
    if (curve_) {
        zap_->allow("nginx", curve::keys_of(cfg_.nginx_clients));
        zap_->allow("subscriber", curve::keys_of(cfg_.nginx_clients));
        host_keys_.pin(cfg_.nginx_clients);
        daemon::make_curve_server(pull_, *cfg_.keypair, "nginx");
        daemon::make_curve_server(pub, *cfg_.keypair, "subscriber");
    } else {
        // Without CURVE, ZAP runs (NULL mechanism) when the socket has a domain.
        zap_->allow_null("nginx");
        zap_->allow_null("subscriber");
        pull_.set(::zmq::sockopt::zap_domain, "nginx");
        pub.set(::zmq::sockopt::zap_domain, "subscriber");
    }
    report_limit_ =
        std::make_unique<daemon::EndpointLimit>(ctx, pull_, "report", cfg_.max_connections);
    publish_limit_ =
        std::make_unique<daemon::EndpointLimit>(ctx, pub, "publish", cfg_.max_connections);
    zap_->limit("nginx", report_limit_.get());
    zap_->limit("subscriber", publish_limit_.get());
    for (daemon::EndpointLimit* l : {report_limit_.get(), publish_limit_.get()})
        loop_.on_socket(l->monitor(), [l] { l->handle(); });
    daemon::bound_messages(loop_, {report_limit_.get()}, {publish_limit_.get()});
    report_ep_ = daemon::bind(pull_, cfg_.report_bind);
    publish_ep_ = daemon::bind(pub, cfg_.publish_bind);
    report_limit_->set_address(report_ep_);
    publish_limit_->set_address(publish_ep_);
}

// controllers -> collector: one SUB connected to all of them, served by the relay.
std::unique_ptr<daemon::HandshakeWatch> Collector::subscribe(::zmq::context_t& ctx,
                                                             ::zmq::socket_t& sub, bool curve_up) {
    sub.set(::zmq::sockopt::maxmsgsize, daemon::kTransportMaxBytes);
    sub.set(::zmq::sockopt::rcvhwm, 10000);
    // One SUB socket connects to every controller: each connection takes the server key set
    // just before it.
    std::unique_ptr<daemon::HandshakeWatch> sub_watch;
    std::map<std::string, std::string> publish_keys;
    for (const std::string& ep : cfg_.controller_publish)
        publish_keys[ep] = controller_key(cfg_, ep);
    if (curve_up) {
        daemon::make_curve_client(sub, *cfg_.keypair,
                                  publish_keys[cfg_.controller_publish.front()]);
        sub_watch = std::make_unique<daemon::HandshakeWatch>(ctx, sub, "controller",
                                                             cfg_.controller_publish, publish_keys);
    }
    topics_[0] = wire::topic(Scope::Global, "", "");
    topics_[1] = wire::topic(Scope::Region, cfg_.region, "");
    topics_[2] = wire::topic(Scope::Zone, cfg_.region, cfg_.zone);
    for (const std::string& t : topics_) sub.set(::zmq::sockopt::subscribe, t);
    for (const std::string& ep : cfg_.controller_publish) {
        if (curve_up) sub.set(::zmq::sockopt::curve_serverkey, publish_keys[ep]);
        daemon::connect(sub, ep);
    }
    return sub_watch;
}

// collector -> controllers: one PUSH each, every controller gets every message.
void Collector::push_to_controllers(::zmq::context_t& ctx, bool curve_up) {
    for (const std::string& ep : cfg_.controller_usage) {
        auto c = std::make_unique<Upstream>(Upstream{ep, ::zmq::socket_t(ctx, ZMQ_PUSH), nullptr});
        // Only queue for a connected controller, and only a little: a usage message is
        // superseded by the next one, so an old one is worth nothing. A little is two whole
        // sets of the most parts a usage may have (docs/protocol.md "Usage in parts"): a set
        // is sent back to back, faster than the I/O thread takes it.
        c->push.set(::zmq::sockopt::immediate, true);
        c->push.set(::zmq::sockopt::sndhwm, kUsageQueue);
        if (curve_up) daemon::make_curve_client(c->push, *cfg_.keypair, controller_key(cfg_, ep));
        std::map<std::string, std::string> own_key;  // for the wording of log lines
        if (curve_up && cfg_.controller_keys.count(ep) > 0) own_key[ep] = controller_key(cfg_, ep);
        // With CURVE, its handshakes; always, whether a connection is up (a dropped usage is
        // then "not reachable" or "queue full").
        c->watch = std::make_unique<daemon::HandshakeWatch>(
            ctx, c->push, "controller", std::vector<std::string>{ep}, std::move(own_key), curve_up);
        daemon::HandshakeWatch* w = c->watch.get();
        loop_.on_socket(w->monitor(), [w] { w->handle(daemon::mono_ms()); });
        daemon::connect(c->push, ep);
        upstreams_.push_back(std::move(c));
    }
}

void Collector::log_start(bool curve_up) const {
    std::string ctl;
    for (const auto& c : upstreams_) ctl += (ctl.empty() ? "" : ", ") + c->endpoint;
    daemon::log_info(
        "collector " + cfg_.name + " for zone " + cfg_.zone + " of region " + cfg_.region +
        ": reports on " + report_ep_ + ", instructions on " + publish_ep_ +
        (http_ ? ", metrics on http://" + http_->address() + "/metrics" : "") + ", controllers: " +
        (ctl.empty() ? "none" : ctl) + ", interval " + std::to_string(cfg_.interval_ms) + " ms" +
        (cfg_.batch_ms ? ", reports in batches every " + std::to_string(cfg_.batch_ms) + " ms"
                       : ", reports one by one") +
        (curve_up ? ", CURVE to controllers" : "") + (curve_ ? ", CURVE for nginx" : "") +
        ", at most " + std::to_string(cfg_.max_connections) + " connections per endpoint");
    if (!curve_) {
        daemon::log_warn("CURVE is off for nginx (no --curve-clients): anyone who can reach " +
                         report_ep_ + " can report for any host of the zone" +
                         (cfg_.insecure ? " (--insecure: reachable beyond loopback)"
                                        : " (bound to loopback only)"));
    }
}

std::vector<std::pair<std::string, std::string>> Collector::endpoints() const {
    std::vector<std::pair<std::string, std::string>> e = {{"report", report_ep_},
                                                          {"publish", publish_ep_}};
    if (http_) e.emplace_back("metrics", http_->address());
    return e;
}

void Collector::reload_keys(const char* why) {
    if (!curve_) {
        daemon::log_info(std::string(why) + ": nothing to reload (no --curve-clients)");
        return;
    }
    curve::KeyList list;
    std::string error;
    try {
        list = daemon::load_key_list(client_list_.path);
        // As at start: a list without keys would refuse every nginx.
        if (list.empty()) error = client_list_.path + ": no key";
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (!error.empty()) {
        ++client_list_.rejected;
        client_list_.last_ok = false;
        daemon::log_error(std::string(why) + ": --curve-clients refused: " + error +
                          "; the list in force stays (" +
                          std::to_string(cfg_.nginx_clients.size()) + " keys)");
        return;
    }
    std::set<std::string> keys = curve::keys_of(list);
    const std::string change = daemon::describe_change(curve::keys_of(cfg_.nginx_clients), keys);
    const bool cut_report = zap_->allow("nginx", keys);
    const bool cut_publish = zap_->allow("subscriber", std::move(keys));
    const std::size_t dropped = host_keys_.pin(list);
    cfg_.nginx_clients = std::move(list);
    ++client_list_.ok;
    client_list_.last_ok = true;
    daemon::log_info(std::string(why) + ": --curve-clients " + client_list_.path + " reloaded (" +
                     change + "; " + std::to_string(dropped) +
                     " host binding(s) the new list contradicts dropped)");
    // ZAP only runs at the handshake: a removed key's connection would stay open, and its
    // subscriptions go on receiving. The endpoints it connected to are bound again, which
    // closes their connections; what a removed key still had queued is refused
    // (key_not_listed). docs/control-plane.md "CURVE".
    if (cut_report) {
        daemon::cut_removed_keys(*zap_, "nginx", *report_limit_, "--curve-clients", why,
                                 [this](daemon::RebindDone done) {
                                     daemon::rebind(loop_, pull_, report_ep_, std::move(done));
                                 });
    }
    if (cut_publish) {
        daemon::cut_removed_keys(*zap_, "subscriber", *publish_limit_, "--curve-clients", why,
                                 [this](daemon::RebindDone done) {
                                     relay_->rebind_publish(publish_ep_, std::move(done), loop_);
                                 });
    }
}

void Collector::on_reports() {
    std::string error;
    bool accepted_in_batch = false;
    std::uint64_t now = mono_ms();
    BatchBudget batch(kMaxPerWakeup, batch_budget_ms(cfg_.interval_ms));
    batch.start(now);
    while (batch.more(mono_ms())) {
        std::size_t n = report_limit_->recv_frames(frames_, 1);
        if (n == 0) break;
        now = mono_ms();
        if (take_report(n, now, error)) accepted_in_batch = true;
    }
    if (batch.cut() && daemon::readable(pull_)) {
        // Reports come faster than they are handled (a flood): the rest waits in the queue,
        // at most kReportQueue per connection, while the loop serves its timers, /metrics and
        // the relay's subscribers.
        ++stats_.batches_cut;
        batch_log_.hit(LogLevel::Warn, {},
                       "reports arrive faster than they are handled: a batch stopped after " +
                           std::to_string(batch.max_ms()) + " ms (" +
                           std::to_string(batch.taken()) +
                           " reports); each connection queues at most " +
                           std::to_string(kReportQueue) + " here, then its sender waits",
                       now);
    }
    // Warming up (just started, or hosts new to us): the last usage sent had buckets that
    // lacked some hosts' rates. Send as soon as more rates exist instead of waiting for the
    // tick, so that enforcement resumes within a report interval after a restart.
    if (accepted_in_batch) early_.rates_arrived();
    maybe_send_early();
}

bool Collector::take_report(std::size_t n, std::uint64_t now, std::string& error) {
    std::string_view body = frames_[0].view();
    stats_.report_bytes += body.size();
    if (n != 1 || !wire::read_report(body, report_, error)) {
        ++stats_.reports_malformed;
        malformed_log_.hit(
            LogLevel::Warn, {},
            "dropped malformed report: " + (n != 1 ? std::string("more than one frame") : error),
            now);
        return false;
    }
    if (curve_ && refused_key(now)) return false;
    if (wrong_zone()) return false;
    rates::Verdict v = table_.add(report_, now);
    ++stats_.reports[daemon::index_of(kVerdicts, v)];
    if (rates::is_new(v)) take_quota_use(now);
    last_report_mono_ = now;
    log_verdict(v, now);
    // A first report with recent counts is rated at once (a collector that just started).
    return v == rates::Verdict::Accepted || (v == rates::Verdict::First && report_.recent_ms > 0);
}

// A new report's per-key quota use (docs/design/009-per-key-quotas.md), until the next usage;
// keys beyond the table's bound are refused with their units, counted and logged.
void Collector::take_quota_use(std::uint64_t now) {
    const std::uint64_t refused = pending_use_.refused().keys;
    pending_use_.add(report_);
    if (pending_use_.refused().keys == refused) return;
    pending_log_.hit(LogLevel::Warn, {},
                     "per-key quota use of " +
                         std::to_string(pending_use_.refused().keys - refused) +
                         " key(s) from host " + std::string(report_.host) +
                         " refused: " + std::to_string(rates::kMaxPendingKeys) +
                         " keys wait for the next zone usage already (the units are lost)",
                     now);
}

// CURVE: the key ZAP admitted may speak for one host only.
bool Collector::refused_key(std::uint64_t now) {
    CurveKeyBindings::Result b = host_keys_.check(frames_[0].meta("User-Id"), report_.host, now);
    if (b == CurveKeyBindings::Result::Ok) return false;
    ++stats_.reports_refused[daemon::index_of(kRefusals, b)];
    identity_log_.hit(LogLevel::Warn, {},
                      "refused a report for host " + std::string(report_.host) + " from key " +
                          frames_[0].meta("User-Id") + ": " + std::string(to_string(b)) +
                          (b == CurveKeyBindings::Result::NotListed
                               ? " (removed from --curve-clients by a reload; its "
                                 "connection predates it)"
                               : " (the key reports for \"" +
                                     host_keys_.name_of(frames_[0].meta("User-Id")) + "\")"),
                      now);
    return true;
}

bool Collector::wrong_zone() {
    if (report_.zone == cfg_.zone && report_.region == cfg_.region) return false;
    ++stats_.reports_wrong_zone;
    std::string host(report_.host);
    if (wrong_zone_hosts_.size() < kMaxWrongZoneHosts && wrong_zone_hosts_.insert(host).second) {
        daemon::log_warn("host " + host + " reports zone " + std::string(report_.zone) +
                         " of region " + std::string(report_.region) +
                         " to the collector of zone " + cfg_.zone + " of region " + cfg_.region +
                         ": its reports are dropped");
    }
    return true;
}

void Collector::log_verdict(rates::Verdict v, std::uint64_t now) {
    if (v == rates::Verdict::Restarted) {
        daemon::log_info("host " + std::string(report_.host) + " restarted (new counter epoch)");
    } else if (v == rates::Verdict::Reclaimed) {
        daemon::log_warn("host " + std::string(report_.host) + ": its counter epoch " +
                         std::to_string(report_.epoch) +
                         " kept reporting after another epoch claimed the host; taken "
                         "back (a forged or misrouted report used its name)");
    } else if (v == rates::Verdict::Full) {
        full_log_.hit(LogLevel::Warn, {},
                      "refused a report of new host " + std::string(report_.host) + ": " +
                          std::to_string(cfg_.rates.max_hosts) +
                          " hosts are known (--max-hosts); known hosts keep working",
                      now);
    } else if (v == rates::Verdict::MemoryFull) {
        full_log_.hit(LogLevel::Warn, {},
                      "refused a report of host " + std::string(report_.host) + " (" +
                          std::to_string(report_.buckets.size()) +
                          " buckets): the rate table holds " + std::to_string(table_.bytes_held()) +
                          " bytes of at most " + std::to_string(cfg_.rates.max_bytes) +
                          " (--max-memory); the hosts it holds keep working",
                      now);
    } else if (v == rates::Verdict::Conflict) {
        epoch_conflict_log_.hit(daemon::LogLevel::Warn, {},
                                "host " + std::string(report_.host) +
                                    ": reports of two counter epochs keep arriving (two "
                                    "senders use this host name); epoch " +
                                    std::to_string(report_.epoch) + " is ignored",
                                now);
    } else if (v == rates::Verdict::First) {
        daemon::log_debug("host " + std::string(report_.host) + " joined" +
                          (report_.recent_ms ? " (rated from its recent counts)" : ""));
    }
}

// The rule (when, how often) is grl::EarlyUsage's, in core/control/include/grl/control/early.h.
void Collector::maybe_send_early() {
    if (early_.due(mono_ms())) send_usage();
}

void Collector::tick() {
    const std::uint64_t now = mono_ms();
    if (curve_) {
        if (std::size_t n = host_keys_.sweep(now); n > 0) {
            daemon::log_info("CURVE: " + std::to_string(n) +
                             " host binding(s) lapsed, unused for " +
                             std::to_string(host_keys_.expiry_ms() / 1000) +
                             " s: their keys may speak for another host now");
        }
    }
    rates::SweepResult s = table_.sweep(now);
    if (!s.went_stale.empty()) {
        daemon::log_warn(std::to_string(s.went_stale.size()) + " host(s) silent for " +
                         std::to_string(cfg_.rates.stale_intervals) +
                         " report intervals, out of the sums: " + list_names(s.went_stale));
    }
    if (!s.forgotten.empty()) {
        daemon::log_info(std::to_string(s.forgotten.size()) +
                         " silent host(s) forgotten: " + list_names(s.forgotten));
    }
    std::size_t fresh = table_.fresh_hosts();
    if (fresh != last_fresh_) {
        daemon::log_info("hosts reporting: " + std::to_string(fresh) + " (was " +
                         std::to_string(last_fresh_) + ")");
        last_fresh_ = fresh;
    }
    std::uint64_t last = relay_->last_mono.load(std::memory_order_relaxed);
    std::uint64_t silence = now - std::max(last, start_mono_);
    if (!instructions_flowing_ && last > 0 && silence <= cfg_.interval_ms) {
        instructions_flowing_ = true;
        daemon::log_info("instructions flowing");
    } else if (instructions_flowing_ && silence > 3 * cfg_.interval_ms) {
        instructions_flowing_ = false;
        daemon::log_warn("no instructions for " + std::to_string(silence) +
                         " ms: nginx will fail open when its ratios expire");
    }
    send_usage();
}

void Collector::send_usage() {
    const auto t0 = std::chrono::steady_clock::now();
    wire::ZoneUsage& u = usage_;
    table_.usage(u);
    u.v = cfg_.usage_version;
    u.source = cfg_.name;
    u.region = cfg_.region;
    u.zone = cfg_.zone;
    u.seq = ++seq_;
    u.ts_ms = wall_ms();
    u.interval_ms = cfg_.interval_ms;
    if (rates::keep_busiest(u.buckets, wire::kMaxUsageBuckets) > 0) ++stats_.usage_truncated;
    pending_use_.take(u);
    // In parts when it does not fit one message (docs/protocol.md "Usage in parts").
    if (!wire::encode_parts(u, parts_)) encode_cut(u);
    usage_bytes_ = 0;
    for (const std::string& part : parts_) usage_bytes_ += part.size();
    usage_build_us_ = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    bool unrated = false;
    for (const auto& b : u.buckets) unrated = unrated || b.rated_hosts < b.hosts;
    early_.sent(mono_ms(), unrated);
    if (parts_.empty()) return;  // too large even in parts: logged above
    // Sent to no controller: the per-key quota use it carried waits for the next usage.
    if (!push_usage()) pending_use_.give_back(u);
}

// A usage too large for kMaxParts parts, cut until it fits; counted and logged.
void Collector::encode_cut(wire::ZoneUsage& u) {
    // Host names are the only part that grows with the zone's size: drop them first.
    for (auto& b : u.buckets) b.host_names.clear();
    bool fits = wire::encode_parts(u, parts_);
    if (!fits) {
        u.host_names.clear();
        fits = wire::encode_parts(u, parts_);
    }
    // Then keyed buckets' key lists (busiest first), halved until the usage fits: the
    // least busy keys go before any bucket does.
    std::size_t max_keys = wire::kMaxUsageKeys;
    while (!fits && max_keys > 0) {
        max_keys /= 2;
        for (auto& b : u.buckets) {
            if (b.keys.size() > max_keys) b.keys.resize(max_keys);
        }
        fits = wire::encode_parts(u, parts_);
    }
    ++stats_.usage_truncated;
    const std::string cut =
        max_keys < wire::kMaxUsageKeys
            ? ", keys cut to the busiest " + std::to_string(max_keys) + " per bucket"
            : "";
    send_log_.hit(LogLevel::Warn, {},
                  fits ? "zone usage too large: host names left out" + cut
                       : "zone usage not sent: " + std::to_string(u.buckets.size()) +
                             " buckets do not fit " + std::to_string(wire::kMaxParts) +
                             " parts of " + std::to_string(wire::kMaxMessageBytes) + " bytes",
                  mono_ms());
}

// Every controller gets every part; what is not queued is counted by why.
bool Collector::push_usage() {
    bool sent = false;
    for (auto& c : upstreams_) {
        std::size_t queued = 0;
        for (const std::string& part : parts_)
            queued += daemon::send_frames(c->push, {part}) ? 1 : 0;
        if (queued == parts_.size()) {
            ++c->sent;
            sent = true;
            continue;
        }
        ++c->dropped;
        c->watch->handle(mono_ms());  // the connection's latest events
        const std::string of = parts_.size() > 1
                                   ? " (" + std::to_string(queued) + " of " +
                                         std::to_string(parts_.size()) + " parts queued)"
                                   : "";
        if (c->watch->up()) {
            ++c->queue_full;
            send_log_.hit(LogLevel::Warn, {},
                          "controller " + c->endpoint +
                              " takes zone usage slower than it is "
                              "sent: its queue of " +
                              std::to_string(kUsageQueue) +
                              " messages is full, zone usage dropped" + of,
                          mono_ms());
        } else {
            ++c->unreachable;
            send_log_.hit(LogLevel::Warn, {},
                          "controller " + c->endpoint +
                              " not reachable (no connection): zone usage dropped" + of,
                          mono_ms());
        }
    }
    return sent;
}

}  // namespace grl::collector
