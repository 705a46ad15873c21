#include "serve_metrics.h"

#include <algorithm>

#include "grl/daemon/metrics.h"

namespace grl::rlc {

namespace {
std::string label_of(std::string action) {
    std::replace(action.begin(), action.end(), ' ', '_');
    return action;
}
}  // namespace

std::string render_serve_metrics(const ServeStats& s) {
    daemon::MetricsText m;
    daemon::write_build_info(m, "rlc");
    m.family("grl_rlc_cycles_total", "counter",
             "Cycles run by grl-rlc serve, by result (failed: nothing applied).");
    m.sample("grl_rlc_cycles_total", {{"result", "ok"}}, static_cast<double>(s.cycles_ok));
    m.sample("grl_rlc_cycles_total", {{"result", "failed"}}, static_cast<double>(s.cycles_failed));
    // Timestamps rather than ages: absent until the first cycle, and time() - x in a query.
    m.family("grl_rlc_last_cycle_timestamp_seconds", "gauge",
             "Unix time when the last cycle ended, successful or not (no sample before the "
             "first).");
    if (s.last_cycle_s) m.sample("grl_rlc_last_cycle_timestamp_seconds", *s.last_cycle_s);
    m.family("grl_rlc_last_successful_cycle_timestamp_seconds", "gauge",
             "Unix time when the last successful cycle ended (no sample before the first).");
    if (s.last_ok_cycle_s)
        m.sample("grl_rlc_last_successful_cycle_timestamp_seconds", *s.last_ok_cycle_s);
    m.family("grl_rlc_last_cycle_duration_seconds", "gauge", "Wall time the last cycle took.");
    if (s.last_cycle_duration_s)
        m.sample("grl_rlc_last_cycle_duration_seconds", *s.last_cycle_duration_s);
    m.family("grl_rlc_rollout_events_total", "counter",
             "Rollout events recorded in the store (raise, shadow, promote, hold, still_held, "
             "rollback), over the store's life.");
    std::map<std::string, std::int64_t> events;
    for (const char* a : kServeEventActions) events[a] = 0;
    for (const auto& [a, n] : s.events) events[label_of(a)] += n;
    for (const auto& [a, n] : events)
        m.sample("grl_rlc_rollout_events_total", {{"action", a}}, static_cast<double>(n));
    m.family("grl_rlc_config_rejected_total", "counter",
             "Changes of rlc.yaml or the quota file refused (the last good configuration "
             "stays).");
    m.sample("grl_rlc_config_rejected_total", static_cast<double>(s.config_rejected));
    m.family("grl_rlc_limits_version", "gauge",
             "The newest limits version in the store (no sample before the first).");
    if (s.version) m.sample("grl_rlc_limits_version", static_cast<double>(*s.version));
    return m.text();
}

}  // namespace grl::rlc
