// grl-rlc serve's /metrics (--metrics HOST:PORT): what the serving loop did, as Prometheus
// text. Pure: the loop fills ServeStats, the metrics thread renders a copy of it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace grl::rlc {

struct ServeStats {
    std::uint64_t cycles_ok = 0;
    std::uint64_t cycles_failed = 0;        // nothing applied (history, store or file error)
    std::uint64_t config_rejected = 0;      // rlc.yaml or the quota file changed and was refused
    std::optional<double> last_cycle_s;     // wall clock when the last cycle ended (ok or not)
    std::optional<double> last_ok_cycle_s;  // ... the last one that succeeded
    std::optional<double> last_cycle_duration_s;
    std::optional<std::int64_t> version;  // the newest version in the store
    // The store's rollout events by action (VersionStore::counters()): counted over the
    // store's whole life, so they survive restarts of grl-rlc serve.
    std::map<std::string, std::int64_t> events;
};

// The actions every scrape shows, 0 when none happened yet (rollout.h's to_string(Action),
// with '_' for spaces, and "rollback").
inline constexpr const char* kServeEventActions[] = {"raise", "shadow",     "promote",
                                                     "hold",  "still_held", "rollback"};

std::string render_serve_metrics(const ServeStats& s);

}  // namespace grl::rlc
