#include "grl/zmq/socket.h"

#include <cerrno>
#include <stdexcept>

namespace grl::zmq {

std::size_t recv_frames(void* socket, std::vector<Frame>& frames, std::size_t max_frames) {
    if (frames.size() < max_frames) frames = std::vector<Frame>(max_frames);
    std::size_t n = 0;
    for (;;) {
        Frame scratch;
        Frame& f = n < max_frames ? frames[n] : scratch;
        if (n < max_frames) {
            zmq_msg_close(f.get());
            zmq_msg_init(f.get());
        }
        int rc;
        while ((rc = zmq_msg_recv(f.get(), socket, n == 0 ? ZMQ_DONTWAIT : 0)) < 0 &&
               zmq_errno() == EINTR) {
        }
        // EAGAIN on the first frame: nothing pending. The later frames of a message arrive
        // with the first (ZeroMQ delivers messages whole), so they never wait.
        if (rc < 0) return n;
        ++n;
        if (!f.more()) return n;
    }
}

bool read_instruction(std::size_t frames, std::string_view topic, std::string_view body,
                      wire::Instructions& msg, std::string& error) {
    if (frames != 2) {
        error = frames == 1 ? "one frame, expected topic and body" : "more than two frames";
        return false;
    }
    if (!wire::decode(body, msg, error)) return false;
    if (wire::topic(msg.scope, msg.region, msg.zone) != topic) {
        error = "topic \"" + std::string(topic) + "\" does not match the message's scope";
        return false;
    }
    return true;
}

namespace {

void set(void* socket, int option, std::string_view value, const char* name) {
    if (zmq_setsockopt(socket, option, value.data(), value.size()) != 0) {
        throw std::runtime_error(std::string(name) + ": " + zmq_strerror(zmq_errno()));
    }
}

}  // namespace

void make_curve_client(void* socket, const curve::KeyPair& client, std::string_view server_public) {
    set(socket, ZMQ_CURVE_SERVERKEY, server_public, "ZMQ_CURVE_SERVERKEY");
    set(socket, ZMQ_CURVE_PUBLICKEY, client.public_key, "ZMQ_CURVE_PUBLICKEY");
    set(socket, ZMQ_CURVE_SECRETKEY, client.secret_key, "ZMQ_CURVE_SECRETKEY");
}

}  // namespace grl::zmq
