// grl-collector's command line (collector/config.cpp): defaults, bad values named with their
// option, cross-option rules, --batch reaching the config.
#include "collector/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "cli_args.h"

namespace grl::collector {
namespace {

const std::vector<std::string> kRequired = {
    "--zone",   "z1", "--region", "r1", "--controller-usage", "tcp://c:1", "--controller-publish",
    "tcp://c:2"};

daemon::cli::Outcome<Config> parse(std::vector<std::string> extra, bool required = true) {
    std::vector<std::string> args = required ? kRequired : std::vector<std::string>{};
    args.insert(args.end(), extra.begin(), extra.end());
    test::Argv a("grl-collector", args);
    return parse_config(a.argc(), a.argv());
}

// The usage error of `extra`: exit status 2 and the message (checked to name what is wrong).
std::string error_of(std::vector<std::string> extra, bool required = true) {
    auto p = parse(std::move(extra), required);
    EXPECT_FALSE(p.config);
    EXPECT_EQ(p.exit_code, 2);
    return p.text;
}

struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/grl-cli-test-XXXXXX";
        path = mkdtemp(tmpl);
    }
    ~TempDir() { std::system(("rm -rf " + path).c_str()); }
    std::string keypair(const std::string& name) const {
        std::string p = path + "/" + name;
        daemon::write_keypair(p, daemon::generate_keypair());
        return p;
    }
    std::string write(const std::string& name, const std::string& text) const {
        std::string p = path + "/" + name;
        std::ofstream(p) << text;
        return p;
    }
};

TEST(CollectorConfig, Defaults) {
    auto p = parse({});
    ASSERT_TRUE(p.config) << p.text;
    const Config& c = *p.config;
    EXPECT_EQ(c.zone, "z1");
    EXPECT_EQ(c.region, "r1");
    EXPECT_EQ(c.name, "collector-z1");
    EXPECT_EQ(c.report_bind, "tcp://127.0.0.1:7101");
    EXPECT_EQ(c.publish_bind, "tcp://127.0.0.1:7102");
    EXPECT_EQ(c.controller_usage, std::vector<std::string>{"tcp://c:1"});
    EXPECT_EQ(c.controller_publish, std::vector<std::string>{"tcp://c:2"});
    EXPECT_EQ(c.interval_ms, 1000u);
    EXPECT_EQ(c.batch_ms, 10u);
    EXPECT_EQ(c.rates.stale_intervals, 3u);
    EXPECT_EQ(c.rates.forget_intervals, 30u);
    EXPECT_EQ(c.metrics_bind, "");
    EXPECT_EQ(c.endpoints_file, "");
    EXPECT_EQ(c.log_level, daemon::LogLevel::Info);
    EXPECT_FALSE(c.keypair);
    EXPECT_TRUE(c.server_key.empty());
    EXPECT_TRUE(c.nginx_clients.empty());
}

TEST(CollectorConfig, EveryOptionReachesItsField) {
    auto p = parse({"--name",
                    "col-a",
                    "--report-bind",
                    "tcp://127.0.0.1:5",
                    "--publish-bind=tcp://127.0.0.1:6",
                    "--controller-usage",
                    "tcp://d:1",
                    "--controller-publish",
                    "tcp://d:2",
                    "--interval",
                    "250ms",
                    "--batch",
                    "50ms",
                    "--stale-intervals",
                    "4",
                    "--forget-intervals",
                    "40",
                    "--metrics-bind",
                    "127.0.0.1:0",
                    "--endpoints-file",
                    "/tmp/e.json",
                    "--log-level",
                    "debug"});
    ASSERT_TRUE(p.config) << p.text;
    const Config& c = *p.config;
    EXPECT_EQ(c.name, "col-a");
    EXPECT_EQ(c.report_bind, "tcp://127.0.0.1:5");
    EXPECT_EQ(c.publish_bind, "tcp://127.0.0.1:6");
    EXPECT_EQ(c.controller_usage, (std::vector<std::string>{"tcp://c:1", "tcp://d:1"}));
    EXPECT_EQ(c.controller_publish, (std::vector<std::string>{"tcp://c:2", "tcp://d:2"}));
    EXPECT_EQ(c.interval_ms, 250u);
    EXPECT_EQ(c.batch_ms, 50u);
    EXPECT_EQ(c.rates.stale_intervals, 4u);
    EXPECT_EQ(c.rates.forget_intervals, 40u);
    EXPECT_EQ(c.metrics_bind, "127.0.0.1:0");
    EXPECT_EQ(c.endpoints_file, "/tmp/e.json");
    EXPECT_EQ(c.log_level, daemon::LogLevel::Debug);
}

TEST(CollectorConfig, BatchZeroTakesReportsOneByOne) {
    auto p = parse({"--batch", "0"});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_EQ(p.config->batch_ms, 0u);
    p = parse({"--batch", "1s", "--interval", "2s"});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_EQ(p.config->batch_ms, 1000u);
}

TEST(CollectorConfig, BadValuesNameTheOptionAndTheValue) {
    EXPECT_NE(error_of({"--interval", "5x"}).find("--interval: invalid duration \"5x\""),
              std::string::npos);
    EXPECT_NE(
        error_of({"--interval", "10ms"}).find("--interval: \"10ms\" is out of range 50ms..1m"),
        std::string::npos);
    EXPECT_NE(error_of({"--batch", "fast"}).find("--batch: invalid duration \"fast\""),
              std::string::npos);
    EXPECT_NE(error_of({"--batch", "2s"}).find("--batch: \"2s\" is out of range 0..1s"),
              std::string::npos);
    EXPECT_NE(
        error_of({"--stale-intervals", "-1"}).find("--stale-intervals: invalid number \"-1\""),
        std::string::npos);
    EXPECT_NE(error_of({"--forget-intervals", "0"})
                  .find("--forget-intervals: \"0\" is out of range 1..1000000"),
              std::string::npos);
    EXPECT_NE(error_of({"--log-level", "loud"}).find("--log-level: invalid level \"loud\""),
              std::string::npos);
    EXPECT_NE(error_of({"--name", "a b"}).find("--name: invalid name \"a b\""), std::string::npos);
    EXPECT_NE(
        error_of({"--curve-keypair", "/nonexistent/k"}).find("--curve-keypair: /nonexistent/k"),
        std::string::npos);
    // Usage errors start with the program and point to --help.
    std::string e = error_of({"--interval", "5x"});
    EXPECT_EQ(e.rfind("grl-collector: ", 0), 0u) << e;
    EXPECT_NE(e.find("grl-collector --help"), std::string::npos) << e;
}

TEST(CollectorConfig, UnknownRepeatedAndMissingOptions) {
    EXPECT_NE(error_of({"--bogus"}).find("--bogus"), std::string::npos);
    EXPECT_NE(error_of({"--interval", "1s", "--interval", "2s"}).find("--interval"),
              std::string::npos);
    EXPECT_NE(error_of({"--interval"}).find("--interval"), std::string::npos);
    EXPECT_NE(
        error_of({"--region", "r1", "--controller-usage", "a", "--controller-publish", "b"}, false)
            .find("--zone is required"),
        std::string::npos);
    EXPECT_NE(error_of({"--zone", "z", "--region", "r1", "--controller-usage", "a"}, false)
                  .find("--controller-publish is required"),
              std::string::npos);
    // One value per occurrence of a repeatable option.
    EXPECT_NE(error_of({"--controller-usage", "a", "b"}).find('b'), std::string::npos);
}

TEST(CollectorConfig, CrossOptionRules) {
    EXPECT_NE(error_of({"--interval", "100ms", "--batch", "100ms"})
                  .find("--batch must be shorter than --interval"),
              std::string::npos);
    EXPECT_NE(error_of({"--stale-intervals", "10", "--forget-intervals", "5"})
                  .find("--forget-intervals must be at least --stale-intervals"),
              std::string::npos);
    TempDir d;
    std::string key = d.keypair("col");
    std::string clients = d.write("clients", daemon::generate_keypair().public_key + "\n");
    std::string empty = d.write("empty", "# nobody\n");
    EXPECT_NE(error_of({"--curve-keypair", key})
                  .find("--curve-keypair needs --curve-server-key or --curve-clients"),
              std::string::npos);
    EXPECT_NE(error_of({"--curve-server-key", key + ".pub"})
                  .find("--curve-server-key needs --curve-keypair"),
              std::string::npos);
    EXPECT_NE(error_of({"--curve-clients", clients}).find("--curve-clients needs --curve-keypair"),
              std::string::npos);
    EXPECT_NE(error_of({"--curve-keypair", key, "--curve-clients", empty})
                  .find("--curve-clients: no key in " + empty),
              std::string::npos);

    auto p = parse(
        {"--curve-keypair", key, "--curve-server-key", key + ".pub", "--curve-clients", clients});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_EQ(p.config->keypair->public_key, daemon::load_keypair(key).public_key);
    EXPECT_EQ(p.config->server_key, daemon::load_public_key(key + ".pub"));
    EXPECT_EQ(p.config->nginx_clients.size(), 1u);
    EXPECT_EQ(check(*p.config), "");
}

// Controllers with key pairs of their own: EP=FILE names each one's public key, on both of its
// endpoints; an endpoint without one is checked against --curve-server-key.
TEST(CollectorConfig, EachControllerMayHaveItsOwnKey) {
    TempDir d;
    std::string key = d.keypair("col");
    std::string a = d.keypair("ctl-a");
    std::string b = d.keypair("ctl-b");
    std::vector<std::string> args = {"--zone",
                                     "z1",
                                     "--region",
                                     "r1",
                                     "--curve-keypair",
                                     key,
                                     "--controller-usage",
                                     "tcp://a:7201=" + a + ".pub",
                                     "--controller-publish",
                                     "tcp://a:7202=" + a + ".pub",
                                     "--controller-usage",
                                     "tcp://b:7201=" + b + ".pub",
                                     "--controller-publish",
                                     "tcp://b:7202=" + b + ".pub"};
    auto p = parse(args, false);
    ASSERT_TRUE(p.config) << p.text;
    const Config& c = *p.config;
    EXPECT_EQ(c.controller_usage, (std::vector<std::string>{"tcp://a:7201", "tcp://b:7201"}));
    EXPECT_EQ(c.controller_publish, (std::vector<std::string>{"tcp://a:7202", "tcp://b:7202"}));
    EXPECT_TRUE(curve_to_controllers(c));
    EXPECT_EQ(controller_key(c, "tcp://a:7202"), daemon::load_public_key(a + ".pub"));
    EXPECT_EQ(controller_key(c, "tcp://b:7201"), daemon::load_public_key(b + ".pub"));
    EXPECT_NE(controller_key(c, "tcp://a:7201"), controller_key(c, "tcp://b:7201"));
    // An endpoint without a key of its own, and no --curve-server-key.
    std::vector<std::string> missing = {"--zone",
                                        "z1",
                                        "--region",
                                        "r1",
                                        "--curve-keypair",
                                        key,
                                        "--controller-usage",
                                        "tcp://a:7201=" + a + ".pub",
                                        "--controller-publish",
                                        "tcp://a:7202"};
    EXPECT_NE(error_of(missing, false)
                  .find("--controller-publish tcp://a:7202 with CURVE towards the controllers "
                        "needs its public key (tcp://a:7202=FILE) or --curve-server-key"),
              std::string::npos);
    missing.insert(missing.end(), {"--curve-server-key", key + ".pub"});
    p = parse(missing, false);
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_EQ(controller_key(*p.config, "tcp://a:7202"), daemon::load_public_key(key + ".pub"));
    EXPECT_NE(error_of({"--zone", "z1", "--region", "r1", "--controller-usage",
                        "tcp://a:7201=" + a + ".pub", "--controller-publish", "tcp://a:7202"},
                       false)
                  .find("needs --curve-keypair"),
              std::string::npos);
    EXPECT_NE(error_of({"--zone", "z1", "--region", "r1", "--controller-usage",
                        "tcp://a:7201=/nonexistent.pub", "--controller-publish", "tcp://a:7202"},
                       false)
                  .find("--controller-usage: /nonexistent.pub: cannot read"),
              std::string::npos);
}

// Without CURVE for nginx, binding beyond loopback needs --insecure; with CURVE it does not.
TEST(CollectorConfig, BindingBeyondLoopbackNeedsCurveOrInsecure) {
    EXPECT_NE(error_of({"--report-bind", "tcp://*:7101"})
                  .find("--report-bind tcp://*:7101 is reachable from other machines without "
                        "CURVE"),
              std::string::npos);
    EXPECT_NE(error_of({"--publish-bind", "tcp://10.0.0.5:7102"}).find("--publish-bind"),
              std::string::npos);
    auto p = parse({"--report-bind", "tcp://*:7101", "--insecure"});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_TRUE(p.config->insecure);
    TempDir d;
    std::string key = d.keypair("col");
    std::string clients = d.write("clients", daemon::generate_keypair().public_key + "\n");
    p = parse(
        {"--report-bind", "tcp://*:7101", "--curve-keypair", key, "--curve-clients", clients});
    EXPECT_TRUE(p.config) << p.text;
}

TEST(Exposure, LocalEndpoints) {
    using daemon::cli::local_endpoint;
    EXPECT_TRUE(local_endpoint("tcp://127.0.0.1:7101"));
    EXPECT_TRUE(local_endpoint("tcp://127.0.0.1:*"));
    EXPECT_TRUE(local_endpoint("tcp://127.3.2.1:1"));
    EXPECT_TRUE(local_endpoint("tcp://localhost:1"));
    EXPECT_TRUE(local_endpoint("tcp://[::1]:1"));
    EXPECT_TRUE(local_endpoint("ipc:///run/grl.sock"));
    EXPECT_TRUE(local_endpoint("inproc://x"));
    EXPECT_FALSE(local_endpoint("tcp://*:7101"));
    EXPECT_FALSE(local_endpoint("tcp://0.0.0.0:7101"));
    EXPECT_FALSE(local_endpoint("tcp://10.1.2.3:7101"));
    EXPECT_FALSE(local_endpoint("tcp://eth0:7101"));
    EXPECT_FALSE(local_endpoint("tcp://[::]:7101"));
    EXPECT_FALSE(local_endpoint("tcp://127.0.0.1.evil.example:1"));
    EXPECT_FALSE(local_endpoint("tcp://:1"));
    EXPECT_FALSE(local_endpoint("pgm://x"));
}

TEST(CollectorConfig, Help) {
    auto p = parse({"--help"}, false);
    EXPECT_FALSE(p.config);
    EXPECT_EQ(p.exit_code, 0);
    EXPECT_EQ(p.text.rfind("usage: grl-collector --zone NAME", 0), 0u) << p.text;
    // Defaults come from the Config, in the units operators write.
    EXPECT_NE(p.text.find("(default: 10ms)"), std::string::npos) << p.text;
    EXPECT_NE(p.text.find("(default: 1s)"), std::string::npos) << p.text;
}

}  // namespace
}  // namespace grl::collector
