#include "grl/control/message_bound.h"

namespace grl {

void MessageBound::opened(int fd) {
    conns_[fd] = Conn{};  // all it sends counts, from its greeting on
}

void MessageBound::closed(int fd) {
    conns_.erase(fd);
}

void MessageBound::taken(int fd) {
    auto it = conns_.find(fd);
    if (it != conns_.end()) it->second.taken = true;
}

bool MessageBound::over(int fd, std::uint64_t read, bool behind) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return false;  // not opened (or closed): nothing to bound
    Conn& c = it->second;
    // A message taken since the last look ends what came before it: the next one starts here
    // (an underestimate by what arrived between the take and now, at most one look's worth).
    // Read going back is another connection on a reused descriptor: it starts afresh.
    if (c.taken || read < c.base) {
        c = Conn{read, false};
        return false;
    }
    last_excess_ = read - c.base;
    return last_excess_ > (behind ? behind_bytes_ : bytes_);
}

}  // namespace grl
