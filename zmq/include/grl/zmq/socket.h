// What the nginx module and the daemons do alike with a ZeroMQ socket: receive a message's
// frames, check an instruction message's frames (the reporter and the collector's relay), and
// make a CURVE client.
// The C API, not cppzmq as in the daemons: cppzmq throws, and the nginx module never does.
#pragma once

#include <zmq.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "grl/common/curve_keys.h"
#include "grl/wire/wire.h"

namespace grl::zmq {

// One received frame, without a copy.
class Frame {
  public:
    Frame() { zmq_msg_init(&msg_); }
    ~Frame() { zmq_msg_close(&msg_); }
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;
    zmq_msg_t* get() { return &msg_; }
    std::string_view view() {
        return {static_cast<const char*>(zmq_msg_data(&msg_)), zmq_msg_size(&msg_)};
    }
    bool more() { return zmq_msg_more(&msg_) != 0; }
    // A metadata property of a received message ("User-Id": the CURVE key ZAP admitted;
    // "Peer-Address": the sender's IP), or "" when the message has none.
    std::string meta(const char* property) {
        const char* v = zmq_msg_gets(&msg_, property);
        return v ? v : "";
    }

  private:
    zmq_msg_t msg_;
};

// Receives all frames of one pending message of `socket` without blocking into `frames`
// (grown to `max_frames`; at most `max_frames` kept, the rest received and discarded). Returns
// the number of frames received (> max_frames when there were more), or 0 when nothing was
// pending or the receive failed (zmq_errno() tells which: EAGAIN is "nothing pending").
std::size_t recv_frames(void* socket, std::vector<Frame>& frames, std::size_t max_frames);

// An instruction message as it arrives on a SUB socket (docs/protocol.md): a topic frame and
// a body frame. `frames` is what recv_frames() returned, `topic` and `body` the first two
// frames (body empty when there was none). Decodes the body into `msg` and checks that the
// topic is the one of the message's scope; false with `error` naming what was wrong.
bool read_instruction(std::size_t frames, std::string_view topic, std::string_view body,
                      wire::Instructions& msg, std::string& error);

// Makes `socket` a CURVE client that talks only to the server holding `server_public`'s
// secret, as `client`. Throws std::runtime_error naming the option.
void make_curve_client(void* socket, const curve::KeyPair& client, std::string_view server_public);

}  // namespace grl::zmq
