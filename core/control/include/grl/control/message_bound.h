// The bound on one message's bytes at a bound endpoint (docs/security.md "Bounds"). libzmq
// bounds a frame (ZMQ_MAXMSGSIZE) and queues whole messages (the high-water mark counts them),
// but it keeps every frame of a message until its last one arrives, and the application sees
// none of them before: a peer that sends frames with the MORE flag and never a last one grows
// the daemon's memory without limit. The daemon therefore compares, per connection, the bytes
// libzmq has read from its socket (TCP_INFO) with the messages it took from it (ZMQ_SRCFD):
// a connection that has sent more than the bound since the daemon last took a message of it
// holds one message that large, and is cut. Pure: the daemon feeds in the connections, the
// messages taken and the bytes read.
#pragma once

#include <cstdint>
#include <unordered_map>

namespace grl {

class MessageBound {
  public:
    // `bytes`: what one connection may send between two messages the daemon takes, while the
    // daemon keeps up; `behind_bytes` while messages wait to be taken (a connection's queued
    // whole messages count then too). Without takes (an endpoint the daemon does not read,
    // e.g. a publisher's subscriptions), `bytes` bounds all a connection sends.
    MessageBound(std::uint64_t bytes, std::uint64_t behind_bytes)
        : bytes_(bytes), behind_bytes_(behind_bytes) {}

    void opened(int fd);
    void closed(int fd);
    void taken(int fd);  // the daemon took a message the connection sent

    // `read`: the bytes read from the connection so far; `behind`: messages wait to be taken.
    // True when the connection passed its bound: cut it, then closed(). A connection counts
    // from 0 (its first byte) until a message of it is taken.
    bool over(int fd, std::uint64_t read, bool behind);
    // What the last over() found the connection had sent since its last message.
    std::uint64_t last_excess() const { return last_excess_; }
    std::uint64_t bytes() const { return bytes_; }
    std::uint64_t behind_bytes() const { return behind_bytes_; }

    template <class Fn>
    void each(Fn fn) const {  // fn(fd) for every open connection; fn may call over() only
        for (const auto& [fd, c] : conns_) fn(fd);
    }

  private:
    struct Conn {
        std::uint64_t base = 0;  // bytes read when the daemon last took one of its messages
        bool taken = false;      // a message was taken since the last over()
    };
    std::uint64_t bytes_, behind_bytes_;
    std::unordered_map<int, Conn> conns_;
    std::uint64_t last_excess_ = 0;
};

}  // namespace grl
