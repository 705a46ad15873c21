#include "grl/daemon/connections.h"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>
#include <cerrno>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "grl/daemon/loop.h"
#include "grl/zmq/monitor.h"

namespace grl::daemon {

EndpointLimit::EndpointLimit(::zmq::context_t& ctx, ::zmq::socket_ref socket, std::string name,
                             std::size_t max)
    : socket_(socket), monitor_(ctx, ZMQ_PAIR), name_(std::move(name)), count_(max, kHandshakeMs) {
    static std::atomic<int> next{0};
    std::string ep = "inproc://grl-endpoint-limit-" + std::to_string(next++);
    zmq::monitor_events(
        socket.handle(), ep,
        ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
    connect(monitor_, ep);
    // A handshake refused with ZAP's 300 (temporary) is not answered over NULL: the connection
    // would hang for libzmq's default 30 s. Closed after 2 s instead, the client connects again
    // by itself (libzmq reconnects after a connection error) and is admitted once there is
    // room. The same interval closes a connection that never starts its handshake (a bare TCP
    // connect): pending, it holds no slot, and this bounds how long it holds anything.
    // Genuine handshakes take milliseconds.
    socket.set(::zmq::sockopt::handshake_ivl, kHandshakeMs);
}

void EndpointLimit::handle() {
    zmq::MonitorEvent e;
    while (zmq::next_monitor_event(monitor_.handle(), frames_, e)) {
        const std::uint64_t now = mono_ms();
        if (e.event == ZMQ_EVENT_ACCEPTED) {
            count_.accepted(static_cast<int>(e.value), now);
            if (bound_) bound_->opened(static_cast<int>(e.value));
        } else if (e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            count_.handshake_succeeded(now);
        } else if (e.event == ZMQ_EVENT_DISCONNECTED) {
            count_.disconnected(static_cast<int>(e.value), now);
            if (bound_) bound_->closed(static_cast<int>(e.value));
        }
    }
    const std::uint64_t now = mono_ms();
    count_.settle(now);
    if (count_.pending() > count_.max()) {
        pending_log_.hit(LogLevel::Warn, {},
                         "connection limit: " + name_ + " endpoint " + address_ + " has " +
                             std::to_string(count_.pending()) +
                             " connections that have not completed their handshake (more than "
                             "--max-connections " +
                             std::to_string(count_.max()) +
                             "): they hold no slot, and each is closed after " +
                             std::to_string(kHandshakeMs / 1000) + " s",
                         now);
    }
}

bool EndpointLimit::admit() {
    // The new connection's ACCEPTED event was queued before its handshake began.
    handle();
    switch (count_.handshake(mono_ms())) {
        case ConnectionLimit::Verdict::Admit: return true;
        case ConnectionLimit::Verdict::AdmitAfterBurst:
            log_info("connection limit: " + name_ + " endpoint " + address_ +
                     " takes connections again (" + std::to_string(count_.last_burst()) +
                     " refused while it held " + std::to_string(count_.max()) + ")");
            return true;
        case ConnectionLimit::Verdict::RefuseFirstOfBurst:
            log_warn("connection limit: " + name_ + " endpoint " + address_ +
                     " is full (--max-connections " + std::to_string(count_.max()) + "; " +
                     std::to_string(count_.established()) +
                     " handshaken connections): refusing new ones until some close; those it "
                     "holds go on");
            return false;
        case ConnectionLimit::Verdict::Refuse: return false;
    }
    return false;
}

std::size_t EndpointLimit::cut(const RebindFn& rebind, RebindDone done) {
    handle();  // the events of connections made before the cut
    // Unbound (at once, or the rebind failed): its connections are closed all the same.
    const std::size_t n = count_.cut();
    cut_ += n;
    if (bound_) bound_ = std::make_unique<MessageBound>(bound_->bytes(), bound_->behind_bytes());
    RebindDone counted = [this, done = std::move(done)](const std::string& error, bool delayed) {
        if (!error.empty()) ++cut_failures_;
        if (delayed) ++cut_delayed_;
        if (done) done(error, delayed);
    };
    try {
        rebind(counted);
    } catch (const std::exception& e) {
        counted(e.what(), false);
    }
    return n;
}

void EndpointLimit::bound_messages(std::uint64_t bytes, std::uint64_t behind_bytes, bool receives) {
    bound_ = std::make_unique<MessageBound>(bytes, behind_bytes);
    receives_ = receives;
}

std::size_t EndpointLimit::recv_frames(std::vector<zmq::Frame>& frames, std::size_t max_frames) {
    const std::size_t n = zmq::recv_frames(socket_.handle(), frames, max_frames);
    if (n > 0 && bound_) {
        // The connection's descriptor, as libzmq's metadata gives it (ZMQ_SRCFD).
        const int fd = zmq_msg_get(frames[0].get(), ZMQ_SRCFD);
        if (fd >= 0) bound_->taken(fd);
    }
    return n;
}

namespace {

// Bytes libzmq has read from a TCP connection: received by TCP less what the kernel still
// holds. False when `fd` is no TCP socket (any more).
bool bytes_read(int fd, std::uint64_t& read) {
    tcp_info info{};
    socklen_t len = sizeof(info);
    int queued = 0;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
        len < offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received) ||
        ioctl(fd, FIONREAD, &queued) != 0) {
        return false;
    }
    read = info.tcpi_bytes_received - static_cast<std::uint64_t>(queued > 0 ? queued : 0);
    return true;
}

std::string peer_of(int fd) {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    char host[INET6_ADDRSTRLEN] = "?";
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
    if (a.ss_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
    }
    if (a.ss_family == AF_INET6) {
        const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
        inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof(host));
        return "[" + std::string(host) + "]:" + std::to_string(ntohs(in->sin6_port));
    }
    return "?";
}

}  // namespace

void EndpointLimit::sweep() {
    if (!bound_) return;
    handle();  // connections opened and closed since the last sweep
    // Messages wait that the daemon has not taken: a connection's whole queued messages count
    // too, so the larger bound holds. How many were taken since the last sweep says nothing:
    // under a flood of whole messages each connection keeps up to 64 queued however many the
    // daemon took.
    const bool behind = receives_ && readable(socket_);
    std::vector<std::pair<int, std::uint64_t>> over;  // fd, bytes since its last message
    std::vector<int> gone;
    bound_->each([&](int fd) {
        std::uint64_t read = 0;
        if (!bytes_read(fd, read)) {
            gone.push_back(fd);
        } else if (bound_->over(fd, read, behind)) {
            over.emplace_back(fd, bound_->last_excess());
        }
    });
    for (int fd : gone) bound_->closed(fd);
    for (const auto& [fd, excess] : over) bound_->closed(fd);  // DISCONNECTED follows
    const std::uint64_t now = mono_ms();
    for (const auto& [fd, excess] : over) {
        const std::string peer = peer_of(fd);
        shutdown(fd, SHUT_RDWR);  // libzmq sees the end, closes the connection, frees its queue
        ++oversize_cut_;
        oversize_log_.hit(
            LogLevel::Warn, {},
            "connection from " + peer + " to the " + name_ + " endpoint " + address_ +
                " cut: it sent " + std::to_string(excess >> 10) +
                " KiB without ending its message (bound: " +
                std::to_string((behind ? bound_->behind_bytes() : bound_->bytes()) >> 10) + " KiB)",
            now);
    }
}

Rebind::Rebind(::zmq::socket_ref socket, std::string endpoint, std::uint64_t now_ms,
               bool unbind_first)
    : socket_(socket), endpoint_(std::move(endpoint)), start_ms_(now_ms) {
    try {
        if (unbind_first) socket_.unbind(endpoint_);
    } catch (const ::zmq::error_t& e) {
        state_ = State::Failed;
        error_ = "unbind " + endpoint_ + ": " + e.what();
        return;
    }
    try_bind(now_ms);
}

void Rebind::try_bind(std::uint64_t now_ms) {
    ++tries_;
    try {
        socket_.bind(endpoint_);
        state_ = State::Bound;
    } catch (const ::zmq::error_t& e) {
        // libzmq closes the old listener on its I/O thread: the port may be held a moment longer.
        if (e.num() == EADDRINUSE && now_ms - start_ms_ < kGiveUpMs) {
            next_ms_ = now_ms + kRetryMs;
            return;
        }
        state_ = State::Failed;
        error_ = "bind " + endpoint_ + " again: " + e.what() +
                 (tries_ > 1 ? " (" + std::to_string(tries_) + " tries in " +
                                   std::to_string(now_ms - start_ms_) + " ms)"
                             : std::string());
    }
}

Rebind::State Rebind::retry(std::uint64_t now_ms) {
    if (state_ == State::Waiting && now_ms >= next_ms_) try_bind(now_ms);
    return state_;
}

void finish_on(Loop& loop, const std::shared_ptr<Rebind>& r, RebindDone done) {
    if (r->retry(mono_ms()) == Rebind::State::Waiting) {
        loop.after(Rebind::kRetryMs,
                   [&loop, r, done = std::move(done)] { finish_on(loop, r, done); });
        return;
    }
    done(r->error(), r->tries() > 1);
}

void rebind(Loop& loop, ::zmq::socket_ref socket, const std::string& endpoint, RebindDone done) {
    finish_on(loop, std::make_shared<Rebind>(socket, endpoint, mono_ms()), std::move(done));
}

void bound_messages(Loop& loop, const std::vector<EndpointLimit*>& receiving,
                    const std::vector<EndpointLimit*>& publishing) {
    std::vector<EndpointLimit*> all;
    for (EndpointLimit* l : receiving) {
        l->bound_messages(kMessageBytes, kMessageBehindBytes, true);
        all.push_back(l);
    }
    for (EndpointLimit* l : publishing) {
        l->bound_messages(kSubscriberBytes, kSubscriberBytes, false);
        all.push_back(l);
    }
    loop.every(EndpointLimit::kSweepMs, [all] {
        for (EndpointLimit* l : all) l->sweep();
    });
}

void write_connection_metrics(MetricsText& m, const std::vector<const EndpointLimit*>& limits) {
    struct Family {
        const char* name;
        const char* type;
        const char* help;
        double (*value)(const EndpointLimit&);
    };
    static const Family kFamilies[] = {
        {"grl_connections", "gauge",
         "Handshaken connections a bound endpoint holds (what --max-connections bounds).",
         [](const EndpointLimit& l) { return static_cast<double>(l.count().established()); }},
        {"grl_connections_pending", "gauge",
         "Connections of a bound endpoint that have not completed their handshake: they hold no "
         "slot, and each is closed after 2 s.",
         [](const EndpointLimit& l) { return static_cast<double>(l.count().pending()); }},
        {"grl_connections_max", "gauge", "The endpoint's connection limit (--max-connections).",
         [](const EndpointLimit& l) { return static_cast<double>(l.count().max()); }},
        {"grl_connections_refused_total", "counter",
         "New connections whose handshake was refused because the endpoint held its limit.",
         [](const EndpointLimit& l) { return static_cast<double>(l.count().refused()); }},
        {"grl_connections_unhandshaken_total", "counter",
         "Connections closed before completing their handshake (bare TCP connections closed "
         "after 2 s, refused handshakes).",
         [](const EndpointLimit& l) { return static_cast<double>(l.count().unhandshaken()); }},
        {"grl_curve_connections_cut_total", "counter",
         "Connections closed by a reload of a CURVE key list that removed a key which had "
         "connected to the endpoint (the endpoint is bound again; listed peers connect again).",
         [](const EndpointLimit& l) { return static_cast<double>(l.cut_total()); }},
        {"grl_curve_connections_cut_delayed_total", "counter",
         "Cuts of the endpoint whose rebind found the port still held by the old listener and "
         "bound it on a later turn of the daemon's loop (every 5 ms, for up to 2 s).",
         [](const EndpointLimit& l) { return static_cast<double>(l.cut_delayed()); }},
        {"grl_curve_connections_cut_failures_total", "counter",
         "Cuts of the endpoint that failed (logged as an error): when binding it again failed, "
         "it takes no connection until the daemon restarts.",
         [](const EndpointLimit& l) { return static_cast<double>(l.cut_failures()); }},
    };
    for (const Family& f : kFamilies) {
        m.family(f.name, f.type, f.help);
        for (const EndpointLimit* l : limits)
            m.sample(f.name, {{"endpoint", l->name()}}, f.value(*l));
    }
    m.family("grl_oversize_messages_total", "counter",
             "Messages over the endpoint's bound, by reason: bytes (a connection sent more than "
             "the bound without ending its message; its connection is cut).");
    for (const EndpointLimit* l : limits)
        m.sample("grl_oversize_messages_total", {{"endpoint", l->name()}, {"reason", "bytes"}},
                 static_cast<double>(l->oversize_cut()));
}

}  // namespace grl::daemon
