// grl-collector: command line -> Config -> Collector on the event loop. See
// docs/control-plane.md for the options and collector/collector.h for the component.
#include <cstdio>
#include <csignal>
#include <exception>
#include <stdexcept>

#include "collector.h"
#include "grl/daemon/args.h"
#include "grl/daemon/json.h"

using namespace grl;

int main(int argc, char** argv) {
    daemon::block_signals();
    daemon::Args args(
        "grl-collector",
        "--zone NAME --region NAME --controller-usage EP --controller-publish EP [options]",
        {
            {"zone", "NAME", "zone this collector serves", "", false},
            {"region", "NAME", "region of the zone", "", false},
            {"name", "NAME", "collector name in messages and logs", "collector-<zone>", false},
            {"report-bind", "EP", "endpoint nginx sends reports to (PULL)", "tcp://*:7101", false},
            {"publish-bind", "EP", "endpoint nginx subscribes to for instructions (PUB)",
             "tcp://*:7102", false},
            {"controller-usage", "EP", "a controller's usage endpoint", "", true},
            {"controller-publish", "EP", "a controller's publish endpoint", "", true},
            {"interval", "DURATION", "how often zone usage is sent", "1s", false},
            {"batch", "DURATION",
             "take reports off the socket in batches this often (0: one by one as they arrive)",
             "10ms", false},
            {"stale-intervals", "N", "a host silent for N of its report intervals leaves the sums",
             "3", false},
            {"forget-intervals", "N", "...and is forgotten after N", "30", false},
            {"metrics-bind", "HOST:PORT", "serve Prometheus /metrics here", "", false},
            {"endpoints-file", "PATH", "write the bound endpoints here as JSON", "", false},
            {"log-level", "LEVEL", "debug, info, warn or error", "info", false},
            {"curve-keypair", "FILE",
             "CURVE key pair of this collector (for --curve-server-key and --curve-clients)", "",
             false},
            {"curve-server-key", "FILE",
             "public key of the controllers (switches CURVE on towards them)", "", false},
            {"curve-clients", "FILE",
             "public keys of the nginx hosts allowed to connect (switches CURVE on for them)", "",
             false},
            {"help", "", "show this help", "", false},
        });
    std::string err;
    if (!args.parse(argc, argv, 1, err)) {
        std::fprintf(stderr, "grl-collector: %s\n\n%s", err.c_str(), args.usage().c_str());
        return 2;
    }
    if (args.has("help")) {
        std::fputs(args.usage().c_str(), stdout);
        return 0;
    }
    try {
        collector::Config c;
        c.zone = args.get("zone");
        c.region = args.get("region");
        if (!valid_name(c.zone) || !valid_name(c.region)) {
            throw std::runtime_error("--zone and --region are required: 1-63 of [A-Za-z0-9_.:-]");
        }
        if (args.has("name")) c.name = args.get("name");
        if (!c.name.empty() && !valid_name(c.name))
            throw std::runtime_error("--name: invalid name \"" + c.name + "\"");
        c.report_bind = args.get("report-bind");
        c.publish_bind = args.get("publish-bind");
        c.controller_usage = args.all("controller-usage");
        c.controller_publish = args.all("controller-publish");
        if (c.controller_usage.empty() || c.controller_publish.empty()) {
            throw std::runtime_error(
                "at least one --controller-usage and one --controller-publish are required");
        }
        std::uint64_t n = 0;
        if (!args.duration_ms("interval", c.interval_ms, err)) throw std::runtime_error(err);
        if (c.interval_ms < 50 || c.interval_ms > 60000)
            throw std::runtime_error("--interval: out of range 50ms..60s");
        if (!args.uint("stale-intervals", n, err) || n == 0)
            throw std::runtime_error(err.empty() ? "--stale-intervals: must be at least 1" : err);
        c.rates.stale_intervals = static_cast<std::uint32_t>(n);
        if (!args.uint("forget-intervals", n, err) || n == 0)
            throw std::runtime_error(err.empty() ? "--forget-intervals: must be at least 1" : err);
        c.rates.forget_intervals = static_cast<std::uint32_t>(n);
        c.metrics_bind = args.get("metrics-bind");
        c.endpoints_file = args.get("endpoints-file");
        auto level = daemon::parse_log_level(args.get("log-level"));
        if (!level) throw std::runtime_error("--log-level: expected debug, info, warn or error");
        if (args.has("curve-keypair")) c.keypair = daemon::load_keypair(args.get("curve-keypair"));
        if (args.has("curve-server-key"))
            c.server_key = daemon::load_public_key(args.get("curve-server-key"));
        if (args.has("curve-clients")) {
            c.nginx_clients = daemon::load_authorized(args.get("curve-clients"));
            if (c.nginx_clients.empty())
                throw std::runtime_error("--curve-clients: no key in " + args.get("curve-clients"));
        }
        daemon::log_init("grl-collector[" + (c.name.empty() ? "collector-" + c.zone : c.name) + "]",
                         *level);

        daemon::Context ctx;
        daemon::Loop loop;
        collector::Collector col(c, ctx, loop);
        if (!c.endpoints_file.empty())
            daemon::write_endpoints_file(c.endpoints_file, col.endpoints());
        loop.on_signal(SIGINT, [&] { loop.stop(); });
        loop.on_signal(SIGTERM, [&] { loop.stop(); });
        loop.on_signal(SIGHUP,
                       [] { daemon::log_info("SIGHUP: nothing to reload in a collector"); });
        loop.run();
        daemon::log_info("stopped");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "grl-collector: %s\n", e.what());
        return 1;
    }
    return 0;
}
