// grl-rlc's subcommands, registered on one CLI11 app by main.cpp.
#pragma once

#include <string>
#include <vector>

#include "record.h"

namespace CLI {
class App;
}

namespace grl::rlc {

// The recording options `record` and `serve` share, as given on the command line.
struct RecordArgs {
    std::string interval = "60s", poll = "1s", retention = "35d", rollup_after;
    std::vector<std::string> controllers;
};
// Registers them on `c` (--controller required for `record`, optional for `serve`), prefixing
// the recording-only names with `prefix` ("" for record, "record-" for serve).
void add_record_args(CLI::App* c, RecordArgs& a, bool controllers_required,
                     const std::string& prefix);
// Checks them (exit status 2 naming the option on error) into the recorder's options.
RecordOptions to_record_options(const std::string& command, const RecordArgs& a,
                                const std::string& prefix);

// History: record (from the controllers), synth, import, prune.
void add_history_commands(CLI::App& app);
// Limits: run, serve, whatif, versions, diff, rollback.
void add_limits_commands(CLI::App& app);

}  // namespace grl::rlc
