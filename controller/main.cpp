// grl-controller: command line -> Config -> Daemon on the event loop. See
// docs/control-plane.md for the options and controller/controller_daemon.h for the parts.
#include <csignal>
#include <cstdio>
#include <exception>
#include <stdexcept>

#include "controller_daemon.h"
#include "grl/daemon/args.h"
#include "grl/daemon/json.h"

using namespace grl;

int main(int argc, char** argv) {
    daemon::block_signals();
    daemon::Args args(
        "grl-controller", "--region NAME --name NAME [options]",
        {
            {"region", "NAME", "region this controller serves", "", false},
            {"name", "NAME", "controller name (\"source\" of its messages; unique in the fleet)",
             "", false},
            {"usage-bind", "EP", "endpoint collectors send zone usage to (PULL)", "tcp://*:7201",
             false},
            {"publish-bind", "EP", "endpoint collectors and peer controllers subscribe to (PUB)",
             "tcp://*:7202", false},
            {"admin-bind", "EP", "endpoint grlctl talks to (ROUTER)", "tcp://127.0.0.1:7203",
             false},
            {"peer", "EP",
             "publish endpoint of another controller (same region: active-active; other regions: "
             "global buckets)",
             "", true},
            {"interval", "DURATION", "how often ratios are computed and published", "1s", false},
            {"ttl", "DURATION", "validity of published ratios", "3 x interval", false},
            {"window", "N", "intervals averaged for the ratio", "2", false},
            {"fast-attack", "PERCENT",
             "a sample this much above the window's mean is a surge, used alone (0: off)", "20",
             false},
            {"stale-intervals", "N", "a zone or peer silent for N intervals leaves the sums", "3",
             false},
            {"limits", "FILE", "YAML limits file (reloaded on SIGHUP and when it changes)", "",
             false},
            {"limits-poll", "DURATION",
             "how often the limits file is checked for changes (0: on SIGHUP only)", "1s", false},
            {"metrics-bind", "HOST:PORT", "serve Prometheus /metrics here", "", false},
            {"endpoints-file", "PATH", "write the bound endpoints here as JSON", "", false},
            {"log-level", "LEVEL", "debug, info, warn or error", "info", false},
            {"curve-keypair", "FILE",
             "CURVE key pair of this controller (switches CURVE on for every socket)", "", false},
            {"curve-server-key", "FILE", "public key of the peer controllers", "", false},
            {"curve-clients", "FILE",
             "public keys allowed to send usage and to subscribe (collectors, peers)", "", false},
            {"curve-admin-clients", "FILE", "public keys allowed on the admin endpoint",
             "--curve-clients", false},
            {"help", "", "show this help", "", false},
        });
    std::string err;
    if (!args.parse(argc, argv, 1, err)) {
        std::fprintf(stderr, "grl-controller: %s\n\n%s", err.c_str(), args.usage().c_str());
        return 2;
    }
    if (args.has("help")) {
        std::fputs(args.usage().c_str(), stdout);
        return 0;
    }
    try {
        controller::Config c;
        c.opts.region = args.get("region");
        c.opts.name = args.get("name");
        if (!valid_name(c.opts.region) || !valid_name(c.opts.name)) {
            throw std::runtime_error("--region and --name are required: 1-63 of [A-Za-z0-9_.:-]");
        }
        c.usage_bind = args.get("usage-bind");
        c.publish_bind = args.get("publish-bind");
        c.admin_bind = args.get("admin-bind");
        c.peers = args.all("peer");
        if (!args.duration_ms("interval", c.opts.interval_ms, err)) throw std::runtime_error(err);
        if (c.opts.interval_ms < 50 || c.opts.interval_ms > 60000)
            throw std::runtime_error("--interval: out of range 50ms..60s");
        c.opts.ttl_ms = 3 * c.opts.interval_ms;
        if (args.has("ttl") && !args.duration_ms("ttl", c.opts.ttl_ms, err))
            throw std::runtime_error(err);
        if (c.opts.ttl_ms < c.opts.interval_ms)
            throw std::runtime_error("--ttl: must be at least one interval");
        std::uint64_t n = 0;
        if (!args.uint("window", n, err) || n == 0 || n > 100)
            throw std::runtime_error(err.empty() ? "--window: 1..100" : err);
        c.opts.window = static_cast<std::uint32_t>(n);
        if (!args.uint("fast-attack", n, err) || n > 1000) {
            throw std::runtime_error(err.empty() ? "--fast-attack: 0..1000 (percent)" : err);
        }
        c.opts.fast_attack = static_cast<double>(n) / 100.0;
        if (!args.uint("stale-intervals", n, err) || n == 0)
            throw std::runtime_error(err.empty() ? "--stale-intervals: must be at least 1" : err);
        c.opts.stale_intervals = static_cast<std::uint32_t>(n);
        c.limits_file = args.get("limits");
        if (!args.duration_ms("limits-poll", c.limits_poll_ms, err)) throw std::runtime_error(err);
        c.metrics_bind = args.get("metrics-bind");
        c.endpoints_file = args.get("endpoints-file");
        auto level = daemon::parse_log_level(args.get("log-level"));
        if (!level) throw std::runtime_error("--log-level: expected debug, info, warn or error");
        if (args.has("curve-keypair")) {
            c.keypair = daemon::load_keypair(args.get("curve-keypair"));
            if (!args.has("curve-clients"))
                throw std::runtime_error("--curve-keypair needs --curve-clients");
            c.clients = daemon::load_authorized(args.get("curve-clients"));
            c.admin_clients = args.has("curve-admin-clients")
                                  ? daemon::load_authorized(args.get("curve-admin-clients"))
                                  : c.clients;
            if (args.has("curve-server-key"))
                c.server_key = daemon::load_public_key(args.get("curve-server-key"));
        } else if (args.has("curve-clients") || args.has("curve-server-key") ||
                   args.has("curve-admin-clients")) {
            throw std::runtime_error("CURVE options need --curve-keypair");
        }
        daemon::log_init("grl-controller[" + c.opts.name + "]", *level);

        daemon::Context ctx;
        daemon::Loop loop;
        controller::Daemon d(c, ctx, loop);
        if (!c.endpoints_file.empty())
            daemon::write_endpoints_file(c.endpoints_file, d.endpoints());
        loop.on_signal(SIGINT, [&] { loop.stop(); });
        loop.on_signal(SIGTERM, [&] { loop.stop(); });
        loop.on_signal(SIGHUP, [&] { d.reload_limits("SIGHUP"); });
        loop.run();
        daemon::log_info("stopped");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "grl-controller: %s\n", e.what());
        return 1;
    }
    return 0;
}
