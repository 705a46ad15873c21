// Placeholder until the limits commands land (branch rlc-limits).
#include "commands.h"

namespace grl::rlc {
void add_limits_commands(CLI::App&) {}
}  // namespace grl::rlc
