// grl-controller: one or more per region. Receives zone usage from the region's collectors
// (PULL), exchanges region usage and overrides with peer controllers (PUB/SUB, topic
// "grl/p/"), computes ratios (grl::control) and publishes instructions on the same PUB
// every interval; serves grlctl on an admin ROUTER; reloads the limits file on SIGHUP and
// when it changes, or watches it in etcd (--limits etcd://...). See docs/control-plane.md.
//
// The daemon is a composition of parts, each a file:
//   sockets.{h,cpp}         the sockets and their CURVE wiring, key lists reloaded on SIGHUP
//   intake.cpp              usage in: zone usage, peers' region usage, parts, versions
//   admin.cpp               grlctl's requests on the admin socket, the admin tick
//   limits_source.{h,cpp}   the limits file or etcd key
//   state_file.{h,cpp}      overrides and run-time buckets across restarts
//   controller_counters.h, controller_metrics.cpp   /metrics, each family declared once
//   controller_daemon.cpp   start-up, the tick and what it publishes
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grl/control/batch_budget.h"
#include "grl/control/control.h"
#include "grl/control/early.h"
#include "grl/daemon/http.h"
#include "grl/daemon/log.h"
#include "grl/daemon/loop.h"
#include "grl/daemon/metrics.h"
#include "grl/daemon/zmq.h"
#include "grl/control/usage_intake.h"
#include "grl/wire/usage_parts.h"
#include "grl/wire/wire_control.h"
#include "config.h"
#include "controller_counters.h"
#include "dashboard.h"
#include "limits_source.h"
#include "sockets.h"
#include "state_file.h"

namespace grl::controller {

class Daemon {
  public:
    Daemon(Config cfg, ::zmq::context_t& ctx, daemon::Loop& loop);
    std::vector<std::pair<std::string, std::string>> endpoints() const;
    void reload_limits(const char* why) { limits_.reload(why); }  // SIGHUP
    // SIGHUP: reads --curve-clients and --curve-admin-clients again; a bad file is refused
    // whole (its old list stays).
    void reload_keys(const char* why) { net_.reload_keys(why); }
    // The loop has stopped (SIGTERM): the quotas' use goes to the state file, whatever its age.
    void stopped();

  private:
    // Messages taken per wakeup of a socket, at most (and at most a time budget).
    static constexpr std::size_t kMaxPerWakeup = 256;
    // Admin changes tick at most once per this fraction of an interval (admin_tick()).
    static constexpr std::uint64_t kAdminTickGapDivisor = 8;
    // A set's parts are sent back to back, but a busy controller may take a while to read
    // them: a set is given as long as its source's usage stays fresh. (One interval let a
    // backlog expire sets faster than they completed.)
    std::uint64_t parts_timeout_ms() const {
        return std::uint64_t{cfg_.opts.stale_intervals} * cfg_.opts.interval_ms;
    }
    // Upper bounds of grl_controller_tick_seconds' histogram buckets, in microseconds.
    static constexpr std::uint64_t kTickBucketsUs[] = {1000,  2500,   5000,   10000,  25000,
                                                       50000, 100000, 250000, 1000000};
    void log_start() const;
    // intake.cpp
    void on_usage();
    bool zone_key_refused(const wire::ZoneUsage& zone_usage, const control::Clock& t);
    void log_quota_refusals(std::uint64_t before, const control::Clock& t);
    void tick_early(bool new_rates, Change change, const control::Clock& t);
    void zone_usage_refused(control::Accepted a, const std::string& source,
                            const std::string& region, const control::Clock& t);
    void on_peers(Peer& p);
    void log_refusal(control::Accepted a, const control::Clock& t);
    void count_cut(const BatchBudget& b, ::zmq::socket_ref s, Kind kind);
    // Usage in parts (docs/protocol.md): counts and logs a part's result; true when taken.
    bool assembled(const control::UsageIntake::Taken& r, const char* kind, const control::Clock& t);
    void expire_parts(const control::Clock& t);
    void note_usage_version(std::map<std::string, std::uint64_t>& last, const std::string& key,
                            const std::string& who, const char* what, std::uint64_t v);
    void log_if_no_older_usage() const;
    void forget_usage_versions();
    // admin.cpp
    void on_admin();
    wire::AdminReply handle(const wire::AdminRequest& q, const std::string& who);
    void admin_tick();
    // controller_daemon.cpp
    void tick();
    void publish(control::TickOutput& out);
    void publish_region_usage(const wire::RegionUsage& ru);
    void publish_dashboard();
    void record_accuracy();
    void record_tick(std::uint64_t us, std::uint64_t cpu_us);
    // controller_metrics.cpp
    std::string metrics();
    struct Scrape;  // what a scrape reads
    void write_accuracy(daemon::Samples& o,
                        std::optional<double> (*get)(const control::AccuracyResult&)) const;
    static const daemon::Family<Scrape> kInstanceFamilies[];
    static const daemon::Family<Scrape> kFleetFamilies[];
    static const daemon::Family<Scrape> kDashboardFamilies[];
    static const daemon::Family<Scrape> kTickFamilies[];

    Config cfg_;
    daemon::Loop& loop_;
    control::Controller ctl_;
    control::TickOutput tick_out_;  // the last tick's, written over by the next (tick())
    Sockets net_;
    LimitsSource limits_{cfg_, loop_, ctl_};
    StateFile state_{cfg_, ctl_};
    Counters stats_;
    // Declared before http_: the server's routes call into it, so it must outlive the server.
    std::unique_ptr<Dashboard> dashboard_;
    std::unique_ptr<daemon::MetricsServer> http_;

    std::vector<zmq::Frame> frames_;
    std::string buf_;
    std::string why_;              // why the last message (or part of it) was refused
    control::UsageIntake intake_;  // usage in, whole or in parts, into ctl_
    std::map<std::string, std::uint64_t> parts_;  // "kind/result" -> parts received
    std::vector<std::string> region_parts_;       // encoded region_usage parts
    std::uint64_t region_usage_bytes_ = 0;        // last published, all parts
    std::uint64_t region_usage_parts_ = 0;
    // Tick duration (compute and publish), a histogram in microseconds.
    std::vector<std::uint64_t> tick_le_us_;  // counts per bucket of kTickBucketsUs
    std::uint64_t tick_sum_us_ = 0;
    std::uint64_t tick_count_ = 0;
    std::uint64_t tick_max_us_ = 0;
    std::uint64_t tick_last_us_ = 0;
    std::uint64_t tick_cpu_us_ = 0;  // thread CPU time in ticks

    std::map<std::string, std::uint64_t> ignored_;  // "kind/reason", for /metrics
    // Usage by protocol version (docs/operations.md "Upgrading"): valid messages by (kind, v),
    // and the "v" of the last usage accepted from each zone (by zone) and peer (by source).
    std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> usage_versions_;
    std::map<std::string, std::uint64_t> zone_usage_v_;
    std::map<std::string, std::uint64_t> peer_usage_v_;
    std::uint64_t ticks_ = 0;
    std::uint64_t last_publish_mono_ = 0;
    // First rates of a bucket, a rise or a fall well beyond the last usage: tick at once.
    EarlyTick early_tick_{cfg_.opts.interval_ms};
    // Admin changes publish at once, but at most one tick per kAdminTickGapDivisor-th of an
    // interval: a burst of changes is published together instead of ticking per request.
    std::uint64_t last_admin_tick_ = 0;  // monotonic ms
    bool admin_tick_pending_ = false;

    std::uint64_t dashboard_uncharted_ = 0;  // as last logged
    // How well each instance held its limit: a sample a second (record_accuracy()).
    control::Accuracy accuracy_;
    std::uint64_t accuracy_mono_ = 0;  // last sample, monotonic ms

    daemon::LogLimiter malformed_log_;
    daemon::LogLimiter ignored_log_;
    daemon::LogLimiter future_log_;     // messages stamped too far ahead
    daemon::LogLimiter hosts_log_;      // messages claiming too many hosts
    daemon::LogLimiter full_log_;       // a new zone or peer while the table is full
    daemon::LogLimiter overrides_log_;  // override entries stamped too far ahead
    daemon::LogLimiter quota_log_;      // quota entries refused (control::QuotaLedger)
    daemon::LogLimiter send_log_;
    daemon::LogLimiter batch_log_;       // batches cut at their time budget: a flood
    daemon::LogLimiter parts_log_;       // usage parts that could not be assembled
    daemon::LogLimiter incomplete_log_;  // usage sets dropped incomplete
};

}  // namespace grl::controller
