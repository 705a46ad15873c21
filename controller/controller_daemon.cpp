#include "controller_daemon.h"

#include <time.h>

#include <chrono>
#include <stdexcept>

#include "clock.h"

namespace grl::controller {

using daemon::LogLevel;
using daemon::mono_ms;

namespace {

// CPU time of this thread: a tick's wall time on a busy machine includes time others ran.
std::uint64_t thread_cpu_us() {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000 +
           static_cast<std::uint64_t>(ts.tv_nsec) / 1000;
}

// The rules between options are checked before any socket is bound.
Config checked(Config c) {
    if (std::string e = check(c); !e.empty()) throw std::runtime_error(e);
    return c;
}

}  // namespace

Daemon::Daemon(Config cfg, ::zmq::context_t& ctx, daemon::Loop& loop)
    : cfg_(checked(std::move(cfg))),
      loop_(loop),
      ctl_(cfg_.opts),
      net_(cfg_, ctx, loop_),
      intake_(ctl_, parts_timeout_ms()) {
    limits_.start();
    state_.restore();
    loop_.on_socket(net_.pull_.handle(), [this] { on_usage(); });
    for (auto& p : net_.peers_) {
        Peer* peer = p.get();
        loop_.on_socket(peer->sock.handle(), [this, peer] { on_peers(*peer); });
    }
    loop_.on_socket(net_.admin_.handle(), [this] { on_admin(); });
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
    log_start();
}

void Daemon::log_start() const {
    std::string peers;
    for (const std::string& p : cfg_.peers) peers += (peers.empty() ? "" : ", ") + p;
    daemon::log_info(
        "controller " + cfg_.opts.name + " for region " + cfg_.opts.region + ": usage on " +
        net_.usage_ep_ + ", publish on " + net_.publish_ep_ + ", admin on " + net_.admin_ep_ +
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
        (net_.curve_ ? ", CURVE on" : "") + ", at most " + std::to_string(cfg_.max_connections) +
        " connections per endpoint");
    if (!net_.curve_) {
        daemon::log_warn("CURVE is off (no --curve-keypair): anyone who can reach " +
                         net_.usage_ep_ + " or " + net_.admin_ep_ +
                         " can send usage for any zone or change limits" +
                         (cfg_.insecure ? " (--insecure: reachable beyond loopback)"
                                        : " (bound to loopback only)"));
    } else if (cfg_.admin_clients.empty()) {
        daemon::log_warn("admin endpoint " + net_.admin_ep_ +
                         " admits no one: no --curve-admin-clients (operators' keys)");
    }
}

std::vector<std::pair<std::string, std::string>> Daemon::endpoints() const {
    std::vector<std::pair<std::string, std::string>> e = {
        {"usage", net_.usage_ep_}, {"publish", net_.publish_ep_}, {"admin", net_.admin_ep_}};
    if (http_) e.emplace_back("metrics", http_->address());
    return e;
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
    // Admin changes, peers' changes and expiries all pass through a tick.
    state_.save(now().mono_ms);
    record_accuracy();
    publish_dashboard();
}

void Daemon::stopped() {
    state_.save(now().mono_ms, true);
}

// One sample a second of every instance (ticks come 4 a second, and early): accuracy is judged
// over a minute, in seconds to settle. A tick less than a second after the last sample is
// skipped, with a tenth of a second's slack so that ticks landing a little early (a 250 ms
// interval's fourth tick at 995 ms) do not push the samples to two seconds apart.
void Daemon::record_accuracy() {
    constexpr std::uint64_t kSampleEveryMs = 1000, kSlackMs = 100;
    const std::uint64_t mono = now().mono_ms;
    if (accuracy_mono_ != 0 && mono < accuracy_mono_ + kSampleEveryMs - kSlackMs) return;
    accuracy_mono_ = mono;
    std::vector<std::pair<control::InstanceKey, control::AccuracySample>> now;
    now.reserve(ctl_.instances().size());
    for (const auto& [key, i] : ctl_.instances()) {
        now.emplace_back(control::InstanceKey{i.bucket, i.scope, "", i.zone},
                         control::AccuracySample{i.offered_mrps / 1000, i.admitted_mrps / 1000,
                                                 static_cast<double>(i.limit_mrps) / 1000,
                                                 i.mode == Mode::Deny && !i.keyed});
    }
    accuracy_.record(mono, now);
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
    s.accuracy.reserve(s.buckets.size());
    for (const wire::BucketStatus& b : s.buckets)
        s.accuracy.push_back(accuracy_.result({b.name, b.scope, "", b.zone}));
    s.zones = ctl_.zones(t);
    s.peers = ctl_.peers(t);
    s.limits = limits_.status();
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
        ++stats_.region_usage_unsent;
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
        if (!daemon::send_frames(net_.pub_, {wire::kPeerTopic, part})) ++stats_.messages_dropped;
    }
}

void Daemon::publish(control::TickOutput& out) {
    for (const wire::Instructions& m : out.instructions) {
        wire::encode(m, buf_);
        std::string topic = wire::topic(m.scope, m.region, m.zone);
        if (daemon::send_frames(net_.pub_, {topic, buf_})) {
            ++stats_.instructions_published;
        } else {
            ++stats_.messages_dropped;
            send_log_.hit(LogLevel::Warn, {},
                          "instructions not queued: " + std::string(::zmq::error_t().what()),
                          mono_ms());
        }
    }
    out.region_usage.v = cfg_.usage_version;
    publish_region_usage(out.region_usage);
    last_publish_mono_ = mono_ms();
}

}  // namespace grl::controller
