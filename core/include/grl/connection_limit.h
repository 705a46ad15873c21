// The connection limit of one bound endpoint (--max-connections; docs/security.md "Bounds").
// ZeroMQ accepts every TCP connection and has no accept limit, so the daemons count an
// endpoint's connections from its socket monitor (accepted and disconnected, by file
// descriptor) and their ZAP handler refuses a new connection's handshake while the endpoint
// holds more than `max` (the new one included). Connections made before keep working: ZAP
// only runs at the handshake. Pure: the daemon feeds the events in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_set>

namespace grl {

class ConnectionLimit {
  public:
    explicit ConnectionLimit(std::size_t max) : max_(max) {}

    void accepted(int fd) { open_.insert(fd); }
    void disconnected(int fd) { open_.erase(fd); }

    enum class Verdict : std::uint8_t {
        Admit,
        AdmitAfterBurst,     // admitted, and the refusals before it are over (log it)
        Refuse,              // over the limit, within a burst already logged
        RefuseFirstOfBurst,  // over the limit, the first refusal since the last admission
    };
    // A handshake of a connection already counted as accepted.
    Verdict handshake() {
        if (open_.size() > max_) {
            ++refused_;
            ++burst_;
            return burst_ == 1 ? Verdict::RefuseFirstOfBurst : Verdict::Refuse;
        }
        if (burst_ == 0) return Verdict::Admit;
        last_burst_ = burst_;
        burst_ = 0;
        return Verdict::AdmitAfterBurst;
    }

    std::size_t open() const { return open_.size(); }
    std::size_t max() const { return max_; }
    std::uint64_t refused() const { return refused_; }
    // Refusals of the burst that the last AdmitAfterBurst ended.
    std::uint64_t last_burst() const { return last_burst_; }

  private:
    std::size_t max_;
    std::unordered_set<int> open_;
    std::uint64_t refused_ = 0;
    std::uint64_t burst_ = 0;
    std::uint64_t last_burst_ = 0;
};

}  // namespace grl
