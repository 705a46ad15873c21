// rlc.yaml: a good file, rule matching, and bad files with errors naming file, line, field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "config.h"

using namespace grl::rlc;

namespace {

std::string error_of(const std::string& text, const std::string& base = "/tmp") {
    try {
        parse_config(text, "rlc.yaml", base);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "accepted";
}

TEST(RlcConfig, AGoodFile) {
    char dir[] = "/tmp/rlc-config-XXXXXX";
    ASSERT_TRUE(mkdtemp(dir));
    std::string d = dir;
    std::ofstream(d + "/quotas.yaml") << "quotas:\n  partner-acme: 100r/s\n";
    std::ofstream(d + "/rlc.yaml") << R"(
store: history.db
limits_file: /etc/grl/limits.yaml
window: 5w
quota_file: quotas.yaml
step_guard: 30%
rollout:
  soak: 2h
  threshold: 0.5%
  raise_directly: false
default:
  policy: peak
  buffer: 0.3
rules:
  - match: "partner-*"
    policy: fixed
  - match: "search*"
    policy: forecast
    min_weeks: 3
)";
    Config c = load_config(d + "/rlc.yaml");
    EXPECT_EQ(c.store, d + "/history.db");
    EXPECT_EQ(c.limits_file, "/etc/grl/limits.yaml");
    EXPECT_EQ(c.quota_file, d + "/quotas.yaml");
    EXPECT_EQ(c.window_s, 35 * 86400);
    EXPECT_DOUBLE_EQ(c.step_guard, 0.3);
    EXPECT_EQ(c.rollout.soak_s, 7200);
    EXPECT_DOUBLE_EQ(c.rollout.threshold, 0.005);
    EXPECT_FALSE(c.rollout.raise_directly);
    EXPECT_EQ(c.rule_for("partner-acme").policy, "fixed");
    EXPECT_EQ(c.rule_for("search-v2").policy, "forecast");
    EXPECT_EQ(c.rule_for("api").policy, "peak");
    EXPECT_EQ(c.rule_for("api").origin, d + "/rlc.yaml:12: default");
    EXPECT_EQ(c.rule_for("search").origin, d + "/rlc.yaml:17: rule 2 (match \"search*\")");
    std::remove((d + "/quotas.yaml").c_str());
    std::remove((d + "/rlc.yaml").c_str());
    rmdir(dir);
}

TEST(RlcConfig, TheExampleInConfLoads) {
    Config c = load_config(GRL_SOURCE_DIR "/conf/rlc/rlc.yaml");
    EXPECT_EQ(c.rules.size(), 3u);
    EXPECT_EQ(c.rule_for("partner-acme").policy, "fixed");
    EXPECT_EQ(c.rule_for("search").policy, "forecast");
    EXPECT_EQ(c.rule_for("login").policy, "peak");
    EXPECT_EQ(c.rule_for("api").origin, GRL_SOURCE_DIR "/conf/rlc/rlc.yaml:13: default");
    EXPECT_EQ(c.quota_file, GRL_SOURCE_DIR "/conf/rlc/quotas.yaml");
}

TEST(RlcConfig, FirstMatchWins) {
    Config c = parse_config(
        "limits_file: l.yaml\nrules:\n  - match: \"api-*\"\n    policy: forecast\n"
        "  - match: \"api-v2\"\n    policy: peak\n    buffer: 50%\ndefault: forecast\n",
        "rlc.yaml", "/tmp");
    EXPECT_EQ(c.rule_for("api-v2").policy, "forecast");
    EXPECT_EQ(c.rule_for("other").policy, "forecast");
    EXPECT_EQ(c.limits_file, "/tmp/l.yaml");
}

TEST(RlcConfig, PushTargetsInEtcd) {
    Config c = parse_config("limits_file: etcd://127.0.0.1:2379/grl/limits\n", "rlc.yaml", "/tmp");
    EXPECT_EQ(c.limits_file, "etcd://127.0.0.1:2379/grl/limits");  // not a path: not resolved
    EXPECT_EQ(c.etcd, "");
    c = parse_config("limits_file: l.yaml\netcd: etcd://e1:2379/grl/limits\n", "rlc.yaml", "/tmp");
    EXPECT_EQ(c.limits_file, "/tmp/l.yaml");
    EXPECT_EQ(c.etcd, "etcd://e1:2379/grl/limits");
    EXPECT_EQ(error_of("limits_file: l.yaml\netcd: etcd://e1/grl/limits\n"),
              "rlc.yaml:2: field \"etcd\": invalid etcd URL \"etcd://e1/grl/limits\": no port "
              "(expected etcd://HOST:PORT/KEY or etcds://HOST:PORT/KEY)");
    EXPECT_EQ(error_of("limits_file: etcd://e1:2379/\n"),
              "rlc.yaml:1: field \"limits_file\": invalid etcd URL \"etcd://e1:2379/\": empty key "
              "(expected etcd://HOST:PORT/KEY or etcds://HOST:PORT/KEY)");
}

TEST(RlcConfig, BadFilesNameFileLineAndField) {
    EXPECT_EQ(error_of("limits_file: l.yaml\nwindow: 2 weeks\n"),
              "rlc.yaml:2: field \"window\": invalid duration \"2 weeks\", expected e.g. 30m, 12h, "
              "14d or 2w");
    EXPECT_EQ(error_of("limits_file: l.yaml\nwindo: 2w\n"),
              "rlc.yaml:2: unknown field \"windo\" (expected store, limits_file, etcd, etcd_ca, "
              "etcd_cert, etcd_key, etcd_user, etcd_password_file, window, quota_file, "
              "step_guard, rollout, default, rules)");
    EXPECT_EQ(error_of("limits_file: l.yaml\netcd_password_file: /nonexistent/pw\n"),
              "rlc.yaml:2: field \"etcd_password_file\": cannot read password file "
              "/nonexistent/pw: No such file or directory");
    EXPECT_EQ(error_of("window: 2w\n"), "rlc.yaml: field \"limits_file\" is required");
    EXPECT_EQ(error_of("limits_file: l.yaml\nrules:\n  - match: a*\n    policy: peek\n"),
              "rlc.yaml:4: rule 1: field \"policy\": unknown policy \"peek\" (expected peak, "
              "forecast, fixed)");
    EXPECT_EQ(error_of("limits_file: l.yaml\nrules:\n  - match: a*\n    policy: peak\n"
                       "  - match: b*\n    policy: peak\n    buffer: much\n"),
              "rlc.yaml:7: rule 2: field \"buffer\": invalid value \"much\", expected a number "
              "from 0.00 to "
              "10.00 or a percentage (e.g. 20%)");
    EXPECT_EQ(error_of("limits_file: l.yaml\nrules:\n  - policy: peak\n"),
              "rlc.yaml:3: rule 1: field \"match\" is required");
    EXPECT_EQ(
        error_of(
            "limits_file: l.yaml\nrules:\n  - match: a*\n    policy: peak\n    percentil: 99\n"),
        "rlc.yaml:5: rule 1: field \"percentil\": unknown parameter for policy peak (expected "
        "percentile, "
        "buffer, floor, ceiling, step, min_change, min_history, min_coverage)");
    EXPECT_EQ(error_of("limits_file: l.yaml\nrollout:\n  soak: 1h\n  raise_directly: yes\n"),
              "rlc.yaml:4: field \"rollout.raise_directly\": invalid value \"yes\", expected true "
              "or false");
    EXPECT_EQ(
        error_of("limits_file: l.yaml\nrollout:\n  threshold: 2\n"),
        "rlc.yaml:3: field \"rollout.threshold\": invalid value \"2\", expected e.g. 0.1 or 10%");
    EXPECT_EQ(error_of("limits_file: l.yaml\nrules:\n  - match: p*\n    policy: fixed\n"),
              "rlc.yaml:3: rule 1 (match \"p*\"): policy fixed needs \"quota_file\" in rlc.yaml");
    EXPECT_EQ(error_of("limits_file: l.yaml\nquota_file: nowhere.yaml\nrules:\n  - match: p*\n    "
                       "policy: fixed\n"),
              "/tmp/nowhere.yaml: cannot read the quota file");
    EXPECT_EQ(error_of("limits_file: [l.yaml\n").rfind("rlc.yaml:2:", 0), 0u);
    EXPECT_EQ(error_of("- a\n"), "rlc.yaml:1: expected a map (store, limits_file, rules, ...)");
}

}  // namespace
