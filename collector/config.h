// grl-collector's configuration and its command line (docs/control-plane.md, "Command lines").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grl/daemon/cli.h"
#include "grl/daemon/curve.h"
#include "grl/daemon/log.h"
#include "grl/control/rates.h"

namespace grl::collector {

struct Config {
    std::string name;  // "source" of zone_usage; parse_config() makes it collector-<zone>
    std::string zone;
    std::string region;
    // Loopback by default: other machines' nginx need CURVE (--curve-clients) or --insecure.
    std::string report_bind = "tcp://127.0.0.1:7101";
    std::string publish_bind = "tcp://127.0.0.1:7102";
    bool insecure = false;                        // --insecure: bind beyond loopback without CURVE
    std::vector<std::string> controller_usage;    // controllers' usage endpoints
    std::vector<std::string> controller_publish;  // controllers' publish endpoints
    std::uint64_t interval_ms = 1000;
    // Reports are taken off the socket in batches this often rather than one wakeup per
    // report (0: as they arrive). Rates use the senders' clocks, so this costs no accuracy.
    std::uint64_t batch_ms = 10;
    // Connections each bound endpoint (report, publish) holds at most (one per nginx each);
    // a new one's handshake is refused while it is full (grl/connection_limit.h).
    std::uint32_t max_connections = 4096;
    // "v" of the zone usage sent (--usage-version): 1 while some controller predates v 2.
    std::uint32_t usage_version = 2;
    rates::Options rates;
    std::string metrics_bind;    // host:port, empty: no /metrics
    std::string endpoints_file;  // written after binding, empty: none
    daemon::LogLevel log_level = daemon::LogLevel::Info;
    // CURVE: `keypair` switches it on towards the controllers (needs `server_key`);
    // `nginx_clients` (non-empty) switches it on for the sockets nginx connects to; each key
    // with the hosts it may report for (none listed: the first it reports for).
    std::optional<daemon::KeyPair> keypair;
    std::string server_key;
    // A controller's own public key (`--controller-usage EP=FILE`, `--controller-publish
    // EP=FILE`), by endpoint; one without is checked against `server_key`.
    std::map<std::string, std::string> controller_keys;
    curve::KeyList nginx_clients;
    std::string nginx_clients_file;  // read again on SIGHUP
};

// True when the collector talks CURVE to its controllers.
bool curve_to_controllers(const Config& c);
// The public key a connection to controller endpoint `ep` checks.
const std::string& controller_key(const Config& c, const std::string& ep);

// The rules between options (CURVE options that need each other): the first one `c` breaks,
// or "" when it keeps them all.
std::string check(const Config& c);

// grl-collector's command line into a Config (key files read), or --help, or a usage error.
daemon::cli::Outcome<Config> parse_config(int argc, const char* const* argv);

}  // namespace grl::collector
