// grl-rlc, the Rate Limit Configurator: records the fleet's traffic history and turns it
// into limits, rolled out shadow first (docs/rlc.md). main only wires the subcommands.
#include <CLI/CLI.hpp>

#include "commands.h"

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    try {
        CLI::App app{"grl-rlc: limits that follow real traffic (docs/rlc.md)"};
        app.require_subcommand(1);
        grl::rlc::add_history_commands(app);
        grl::rlc::add_limits_commands(app);
        CLI11_PARSE(app, argc, argv);
        return 0;
    } catch (const std::exception& e) {  // the commands report their own errors; a last guard
        std::fprintf(stderr, "grl-rlc: %s\n", e.what());
        return 1;
    }
}
