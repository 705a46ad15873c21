// grl-rlc, the Rate Limit Configurator: records the fleet's traffic history and turns it
// into limits, rolled out shadow first (docs/rlc.md). main only wires the subcommands.
#include <CLI/CLI.hpp>

#include "commands.h"

#include <malloc.h>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    // A cycle reads history a slice at a time: each slice's samples (~6 MB per instance-month)
    // are freed and the next slice's allocated again. glibc would hand those blocks back to
    // the kernel (mmap above 128 KB-32 MB, heap trimmed above 2x that) and fault every page
    // in again: a third of a cycle's CPU (docs/rlc.md, "Measured"). Kept instead, the process
    // stays at one slice's peak (~340 MB at --slice 50, 5 weeks) between cycles of serve.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the most glibc documents
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
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
