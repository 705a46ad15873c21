// grl/daemon/metrics.h: families declared once, as table rows and as an X-macro list of
// counters, written in Prometheus text exposition byte for byte.
#include "grl/daemon/metrics.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace grl::daemon {
namespace {

enum class Color : std::uint8_t { Red, Green, Blue };
std::string_view to_string(Color c) {
    return c == Color::Red ? "red" : c == Color::Green ? "green" : "blue";
}

constexpr std::string_view kKinds[] = {"a", "b"};
constexpr Color kColors[] = {Color::Red, Color::Blue};  // Green is never counted

#define TEST_COUNTERS(COUNTER, COUNTER_BY)                                  \
    COUNTER(sent, "test_sent_total", "Messages sent.")                      \
    COUNTER_BY(received, "test_received_total", "kind", kKinds, "By kind.") \
    COUNTER_BY(colored, "test_colored_total", "color", kColors, "By color.")

struct Counters {
    TEST_COUNTERS(GRL_COUNTER_FIELD, GRL_COUNTER_BY_FIELD)
};

const Family<Counters> kCounterFamilies[] = {
    TEST_COUNTERS(GRL_COUNTER_FAMILY, GRL_COUNTER_BY_FAMILY)};

TEST(Metrics, ACounterListMakesFieldsAndFamiliesEveryLabelWrittenZeroIncluded) {
    Counters c;
    ++c.sent;
    c.received[1] += 2;
    ++c.colored[index_of(kColors, Color::Blue)];
    MetricsText m;
    write(m, kCounterFamilies, c);
    EXPECT_EQ(m.text(),
              "# HELP test_sent_total Messages sent.\n"
              "# TYPE test_sent_total counter\n"
              "test_sent_total 1\n"
              "# HELP test_received_total By kind.\n"
              "# TYPE test_received_total counter\n"
              "test_received_total{kind=\"a\"} 0\n"
              "test_received_total{kind=\"b\"} 2\n"
              "# HELP test_colored_total By color.\n"
              "# TYPE test_colored_total counter\n"
              "test_colored_total{color=\"red\"} 0\n"
              "test_colored_total{color=\"blue\"} 1\n");
}

TEST(Metrics, ATableWritesItsRowsInOrderEachNamingItsSamplesOnce) {
    struct State {
        double load = 0.5;
        bool up = true;
    };
    static const Family<State> table[] = {
        {"test_load", "gauge", "Load.", [](Samples& o, const State& s) { o(s.load); }},
        {"test_up", "gauge", "Up, by side.",
         [](Samples& o, const State& s) {
             o({{"side", "left"}, {"note", "a \"q\"\n"}}, s.up ? 1 : 0);
         }},
        {"test_none", "gauge", "No sample yet.", [](Samples&, const State&) {}},
    };
    MetricsText m;
    write(m, table, State{});
    EXPECT_EQ(m.text(),
              "# HELP test_load Load.\n"
              "# TYPE test_load gauge\n"
              "test_load 0.5\n"
              "# HELP test_up Up, by side.\n"
              "# TYPE test_up gauge\n"
              "test_up{side=\"left\",note=\"a \\\"q\\\"\\n\"} 1\n"
              "# HELP test_none No sample yet.\n"
              "# TYPE test_none gauge\n");
}

TEST(Metrics, IndexOfFindsAValuesField) {
    EXPECT_EQ(index_of(kColors, Color::Red), 0u);
    EXPECT_EQ(index_of(kColors, Color::Blue), 1u);
    EXPECT_EQ(index_of(kKinds, std::string_view("b")), 1u);
}

}  // namespace
}  // namespace grl::daemon
