#include "grl/zmq/monitor.h"

#include <cstring>
#include <stdexcept>

namespace grl::zmq {

void monitor_events(void* socket, const std::string& endpoint, int events) {
    if (zmq_socket_monitor(socket, endpoint.c_str(), events) != 0) {
        throw std::runtime_error("zmq_socket_monitor(" + endpoint +
                                 "): " + zmq_strerror(zmq_errno()));
    }
}

MonitorEvent decode_monitor_frames(std::string_view head, std::string_view address) {
    MonitorEvent e;
    e.address = address;
    if (head.size() < 6) return e;
    std::memcpy(&e.event, head.data(), 2);
    std::memcpy(&e.value, head.data() + 2, 4);
    return e;
}

bool next_monitor_event(void* pair, std::vector<Frame>& frames, MonitorEvent& event) {
    const std::size_t n = recv_frames(pair, frames, 2);
    if (n == 0) return false;
    event = decode_monitor_frames(frames[0].view(), n >= 2 ? frames[1].view() : std::string_view());
    return true;
}

void monitor_handshakes(void* socket, const std::string& endpoint, bool failures) {
    int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    if (failures) {
        events |= ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                  ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    }
    monitor_events(socket, endpoint, events);
}

HandshakeEvent handshake_event(const MonitorEvent& m) {
    HandshakeEvent e;
    e.address.assign(m.address);
    e.value = m.value;
    e.ok = m.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    if (m.event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        e.failure = HandshakeFailure::Refused;
    } else if (m.event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
        e.failure = m.value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                        ? HandshakeFailure::NoCurve
                        : HandshakeFailure::Protocol;
    }
    return e;
}

HandshakeEvent decode_monitor_event(std::string_view head, std::string_view address) {
    return handshake_event(decode_monitor_frames(head, address));
}

bool next_handshake_event(void* pair, std::vector<Frame>& frames, HandshakeEvent& event) {
    MonitorEvent m;
    if (!next_monitor_event(pair, frames, m)) return false;
    event = handshake_event(m);
    return true;
}

}  // namespace grl::zmq
