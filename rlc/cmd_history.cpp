// Placeholder until the history commands land (branch rlc-history).
#include "commands.h"

namespace grl::rlc {
void add_history_commands(CLI::App&) {}
}  // namespace grl::rlc
