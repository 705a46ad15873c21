#include "config.h"

namespace grl::collector {

bool curve_to_controllers(const Config& c) {
    return !c.server_key.empty() || !c.controller_keys.empty();
}

const std::string& controller_key(const Config& c, const std::string& ep) {
    auto it = c.controller_keys.find(ep);
    return it == c.controller_keys.end() ? c.server_key : it->second;
}

std::string check(const Config& c) {
    if (c.batch_ms >= c.interval_ms) return "--batch must be shorter than --interval";
    if (c.rates.forget_intervals < c.rates.stale_intervals)
        return "--forget-intervals must be at least --stale-intervals";
    if (!c.nginx_clients.empty() && !c.keypair) return "--curve-clients needs --curve-keypair";
    if (!c.server_key.empty() && !c.keypair) return "--curve-server-key needs --curve-keypair";
    if (!c.controller_keys.empty() && !c.keypair)
        return "a controller's public key (--controller-usage or --controller-publish EP=FILE) "
               "needs --curve-keypair";
    if (c.keypair && !curve_to_controllers(c) && c.nginx_clients.empty())
        return "--curve-keypair needs --curve-server-key or --curve-clients";
    if (curve_to_controllers(c)) {
        for (const auto& [option, eps] :
             {std::pair{"--controller-usage", &c.controller_usage},
              std::pair{"--controller-publish", &c.controller_publish}}) {
            for (const std::string& ep : *eps) {
                if (controller_key(c, ep).empty())
                    return std::string(option) + " " + ep +
                           " with CURVE towards the controllers needs its public key (" + ep +
                           "=FILE) or --curve-server-key";
            }
        }
    }
    if (c.nginx_clients.empty()) {
        return daemon::cli::check_exposure(
            {{"--report-bind", c.report_bind}, {"--publish-bind", c.publish_bind}}, c.insecure);
    }
    return {};
}

namespace {

namespace cli = daemon::cli;

// The options in --help's order, a section each. Returns --name (its default comes after).
CLI::Option* add_fleet_options(CLI::App& app, Config& c) {
    cli::add_name(app, "--zone", c.zone, "zone this collector serves")->required();
    cli::add_name(app, "--region", c.region, "region of the zone")->required();
    CLI::Option* name = cli::add_name(app, "--name", c.name,
                                      "collector name in messages and logs (default: "
                                      "collector-<zone>)");
    cli::add_text(app, "--report-bind", c.report_bind, "EP",
                  "endpoint nginx sends reports to (PULL)");
    cli::add_text(app, "--publish-bind", c.publish_bind, "EP",
                  "endpoint nginx subscribes to for instructions (PUB)");
    cli::add_list(app, "--controller-usage", c.controller_usage, "EP[=FILE]",
                  "a controller's usage endpoint; with CURVE, =FILE names the file of its own "
                  "public key (default: --curve-server-key)")
        ->required();
    cli::add_list(app, "--controller-publish", c.controller_publish, "EP[=FILE]",
                  "a controller's publish endpoint (=FILE: as for --controller-usage)")
        ->required();
    app.add_flag("--insecure", c.insecure,
                 "allow --report-bind and --publish-bind beyond loopback without CURVE "
                 "(--curve-clients): anyone who reaches them can report for any host");
    return name;
}

void add_timing_options(CLI::App& app, Config& c) {
    cli::add_duration(app, "--interval", c.interval_ms, 50, 60000, "how often zone usage is sent");
    cli::add_duration(app, "--batch", c.batch_ms, 0, 1000,
                      "take reports off the socket in batches this often (0: one by one as they "
                      "arrive)");
    cli::add_usage_version(app, c.usage_version, "zone usage");
    cli::add_count(app, "--stale-intervals", c.rates.stale_intervals, 1, 1000000,
                   "a host silent for N of its report intervals leaves the sums");
    cli::add_count(app, "--forget-intervals", c.rates.forget_intervals, 1, 1000000,
                   "...and is forgotten after N");
}

// Bounds on what the network can make the collector hold.
void add_bounds(CLI::App& app, Config& c) {
    cli::add_count(app, "--max-connections", c.max_connections, 1, 1000000,
                   "handshaken connections each bound endpoint (report, publish) holds at most; a "
                   "new one's handshake is refused while it is full "
                   "(connections_refused_total)");
    cli::add_count(app, "--max-hosts", c.rates.max_hosts, 1, 10000000,
                   "hosts held at most; a new host beyond is refused and counted "
                   "(reports_total{result=\"hosts_full\"})");
    cli::add_size(app, "--max-memory", c.rates.max_bytes, 1ULL << 20, 1ULL << 40,
                  "bytes the rate table holds at most (hosts, buckets, heavy hitters, names); "
                  "a report that would take it beyond is refused and counted "
                  "(reports_total{result=\"memory_full\"})");
}

// Returns --curve-clients.
CLI::Option* add_curve_options(CLI::App& app, Config& c) {
    cli::add_keypair(app, "--curve-keypair", c.keypair,
                     "CURVE key pair of this collector (for --curve-server-key and "
                     "--curve-clients)");
    cli::add_public_key(app, "--curve-server-key", c.server_key,
                        "public key of the controllers without one of their own (EP=FILE); "
                        "switches CURVE on towards them");
    return cli::add_key_list(
        app, "--curve-clients", c.nginx_clients,
        "public keys of the nginx hosts allowed to connect (switches CURVE on for them), each "
        "optionally followed by the hosts it may report for");
}

// The rules between options, after parsing; "" when they hold.
std::string check_options(Config& c, const CLI::Option& clients) {
    std::string error;
    for (auto [option, eps] : {std::pair{"--controller-usage", &c.controller_usage},
                               std::pair{"--controller-publish", &c.controller_publish}}) {
        for (std::string& ep : *eps) {
            if (error.empty()) error = cli::split_keyed_endpoint(option, ep, c.controller_keys);
        }
    }
    if (error.empty()) error = check(c);
    // A list without keys would look like CURVE off (an empty list) and admit anyone.
    if (clients.count() > 0 && c.nginx_clients.empty())
        error = "--curve-clients: no key in " + clients.as<std::string>();
    return error;
}

}  // namespace

daemon::cli::Outcome<Config> parse_config(int argc, const char* const* argv) {
    Config c;
    CLI::App app(
        "grl-collector: one per zone; sums the reports of the zone's nginx for the "
        "controllers of its region and relays their instructions back (see "
        "docs/control-plane.md).",
        "grl-collector");
    cli::init(app,
              "--zone NAME --region NAME --controller-usage EP --controller-publish EP [options]");
    CLI::Option* name = add_fleet_options(app, c);
    add_timing_options(app, c);
    add_bounds(app, c);
    cli::add_text(app, "--metrics-bind", c.metrics_bind, "HOST:PORT",
                  "serve Prometheus /metrics here");
    cli::add_text(app, "--endpoints-file", c.endpoints_file, "PATH",
                  "write the bound endpoints here as JSON (after binding)");
    cli::add_log_level(app, c.log_level);
    CLI::Option* clients = add_curve_options(app, c);

    cli::Outcome<Config> out;
    if (!cli::parse(app, argc, argv, out.exit_code, out.text)) return out;
    if (std::string error = check_options(c, *clients); !error.empty()) {
        out.exit_code = cli::kUsageError;
        out.text = cli::usage_error(app, error);
        return out;
    }
    if (name->count() == 0) c.name = "collector-" + c.zone;
    if (clients->count() > 0) c.nginx_clients_file = clients->as<std::string>();
    out.config = std::move(c);
    return out;
}

}  // namespace grl::collector
