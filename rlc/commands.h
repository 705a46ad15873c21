// grl-rlc's subcommands, registered on one CLI11 app by main.cpp.
#pragma once

namespace CLI {
class App;
}

namespace grl::rlc {

// History: record (from the controllers), synth, import, prune.
void add_history_commands(CLI::App& app);
// Limits: run, serve, whatif, versions, diff, rollback.
void add_limits_commands(CLI::App& app);

}  // namespace grl::rlc
