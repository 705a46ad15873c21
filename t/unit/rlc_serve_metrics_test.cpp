// grl-rlc serve's /metrics text (serve_metrics.h): every action shown, spaces in the store's
// action names made label-friendly, no sample for what has not happened yet.
#include "serve_metrics.h"

#include <gtest/gtest.h>

namespace grl::rlc {
namespace {

TEST(ServeMetrics, BeforeTheFirstCycleTimestampsAndVersionAreAbsent) {
    std::string t = render_serve_metrics(ServeStats{});
    EXPECT_NE(t.find("grl_rlc_cycles_total{result=\"ok\"} 0\n"), std::string::npos) << t;
    EXPECT_NE(t.find("grl_rlc_rollout_events_total{action=\"promote\"} 0\n"), std::string::npos);
    EXPECT_NE(t.find("grl_build_info{version=\""), std::string::npos);
    EXPECT_EQ(t.find("\ngrl_rlc_last_cycle_timestamp_seconds "), std::string::npos);
    EXPECT_EQ(t.find("\ngrl_rlc_limits_version "), std::string::npos);
    EXPECT_NE(t.find("# TYPE grl_rlc_limits_version gauge"), std::string::npos);
}

TEST(ServeMetrics, CountsCyclesEventsAndTheLastCycle) {
    ServeStats s;
    s.cycles_ok = 3;
    s.cycles_failed = 1;
    s.last_cycle_s = 1795996800.5;
    s.last_ok_cycle_s = 1795996800.5;
    s.last_cycle_duration_s = 2.25;
    s.version = 7;
    s.events = {{"promote", 2}, {"still held", 4}, {"rollback", 1}};
    std::string t = render_serve_metrics(s);
    for (const char* line :
         {"grl_rlc_cycles_total{result=\"failed\"} 1\n", "grl_rlc_cycles_total{result=\"ok\"} 3\n",
          "grl_rlc_rollout_events_total{action=\"promote\"} 2\n",
          "grl_rlc_rollout_events_total{action=\"still_held\"} 4\n",
          "grl_rlc_rollout_events_total{action=\"rollback\"} 1\n",
          "grl_rlc_rollout_events_total{action=\"hold\"} 0\n",
          "grl_rlc_last_cycle_timestamp_seconds 1795996800.5\n",
          "grl_rlc_last_cycle_duration_seconds 2.25\n", "grl_rlc_limits_version 7\n"}) {
        EXPECT_NE(t.find(line), std::string::npos) << line << " in\n" << t;
    }
}

}  // namespace
}  // namespace grl::rlc
