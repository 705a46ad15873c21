#include "grl/daemon/zmq.h"

#include <cerrno>
#include <stdexcept>

namespace grl::daemon {

::zmq::context_t make_context() {
    ::zmq::context_t ctx;
    ctx.set(::zmq::ctxopt::blocky, false);
    return ctx;
}

std::string bind(::zmq::socket_ref s, const std::string& endpoint) {
    try {
        s.bind(endpoint);
    } catch (const ::zmq::error_t& e) {
        throw std::runtime_error("cannot bind " + endpoint + ": " + e.what());
    }
    try {
        return s.get(::zmq::sockopt::last_endpoint);
    } catch (const ::zmq::error_t&) {
        return endpoint;
    }
}

void connect(::zmq::socket_ref s, const std::string& endpoint) {
    try {
        s.connect(endpoint);
    } catch (const ::zmq::error_t& e) {
        throw std::runtime_error("cannot connect to " + endpoint + ": " + e.what());
    }
}

bool send_frames(::zmq::socket_ref s, const std::vector<std::string_view>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
        const ::zmq::send_flags flags =
            i + 1 < frames.size() ? ::zmq::send_flags::dontwait | ::zmq::send_flags::sndmore
                                  : ::zmq::send_flags::dontwait;
        for (;;) {
            try {
                if (!s.send(::zmq::const_buffer(frames[i].data(), frames[i].size()), flags))
                    return false;  // EAGAIN: the queue is full or there is no peer
                break;
            } catch (const ::zmq::error_t& e) {
                if (e.num() != EINTR) return false;
            }
        }
    }
    return true;
}

bool readable(::zmq::socket_ref s) {
    return (s.get(::zmq::sockopt::events) & ZMQ_POLLIN) != 0;
}

}  // namespace grl::daemon
