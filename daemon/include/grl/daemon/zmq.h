// The daemons' contexts and sockets are cppzmq's (zmq.hpp: ownership, options, sends); these
// few helpers say what a daemon means by them. Receiving goes through grl::zmq::recv_frames()
// (whole messages, bounded frames), which the nginx module shares.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "grl/zmq/socket.h"

namespace grl::daemon {

// ZeroMQ drops the connection of a peer that sends a bigger message (ZMQ_MAXMSGSIZE), so such
// a message can only be noticed, not counted. Receivers therefore accept up to 4 MiB at the
// transport and let the decoders refuse (and count) anything over the protocol's 1 MiB.
inline constexpr std::int64_t kTransportMaxBytes = 4 << 20;

// A context whose sockets drop what they have not sent when closed (ZMQ_BLOCKY off: ZMQ_LINGER
// 0 on every new socket), so that a daemon that stops never waits for an absent peer.
::zmq::context_t make_context();

// Binds and returns the resolved endpoint (tcp://127.0.0.1:* becomes the real port).
// Throws std::runtime_error naming the endpoint.
std::string bind(::zmq::socket_ref s, const std::string& endpoint);
// Throws std::runtime_error naming the endpoint.
void connect(::zmq::socket_ref s, const std::string& endpoint);

// Sends `frames` as one message without blocking; false when it could not be queued (HWM, no
// peer).
bool send_frames(::zmq::socket_ref s, const std::vector<std::string_view>& frames);

// True when a message is pending (ZMQ_EVENTS): a batch stopped at its budget with more to take.
bool readable(::zmq::socket_ref s);

}  // namespace grl::daemon
