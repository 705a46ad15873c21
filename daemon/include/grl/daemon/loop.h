// The daemons' single-threaded event loop: ZeroMQ sockets, plain file descriptors (the
// metrics HTTP server), periodic timers and signals (signalfd), all in one poll(2).
//
// A ZeroMQ socket is polled by its ZMQ_FD, which signals its commands, not its messages (edge-
// triggered): its ZMQ_EVENTS is read when that descriptor is readable, after its own handler ran
// (the handler's receives and sends may have taken the commands that would have signalled), and
// after any other handler ran (an fd, a timer, a later, a signal: they may use any socket). Not
// at every turn for every socket, twice, as zmq_poll does: each such read of an idle socket is
// two system calls (getpid, poll); with the controller's 10 sockets at fleet scale, zmq_poll made
// 3,400 polls and 3,500 getpids a second (docs/control-plane.md "The controller at fleet scale").
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace grl::daemon {

std::uint64_t mono_ms();
std::uint64_t wall_ms();

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread. Call first thing in main(), before
// any thread exists (ZeroMQ's I/O threads inherit the mask), so that only the loop's signalfd
// sees them.
void block_signals();

class Loop {
  public:
    // `clock` gives the milliseconds its timers and laters are due by (a test's fake clock).
    explicit Loop(std::function<std::uint64_t()> clock = mono_ms);
    ~Loop();
    Loop(const Loop&) = delete;
    Loop& operator=(const Loop&) = delete;

    // `fn` runs while the socket has a message pending (level-triggered: it need not drain).
    // `fn` may receive and send on its own socket and on sockets not given to on_socket; a socket
    // given to on_socket may be used by the other handlers (fds, timers, laters, signals).
    void on_socket(void* zmq_socket, std::function<void()> fn);
    // `fn(revents)` runs when `fd` is ready for `events` (POLLIN / POLLOUT).
    void on_fd(int fd, short events, std::function<void(short)> fn);
    void set_fd_events(int fd, short events);
    void remove_fd(int fd);
    // `fn` runs every `period_ms`, first after one period.
    void every(std::uint64_t period_ms, std::function<void()> fn);
    // `fn` runs once, `delay_ms` from now (at a later loop turn; may be called from a handler).
    void after(std::uint64_t delay_ms, std::function<void()> fn);
    // SIGINT, SIGTERM or SIGHUP (blocked by block_signals()).
    void on_signal(int sig, std::function<void()> fn);

    void run();   // until stop()
    void stop();  // from a handler

  private:
    struct SocketItem {
        void* socket;
        std::function<void()> fn;
        int fd = -1;        // ZMQ_FD
        bool check = true;  // read ZMQ_EVENTS before the next wait
    };
    // The socket's ZMQ_EVENTS has ZMQ_POLLIN.
    static bool readable(const SocketItem& s);
    struct FdItem {
        int fd;
        short events;
        std::function<void(short)> fn;
        bool removed = false;
    };
    struct Timer {
        std::uint64_t period_ms;
        std::uint64_t next_ms;
        std::function<void()> fn;
    };
    struct Later {
        std::uint64_t due_ms;
        std::function<void()> fn;
    };
    struct SignalItem {
        int sig;
        std::function<void()> fn;
    };
    void handle_signals();

    std::function<std::uint64_t()> clock_;
    std::deque<SocketItem> sockets_;  // a handler may add sockets: references must stay valid
    std::deque<FdItem> fds_;          // a handler may add fds: references must stay valid
    std::vector<Timer> timers_;
    std::vector<Later> later_;
    std::vector<SignalItem> signals_;
    int signal_fd_ = -1;
    bool stop_ = false;
};

}  // namespace grl::daemon
