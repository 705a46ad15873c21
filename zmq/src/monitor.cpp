#include "grl/zmq/monitor.h"

#include <cstring>
#include <stdexcept>

namespace grl::zmq {

void monitor_handshakes(void* socket, const std::string& endpoint, bool failures) {
    int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    if (failures) {
        events |= ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                  ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    }
    if (zmq_socket_monitor(socket, endpoint.c_str(), events) != 0) {
        throw std::runtime_error("zmq_socket_monitor(" + endpoint +
                                 "): " + zmq_strerror(zmq_errno()));
    }
}

HandshakeEvent decode_monitor_event(std::string_view head, std::string_view address) {
    HandshakeEvent e;
    e.address.assign(address);
    if (head.size() < 6) return e;  // a failure of no known kind: logged as "failed (...)"
    std::uint16_t event = 0;
    std::memcpy(&event, head.data(), 2);
    std::memcpy(&e.value, head.data() + 2, 4);
    e.ok = event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        e.failure = HandshakeFailure::Refused;
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
        e.failure = e.value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                        ? HandshakeFailure::NoCurve
                        : HandshakeFailure::Protocol;
    }
    return e;
}

bool next_handshake_event(void* pair, std::vector<Frame>& frames, HandshakeEvent& event) {
    const std::size_t n = recv_frames(pair, frames, 2);
    if (n == 0) return false;
    event = decode_monitor_event(frames[0].view(), n >= 2 ? frames[1].view() : std::string_view());
    return true;
}

}  // namespace grl::zmq
