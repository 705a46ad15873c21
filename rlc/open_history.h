// Where `run`, `serve` and `whatif` read history from. One function, defined in
// open_history.cpp alone, so that wiring in a history source is a one-line change there.
#pragma once

#include <memory>
#include <string>

#include "history.h"

namespace grl::rlc {

// Opens the history at `path` (the store of rlc.yaml or --store). Throws
// std::runtime_error naming the path when it cannot.
std::unique_ptr<HistorySource> open_history(const std::string& path);

}  // namespace grl::rlc
