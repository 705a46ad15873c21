#include "grl/redial.h"

#include <algorithm>

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

}  // namespace grl
