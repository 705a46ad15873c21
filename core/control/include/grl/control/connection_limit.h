// The connection limit of one bound endpoint (--max-connections; docs/security.md "Bounds").
// ZeroMQ accepts every TCP connection and has no accept limit, so the daemons follow an
// endpoint's connections from its socket monitor and their ZAP handler refuses a new
// connection's handshake while the endpoint holds `max` handshaken connections. A connection
// takes a slot from its handshake, not from its accept: one that never handshakes (a bare TCP
// connect) holds no slot; it is counted as pending, and libzmq closes it after the handshake
// interval (ZMQ_HANDSHAKE_IVL), which bounds how long each one lives. Connections made before
// keep working: ZAP only runs at the handshake. Pure: the daemon feeds the events in, with
// the time.
//
// libzmq's monitor names the connection (its file descriptor) in ACCEPTED and DISCONNECTED
// but not in HANDSHAKE_SUCCEEDED. A success is therefore taken as the newest connection still
// pending (genuine handshakes take milliseconds, so it is almost always that one), and any
// connection still open `handshake_ms` plus a grace after its accept has completed its
// handshake (libzmq closes the others), which corrects a wrong guess within that time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>

namespace grl {

class ConnectionLimit {
  public:
    // How long after the handshake interval a connection still open is taken as handshaken.
    static constexpr std::uint64_t kGraceMs = 1000;

    ConnectionLimit(std::size_t max, std::uint64_t handshake_ms)
        : max_(max), handshake_ms_(handshake_ms) {}

    void accepted(int fd, std::uint64_t now_ms);      // ZMQ_EVENT_ACCEPTED
    void handshake_succeeded(std::uint64_t now_ms);   // ZMQ_EVENT_HANDSHAKE_SUCCEEDED
    void disconnected(int fd, std::uint64_t now_ms);  // ZMQ_EVENT_DISCONNECTED
    // The endpoint was bound again: libzmq closed its connections without a DISCONNECTED
    // event each. Returns how many it held (handshaken and pending).
    std::size_t cut();

    enum class Verdict : std::uint8_t {
        Admit,
        AdmitAfterBurst,     // admitted, and the refusals before it are over (log it)
        Refuse,              // the endpoint is full, within a burst already logged
        RefuseFirstOfBurst,  // the endpoint is full, the first refusal since the last admission
    };
    // ZAP asks about a new connection's handshake: refused while the handshaken connections and
    // those admitted whose success has not arrived yet make `max`.
    Verdict handshake(std::uint64_t now_ms);

    // Settles the connections pending for longer than the handshake interval and the grace
    // (handshaken: libzmq would have closed them). The getters are as of the last event or
    // settle().
    void settle(std::uint64_t now_ms);

    std::size_t open() const { return open_.size(); }
    std::size_t established() const { return established_; }
    std::size_t pending() const { return open_.size() - established_; }
    std::size_t max() const { return max_; }
    std::uint64_t refused() const { return refused_; }
    // Connections closed before their handshake completed (never handshaken, or refused).
    std::uint64_t unhandshaken() const { return unhandshaken_; }
    // Refusals of the burst that the last AdmitAfterBurst ended.
    std::uint64_t last_burst() const { return last_burst_; }

  private:
    struct Conn {
        std::uint64_t accepted_ms = 0;
        bool established = false;
    };
    // Whether `entry` of pending_ (fd, accept time) is still that pending connection.
    bool still_pending(const std::pair<int, std::uint64_t>& entry) const;
    void establish(int fd);

    std::size_t max_;
    std::uint64_t handshake_ms_;
    std::unordered_map<int, Conn> open_;
    std::size_t established_ = 0;
    // Pending connections by accept time (fd, time); entries of connections since closed or
    // handshaken are dropped when they reach either end.
    std::deque<std::pair<int, std::uint64_t>> pending_;
    // When ZAP admitted handshakes whose success has not arrived yet (at most the handshake
    // interval old: a handshake admitted and then failed sends no success).
    std::deque<std::uint64_t> admitted_;
    std::uint64_t refused_ = 0;
    std::uint64_t unhandshaken_ = 0;
    std::uint64_t burst_ = 0;
    std::uint64_t last_burst_ = 0;
};

}  // namespace grl
