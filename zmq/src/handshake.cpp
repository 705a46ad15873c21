#include "grl/zmq/handshake.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace grl {

Redial::Redial(std::vector<std::string> endpoints, std::uint64_t min_ms, std::uint64_t max_ms)
    : endpoints_(std::move(endpoints)), min_ms_(min_ms), max_ms_(max_ms), backoff_ms_(min_ms) {}

void Redial::mark(const std::string& endpoint) {
    if (std::find(pending_.begin(), pending_.end(), endpoint) == pending_.end()) {
        pending_.push_back(endpoint);
    }
}

void Redial::failed(const std::string& address, std::uint64_t now_ms) {
    bool was_empty = pending_.empty();
    if (std::find(endpoints_.begin(), endpoints_.end(), address) != endpoints_.end()) {
        mark(address);
    } else {
        for (const std::string& e : endpoints_) mark(e);
    }
    if (was_empty && !pending_.empty()) retry_at_ = now_ms + backoff_ms_;
}

void Redial::succeeded() {
    if (pending_.empty()) backoff_ms_ = min_ms_;
}

std::vector<std::string> Redial::due(std::uint64_t now_ms) {
    if (pending_.empty() || now_ms < retry_at_) return {};
    std::vector<std::string> out;
    out.swap(pending_);
    backoff_ms_ = std::min(backoff_ms_ * 2, max_ms_);
    return out;
}

std::string describe(HandshakeFailure f, std::uint32_t value, const HandshakeWording& w) {
    const std::string peer(w.peer);
    const std::string hold = "does the " + peer + " hold the key pair whose public key " +
                             std::string(w.server_key) + " names?";
    char code[16];
    switch (f) {
        case HandshakeFailure::Refused:
            return "refused by the " + peer + " (ZAP status " + std::to_string(value) + "): is " +
                   std::string(w.self) + "'s public key in its --curve-clients?";
        case HandshakeFailure::NoCurve:
            return "failed: the " + peer + " does not speak CURVE on this endpoint";
        case HandshakeFailure::Protocol:
            std::snprintf(code, sizeof(code), "0x%x", value);
            return std::string("failed (protocol error ") + code + "): " + hold;
        case HandshakeFailure::Other: break;
    }
    return "failed (" + std::string(std::strerror(static_cast<int>(value))) + "): " + hold;
}

bool Handshakes::record(bool ok, const std::string& address, std::uint64_t now_ms) {
    if (ok) {
        redial_.succeeded();
    } else {
        redial_.failed(address, now_ms);
    }
    const Logged now = ok ? Logged::Working : Logged::Failing;
    const bool news = now != logged_ && !(ok && logged_ == Logged::Nothing);
    logged_ = now;
    return news;
}

}  // namespace grl
