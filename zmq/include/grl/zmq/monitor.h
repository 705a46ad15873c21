// The events of a ZeroMQ socket, from a socket monitor (zmq_socket_monitor): how the nginx
// module's reporter and the daemons (HandshakeWatch, EndpointLimit) start one and read its
// events, decoded here only, and how a handshake failure is put into words
// (grl/zmq/handshake.h decides what to do about them).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grl/zmq/socket.h"
#include "grl/zmq/handshake.h"

namespace grl::zmq {

// Makes `socket` publish `events` (ZMQ_EVENT_* bits) to the inproc `endpoint` (a PAIR socket
// then connects there to read them). Throws std::runtime_error naming the endpoint.
void monitor_events(void* socket, const std::string& endpoint, int events);

// One monitor event as libzmq sends it (version 1 of the monitor): its number, its value (by
// event: the connection's file descriptor for ACCEPTED and DISCONNECTED, 0 for
// HANDSHAKE_SUCCEEDED, a ZAP status, a protocol error or an errno for a failure) and the
// endpoint it names (for a bound socket, the bound endpoint, not the peer).
struct MonitorEvent {
    std::uint16_t event = 0;  // 0: a head too short (libzmq never sends one)
    std::uint32_t value = 0;
    std::string_view address;  // into the frames it was decoded from
};

// Decodes one monitor message: `head` is its first frame (event number, 16 bits, then the
// value, 32 bits, in host order), `address` its second.
MonitorEvent decode_monitor_frames(std::string_view head, std::string_view address);

// Reads the next queued event of a monitor's PAIR socket without blocking; false when none.
// `frames` is the caller's, reused from call to call (the event's address points into it).
bool next_monitor_event(void* pair, std::vector<Frame>& frames, MonitorEvent& event);

// Makes `socket` publish its handshake events to the inproc `endpoint` (a PAIR socket then
// connects there to read them): successes always, failures too when `failures`. Throws
// std::runtime_error naming the endpoint.
void monitor_handshakes(void* socket, const std::string& endpoint, bool failures);

// One handshake event.
struct HandshakeEvent {
    bool ok = false;  // ZMQ_EVENT_HANDSHAKE_SUCCEEDED
    HandshakeFailure failure = HandshakeFailure::Other;
    std::uint32_t value = 0;  // ZAP status, protocol error or errno (see HandshakeFailure)
    std::string address;      // the endpoint, as libzmq names it
};

// The handshake event of a decoded monitor event (an event of another kind is a failure of
// no known kind: check MonitorEvent::event first).
HandshakeEvent handshake_event(const MonitorEvent& m);

// A handshake event from one monitor message (decode_monitor_frames). A head too short is an
// event of no kind (neither a success nor a known failure), as libzmq never sends one.
HandshakeEvent decode_monitor_event(std::string_view head, std::string_view address);

// Reads the next queued event of the monitor's PAIR socket without blocking; false when none.
// `frames` is the caller's, reused from call to call.
bool next_handshake_event(void* pair, std::vector<Frame>& frames, HandshakeEvent& event);

// The words of a failed event (describe() of grl/zmq/handshake.h).
inline std::string describe(const HandshakeEvent& e, const HandshakeWording& w) {
    return describe(e.failure, e.value, w);
}

}  // namespace grl::zmq
