#include "grl/daemon/connections.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "grl/daemon/loop.h"
#include "grl/zmq/monitor.h"

namespace grl::daemon {

EndpointLimit::EndpointLimit(Context& ctx, void* socket, std::string name, std::size_t max)
    : monitor_(ctx, ZMQ_PAIR), name_(std::move(name)), count_(max, kHandshakeMs) {
    static std::atomic<int> next{0};
    std::string ep = "inproc://grl-endpoint-limit-" + std::to_string(next++);
    zmq::monitor_events(
        socket, ep, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED);
    monitor_.connect(ep);
    // A handshake refused with ZAP's 300 (temporary) is not answered over NULL: the connection
    // would hang for libzmq's default 30 s. Closed after 2 s instead, the client connects again
    // by itself (libzmq reconnects after a connection error) and is admitted once there is
    // room. The same interval closes a connection that never starts its handshake (a bare TCP
    // connect): pending, it holds no slot, and this bounds how long it holds anything.
    // Genuine handshakes take milliseconds.
    int handshake_ms = kHandshakeMs;
    if (zmq_setsockopt(socket, ZMQ_HANDSHAKE_IVL, &handshake_ms, sizeof(handshake_ms)) != 0) {
        throw std::runtime_error("ZMQ_HANDSHAKE_IVL: " + zmq_error());
    }
}

void EndpointLimit::handle() {
    zmq::MonitorEvent e;
    while (zmq::next_monitor_event(monitor_.get(), frames_, e)) {
        const std::uint64_t now = mono_ms();
        if (e.event == ZMQ_EVENT_ACCEPTED) {
            count_.accepted(static_cast<int>(e.value), now);
        } else if (e.event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            count_.handshake_succeeded(now);
        } else if (e.event == ZMQ_EVENT_DISCONNECTED) {
            count_.disconnected(static_cast<int>(e.value), now);
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

Rebind::Rebind(void* socket, std::string endpoint, std::uint64_t now_ms, bool unbind_first)
    : socket_(socket), endpoint_(std::move(endpoint)), start_ms_(now_ms) {
    if (unbind_first && zmq_unbind(socket_, endpoint_.c_str()) != 0) {
        state_ = State::Failed;
        error_ = "unbind " + endpoint_ + ": " + zmq_error();
        return;
    }
    try_bind(now_ms);
}

void Rebind::try_bind(std::uint64_t now_ms) {
    ++tries_;
    if (zmq_bind(socket_, endpoint_.c_str()) == 0) {
        state_ = State::Bound;
        return;
    }
    // libzmq closes the old listener on its I/O thread: the port may be held a moment longer.
    if (zmq_errno() != EADDRINUSE || now_ms - start_ms_ >= kGiveUpMs) {
        state_ = State::Failed;
        error_ = "bind " + endpoint_ + " again: " + zmq_error() +
                 (tries_ > 1 ? " (" + std::to_string(tries_) + " tries in " +
                                   std::to_string(now_ms - start_ms_) + " ms)"
                             : std::string());
        return;
    }
    next_ms_ = now_ms + kRetryMs;
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

void rebind(Loop& loop, void* socket, const std::string& endpoint, RebindDone done) {
    finish_on(loop, std::make_shared<Rebind>(socket, endpoint, mono_ms()), std::move(done));
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
}

}  // namespace grl::daemon
