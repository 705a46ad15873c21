// The controller's live dashboard (docs/dashboard.md): a page and the JSON it reads, served on
// --metrics-bind next to /metrics.
//
// The tick must never wait for it: each tick copies what the page shows into a
// DashboardSnapshot (the same work as answering `grlctl buckets` and `grlctl status`) and
// hands it over with a move under a mutex. The dashboard's own thread takes it, records the
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
#include "grl/history.h"
#include "grl/wire_control.h"

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

    // From the tick: never waits for the dashboard thread. A snapshot it has not taken yet is
    // replaced (counted in snapshots_skipped()).
    void publish(DashboardSnapshot s);
    // The loop's HTTP routes (daemon::Routes): the page's files, /api/state, /api/history.
    std::optional<daemon::HttpResponse> route(const daemon::RequestHead& h);

    // For /metrics; read from the loop.
    std::uint64_t series_refused() const { return series_refused_.load(); }
    std::uint64_t snapshots_skipped() const { return skipped_.load(); }
    std::size_t history_bytes_bound() const { return max_bytes_; }

  private:
    void run();

    std::mutex mu_;  // guards pending_, stop_, history_asked_, state_, history_json_
    std::condition_variable cv_;
    std::optional<DashboardSnapshot> pending_;
    bool stop_ = false;
    bool history_asked_ = false;
    std::shared_ptr<const std::string> state_;
    std::shared_ptr<const std::string> history_json_;
    // When the page last asked for the history (monotonic ms): it is rendered only while
    // someone watches, at most once a second.
    std::atomic<std::uint64_t> history_wanted_{0};
    std::atomic<std::uint64_t> series_refused_{0};
    std::atomic<std::uint64_t> skipped_{0};

    control::History history_;  // the dashboard thread's alone
    std::size_t max_bytes_ = 0;
    std::thread thread_;
};

}  // namespace grl::controller
