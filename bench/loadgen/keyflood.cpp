// grl_keyflood: a flood of one-request keys (bench/README.md,
// t/integration/test_fleet_keyed_nginx.py).
//
// Sends exactly --keys requests, each with a key no other request carries (--header NAME:
// PREFIX<n>, n = 0, 1, ...), spread over the targets: --connections keep-alive connections per
// target, each with --depth requests pipelined in one write. A closed loop (a connection's next
// batch goes when its last one is answered), so the count is exact; spread evenly over the
// targets and --seconds (a batch waits while its target is ahead of N/S/targets per second), or
// as fast as the servers answer. wrk with a Lua script for the keys spends ~20x the CPU per request
// (35 us against 1.6 us; nginx itself ~7 us), so wrk, not nginx, set the pace.
//
// Output: one JSON line on stdout: keys sent, responses by status, unanswered (a connection
// closed before answering its batch), seconds, requests per target.
//
// Single thread, epoll. Responses must carry Content-Length (nginx's do).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "grl_keyflood: %s\n", msg.c_str());
    std::exit(2);
}

double now_s() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Options {
    std::vector<sockaddr_in> targets;
    std::vector<std::string> specs;
    std::uint64_t keys = 0;
    std::string path = "/";
    std::string header = "X-Api-Key";
    std::string prefix = "f";
    std::size_t connections = 2;  // per target
    std::size_t depth = 64;
    double timeout_s = 10;  // for one batch's answers
    double seconds = 0;     // spread the keys over this long (0: as fast as answered)
};

const char kUsage[] =
    "usage: grl_keyflood --target HOST:PORT... --keys N [--path /] [--header X-Api-Key]\n"
    "                    [--prefix f] [--connections 2] [--depth 64] [--seconds S]\n"
    "                    [--timeout-ms 10000]\n"
    "  N requests in all, request n with header 'NAME: PREFIXn' (every key once).\n";

std::uint64_t number(const char* flag, const char* v, std::uint64_t min) {
    char* end = nullptr;
    errno = 0;
    unsigned long long x = std::strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < min) {
        die(std::string("invalid ") + flag + " \"" + v +
            "\" (an integer >= " + std::to_string(min) + ")");
    }
    return x;
}

Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "-h" || a == "--help") {
            std::fputs(kUsage, stdout);
            std::exit(0);
        }
        if (i + 1 >= argc) die(std::string(argv[i]) + " needs a value\n" + kUsage);
        const char* v = argv[++i];
        if (a == "--target") {
            std::string s = v;
            auto colon = s.rfind(':');
            int port = colon == std::string::npos ? 0 : std::atoi(s.c_str() + colon + 1);
            sockaddr_in addr{};
            addr.sin_family = AF_INET;
            addr.sin_port = htons(static_cast<std::uint16_t>(port));
            if (port <= 0 || port > 65535 ||
                inet_pton(AF_INET, s.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
                die("--target \"" + s + "\": expected IPV4:PORT");
            }
            o.targets.push_back(addr);
            o.specs.push_back(s);
        } else if (a == "--keys") {
            o.keys = number("--keys", v, 1);
        } else if (a == "--path") {
            o.path = v;
        } else if (a == "--header") {
            o.header = v;
        } else if (a == "--prefix") {
            o.prefix = v;
        } else if (a == "--connections") {
            o.connections = number("--connections", v, 1);
        } else if (a == "--depth") {
            o.depth = number("--depth", v, 1);
        } else if (a == "--seconds") {
            o.seconds = static_cast<double>(number("--seconds", v, 1));
        } else if (a == "--timeout-ms") {
            o.timeout_s = static_cast<double>(number("--timeout-ms", v, 1)) / 1000.0;
        } else {
            die("unknown option " + std::string(a) + "\n" + kUsage);
        }
    }
    if (o.targets.empty() || o.keys == 0)
        die(std::string("--target and --keys are required\n") + kUsage);
    return o;
}

struct Conn {
    std::size_t target = 0;
    int fd = -1;
    std::string out;      // the batch's requests not yet written
    std::size_t off = 0;  // written of `out`
    std::string in;       // received, not yet parsed
    std::size_t pending = 0;
    double sent_at = 0;
    bool waiting = false;  // ahead of --seconds' pace: the next batch is due later
};

class Flood {
  public:
    explicit Flood(Options o) : o_(std::move(o)), per_target_(o_.targets.size(), 0) {
        ep_ = epoll_create1(EPOLL_CLOEXEC);
        if (ep_ < 0) die(std::string("epoll_create1: ") + std::strerror(errno));
        for (std::size_t t = 0; t < o_.targets.size(); ++t) {
            for (std::size_t c = 0; c < o_.connections; ++c) {
                conns_.push_back(Conn{});
                conns_.back().target = t;
            }
        }
    }

    void run() {
        start_ = now_s();
        for (Conn& c : conns_) next_batch(c);
        std::vector<epoll_event> evs(conns_.size());
        while (busy_ > 0 || waiting_ > 0) {
            int n = epoll_wait(ep_, evs.data(), static_cast<int>(evs.size()), waiting_ ? 1 : 100);
            if (n < 0 && errno != EINTR) die(std::string("epoll_wait: ") + std::strerror(errno));
            for (int i = 0; i < n; ++i) {
                Conn& c = conns_[evs[i].data.u64];
                if (evs[i].events & EPOLLOUT) write_some(c);
                if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) read_some(c);
            }
            const double now = now_s();
            for (Conn& c : conns_) {
                if (c.waiting) {
                    c.waiting = false;
                    --waiting_;
                    next_batch(c);
                }
                if (c.pending > 0 && now - c.sent_at > o_.timeout_s) {
                    std::fprintf(stderr, "grl_keyflood: %s: no answer within %.1f s\n",
                                 o_.specs[c.target].c_str(), o_.timeout_s);
                    lost(c);
                }
            }
        }
        seconds_ = now_s() - start_;
    }

    void print() const {
        std::printf("{\"keys\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"r429\":%" PRIu64
                    ",\"other\":%" PRIu64 ",\"unanswered\":%" PRIu64
                    ",\"seconds\":%.3f,\"rate\":%.0f,\"per_target\":[",
                    next_, ok_, r429_, other_, unanswered_, seconds_,
                    seconds_ > 0 ? static_cast<double>(next_) / seconds_ : 0.0);
        for (std::size_t t = 0; t < per_target_.size(); ++t) {
            std::printf("%s%" PRIu64, t ? "," : "", per_target_[t]);
        }
        std::printf("]}\n");
    }

  private:
    // Writes the connection's next batch of new keys (connecting first when needed).
    void next_batch(Conn& c) {
        if (next_ >= o_.keys) return;
        // Paced: each target gets its share of the keys evenly over --seconds.
        const double share = static_cast<double>(o_.keys) / static_cast<double>(o_.targets.size());
        if (o_.seconds > 0 &&
            static_cast<double>(per_target_[c.target]) > share * (now_s() - start_) / o_.seconds) {
            c.waiting = true;
            ++waiting_;
            return;
        }
        if (c.fd < 0) connect_to(c);
        c.out.clear();
        c.off = 0;
        c.in.clear();
        c.pending = 0;
        while (c.pending < o_.depth && next_ < o_.keys) {
            c.out += "GET " + o_.path + " HTTP/1.1\r\nHost: grl\r\n" + o_.header + ": " +
                     o_.prefix + std::to_string(next_++) + "\r\n\r\n";
            ++c.pending;
        }
        per_target_[c.target] += c.pending;
        c.sent_at = now_s();
        ++busy_;
        write_some(c);
    }

    void connect_to(Conn& c) {
        c.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c.fd < 0) die(std::string("socket: ") + std::strerror(errno));
        int one = 1;
        setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        const sockaddr_in& a = o_.targets[c.target];
        if (connect(c.fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) < 0 &&
            errno != EINPROGRESS) {
            die("connect " + o_.specs[c.target] + ": " + std::strerror(errno));
        }
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLOUT;
        ev.data.u64 = static_cast<std::uint64_t>(&c - conns_.data());
        if (epoll_ctl(ep_, EPOLL_CTL_ADD, c.fd, &ev) < 0) {
            die(std::string("epoll_ctl: ") + std::strerror(errno));
        }
    }

    void want_write(Conn& c, bool on) {
        epoll_event ev{};
        ev.events = EPOLLIN | (on ? EPOLLOUT : 0u);
        ev.data.u64 = static_cast<std::uint64_t>(&c - conns_.data());
        epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
    }

    void write_some(Conn& c) {
        while (c.off < c.out.size()) {
            ssize_t n = send(c.fd, c.out.data() + c.off, c.out.size() - c.off, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EAGAIN || errno == EINPROGRESS || errno == ENOTCONN) {
                    want_write(c, true);
                    return;
                }
                lost(c);
                return;
            }
            c.off += static_cast<std::size_t>(n);
        }
        want_write(c, false);
    }

    void read_some(Conn& c) {
        char buf[65536];
        for (;;) {
            ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
            if (n > 0) {
                c.in.append(buf, static_cast<std::size_t>(n));
                if (static_cast<std::size_t>(n) < sizeof(buf)) break;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
            lost(c);  // closed or failed with answers missing
            return;
        }
        parse(c);
    }

    // Counts the complete responses in c.in; when the batch is answered, sends the next.
    void parse(Conn& c) {
        std::size_t pos = 0;
        while (c.pending > 0) {
            std::size_t end = c.in.find("\r\n\r\n", pos);
            if (end == std::string::npos) break;
            std::string_view head(c.in.data() + pos, end - pos);
            if (head.size() < 12 || head.substr(0, 5) != "HTTP/") {
                die("bad response from " + o_.specs[c.target] + ": " +
                    std::string(head.substr(0, 80)));
            }
            std::size_t cl = head.find("\r\nContent-Length: ");
            if (cl == std::string_view::npos) {
                die("a response from " + o_.specs[c.target] + " without Content-Length");
            }
            std::size_t body = std::strtoull(head.data() + cl + 18, nullptr, 10);
            if (c.in.size() < end + 4 + body) break;
            int status = std::atoi(std::string(head.substr(9, 3)).c_str());
            ++(status / 100 == 2 ? ok_ : status == 429 ? r429_ : other_);
            --c.pending;
            pos = end + 4 + body;
        }
        c.in.erase(0, pos);
        if (c.pending == 0) {
            --busy_;
            next_batch(c);
        }
    }

    // The connection failed or closed with requests unanswered: counted, and a new one.
    void lost(Conn& c) {
        unanswered_ += c.pending;
        if (c.pending > 0) --busy_;
        c.pending = 0;
        epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
        close(c.fd);
        c.fd = -1;
        next_batch(c);
    }

    Options o_;
    int ep_ = -1;
    std::vector<Conn> conns_;
    std::vector<std::uint64_t> per_target_;
    std::uint64_t next_ = 0;   // keys sent: the next key's number
    std::size_t busy_ = 0;     // connections with a batch out
    std::size_t waiting_ = 0;  // connections waiting for the pace
    std::uint64_t ok_ = 0, r429_ = 0, other_ = 0, unanswered_ = 0;
    double start_ = 0, seconds_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
    Flood f(parse_args(argc, argv));
    f.run();
    f.print();
    return 0;
}
