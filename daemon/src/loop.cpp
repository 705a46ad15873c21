#include "grl/daemon/loop.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace grl::daemon {

namespace {

// on_fd takes poll(2)'s flags; zmq_poll has its own values (ZMQ_POLLOUT is 2, POLLOUT 4, which
// zmq_poll reads as ZMQ_POLLERR): a writer waiting for POLLOUT would never be woken, and a
// response larger than the socket buffer (a /metrics page of 10,000 buckets) stalled until the
// client's deadline.
short to_zmq_events(short events) {
    short z = 0;
    if (events & POLLIN) z |= ZMQ_POLLIN;
    if (events & POLLOUT) z |= ZMQ_POLLOUT;
    return z;
}

short from_zmq_events(short revents) {
    short e = 0;
    if (revents & ZMQ_POLLIN) e |= POLLIN;
    if (revents & ZMQ_POLLOUT) e |= POLLOUT;
    if (revents & ZMQ_POLLERR) e |= POLLERR;
    return e;
}

}  // namespace

namespace {
std::uint64_t clock_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000 +
           static_cast<std::uint64_t>(ts.tv_nsec) / 1000000;
}

sigset_t handled_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    return set;
}
}  // namespace

std::uint64_t mono_ms() {
    return clock_ms(CLOCK_MONOTONIC);
}
std::uint64_t wall_ms() {
    return clock_ms(CLOCK_REALTIME);
}

void block_signals() {
    sigset_t set = handled_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signal(SIGPIPE, SIG_IGN);  // the metrics server writes to sockets that may be gone
}

Loop::Loop() {
    sigset_t set = handled_signals();
    signal_fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd_ < 0) throw std::runtime_error(std::string("signalfd: ") + strerror(errno));
}

Loop::~Loop() {
    if (signal_fd_ >= 0) close(signal_fd_);
}

void Loop::on_socket(void* zmq_socket, std::function<void()> fn) {
    sockets_.push_back({zmq_socket, std::move(fn)});
}

void Loop::on_fd(int fd, short events, std::function<void(short)> fn) {
    fds_.push_back({fd, events, std::move(fn)});
}

void Loop::set_fd_events(int fd, short events) {
    for (FdItem& f : fds_) {
        if (f.fd == fd && !f.removed) f.events = events;
    }
}

void Loop::remove_fd(int fd) {
    for (FdItem& f : fds_) {
        if (f.fd == fd) f.removed = true;  // erased after the current dispatch
    }
}

void Loop::every(std::uint64_t period_ms, std::function<void()> fn) {
    if (period_ms == 0) period_ms = 1;
    timers_.push_back({period_ms, mono_ms() + period_ms, std::move(fn)});
}

void Loop::after(std::uint64_t delay_ms, std::function<void()> fn) {
    later_.push_back({mono_ms() + delay_ms, std::move(fn)});
}

void Loop::on_signal(int sig, std::function<void()> fn) {
    signals_.push_back({sig, std::move(fn)});
}

void Loop::stop() {
    stop_ = true;
}

void Loop::handle_signals() {
    struct signalfd_siginfo si;
    while (read(signal_fd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
        for (const SignalItem& s : signals_) {
            if (static_cast<std::uint32_t>(s.sig) == si.ssi_signo) s.fn();
        }
    }
}

void Loop::run() {
    std::vector<zmq_pollitem_t> items;
    while (!stop_) {
        fds_.erase(
            std::remove_if(fds_.begin(), fds_.end(), [](const FdItem& f) { return f.removed; }),
            fds_.end());
        items.clear();
        items.push_back({nullptr, signal_fd_, ZMQ_POLLIN, 0});
        for (const SocketItem& s : sockets_) items.push_back({s.socket, 0, ZMQ_POLLIN, 0});
        std::size_t fd_base = items.size();
        std::size_t nfds = fds_.size();  // handlers may add fds: dispatch only these
        for (std::size_t i = 0; i < nfds; ++i) {
            items.push_back({nullptr, fds_[i].fd, to_zmq_events(fds_[i].events), 0});
        }
        std::uint64_t now = mono_ms();
        long timeout = -1;
        for (const Timer& t : timers_) {
            long left = t.next_ms > now ? static_cast<long>(t.next_ms - now) : 0;
            if (timeout < 0 || left < timeout) timeout = left;
        }
        for (const Later& l : later_) {
            long left = l.due_ms > now ? static_cast<long>(l.due_ms - now) : 0;
            if (timeout < 0 || left < timeout) timeout = left;
        }
        int rc = zmq_poll(items.data(), static_cast<int>(items.size()), timeout);
        if (rc < 0 && zmq_errno() != EINTR) {
            throw std::runtime_error(std::string("zmq_poll: ") + zmq_strerror(zmq_errno()));
        }
        if (rc > 0) {
            if (items[0].revents & ZMQ_POLLIN) handle_signals();
            for (std::size_t i = 0; i < sockets_.size() && !stop_; ++i) {
                if (items[1 + i].revents & ZMQ_POLLIN) sockets_[i].fn();
            }
            for (std::size_t i = 0; i < nfds && !stop_; ++i) {
                short ev = from_zmq_events(items[fd_base + i].revents);
                if (ev && !fds_[i].removed) fds_[i].fn(ev);
            }
        }
        now = mono_ms();
        for (Timer& t : timers_) {
            if (stop_ || now < t.next_ms) continue;
            // Keep the phase; skip missed periods rather than firing a burst.
            t.next_ms += t.period_ms;
            if (t.next_ms <= now) t.next_ms = now + t.period_ms;
            t.fn();
        }
        // One-shot: taken out before they run (a handler may add more).
        std::vector<Later> due;
        for (auto it = later_.begin(); it != later_.end();) {
            if (it->due_ms <= now) {
                due.push_back(std::move(*it));
                it = later_.erase(it);
            } else {
                ++it;
            }
        }
        for (Later& l : due) {
            if (!stop_) l.fn();
        }
    }
}

}  // namespace grl::daemon
