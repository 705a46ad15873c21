// grl-controller's command line (controller/config.cpp): defaults, bad values named with their
// option, cross-option rules (CURVE, --ttl).
#include "controller/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "cli_args.h"

namespace grl::controller {
namespace {

daemon::cli::Outcome<Config> parse(std::vector<std::string> extra, bool required = true) {
    std::vector<std::string> args;
    if (required) args = {"--region", "eu", "--name", "ctl-1"};
    args.insert(args.end(), extra.begin(), extra.end());
    test::Argv a("grl-controller", args);
    return parse_config(a.argc(), a.argv());
}

std::string error_of(std::vector<std::string> extra, bool required = true) {
    auto p = parse(std::move(extra), required);
    EXPECT_FALSE(p.config);
    EXPECT_EQ(p.exit_code, 2);
    return p.text;
}

#define EXPECT_MENTIONS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

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

TEST(ControllerConfig, Defaults) {
    auto p = parse({});
    ASSERT_TRUE(p.config) << p.text;
    const Config& c = *p.config;
    EXPECT_EQ(c.opts.region, "eu");
    EXPECT_EQ(c.opts.name, "ctl-1");
    EXPECT_EQ(c.usage_bind, "tcp://127.0.0.1:7201");
    EXPECT_EQ(c.publish_bind, "tcp://127.0.0.1:7202");
    EXPECT_EQ(c.admin_bind, "tcp://127.0.0.1:7203");
    EXPECT_TRUE(c.peers.empty());
    EXPECT_EQ(c.opts.interval_ms, 1000u);
    EXPECT_EQ(c.opts.ttl_ms, 3000u);
    EXPECT_EQ(c.opts.window, 2u);
    EXPECT_DOUBLE_EQ(c.opts.fast_attack, 0.2);
    EXPECT_EQ(c.opts.stale_intervals, 3u);
    EXPECT_EQ(c.limits_file, "");
    EXPECT_EQ(c.limits_poll_ms, 1000u);
    EXPECT_EQ(c.log_level, daemon::LogLevel::Info);
    EXPECT_FALSE(c.keypair);
}

TEST(ControllerConfig, EveryOptionReachesItsField) {
    auto p = parse({"--usage-bind",
                    "tcp://127.0.0.1:1",
                    "--publish-bind",
                    "tcp://127.0.0.1:2",
                    "--admin-bind",
                    "tcp://127.0.0.1:3",
                    "--peer",
                    "tcp://p:1",
                    "--peer",
                    "tcp://p:2",
                    "--interval",
                    "250ms",
                    "--ttl",
                    "2s",
                    "--window",
                    "4",
                    "--fast-attack",
                    "0",
                    "--stale-intervals",
                    "5",
                    "--limits",
                    "/etc/l.yaml",
                    "--limits-poll",
                    "0",
                    "--metrics-bind",
                    "127.0.0.1:0",
                    "--endpoints-file",
                    "/tmp/e.json",
                    "--log-level",
                    "warn"});
    ASSERT_TRUE(p.config) << p.text;
    const Config& c = *p.config;
    EXPECT_EQ(c.usage_bind, "tcp://127.0.0.1:1");
    EXPECT_EQ(c.publish_bind, "tcp://127.0.0.1:2");
    EXPECT_EQ(c.admin_bind, "tcp://127.0.0.1:3");
    EXPECT_EQ(c.peers, (std::vector<std::string>{"tcp://p:1", "tcp://p:2"}));
    EXPECT_EQ(c.opts.interval_ms, 250u);
    EXPECT_EQ(c.opts.ttl_ms, 2000u);
    EXPECT_EQ(c.opts.window, 4u);
    EXPECT_DOUBLE_EQ(c.opts.fast_attack, 0.0);
    EXPECT_EQ(c.opts.stale_intervals, 5u);
    EXPECT_EQ(c.limits_file, "/etc/l.yaml");
    EXPECT_FALSE(c.limits_etcd);
    EXPECT_EQ(c.limits_poll_ms, 0u);
    EXPECT_EQ(c.metrics_bind, "127.0.0.1:0");
    EXPECT_EQ(c.endpoints_file, "/tmp/e.json");
    EXPECT_EQ(c.log_level, daemon::LogLevel::Warn);
}

TEST(ControllerConfig, TtlDefaultsToThreeIntervals) {
    auto p = parse({"--interval", "250ms"});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_EQ(p.config->opts.ttl_ms, 750u);
    p = parse({"--fast-attack", "50"});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_DOUBLE_EQ(p.config->opts.fast_attack, 0.5);
}

TEST(ControllerConfig, LimitsFromEtcd) {
    auto p = parse({"--limits", "etcd://10.0.0.5:2379/grl/limits"});
    ASSERT_TRUE(p.config) << p.text;
    ASSERT_TRUE(p.config->limits_etcd);
    EXPECT_EQ(p.config->limits_etcd->host, "10.0.0.5");
    EXPECT_EQ(p.config->limits_etcd->port, 2379);
    EXPECT_EQ(p.config->limits_etcd->key, "grl/limits");
}

TEST(ControllerConfig, BadValuesNameTheOptionAndTheValue) {
    EXPECT_MENTIONS(error_of({"--interval", "5x"}), "--interval: invalid duration \"5x\"");
    EXPECT_MENTIONS(error_of({"--interval", "2m"}), "--interval: \"2m\" is out of range 50ms..1m");
    EXPECT_MENTIONS(error_of({"--ttl", "soon"}), "--ttl: invalid duration \"soon\"");
    EXPECT_MENTIONS(error_of({"--window", "0"}), "--window: \"0\" is out of range 1..100");
    EXPECT_MENTIONS(error_of({"--window", "two"}), "--window: invalid number \"two\"");
    EXPECT_MENTIONS(error_of({"--fast-attack", "20%"}), "--fast-attack: invalid number \"20%\"");
    EXPECT_MENTIONS(error_of({"--fast-attack", "1001"}),
                    "--fast-attack: \"1001\" is out of range 0..1000");
    EXPECT_MENTIONS(error_of({"--stale-intervals", "0"}),
                    "--stale-intervals: \"0\" is out of range");
    EXPECT_MENTIONS(error_of({"--limits-poll", "1.5s"}),
                    "--limits-poll: invalid duration \"1.5s\"");
    EXPECT_MENTIONS(error_of({"--limits", "etcd://127.0.0.1/grl/limits"}),
                    "--limits: invalid etcd URL \"etcd://127.0.0.1/grl/limits\": no port");
    EXPECT_MENTIONS(error_of({"--log-level", "verbose"}), "--log-level: invalid level \"verbose\"");
    EXPECT_MENTIONS(error_of({"--region", "eu west", "--name", "c"}, false),
                    "--region: invalid name \"eu west\"");
    EXPECT_MENTIONS(error_of({"--name", "c"}, false), "--region is required");
    EXPECT_MENTIONS(error_of({"--region", "eu"}, false), "--name is required");
    EXPECT_MENTIONS(error_of({"--curve-clients", "/nonexistent/list"}),
                    "--curve-clients: /nonexistent/list");
}

TEST(ControllerConfig, CrossOptionRules) {
    EXPECT_MENTIONS(error_of({"--interval", "1s", "--ttl", "500ms"}),
                    "--ttl must be at least --interval");
    TempDir d;
    std::string key = d.keypair("ctl");
    std::string clients = d.write("clients", daemon::generate_keypair().public_key + "\n");
    std::string admins = d.write("admins", daemon::generate_keypair().public_key + "\n");
    EXPECT_MENTIONS(error_of({"--curve-keypair", key}), "--curve-keypair needs --curve-clients");
    EXPECT_MENTIONS(error_of({"--curve-clients", clients}), "need --curve-keypair");
    EXPECT_MENTIONS(error_of({"--curve-server-key", key + ".pub"}), "need --curve-keypair");
    EXPECT_MENTIONS(error_of({"--curve-admin-clients", admins}), "need --curve-keypair");
    EXPECT_MENTIONS(
        error_of({"--curve-keypair", key, "--curve-clients", clients, "--peer", "tcp://p:1"}),
        "--peer tcp://p:1 with CURVE (--curve-keypair) needs its public key (--peer "
        "tcp://p:1=FILE) or --curve-server-key");

    // The admin list is its own: collectors' keys never open the admin endpoint.
    auto p = parse({"--curve-keypair", key, "--curve-clients", clients});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_TRUE(p.config->admin_clients.empty());
    EXPECT_EQ(p.config->clients.size(), 1u);
    p = parse({"--curve-keypair", key, "--curve-clients", clients, "--curve-admin-clients", admins,
               "--curve-server-key", key + ".pub", "--peer", "tcp://p:1"});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_EQ(p.config->admin_clients, daemon::load_authorized(admins));
    EXPECT_NE(p.config->admin_clients, curve::keys_of(p.config->clients));
    EXPECT_EQ(p.config->server_key, daemon::load_public_key(key + ".pub"));
    EXPECT_EQ(check(*p.config), "");
}

// Each peer may have a key pair of its own: --peer EP=FILE names its public key, and a peer
// without one is checked against --curve-server-key.
TEST(ControllerConfig, EachPeerMayHaveItsOwnKey) {
    TempDir d;
    std::string key = d.keypair("ctl");
    std::string b = d.keypair("ctl-b");
    std::string c = d.keypair("ctl-c");
    std::string clients = d.write("clients", daemon::generate_keypair().public_key + "\n");
    auto p = parse({"--curve-keypair", key, "--curve-clients", clients, "--peer",
                    "tcp://b:7202=" + b + ".pub", "--peer", "tcp://c:7202=" + c + ".pub"});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_EQ(p.config->peers, (std::vector<std::string>{"tcp://b:7202", "tcp://c:7202"}));
    EXPECT_EQ(peer_key(*p.config, "tcp://b:7202"), daemon::load_public_key(b + ".pub"));
    EXPECT_EQ(peer_key(*p.config, "tcp://c:7202"), daemon::load_public_key(c + ".pub"));
    EXPECT_NE(peer_key(*p.config, "tcp://b:7202"), peer_key(*p.config, "tcp://c:7202"));
    // Mixed: the peer without a key of its own gets --curve-server-key.
    p = parse({"--curve-keypair", key, "--curve-clients", clients, "--curve-server-key",
               key + ".pub", "--peer", "tcp://b:7202=" + b + ".pub", "--peer", "tcp://d:7202"});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_EQ(peer_key(*p.config, "tcp://b:7202"), daemon::load_public_key(b + ".pub"));
    EXPECT_EQ(peer_key(*p.config, "tcp://d:7202"), daemon::load_public_key(key + ".pub"));
    // Errors name the option and the file.
    EXPECT_MENTIONS(error_of({"--curve-keypair", key, "--curve-clients", clients, "--peer",
                              "tcp://b:7202=/nonexistent.pub"}),
                    "--peer: /nonexistent.pub: cannot read");
    EXPECT_MENTIONS(error_of({"--peer", "tcp://b:7202=" + b + ".pub"}),
                    "--peer tcp://b:7202=FILE (its public key) needs --curve-keypair");
    EXPECT_MENTIONS(
        error_of({"--curve-keypair", key, "--curve-clients", clients, "--peer", "tcp://b:7202="}),
        "--peer: expected EP or EP=FILE");
}

// Without CURVE, every bind beyond loopback needs --insecure (the admin one included).
TEST(ControllerConfig, BindingBeyondLoopbackNeedsCurveOrInsecure) {
    for (const char* opt : {"--usage-bind", "--publish-bind", "--admin-bind"}) {
        std::string err = error_of({opt, "tcp://0.0.0.0:7201"});
        EXPECT_NE(err.find(std::string(opt) + " tcp://0.0.0.0:7201 is reachable"),
                  std::string::npos)
            << err;
    }
    auto p = parse({"--usage-bind", "tcp://*:7201", "--insecure"});
    ASSERT_TRUE(p.config) << p.text;
    EXPECT_TRUE(p.config->insecure);
}

TEST(ControllerConfig, Help) {
    auto p = parse({"-h"}, false);
    EXPECT_FALSE(p.config);
    EXPECT_EQ(p.exit_code, 0);
    EXPECT_EQ(p.text.rfind("usage: grl-controller --region NAME --name NAME", 0), 0u) << p.text;
    EXPECT_MENTIONS(p.text, "--fast-attack PERCENT");
    EXPECT_MENTIONS(p.text, "(default: 20)");
}

}  // namespace
}  // namespace grl::controller
