// --max-connections: the connection limit of one bound endpoint (grl/connection_limit.h). A
// socket monitor follows the endpoint's connections (accepted, handshaken, disconnected); the
// daemon's ZAP handler asks admit() at each new connection's handshake (ZMQ_ZAP_DOMAIN is set
// on the socket, with or without CURVE) and refuses it while the endpoint is full. A
// connection takes a slot from its handshake; those still in theirs are pending, and closed by
// libzmq after kHandshakeMs. Used on the daemon loop's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grl/control/connection_limit.h"
#include "grl/control/message_bound.h"
#include "grl/daemon/log.h"
#include "grl/daemon/metrics.h"
#include "grl/daemon/zmq.h"

namespace grl::daemon {

class Loop;

// How a rebind ends: `error` "" when the socket is bound again, else what went wrong (naming
// the endpoint); `delayed` when it had to wait for the port. A rebind may end at once or on a
// later loop turn (rebind(), Rebind).
using RebindDone = std::function<void(const std::string& error, bool delayed)>;
// Starts a rebind of an endpoint on the thread that owns its socket; `done` runs on that
// thread when it ends.
using RebindFn = std::function<void(RebindDone done)>;

class EndpointLimit {
  public:
    // How long a connection may take to complete its handshake (ZMQ_HANDSHAKE_IVL).
    static constexpr int kHandshakeMs = 2000;
    // `name` labels the endpoint in metrics and log lines ("report", "usage"). Create it
    // before the socket binds.
    EndpointLimit(::zmq::context_t& ctx, ::zmq::socket_ref socket, std::string name,
                  std::size_t max);
    EndpointLimit(const EndpointLimit&) = delete;
    EndpointLimit& operator=(const EndpointLimit&) = delete;

    void set_address(std::string address) { address_ = std::move(address); }  // after bind
    const std::string& address() const { return address_; }
    void* monitor() { return monitor_.handle(); }  // readable when events are queued
    void handle();                                 // takes the queued events
    // A new connection's handshake: false (counted; one warning per burst of refusals) while
    // the endpoint holds its limit of handshaken connections.
    bool admit();
    // Closes every connection of the endpoint: `rebind` (run by the thread that owns the
    // socket) unbinds it and binds it again, which makes libzmq close the sessions accepted
    // through it. Returns how many connections were cut (counted). The rebind ends now or on
    // a later loop turn (the port may be held a moment: rebind()); then `done` gets its
    // result, a failure counted first (cut_failures()), and a rebind that had to wait for the
    // port in cut_delayed().
    std::size_t cut(const RebindFn& rebind, RebindDone done);

    // The bound on one message's bytes per connection (grl/message_bound.h): `bytes` while the
    // daemon keeps up, `behind_bytes` while messages wait. `receives`: the daemon takes the
    // endpoint's messages through recv_frames() (each restarts its connection's count); else
    // `bytes` bounds all a connection sends (subscriptions to a publisher).
    void bound_messages(std::uint64_t bytes, std::uint64_t behind_bytes, bool receives);
    // zmq::recv_frames() on the endpoint's socket, noting the connection each message came from.
    std::size_t recv_frames(std::vector<zmq::Frame>& frames, std::size_t max_frames);
    // Run every kSweepMs on the thread of the daemon's loop: a connection over its bound is cut
    // (shutdown(2) of its descriptor; libzmq then closes it and frees the message), counted and
    // logged. The bytes read come from TCP_INFO less what the kernel still holds.
    static constexpr std::uint64_t kSweepMs = 100;
    void sweep();
    std::uint64_t oversize_cut() const { return oversize_cut_; }

    const std::string& name() const { return name_; }
    const ConnectionLimit& count() const { return count_; }
    std::uint64_t cut_total() const { return cut_; }
    std::uint64_t cut_failures() const { return cut_failures_; }
    std::uint64_t cut_delayed() const { return cut_delayed_; }

  private:
    ::zmq::socket_ref socket_;
    ::zmq::socket_t monitor_;
    std::string name_;
    std::string address_;
    ConnectionLimit count_;
    std::uint64_t cut_ = 0;
    std::uint64_t cut_failures_ = 0;
    std::uint64_t cut_delayed_ = 0;
    std::vector<zmq::Frame> frames_;
    LogLimiter pending_log_;
    std::unique_ptr<MessageBound> bound_;  // null: no bound (bound_messages() not called)
    bool receives_ = false;
    std::uint64_t oversize_cut_ = 0;
    LogLimiter oversize_log_;
};

// Unbinds `socket` from `endpoint` (its resolved address) and binds it there again; libzmq
// closes the connections accepted through the old listener (each once the socket has taken
// its session's termination, at its next poll, send or receive). libzmq closes the old
// listener on its I/O thread, so the port may be held a moment longer: the bind is then tried
// again every kRetryMs on later turns of the owner's loop, never sleeping on its thread, for
// up to kGiveUpMs. Errors name the endpoint. For a thread with a loop of its own (the
// collector's relay): start it, poll until next_ms(), retry().
class Rebind {
  public:
    static constexpr std::uint64_t kRetryMs = 5;
    static constexpr std::uint64_t kGiveUpMs = 2000;
    // Unbinds and tries to bind once (`unbind_first` false: only binds, for a socket not bound
    // there, e.g. one whose unbind already happened).
    Rebind(::zmq::socket_ref socket, std::string endpoint, std::uint64_t now_ms,
           bool unbind_first = true);
    enum class State : std::uint8_t { Bound, Waiting, Failed };
    State state() const { return state_; }
    // Waiting: tries to bind again (when due); the new state.
    State retry(std::uint64_t now_ms);
    std::uint64_t next_ms() const { return next_ms_; }   // Waiting: when to retry
    const std::string& error() const { return error_; }  // Failed: why
    unsigned tries() const { return tries_; }            // binds tried
    std::uint64_t waited_ms(std::uint64_t now_ms) const { return now_ms - start_ms_; }

  private:
    void try_bind(std::uint64_t now_ms);

    ::zmq::socket_ref socket_;
    std::string endpoint_;
    std::uint64_t start_ms_;
    std::uint64_t next_ms_ = 0;
    unsigned tries_ = 0;
    State state_ = State::Waiting;
    std::string error_;
};

// A Rebind on `loop`'s thread, retried by loop turns: `done` runs when it ends (possibly before
// rebind() returns).
void rebind(Loop& loop, ::zmq::socket_ref socket, const std::string& endpoint, RebindDone done);
// The same for a Rebind already started.
void finish_on(Loop& loop, const std::shared_ptr<Rebind>& rebind, RebindDone done);

// The bound on one message at every bound endpoint of a daemon (docs/security.md "Bounds"): at
// those it receives on (`receiving`, read through EndpointLimit::recv_frames), a connection may
// send kMessageBytes between two messages taken, kMessageBehindBytes while messages wait (64
// queued messages of a genuine sender's at most 1 MiB, and two more); at its publishers
// (`publishing`), a subscriber may send kSubscriberBytes in all. Swept every kSweepMs on `loop`.
inline constexpr std::uint64_t kMessageBytes = std::uint64_t{2} << 20;
inline constexpr std::uint64_t kMessageBehindBytes = std::uint64_t{66} << 20;
inline constexpr std::uint64_t kSubscriberBytes = std::uint64_t{256} << 10;
void bound_messages(Loop& loop, const std::vector<EndpointLimit*>& receiving,
                    const std::vector<EndpointLimit*>& publishing);

// grl_connections{endpoint}, grl_connections_pending{endpoint}, grl_connections_max{endpoint},
// grl_connections_refused_total{endpoint}, grl_connections_unhandshaken_total{endpoint},
// grl_curve_connections_cut_total{endpoint}, grl_curve_connections_cut_failures_total{endpoint},
// grl_curve_connections_cut_delayed_total{endpoint},
// grl_oversize_messages_total{endpoint,reason}.
void write_connection_metrics(MetricsText& m, const std::vector<const EndpointLimit*>& limits);

}  // namespace grl::daemon
