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

Loop::Loop(std::function<std::uint64_t()> clock) : clock_(std::move(clock)) {
    sigset_t set = handled_signals();
    signal_fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd_ < 0) throw std::runtime_error(std::string("signalfd: ") + strerror(errno));
}

Loop::~Loop() {
    if (signal_fd_ >= 0) close(signal_fd_);
}

void Loop::on_socket(void* zmq_socket, std::function<void()> fn) {
    SocketItem s{zmq_socket, std::move(fn)};
    std::size_t len = sizeof(s.fd);
    if (zmq_getsockopt(zmq_socket, ZMQ_FD, &s.fd, &len) != 0) {
        throw std::runtime_error(std::string("zmq_getsockopt(ZMQ_FD): ") +
                                 zmq_strerror(zmq_errno()));
    }
    sockets_.push_back(std::move(s));
}

bool Loop::readable(const SocketItem& s) {
    int events = 0;
    std::size_t len = sizeof(events);
    if (zmq_getsockopt(s.socket, ZMQ_EVENTS, &events, &len) != 0) {
        // Interrupted: the handler's own receive tells (it does not wait).
        if (zmq_errno() == EINTR) return true;
        throw std::runtime_error(std::string("zmq_getsockopt(ZMQ_EVENTS): ") +
                                 zmq_strerror(zmq_errno()));
    }
    return (events & ZMQ_POLLIN) != 0;
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
    timers_.push_back({period_ms, clock_() + period_ms, std::move(fn)});
}

void Loop::after(std::uint64_t delay_ms, std::function<void()> fn) {
    later_.push_back({clock_() + delay_ms, std::move(fn)});
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
    std::vector<pollfd> items;
    std::vector<char> ready;
    bool others_ran = true;  // the first turn reads every socket's ZMQ_EVENTS
    while (!stop_) {
        fds_.erase(
            std::remove_if(fds_.begin(), fds_.end(), [](const FdItem& f) { return f.removed; }),
            fds_.end());
        // Handlers may add sockets and fds: this turn dispatches only these.
        const std::size_t nsockets = sockets_.size(), nfds = fds_.size();
        // Sockets that may hold messages their descriptor will not signal (see loop.h): read
        // now, and when one does, the wait below does not block.
        ready.assign(nsockets, 0);
        bool any_ready = false;
        for (std::size_t i = 0; i < nsockets; ++i) {
            SocketItem& s = sockets_[i];
            if (!s.check && !others_ran) continue;
            s.check = false;
            ready[i] = readable(s);
            any_ready = any_ready || ready[i];
        }
        others_ran = false;
        items.clear();
        items.push_back({signal_fd_, POLLIN, 0});
        for (std::size_t i = 0; i < nsockets; ++i) items.push_back({sockets_[i].fd, POLLIN, 0});
        const std::size_t fd_base = items.size();
        for (std::size_t i = 0; i < nfds; ++i) items.push_back({fds_[i].fd, fds_[i].events, 0});
        std::uint64_t now = clock_();
        long timeout = -1;
        for (const Timer& t : timers_) {
            long left = t.next_ms > now ? static_cast<long>(t.next_ms - now) : 0;
            if (timeout < 0 || left < timeout) timeout = left;
        }
        for (const Later& l : later_) {
            long left = l.due_ms > now ? static_cast<long>(l.due_ms - now) : 0;
            if (timeout < 0 || left < timeout) timeout = left;
        }
        if (any_ready) timeout = 0;
        int rc = poll(items.data(), static_cast<nfds_t>(items.size()),
                      static_cast<int>(std::min<long>(timeout, 1L << 30)));
        if (rc < 0) {
            if (errno != EINTR) throw std::runtime_error(std::string("poll: ") + strerror(errno));
            for (pollfd& p : items) p.revents = 0;
        }
        if (items[0].revents & POLLIN) {
            handle_signals();
            others_ran = true;
        }
        for (std::size_t i = 0; i < nsockets && !stop_; ++i) {
            // Its descriptor signalled commands: ZMQ_EVENTS takes them and tells.
            if (!ready[i] && items[1 + i].revents != 0) ready[i] = readable(sockets_[i]);
            if (!ready[i]) continue;
            sockets_[i].check = true;  // its handler may leave messages, or take the signal
            sockets_[i].fn();
        }
        for (std::size_t i = 0; i < nfds && !stop_; ++i) {
            const short ev = items[fd_base + i].revents;
            if (ev && !fds_[i].removed) {
                fds_[i].fn(ev);
                others_ran = true;
            }
        }
        now = clock_();
        for (Timer& t : timers_) {
            if (stop_ || now < t.next_ms) continue;
            // Keep the phase; skip missed periods rather than firing a burst.
            t.next_ms += t.period_ms;
            if (t.next_ms <= now) t.next_ms = now + t.period_ms;
            t.fn();
            others_ran = true;
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
            others_ran = true;
        }
    }
}

}  // namespace grl::daemon
