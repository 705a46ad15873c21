#include "grl/daemon/connections.h"

#include <atomic>
#include <cstring>
#include <stdexcept>

namespace grl::daemon {

EndpointLimit::EndpointLimit(Context& ctx, void* socket, std::string name, std::size_t max)
    : monitor_(ctx, ZMQ_PAIR), name_(std::move(name)), count_(max) {
    static std::atomic<int> next{0};
    std::string ep = "inproc://grl-endpoint-limit-" + std::to_string(next++);
    if (zmq_socket_monitor(socket, ep.c_str(), ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
        throw std::runtime_error("zmq_socket_monitor: " + zmq_error());
    }
    monitor_.connect(ep);
    // A handshake refused with ZAP's 300 (temporary) is not answered over NULL: the connection
    // would hang, counted, for libzmq's default 30 s. Closed after 2 s instead, the client
    // connects again by itself (libzmq reconnects after a connection error) and is admitted
    // once there is room. Genuine handshakes take milliseconds.
    int handshake_ms = kHandshakeMs;
    if (zmq_setsockopt(socket, ZMQ_HANDSHAKE_IVL, &handshake_ms, sizeof(handshake_ms)) != 0) {
        throw std::runtime_error("ZMQ_HANDSHAKE_IVL: " + zmq_error());
    }
}

void EndpointLimit::handle() {
    for (;;) {
        std::size_t n = monitor_.recv_frames(frames_, 2);
        if (n == 0) return;
        std::string_view head = frames_[0].view();
        if (head.size() < 6) continue;
        std::uint16_t event = 0;
        std::uint32_t value = 0;  // the connection's file descriptor for both events
        std::memcpy(&event, head.data(), 2);
        std::memcpy(&value, head.data() + 2, 4);
        if (event == ZMQ_EVENT_ACCEPTED) {
            count_.accepted(static_cast<int>(value));
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            count_.disconnected(static_cast<int>(value));
        }
    }
}

bool EndpointLimit::admit() {
    // The new connection's ACCEPTED event was queued before its handshake began.
    handle();
    switch (count_.handshake()) {
        case ConnectionLimit::Verdict::Admit: return true;
        case ConnectionLimit::Verdict::AdmitAfterBurst:
            log_info("connection limit: " + name_ + " endpoint " + address_ +
                     " takes connections again (" + std::to_string(count_.last_burst()) +
                     " refused while it held " + std::to_string(count_.max()) + ")");
            return true;
        case ConnectionLimit::Verdict::RefuseFirstOfBurst:
            log_warn("connection limit: " + name_ + " endpoint " + address_ +
                     " is full (--max-connections " + std::to_string(count_.max()) + "; " +
                     std::to_string(count_.open()) +
                     " connections with those in their handshake): refusing new ones until "
                     "some close; those it holds go on");
            return false;
        case ConnectionLimit::Verdict::Refuse: return false;
    }
    return false;
}

void write_connection_metrics(MetricsText& m, const std::vector<const EndpointLimit*>& limits) {
    m.family("grl_connections", "gauge",
             "Connections a bound endpoint holds (handshaking ones included).");
    for (const EndpointLimit* l : limits)
        m.sample("grl_connections", {{"endpoint", l->name()}},
                 static_cast<double>(l->count().open()));
    m.family("grl_connections_max", "gauge",
             "The endpoint's connection limit (--max-connections).");
    for (const EndpointLimit* l : limits)
        m.sample("grl_connections_max", {{"endpoint", l->name()}},
                 static_cast<double>(l->count().max()));
    m.family("grl_connections_refused_total", "counter",
             "New connections whose handshake was refused because the endpoint held its limit.");
    for (const EndpointLimit* l : limits)
        m.sample("grl_connections_refused_total", {{"endpoint", l->name()}},
                 static_cast<double>(l->count().refused()));
}

}  // namespace grl::daemon
