// grl-controller: one or more per region. Receives zone usage from the region's collectors
// (PULL), exchanges region usage and overrides with peer controllers (PUB/SUB, topic
// "grl/p/"), computes ratios (grl::control) and publishes instructions on the same PUB
// every interval; serves grlctl on an admin ROUTER; reloads the limits file on SIGHUP and
// when it changes, or watches it in etcd (--limits etcd://...). See docs/control-plane.md.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "grl/control/batch_budget.h"
#include "grl/control/control.h"
#include "grl/control/early.h"
#include "grl/control/curve_key_bindings.h"
#include "grl/control/usage_intake.h"
#include "grl/daemon/connections.h"
#include "grl/daemon/curve.h"
#include "grl/daemon/etcd_watch.h"
#include "grl/daemon/limits_file.h"
#include "grl/daemon/http.h"
#include "grl/daemon/log.h"
#include "grl/daemon/loop.h"
#include "grl/daemon/zmq.h"
#include "grl/wire/usage_parts.h"
#include "grl/wire/wire_control.h"
#include "config.h"
#include "dashboard.h"

namespace grl::controller {

class Daemon {
  public:
    Daemon(Config cfg, daemon::Context& ctx, daemon::Loop& loop);
    std::vector<std::pair<std::string, std::string>> endpoints() const;
    void reload_limits(const char* why);  // SIGHUP
    // SIGHUP: reads --curve-clients and --curve-admin-clients again; a bad file is refused
    // whole (its old list stays).
    void reload_keys(const char* why);

  private:
    // One SUB socket per --peer: what arrives on a connection comes from that endpoint (and,
    // with CURVE, from the holder of the server key), so each connection is bound to the one
    // controller it first speaks for and cannot speak for another (peer_sources_).
    struct Peer {
        std::string endpoint;
        daemon::Socket sock;
        std::unique_ptr<daemon::HandshakeWatch> watch;  // with CURVE
    };

    void on_usage();
    void on_peers(Peer& p);
    void on_admin();
    void log_refusal(control::Accepted a, const control::Clock& t);
    void count_cut(const BatchBudget& b, const daemon::Socket& s, const char* kind);
    void tick();
    void publish(control::TickOutput& out);
    void publish_dashboard();
    void watch_limits();
    // A new limits set (file or etcd): taken whole, or rejected whole with the last good kept.
    bool take_limits(daemon::LimitsLoad l, const std::string& why);
    void start_etcd();
    void on_etcd(const daemon::etcd::WatchEvent& e);
    wire::AdminReply handle(const wire::AdminRequest& q, const std::string& who);
    void admin_tick();
    // The state file (--state-file): overrides and run-time buckets across restarts.
    void restore_state();
    void save_state();
    std::string metrics();
    // Usage in parts (docs/protocol.md): counts and logs a part's result; true when taken.
    bool assembled(const control::UsageIntake::Taken& r, const char* kind, const control::Clock& t);
    void expire_parts(const control::Clock& t);
    void publish_region_usage(const wire::RegionUsage& ru);
    void record_tick(std::uint64_t us, std::uint64_t cpu_us);
    void scale_metrics(daemon::MetricsText& m) const;
    control::Clock now() const;

    Config cfg_;
    daemon::Loop& loop_;
    control::Controller ctl_;
    control::TickOutput tick_out_;  // the last tick's, written over by the next (tick())
    // Always: ZAP admits CURVE keys (curve_) and enforces --max-connections.
    std::unique_ptr<daemon::ZapHandler> zap_;
    bool curve_ = false;  // --curve-keypair
    std::unique_ptr<daemon::EndpointLimit> usage_limit_, publish_limit_, admin_limit_;
    daemon::Socket pull_;
    daemon::Socket pub_;
    daemon::Socket admin_;
    std::vector<std::unique_ptr<Peer>> peers_;
    // Declared before http_: the server's routes call into it, so it must outlive the server.
    std::unique_ptr<Dashboard> dashboard_;
    std::unique_ptr<daemon::MetricsServer> http_;
    std::string usage_ep_, publish_ep_, admin_ep_;

    std::vector<zmq::Frame> frames_;
    std::string buf_;
    std::string why_;              // why the last message (or part of it) was refused
    control::UsageIntake intake_;  // usage in, whole or in parts, into ctl_
    std::map<std::string, std::uint64_t> parts_;  // "kind/result" -> parts received
    std::vector<std::string> region_parts_;       // encoded region_usage parts
    std::uint64_t region_usage_bytes_ = 0;        // last published, all parts
    std::uint64_t region_usage_parts_ = 0;
    std::uint64_t region_usage_unsent_ = 0;  // too large for kMaxParts parts
    // Tick duration (compute and publish), a histogram in microseconds.
    std::vector<std::uint64_t> tick_le_us_;  // counts per bucket of kTickBucketsUs
    std::uint64_t tick_sum_us_ = 0;
    std::uint64_t tick_count_ = 0;
    std::uint64_t tick_max_us_ = 0;
    std::uint64_t tick_last_us_ = 0;
    std::uint64_t tick_cpu_us_ = 0;  // thread CPU time in ticks

    // The limits file.
    struct FileId {
        dev_t dev = 0;
        ino_t ino = 0;
        off_t size = -1;
        std::int64_t mtime_ns = -1;
        bool operator==(const FileId& o) const {
            return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
        }
    };
    FileId limits_file_id() const;
    wire::LimitsStatus limits_status() const;  // for grlctl status and the dashboard
    FileId limits_id_;
    bool limits_ok_ = true;
    std::string limits_error_;
    std::uint64_t limits_loaded_wall_ = 0;
    std::uint64_t limits_reloads_ok_ = 0;
    std::uint64_t limits_reloads_rejected_ = 0;
    // --limits etcd://: the watch (its own thread), the revision in force and etcd's state.
    std::unique_ptr<daemon::etcd::KeyWatch> etcd_;
    std::int64_t etcd_revision_ = -1;  // mod_revision of the value in force (0: no key yet)
    bool etcd_up_ = false;
    std::string etcd_error_;  // why etcd is unreachable ("" while up)
    std::uint64_t etcd_losses_ = 0;

    // Counters for /metrics, by message kind.
    std::map<std::string, std::uint64_t> received_;
    std::map<std::string, std::uint64_t> malformed_;
    std::map<std::string, std::uint64_t> ignored_;      // "kind/reason"
    std::map<std::string, std::uint64_t> batches_cut_;  // by kind: stopped at the time budget
    // Usage by protocol version (docs/operations.md "Upgrading"): valid messages by (kind, v),
    // and the "v" of the last usage accepted from each zone (by zone) and peer (by source).
    std::map<std::pair<std::string, std::uint64_t>, std::uint64_t> usage_versions_;
    std::map<std::string, std::uint64_t> zone_usage_v_;
    std::map<std::string, std::uint64_t> peer_usage_v_;
    void note_usage_version(std::map<std::string, std::uint64_t>& last, const std::string& key,
                            const std::string& who, const char* what, std::uint64_t v);
    void log_if_no_older_usage() const;
    void forget_usage_versions();
    std::uint64_t instructions_published_ = 0;
    std::uint64_t messages_dropped_ = 0;
    std::uint64_t ticks_ = 0;
    std::string state_saved_;  // the state file's content as last written
    bool state_ok_ = true;     // false: the last write failed, or the file read at start was bad
    std::uint64_t state_writes_ = 0;
    std::uint64_t last_publish_mono_ = 0;
    // First rates of a bucket, a rise or a fall well beyond the last usage: tick at once.
    EarlyTick early_tick_{cfg_.opts.interval_ms};
    std::uint64_t early_ticks_new_rates_ = 0, early_ticks_rise_ = 0,
                  early_ticks_fall_ = 0;  // early ticks taken, by reason
    std::uint64_t admin_requests_ = 0;
    std::uint64_t admin_changes_ = 0;
    // Admin changes publish at once, but at most one tick per kAdminTickGapDivisor-th of an
    // interval: a burst of changes is published together instead of ticking per request.
    std::uint64_t last_admin_tick_ = 0;  // monotonic ms
    bool admin_tick_pending_ = false;
    std::uint64_t admin_ticks_deferred_ = 0;

    std::uint64_t dashboard_uncharted_ = 0;  // as last logged

    daemon::LogLimiter malformed_log_;
    daemon::LogLimiter ignored_log_;
    daemon::LogLimiter future_log_;     // messages stamped too far ahead
    daemon::LogLimiter hosts_log_;      // messages claiming too many hosts
    daemon::LogLimiter full_log_;       // a new zone or peer while the table is full
    daemon::LogLimiter overrides_log_;  // override entries stamped too far ahead
    daemon::LogLimiter send_log_;
    daemon::LogLimiter batch_log_;       // batches cut at their time budget: a flood
    daemon::LogLimiter parts_log_;       // usage parts that could not be assembled
    daemon::LogLimiter incomplete_log_;  // usage sets dropped incomplete
    // With CURVE: which zone each collector key sends usage for (first come, one to one).
    CurveKeyBindings zone_keys_;
    daemon::KeyListReloads client_list_{"--curve-clients", cfg_.clients_file};
    daemon::KeyListReloads admin_list_{"--curve-admin-clients", cfg_.admin_clients_file};
    // Which controller (source) each peer connection speaks for.
    CurveKeyBindings peer_sources_;
};

}  // namespace grl::controller
