// Command lines of grl-collector, grl-controller and grlctl through CLI11: each option is bound
// to a field of the program's config struct, values go through the parsers of grl/common/parse.h
// (so a bad value reads `--interval: invalid duration "5x"`), and a parse ends in an Outcome: a
// config to run with, or a text to print and an exit status (0 after --help, 2 after a usage
// error).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "grl/daemon/curve.h"
#include "grl/daemon/log.h"

namespace grl::daemon::cli {

constexpr int kUsageError = 2;  // exit status for every usage error

template <typename Config>
struct Outcome {
    std::optional<Config> config;  // set: run with it
    int exit_code = 0;             // otherwise: 0 after --help, kUsageError after an error
    std::string text;              // otherwise: the help (stdout) or the error (stderr)
};

// Sets grl's help layout on `app` (and the subcommands added after it): the usage line reads
// "usage: PROGRAM SYNOPSIS", options are listed with their metavar, help and default.
void init(CLI::App& app, const std::string& synopsis);

// Parses argv into the fields the options are bound to. Returns true when the program should go
// on; false with `exit_code` and `text` set after --help or a usage error.
bool parse(CLI::App& app, int argc, const char* const* argv, int& exit_code, std::string& text);

// The message of a usage error found after parsing (a cross-option rule).
std::string usage_error(const CLI::App& app, const std::string& message);

// Durations as operators write them ("250ms", "1s", "30m"; a bare number is seconds).
std::string format_duration(std::uint64_t ms);
std::string format_size(std::uint64_t bytes);

// Options bound to a field. Each help ends with the default, taken from the field's value
// when the option is added (so set the default in the config struct, not here).
CLI::Option* add_text(CLI::App& app, const std::string& name, std::string& field,
                      const std::string& metavar, const std::string& help);
// A name (zone, region, controller...): 1-63 of [A-Za-z0-9_.:-].
CLI::Option* add_name(CLI::App& app, const std::string& name, std::string& field,
                      const std::string& help);
// Repeatable: every occurrence adds one value.
CLI::Option* add_list(CLI::App& app, const std::string& name, std::vector<std::string>& field,
                      const std::string& metavar, const std::string& help);
// A duration in milliseconds within [min_ms, max_ms].
CLI::Option* add_duration(CLI::App& app, const std::string& name, std::uint64_t& field_ms,
                          std::uint64_t min_ms, std::uint64_t max_ms, const std::string& help);
// A whole number within [min, max].
CLI::Option* add_count(CLI::App& app, const std::string& name, std::uint32_t& field,
                       std::uint32_t min, std::uint32_t max, const std::string& help,
                       const std::string& metavar = "N");
// A size in bytes ("512k", "64m", as nginx writes them) within [min, max].
CLI::Option* add_size(CLI::App& app, const std::string& name, std::uint64_t& field,
                      std::uint64_t min, std::uint64_t max, const std::string& help);
CLI::Option* add_log_level(CLI::App& app, LogLevel& field);
// --usage-version 1|2: the protocol version of the usage a daemon sends (docs/protocol.md
// "Versions"); `what` names the messages ("zone usage", "region usage").
CLI::Option* add_usage_version(CLI::App& app, std::uint32_t& field, const std::string& what);

// CURVE key files, read when the option is parsed (a file that cannot be read is a usage error
// naming the option and the file).
CLI::Option* add_keypair(CLI::App& app, const std::string& name, std::optional<KeyPair>& field,
                         const std::string& help);
CLI::Option* add_public_key(CLI::App& app, const std::string& name, std::string& field,
                            const std::string& help);
// A list of authorised public keys (possibly empty).
CLI::Option* add_authorized(CLI::App& app, const std::string& name, std::set<std::string>& field,
                            const std::string& help);
// The same, with the names each key may speak for (grl/curve_keys.h KeyList).
CLI::Option* add_key_list(CLI::App& app, const std::string& name, curve::KeyList& field,
                          const std::string& help);

// `EP=FILE` (an option's value naming a peer and the file of its CURVE public key): leaves the
// endpoint in `value` and puts the key read from FILE into `keys[endpoint]`; a value without
// '=' is left alone (tcp:// and ipc:// endpoints have no '=' of their own). Returns the error
// naming `option` and the file, or "".
std::string split_keyed_endpoint(const std::string& option, std::string& value,
                                 std::map<std::string, std::string>& keys);

// True for an endpoint only this machine can reach: tcp:// on a loopback address (127.0.0.0/8,
// ::1, localhost), ipc:// and inproc://.
bool local_endpoint(const std::string& endpoint);

// Without CURVE, whoever reaches a bound endpoint can speak for any host, zone or operator. The
// error for the first of `binds` (option name, endpoint) that other machines can reach, unless
// `insecure` (--insecure) says the operator accepts that; "" otherwise.
std::string check_exposure(const std::vector<std::pair<std::string, std::string>>& binds,
                           bool insecure);

// The validators behind the options above, for options bound otherwise. Each leaves the value in
// a form CLI11 converts to the field (a duration becomes its milliseconds).
CLI::Validator duration_validator(std::uint64_t min_ms, std::uint64_t max_ms);
CLI::Validator size_validator(std::uint64_t min, std::uint64_t max);
CLI::Validator count_validator(std::uint64_t min, std::uint64_t max);
CLI::Validator name_validator();
CLI::Validator limit_validator();  // a rate or 0 (grl/parse.h parse_limit), to milli-r/s

}  // namespace grl::daemon::cli
