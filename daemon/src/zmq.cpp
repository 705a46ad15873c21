#include "grl/daemon/zmq.h"

#include <cerrno>
#include <stdexcept>

namespace grl::daemon {

std::string zmq_error() {
    return zmq_strerror(zmq_errno());
}

Context::Context() : ctx_(zmq_ctx_new()) {
    if (ctx_ == nullptr) throw std::runtime_error("zmq_ctx_new: " + zmq_error());
}

Context::~Context() {
    while (zmq_ctx_term(ctx_) != 0 && zmq_errno() == EINTR) {
    }
}

Socket::Socket(Context& ctx, int type) : s_(zmq_socket(ctx.get(), type)) {
    if (s_ == nullptr) throw std::runtime_error("zmq_socket: " + zmq_error());
    set(ZMQ_LINGER, 0);
}

Socket::~Socket() {
    if (s_) zmq_close(s_);
}

void Socket::set(int option, int value) {
    if (zmq_setsockopt(s_, option, &value, sizeof(value)) != 0) {
        throw std::runtime_error("zmq_setsockopt(" + std::to_string(option) + "): " + zmq_error());
    }
}

void Socket::set(int option, std::int64_t value) {
    if (zmq_setsockopt(s_, option, &value, sizeof(value)) != 0) {
        throw std::runtime_error("zmq_setsockopt(" + std::to_string(option) + "): " + zmq_error());
    }
}

void Socket::set(int option, std::string_view value) {
    if (zmq_setsockopt(s_, option, value.data(), value.size()) != 0) {
        throw std::runtime_error("zmq_setsockopt(" + std::to_string(option) + "): " + zmq_error());
    }
}

std::string Socket::bind(const std::string& endpoint) {
    if (zmq_bind(s_, endpoint.c_str()) != 0) {
        throw std::runtime_error("cannot bind " + endpoint + ": " + zmq_error());
    }
    char buf[256];
    std::size_t len = sizeof(buf);
    if (zmq_getsockopt(s_, ZMQ_LAST_ENDPOINT, buf, &len) != 0) return endpoint;
    return std::string(buf, len > 0 && buf[len - 1] == '\0' ? len - 1 : len);
}

void Socket::connect(const std::string& endpoint) {
    if (zmq_connect(s_, endpoint.c_str()) != 0) {
        throw std::runtime_error("cannot connect to " + endpoint + ": " + zmq_error());
    }
}

bool Socket::send(std::string_view body, bool more) {
    int flags = ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0);
    while (zmq_send(s_, body.data(), body.size(), flags) < 0) {
        if (zmq_errno() != EINTR) return false;
    }
    return true;
}

bool Socket::send_frames(const std::vector<std::string_view>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
        if (!send(frames[i], i + 1 < frames.size())) return false;
    }
    return true;
}

bool Socket::readable() const {
    int events = 0;
    std::size_t len = sizeof(events);
    return zmq_getsockopt(s_, ZMQ_EVENTS, &events, &len) == 0 && (events & ZMQ_POLLIN) != 0;
}

}  // namespace grl::daemon
