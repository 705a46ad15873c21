#include "open_history.h"

#include <stdexcept>

namespace grl::rlc {

std::unique_ptr<HistorySource> open_history(const std::string& path) {
    // The SQLite history store (rlc/store.h, branch rlc-history) is not in this branch:
    // at merge this becomes `return std::make_unique<Store>(path, ...);`.
    throw std::runtime_error(
        path +
        ": cannot read history: this grl-rlc was built without the history store "
        "(rlc/store.h, branch rlc-history)");
}

}  // namespace grl::rlc
