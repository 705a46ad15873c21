// grl-controller's configuration and its command line (docs/control-plane.md, "Command lines").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grl/control/control.h"
#include "grl/daemon/cli.h"
#include "grl/daemon/curve.h"
#include "grl/daemon/etcd.h"
#include "grl/daemon/log.h"

namespace grl::controller {

struct Config {
    control::Options opts;
    // Loopback by default: other machines' collectors and peers need CURVE or --insecure.
    std::string usage_bind = "tcp://127.0.0.1:7201";
    std::string publish_bind = "tcp://127.0.0.1:7202";
    std::string admin_bind = "tcp://127.0.0.1:7203";
    bool insecure = false;           // --insecure: bind beyond loopback without CURVE
    std::vector<std::string> peers;  // other controllers' publish endpoints
    // "v" of the region usage sent (--usage-version): 1 while some peer predates v 2.
    std::uint32_t usage_version = 2;
    // With CURVE: a peer's own public key (`--peer EP=FILE`), by endpoint; a peer without
    // one is checked against `server_key`.
    std::map<std::string, std::string> peer_keys;
    std::string limits_file;                       // empty: none; a path, or etcd://HOST:PORT/KEY
    std::optional<daemon::etcd::Url> limits_etcd;  // set when limits_file is an etcd URL
    daemon::etcd::Access etcd_access;              // TLS files and user for a secured etcd
    std::string state_file;                        // overrides kept across restarts; empty: none
    std::uint64_t limits_poll_ms = 1000;
    std::string metrics_bind;
    std::string endpoints_file;
    // Connections each bound endpoint (usage, publish, admin) holds at most; a new one's
    // handshake is refused while it is full (grl/connection_limit.h).
    std::uint32_t max_connections = 4096;
    daemon::LogLevel log_level = daemon::LogLevel::Info;
    // CURVE: `keypair` switches it on for every socket; connections to peers need their own
    // key (`peer_keys`) or `server_key`; `clients` may connect to the usage and publish sockets,
    // `admin_clients` (a list of its own: operators, not collectors) to the admin socket, which
    // admits no one over CURVE without it. `clients`: each key with the zones it may send usage for
    // (none listed: the first).
    std::optional<daemon::KeyPair> keypair;
    std::string server_key;
    curve::KeyList clients;
    std::set<std::string> admin_clients;
    // The files of the two lists, read again on SIGHUP ("": not given).
    std::string clients_file, admin_clients_file;
};

// The rules between fields (a TTL shorter than the interval, peers over CURVE without their
// key): the first one `c` breaks, or "" when it keeps them all.
std::string check(const Config& c);

// The public key a connection to peer `endpoint` checks (its own, else --curve-server-key).
const std::string& peer_key(const Config& c, const std::string& endpoint);

// grl-controller's command line into a Config (key files read), or --help, or a usage error.
daemon::cli::Outcome<Config> parse_config(int argc, const char* const* argv);

}  // namespace grl::controller
