// A thin RAII layer over the ZeroMQ C API (cppzmq is not a dependency) for the daemons; what
// the nginx module does alike (frames, CURVE clients, handshake monitors) is grl_zmq's.
#pragma once

#include <zmq.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grl/zmq/socket.h"

namespace grl::daemon {

// ZeroMQ drops the connection of a peer that sends a bigger message (ZMQ_MAXMSGSIZE), so such
// a message can only be noticed, not counted. Receivers therefore accept up to 4 MiB at the
// transport and let the decoders refuse (and count) anything over the protocol's 1 MiB.
inline constexpr std::int64_t kTransportMaxBytes = 4 << 20;

class Context {
  public:
    Context();
    ~Context();  // zmq_ctx_term: every socket must be closed first
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    void* get() const { return ctx_; }

  private:
    void* ctx_;
};

class Socket {
  public:
    Socket(Context& ctx, int type);  // LINGER 0
    ~Socket();
    Socket(Socket&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
    Socket& operator=(Socket&&) = delete;
    Socket(const Socket&) = delete;
    void* get() const { return s_; }

    void set(int option, int value);
    void set(int option, std::int64_t value);
    void set(int option, std::string_view value);
    // Binds and returns the resolved endpoint (tcp://127.0.0.1:* becomes the real port).
    // Throws std::runtime_error naming the endpoint.
    std::string bind(const std::string& endpoint);
    void connect(const std::string& endpoint);

    // Sends without blocking; false when the message could not be queued (HWM, no peer).
    bool send(std::string_view body, bool more = false);
    bool send_frames(const std::vector<std::string_view>& frames);

    // grl::zmq::recv_frames() on this socket.
    std::size_t recv_frames(std::vector<zmq::Frame>& frames, std::size_t max_frames) {
        return zmq::recv_frames(s_, frames, max_frames);
    }
    // True when a message is pending (ZMQ_EVENTS): a batch stopped at its budget with more
    // to take.
    bool readable() const;

  private:
    void* s_;
};

// The current ZeroMQ error as text.
std::string zmq_error();

}  // namespace grl::daemon
