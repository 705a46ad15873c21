// grlctl's command line (docs/control-plane.md, "grlctl"): a subcommand with its arguments,
// turned into the admin_request it sends, and the options of the connection.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "grl/daemon/cli.h"
#include "grl/daemon/curve.h"
#include "grl/wire/wire_control.h"

namespace grl::grlctl {

enum class Command { Buckets, Show, Status, Set, Clear, Add, Remove, Keygen, Top, Keys, Explain };
const char* to_string(Command c);  // as typed ("buckets" also for its alias "list")

struct Config {
    Command command = Command::Status;
    // Every command but keygen: what to ask (seq and ts_ms are set when it is sent).
    wire::AdminRequest request;
    std::string keygen_file;                          // keygen: where to write the key pair
    std::string explain_key;                          // explain: the API key asked about
    std::uint64_t top_interval_ms = 1000;             // top: refresh period
    std::uint32_t top_count = 0;                      // top: screens to show (0: until Ctrl-C)
    std::string controller = "tcp://127.0.0.1:7203";  // the admin endpoint
    bool json = false;
    std::uint64_t timeout_ms = 3000;
    std::optional<daemon::KeyPair> keypair;  // CURVE: both or neither
    std::string server_key;
};

// `env_controller` ($GRL_CONTROLLER, may be null) replaces the default --controller.
daemon::cli::Outcome<Config> parse_config(int argc, const char* const* argv,
                                          const char* env_controller);

}  // namespace grl::grlctl
