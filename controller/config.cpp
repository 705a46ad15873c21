#include "config.h"

#include <cmath>

namespace grl::controller {

std::string check(const Config& c) {
    if (c.opts.ttl_ms < c.opts.interval_ms) return "--ttl must be at least --interval";
    for (const std::string& p : c.peers) {
        if (c.keypair && peer_key(c, p).empty())
            return "--peer " + p + " with CURVE (--curve-keypair) needs its public key (--peer " +
                   p + "=FILE) or --curve-server-key";
        if (!c.keypair && c.peer_keys.count(p) > 0)
            return "--peer " + p + "=FILE (its public key) needs --curve-keypair";
    }
    if (!c.keypair) {
        return daemon::cli::check_exposure({{"--usage-bind", c.usage_bind},
                                            {"--publish-bind", c.publish_bind},
                                            {"--admin-bind", c.admin_bind}},
                                           c.insecure);
    }
    return {};
}

const std::string& peer_key(const Config& c, const std::string& endpoint) {
    auto it = c.peer_keys.find(endpoint);
    return it == c.peer_keys.end() ? c.server_key : it->second;
}

namespace {

namespace cli = daemon::cli;

// The options in --help's order, a section each.
void add_fleet_options(CLI::App& app, Config& c) {
    cli::add_name(app, "--region", c.opts.region, "region this controller serves")->required();
    cli::add_name(app, "--name", c.opts.name,
                  "controller name (\"source\" of its messages; unique in the fleet)")
        ->required();
    cli::add_text(app, "--usage-bind", c.usage_bind, "EP",
                  "endpoint collectors send zone usage to (PULL)");
    cli::add_text(app, "--publish-bind", c.publish_bind, "EP",
                  "endpoint collectors and peer controllers subscribe to (PUB)");
    cli::add_text(app, "--admin-bind", c.admin_bind, "EP", "endpoint grlctl talks to (ROUTER)");
    app.add_flag("--insecure", c.insecure,
                 "allow binds beyond loopback without CURVE (--curve-keypair): anyone who "
                 "reaches them can send usage for any zone or change limits");
    cli::add_list(app, "--peer", c.peers, "EP[=FILE]",
                  "publish endpoint of another controller (same region: active-active; other "
                  "regions: global buckets); with CURVE, =FILE names the file of its own public "
                  "key (default: --curve-server-key)");
}

CLI::Option* add_control_options(CLI::App& app, Config& c, std::uint32_t& fast_attack_percent) {
    cli::add_duration(app, "--interval", c.opts.interval_ms, 50, 60000,
                      "how often ratios are computed and published");
    CLI::Option* ttl = app.add_option("--ttl", c.opts.ttl_ms,
                                      "validity of published ratios (default: 3 x interval)")
                           ->option_text("DURATION")
                           ->transform(cli::duration_validator(1, 24ULL * 3600000));
    cli::add_count(app, "--window", c.opts.window, 1, 100, "intervals averaged for the ratio");
    fast_attack_percent = static_cast<std::uint32_t>(std::lround(c.opts.fast_attack * 100.0));
    cli::add_count(app, "--fast-attack", fast_attack_percent, 0, 1000,
                   "a sample this much above the window's mean is a surge, used alone (0: off, and "
                   "no fast release under the limit)",
                   "PERCENT");
    cli::add_usage_version(app, c.usage_version, "region usage");
    cli::add_count(app, "--stale-intervals", c.opts.stale_intervals, 1, 1000000,
                   "a zone or peer silent for N intervals leaves the sums");
    cli::add_duration(app, "--peer-hold", c.opts.peer_hold_ms, 0, 24ULL * 3600000,
                      "a region whose peers all went silent (a partition) keeps its last usage "
                      "in global sums this long (0: leaves with its peers)");
    cli::add_duration(app, "--max-skew", c.opts.max_skew_ms, 1000, 3600000,
                      "refuse usage and overrides stamped further ahead of this clock (they would "
                      "win over every genuine message)");
    return ttl;
}

// Bounds on what the network can make the controller hold.
void add_bounds(CLI::App& app, Config& c) {
    cli::add_count(app, "--max-zone-hosts", c.opts.max_zone_hosts, 1, 100000000,
                   "refuse a zone usage claiming more hosts");
    cli::add_count(app, "--max-region-hosts", c.opts.max_region_hosts, 1, 1000000000,
                   "refuse a region usage claiming more hosts");
    cli::add_count(app, "--max-zones", c.opts.max_zones, 1, 1000000,
                   "zones held at once; usage from a new zone is refused while full");
    cli::add_count(
        app, "--max-connections", c.max_connections, 1, 1000000,
        "handshaken connections each bound endpoint (usage, publish, admin) holds at most; a "
        "new one's handshake is refused while it is full "
        "(connections_refused_total)");
    cli::add_count(app, "--max-peers", c.opts.max_peers, 1, 100000,
                   "peer controllers held at once; usage from a new peer is refused while full");
    cli::add_count(app, "--max-bucket-names", c.opts.max_bucket_names, 1, 10000000,
                   "distinct bucket names in the usage held; a usage naming a new one is refused "
                   "while full");
    cli::add_count(app, "--max-instance-keys", c.opts.max_instance_keys, 1, 1000000,
                   "keys a keyed bucket instance holds sums for; new keys are refused while full");
}

void add_limits_options(CLI::App& app, Config& c, std::string& password_file) {
    cli::add_text(app, "--state-file", c.state_file, "FILE",
                  "keep overrides, run-time buckets and quota use here across restarts (written "
                  "atomically at each change; quota use alone at most every 5 s)");
    cli::add_text(app, "--limits", c.limits_file, "FILE|etcd://HOST:PORT/KEY",
                  "YAML limits file (reloaded on SIGHUP and when it changes), or an etcd v3 key "
                  "holding it (watched)");
    cli::add_text(app, "--etcd-ca", c.etcd_access.ca_file, "FILE",
                  "CA certificate(s) that signed etcd's (etcds://; default: the system's)");
    cli::add_text(app, "--etcd-cert", c.etcd_access.cert_file, "FILE",
                  "client certificate for etcd (etcds://, with --etcd-key)");
    cli::add_text(app, "--etcd-key", c.etcd_access.key_file, "FILE",
                  "the client certificate's private key");
    cli::add_text(app, "--etcd-user", c.etcd_access.user, "NAME",
                  "etcd user (etcd's authentication; with --etcd-password-file)");
    cli::add_text(app, "--etcd-password-file", password_file, "FILE",
                  "file whose first line is the etcd user's password");
    cli::add_duration(app, "--limits-poll", c.limits_poll_ms, 0, 3600000,
                      "how often the limits file is checked for changes (0: on SIGHUP only)");
}

struct CurveOptions {
    CLI::Option *keypair, *server_key, *clients, *admin_clients;
};

CurveOptions add_curve_options(CLI::App& app, Config& c) {
    CurveOptions k;
    k.keypair =
        cli::add_keypair(app, "--curve-keypair", c.keypair,
                         "CURVE key pair of this controller (switches CURVE on for every socket)");
    k.server_key =
        cli::add_public_key(app, "--curve-server-key", c.server_key,
                            "public key of the peer controllers without one of their own "
                            "(--peer EP=FILE)");
    k.clients = cli::add_key_list(
        app, "--curve-clients", c.clients,
        "public keys allowed to send usage and to subscribe (collectors, peers), each "
        "optionally followed by the zones it may send usage for");
    k.admin_clients =
        cli::add_authorized(app, "--curve-admin-clients", c.admin_clients,
                            "public keys allowed on the admin endpoint (operators' keys, its "
                            "own list: without it no one is admitted there over CURVE)");
    return k;
}

// --limits etcd://...: the URL and the --etcd-* options that go with it.
std::string check_etcd(Config& c, const std::string& password_file) {
    std::string error;
    c.limits_etcd = daemon::etcd::parse_url(c.limits_file, error);
    if (!c.limits_etcd) {
        error = "--limits: " + error;
    } else if (c.etcd_access.user.empty() != password_file.empty()) {
        error = "--etcd-user and --etcd-password-file go together";
    } else if (c.etcd_access.cert_file.empty() != c.etcd_access.key_file.empty()) {
        error = "--etcd-cert and --etcd-key go together";
    } else if (!c.limits_etcd->tls &&
               !(c.etcd_access.ca_file.empty() && c.etcd_access.cert_file.empty())) {
        error = "--etcd-ca and --etcd-cert need an etcds:// URL in --limits";
    } else if (!password_file.empty() &&
               !daemon::etcd::read_password_file(password_file, c.etcd_access.password, error)) {
        error = "--etcd-password-file: " + error;
    } else {
        error = check(c);
    }
    return error;
}

// The rules between options, after parsing; "" when they hold.
std::string check_options(Config& c, const CurveOptions& k, const std::string& password_file) {
    // Given, not their contents: an empty key list is a valid (closed) list.
    std::string error;
    for (std::string& p : c.peers) {
        if (error.empty()) error = cli::split_keyed_endpoint("--peer", p, c.peer_keys);
    }
    if (!error.empty()) return error;  // a bad --peer EP=FILE, reported as it is
    if (k.keypair->count() > 0 && k.clients->count() == 0)
        return "--curve-keypair needs --curve-clients";
    if (k.keypair->count() == 0 &&
        k.clients->count() + k.server_key->count() + k.admin_clients->count() > 0) {
        return "CURVE options (--curve-clients, --curve-server-key, --curve-admin-clients) need "
               "--curve-keypair";
    }
    if (daemon::etcd::is_url(c.limits_file)) return check_etcd(c, password_file);
    if (!c.etcd_access.user.empty() || !c.etcd_access.ca_file.empty() ||
        !c.etcd_access.cert_file.empty() || !password_file.empty()) {
        return "--etcd-* options need an etcd:// or etcds:// URL in --limits";
    }
    return check(c);
}

}  // namespace

daemon::cli::Outcome<Config> parse_config(int argc, const char* const* argv) {
    Config c;
    CLI::App app(
        "grl-controller: one or more per region; computes drop ratios from the usage "
        "its collectors send and publishes them (see docs/control-plane.md).",
        "grl-controller");
    cli::init(app, "--region NAME --name NAME [options]");
    add_fleet_options(app, c);
    std::uint32_t fast_attack_percent = 0;
    CLI::Option* ttl = add_control_options(app, c, fast_attack_percent);
    add_bounds(app, c);
    std::string password_file;
    add_limits_options(app, c, password_file);
    cli::add_text(app, "--metrics-bind", c.metrics_bind, "HOST:PORT",
                  "serve Prometheus /metrics and the dashboard (/) here");
    cli::add_text(app, "--endpoints-file", c.endpoints_file, "PATH",
                  "write the bound endpoints here as JSON (after binding)");
    cli::add_log_level(app, c.log_level);
    const CurveOptions k = add_curve_options(app, c);

    cli::Outcome<Config> out;
    if (!cli::parse(app, argc, argv, out.exit_code, out.text)) return out;
    c.opts.fast_attack = fast_attack_percent / 100.0;
    if (ttl->count() == 0) c.opts.ttl_ms = 3 * c.opts.interval_ms;
    if (std::string error = check_options(c, k, password_file); !error.empty()) {
        out.exit_code = cli::kUsageError;
        out.text = cli::usage_error(app, error);
        return out;
    }
    if (k.clients->count() > 0) c.clients_file = k.clients->as<std::string>();
    if (k.admin_clients->count() > 0) c.admin_clients_file = k.admin_clients->as<std::string>();
    out.config = std::move(c);
    return out;
}

}  // namespace grl::controller
