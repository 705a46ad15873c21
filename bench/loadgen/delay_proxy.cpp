// grl_delay_proxy: a TCP proxy on loopback that delays every byte by a fixed time in each
// direction, for the benchmarks' "Redis across the network" case (bench/README.md). The
// kernel here has no netem, so the delay is added in user space: each chunk read is held
// until its arrival time + --delay-us, then written on, in order.
//
//   grl_delay_proxy --listen PORT --upstream PORT --delay-us 500
//
// Prints "ready" on stdout once listening. Single thread, epoll, no backpressure (a
// benchmark tool: what is read is queued).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace {

std::uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "grl_delay_proxy: %s\n", msg.c_str());
    std::exit(2);
}

struct Chunk {
    std::uint64_t due_ns;
    std::string data;
};

struct Pair;

// One direction's source socket; `peer` is where its bytes go.
struct End {
    int fd = -1;
    Pair* pair = nullptr;
    End* peer = nullptr;
    std::deque<Chunk> out;    // bytes read from `peer`, waiting to be written to fd
    std::size_t written = 0;  // of out.front()
    bool closed = false;
};

struct Pair {
    End client;
    End upstream;
    bool dead = false;
};

class Proxy {
  public:
    Proxy(int listen_port, int upstream_port, std::uint64_t delay_ns)
        : upstream_port_(upstream_port), delay_ns_(delay_ns) {
        ep_ = epoll_create1(EPOLL_CLOEXEC);
        lfd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(lfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<std::uint16_t>(listen_port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || listen(lfd_, 512) < 0) {
            die(std::string("cannot listen: ") + std::strerror(errno));
        }
        add(lfd_, nullptr);
    }

    void run();

  private:
    void add(int fd, End* e) {
        epoll_event ev{};
        ev.events = EPOLLIN | (e ? EPOLLOUT | EPOLLRDHUP | EPOLLET : 0);
        ev.data.ptr = e;
        if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl failed");
    }
    void accept_all();
    void on_readable(End* e);
    void flush(End* e, std::uint64_t now);
    void kill(Pair* p);

    int upstream_port_;
    std::uint64_t delay_ns_;
    int ep_ = -1;
    int lfd_ = -1;
    std::vector<std::unique_ptr<Pair>> pairs_;
};

void Proxy::accept_all() {
    for (;;) {
        int c = accept4(lfd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) return;
        int u = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<std::uint16_t>(upstream_port_));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(u, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 && errno != EINPROGRESS) {
            close(c);
            close(u);
            continue;
        }
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        auto p = std::make_unique<Pair>();
        p->client.fd = c;
        p->upstream.fd = u;
        p->client.pair = p->upstream.pair = p.get();
        p->client.peer = &p->upstream;
        p->upstream.peer = &p->client;
        add(c, &p->client);
        add(u, &p->upstream);
        pairs_.push_back(std::move(p));
    }
}

void Proxy::kill(Pair* p) {
    if (p->dead) return;
    p->dead = true;
    for (End* e : {&p->client, &p->upstream}) {
        epoll_ctl(ep_, EPOLL_CTL_DEL, e->fd, nullptr);
        close(e->fd);
    }
}

void Proxy::on_readable(End* e) {
    char buf[65536];
    for (;;) {
        ssize_t n = recv(e->fd, buf, sizeof buf, 0);
        if (n > 0) {
            e->peer->out.push_back({now_ns() + delay_ns_, std::string(buf, n)});
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            e->closed = true;  // the peer side is closed once its queue is written
            return;
        }
    }
}

void Proxy::flush(End* e, std::uint64_t now) {
    while (!e->out.empty() && e->out.front().due_ns <= now) {
        Chunk& c = e->out.front();
        ssize_t n =
            send(e->fd, c.data.data() + e->written, c.data.size() - e->written, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            kill(e->pair);
            return;
        }
        e->written += static_cast<std::size_t>(n);
        if (e->written == c.data.size()) {
            e->out.pop_front();
            e->written = 0;
        }
    }
}

void Proxy::run() {
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    std::puts("ready");
    std::fflush(stdout);
    epoll_event events[256];
    for (;;) {
        std::uint64_t now = now_ns();
        std::uint64_t next = now + 100000000ULL;
        for (auto& p : pairs_) {
            if (p->dead) continue;
            for (End* e : {&p->client, &p->upstream}) {
                flush(e, now);
                if (p->dead) break;
                if (!e->out.empty() && e->out.front().due_ns < next) next = e->out.front().due_ns;
            }
            if (!p->dead && ((p->client.closed && p->upstream.out.empty()) ||
                             (p->upstream.closed && p->client.out.empty()))) {
                kill(p.get());
            }
        }
        // Forget dead pairs now and then.
        if (pairs_.size() > 64) {
            std::vector<std::unique_ptr<Pair>> alive;
            for (auto& p : pairs_) {
                if (!p->dead) alive.push_back(std::move(p));
            }
            pairs_.swap(alive);
        }
        std::uint64_t wait = next > now ? next - now : 0;
        timespec ts{static_cast<time_t>(wait / 1000000000ULL),
                    static_cast<long>(wait % 1000000000ULL)};
        int n = epoll_pwait2(ep_, events, 256, &ts, nullptr);
        for (int i = 0; i < n; ++i) {
            End* e = static_cast<End*>(events[i].data.ptr);
            if (e == nullptr) {
                accept_all();
                continue;
            }
            if (e->pair->dead) continue;
            if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) on_readable(e);
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    int listen_port = 0, upstream_port = 0;
    std::uint64_t delay_us = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i];
        if (a == "--listen") {
            listen_port = std::atoi(argv[i + 1]);
        } else if (a == "--upstream") {
            upstream_port = std::atoi(argv[i + 1]);
        } else if (a == "--delay-us") {
            delay_us = std::strtoull(argv[i + 1], nullptr, 10);
        } else {
            die("unknown option " + a);
        }
    }
    if (listen_port <= 0 || upstream_port <= 0) {
        die("usage: grl_delay_proxy --listen PORT --upstream PORT --delay-us N");
    }
    Proxy(listen_port, upstream_port, delay_us * 1000ULL).run();
}
