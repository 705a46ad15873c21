// Which endpoints of a ZeroMQ client socket to connect again, and when.
//
// libzmq gives up on an endpoint for good when a handshake fails with a
// protocol error, which is what a refused CURVE key is: without help, a host
// or collector whose key is added to its peer's list later would never be
// admitted. The socket's owner feeds handshake results (from a socket monitor)
// in here, and at due() disconnects and connects the returned endpoints again.
// Backoff: `min_ms`, doubling per round to `max_ms`; back to `min_ms` after a
// success with nothing pending. Pure logic: the caller supplies the clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace grl {

class Redial {
  public:
    explicit Redial(std::vector<std::string> endpoints, std::uint64_t min_ms = 1000,
                    std::uint64_t max_ms = 30000);

    // A failed handshake with `address`. An address that is none of the
    // configured endpoints (resolved differently) marks all of them.
    void failed(const std::string& address, std::uint64_t now_ms);
    void succeeded();

    // The endpoints to connect again now (and forgets them); empty before the
    // retry time.
    std::vector<std::string> due(std::uint64_t now_ms);
    // When due() will next return something; 0 when nothing is pending.
    std::uint64_t next_ms() const { return pending_.empty() ? 0 : retry_at_; }
    const std::vector<std::string>& endpoints() const { return endpoints_; }

  private:
    void mark(const std::string& endpoint);

    std::vector<std::string> endpoints_;
    std::vector<std::string> pending_;
    std::uint64_t min_ms_, max_ms_, backoff_ms_;
    std::uint64_t retry_at_ = 0;
};

}  // namespace grl
