// The controller's live dashboard (docs/dashboard.md): a page and the JSON it reads, served on
// --metrics-bind next to /metrics.
//
// The tick must never wait for it: a tick copies what the page shows into a DashboardSnapshot
// (the same work as answering `grlctl buckets` and `grlctl status`) and hands it over with a
// move under a mutex. It does so only when the dashboard wants one (wants_snapshot()): for the
// history's next point (one per step, at least a second) and, while someone reads /api/state,
// every tick; at 10,000 instances and 4 ticks a second the copy and its rendering cost a tenth
// of a core that nobody looked at. The dashboard's own thread takes it, records the
// 15-minute history (grl/history.h) and renders the JSON documents; the loop's HTTP routes
// only hand out references to the last rendered documents. A slow browser, a huge history or
// a stuck dashboard thread therefore costs the tick nothing but the copy.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "grl/daemon/http.h"
#include "grl/control/accuracy.h"
#include "grl/control/history.h"
#include "grl/wire/wire_control.h"

namespace grl::controller {

// What the page shows, as of one tick.
struct DashboardSnapshot {
    std::uint64_t mono_ms = 0;
    std::uint64_t wall_ms = 0;
    std::string controller;
    std::string region;
    std::uint64_t interval_ms = 0;
    std::uint64_t ttl_ms = 0;
    std::vector<wire::BucketStatus> buckets;  // every bucket instance
    // How well each of them held its limit (grl/control/accuracy.h), as buckets is ordered.
    std::vector<std::optional<control::AccuracyResult>> accuracy;
    std::vector<wire::ZoneStatus> zones;
    std::vector<wire::PeerStatus> peers;
    wire::LimitsStatus limits;
    std::uint64_t hosts_fresh = 0;
    std::uint64_t hosts_stale = 0;
    std::optional<std::uint64_t> instruction_age_ms;  // none published yet: nullopt
    std::uint64_t held_regions = 0;
    std::vector<wire::Override> overrides;  // in force: overrides and run-time buckets
};

// The history point of each bucket instance of a snapshot.
std::vector<std::pair<control::InstanceKey, control::HistoryPoint>> history_points(
    const DashboardSnapshot& s);

// GET /api/state: the snapshot, the history's bounds and its newest point.
std::string render_state(
    const DashboardSnapshot& s, const control::History& h,
    const std::vector<std::pair<control::InstanceKey, control::HistoryPoint>>& last_point);
// GET /api/history: every series held, oldest point first (null where an instance was absent).
std::string render_history(const control::History& h);

// The page's files, built into the binary from controller/dashboard/ (no build step, no CDN).
struct DashboardAsset {
    const char* path;  // "/", "/dashboard.js", ...
    const char* type;
    const char* body;
};
const std::vector<DashboardAsset>& dashboard_assets();

class Dashboard {
  public:
    explicit Dashboard(control::History::Options o);
    ~Dashboard();
    Dashboard(const Dashboard&) = delete;
    Dashboard& operator=(const Dashboard&) = delete;

    // From the tick: whether a snapshot taken at `mono_ms` would be used. True for the first,
    // then once the history's next point is due (90% of a step after the last point, as
    // History::record() takes them), and at every tick while /api/state was read within the
    // last kStateWatchedMs. The loop's thread only (with publish() and route()).
    bool wants_snapshot(std::uint64_t mono_ms) const;
    // From the tick: never waits for the dashboard thread. A snapshot it has not taken yet is
    // replaced (counted in snapshots_skipped()).
    void publish(DashboardSnapshot s);
    // How long a read of /api/state keeps every tick's snapshot coming (the page reads it
    // every interval, at least every second).
    static constexpr std::uint64_t kStateWatchedMs = 10000;
    // The loop's HTTP routes (daemon::Routes): the page's files, /api/state, /api/history.
    std::optional<daemon::HttpResponse> route(const daemon::RequestHead& h);

    // For /metrics; read from the loop.
    std::uint64_t series_refused() const { return series_refused_.load(); }
    std::uint64_t snapshots_skipped() const { return skipped_.load(); }
    std::uint64_t snapshots() const { return snapshots_; }
    std::size_t history_bytes_bound() const { return max_bytes_; }

  private:
    void run();

    // guards pending_, pending_watched_, stop_, history_asked_, state_asked_, state_,
    // history_json_
    std::mutex mu_;
    std::condition_variable cv_;
    std::optional<DashboardSnapshot> pending_;
    // Whether /api/state was read within kStateWatchedMs of pending_'s tick: only then is it
    // rendered at once (else when /api/state is next read).
    bool pending_watched_ = false;
    bool stop_ = false;
    bool history_asked_ = false;
    bool state_asked_ = false;
    std::shared_ptr<const std::string> state_;
    std::shared_ptr<const std::string> history_json_;
    // When the page last asked for the history (monotonic ms): it is rendered only while
    // someone watches, at most once a second.
    std::atomic<std::uint64_t> history_wanted_{0};
    // Whether a snapshot at `mono_ms` is the history's next point, by History::record()'s rule.
    bool point_due(std::uint64_t mono_ms) const;

    // The loop's: when /api/state was last read (monotonic ms, 0 never), when the last snapshot
    // the history takes as a point was published, and how many snapshots were.
    std::uint64_t state_wanted_ = 0;
    std::uint64_t last_point_mono_ = 0;
    std::uint64_t snapshots_ = 0;
    std::uint64_t step_ms_ = 0;  // the history's
    std::atomic<std::uint64_t> series_refused_{0};
    std::atomic<std::uint64_t> skipped_{0};

    control::History history_;  // the dashboard thread's alone
    std::size_t max_bytes_ = 0;
    std::thread thread_;
};

}  // namespace grl::controller
