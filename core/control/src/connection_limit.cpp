#include "grl/control/connection_limit.h"

namespace grl {

void ConnectionLimit::accepted(int fd, std::uint64_t now_ms) {
    settle(now_ms);
    auto [it, inserted] = open_.try_emplace(fd);
    if (!inserted && it->second.established) --established_;  // a close libzmq did not report
    it->second = Conn{now_ms, false};
    pending_.emplace_back(fd, now_ms);
}

void ConnectionLimit::handshake_succeeded(std::uint64_t now_ms) {
    settle(now_ms);
    if (!admitted_.empty()) admitted_.pop_front();
    while (!pending_.empty()) {
        const auto newest = pending_.back();
        pending_.pop_back();
        if (still_pending(newest)) {
            establish(newest.first);
            return;
        }
    }
}

void ConnectionLimit::disconnected(int fd, std::uint64_t now_ms) {
    settle(now_ms);
    auto it = open_.find(fd);
    if (it == open_.end()) return;
    if (it->second.established) {
        --established_;
    } else {
        ++unhandshaken_;
    }
    open_.erase(it);
}

std::size_t ConnectionLimit::cut() {
    const std::size_t n = open_.size();
    open_.clear();
    pending_.clear();
    admitted_.clear();
    established_ = 0;
    return n;
}

ConnectionLimit::Verdict ConnectionLimit::handshake(std::uint64_t now_ms) {
    settle(now_ms);
    if (established_ + admitted_.size() >= max_) {
        ++refused_;
        ++burst_;
        return burst_ == 1 ? Verdict::RefuseFirstOfBurst : Verdict::Refuse;
    }
    admitted_.push_back(now_ms);
    if (burst_ == 0) return Verdict::Admit;
    last_burst_ = burst_;
    burst_ = 0;
    return Verdict::AdmitAfterBurst;
}

void ConnectionLimit::settle(std::uint64_t now_ms) {
    while (!admitted_.empty() && admitted_.front() + handshake_ms_ <= now_ms) admitted_.pop_front();
    while (!pending_.empty() && pending_.front().second + handshake_ms_ + kGraceMs <= now_ms) {
        const auto oldest = pending_.front();
        pending_.pop_front();
        if (still_pending(oldest)) establish(oldest.first);
    }
}

bool ConnectionLimit::still_pending(const std::pair<int, std::uint64_t>& entry) const {
    auto it = open_.find(entry.first);
    return it != open_.end() && !it->second.established && it->second.accepted_ms == entry.second;
}

void ConnectionLimit::establish(int fd) {
    open_[fd].established = true;
    ++established_;
}

}  // namespace grl
