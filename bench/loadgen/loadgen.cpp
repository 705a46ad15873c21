// grl_loadgen: an open-loop HTTP/1.1 load generator for the benchmarks (bench/README.md).
//
// Requests are scheduled at a constant rate per phase (a schedule of RATE:SECONDS steps) and
// spread over one or more targets by weight (smooth weighted round robin). Latency is measured
// from each request's *scheduled* send time to the end of its response, so a stalled server
// cannot hide its queueing delay by slowing the generator down (no coordinated omission).
// Keep-alive connections are opened on demand, up to --max-connections per target; a request
// that finds none free waits in a queue, its latency clock already running.
//
// Output (JSON, to --out or stdout): per-interval time series (offered by scheduled time;
// 2xx/429/other/errors by completion time; 2xx per target; p50/p99) and per-phase summaries
// (counts, latency percentiles up to p99.9, how late the generator itself sent).
//
// Single thread, epoll, nanosecond timeouts (epoll_pwait2). Pin it to its own core.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "histogram.h"

namespace {

using loadgen::Histogram;

std::uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "grl_loadgen: %s\n", msg.c_str());
    std::exit(2);
}

struct Target {
    std::string spec;  // host:port as given
    sockaddr_in addr{};
    double weight = 1;
    double current = 0;  // smooth weighted round robin state
};

struct Phase {
    double rate = 0;  // requests per second
    double seconds = 0;
};

struct Options {
    std::vector<Target> targets;
    std::vector<Phase> phases;
    std::string path = "/";
    std::vector<std::string> headers;
    std::uint64_t interval_ms = 100;
    std::size_t max_connections = 256;  // per target
    std::uint64_t timeout_ms = 2000;
    std::uint64_t spin_us = 200;
    std::string out;
};

const char kUsage[] =
    "usage: grl_loadgen --target HOST:PORT[=WEIGHT]... --schedule RATE:SECONDS[,RATE:SECONDS...]\n"
    "                   [--path /] [--header 'Name: value']... [--interval-ms 100]\n"
    "                   [--max-connections 256] [--timeout-ms 2000] [--spin-us 200]\n"
    "                   [--out FILE]\n"
    "  RATE is requests per second over all targets; WEIGHT shares it among targets.\n";

Target parse_target(const std::string& s) {
    Target t;
    std::string hp = s;
    auto eq = s.find('=');
    if (eq != std::string::npos) {
        hp = s.substr(0, eq);
        char* end = nullptr;
        t.weight = std::strtod(s.c_str() + eq + 1, &end);
        if (*end != '\0' || !(t.weight > 0)) die("invalid weight in --target \"" + s + "\"");
    }
    auto colon = hp.rfind(':');
    if (colon == std::string::npos) die("--target \"" + s + "\": expected HOST:PORT");
    std::string host = hp.substr(0, colon);
    int port = std::atoi(hp.c_str() + colon + 1);
    if (port <= 0 || port > 65535) die("--target \"" + s + "\": invalid port");
    t.addr.sin_family = AF_INET;
    t.addr.sin_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &t.addr.sin_addr) != 1) {
        die("--target \"" + s + "\": host must be an IPv4 address");
    }
    t.spec = hp;
    return t;
}

std::vector<Phase> parse_schedule(const std::string& s) {
    std::vector<Phase> out;
    std::size_t pos = 0;
    while (pos <= s.size()) {
        auto comma = s.find(',', pos);
        std::string item =
            s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        Phase p;
        char* end = nullptr;
        p.rate = std::strtod(item.c_str(), &end);
        if (*end != ':') die("--schedule item \"" + item + "\": expected RATE:SECONDS");
        p.seconds = std::strtod(end + 1, &end);
        if (*end != '\0' || p.rate < 0 || !(p.seconds > 0)) {
            die("--schedule item \"" + item + "\": invalid rate or duration");
        }
        out.push_back(p);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return out;
}

Options parse_args(int argc, char** argv) {
    Options o;
    std::string schedule;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "--target") {
            o.targets.push_back(parse_target(value()));
        } else if (a == "--schedule") {
            schedule = value();
        } else if (a == "--path") {
            o.path = value();
        } else if (a == "--header") {
            o.headers.push_back(value());
        } else if (a == "--interval-ms") {
            o.interval_ms = std::strtoull(value().c_str(), nullptr, 10);
        } else if (a == "--max-connections") {
            o.max_connections = std::strtoull(value().c_str(), nullptr, 10);
        } else if (a == "--timeout-ms") {
            o.timeout_ms = std::strtoull(value().c_str(), nullptr, 10);
        } else if (a == "--spin-us") {
            o.spin_us = std::strtoull(value().c_str(), nullptr, 10);
        } else if (a == "--out") {
            o.out = value();
        } else if (a == "-h" || a == "--help") {
            std::fputs(kUsage, stdout);
            std::exit(0);
        } else {
            std::fputs(kUsage, stderr);
            die("unknown option \"" + a + "\"");
        }
    }
    if (o.targets.empty() || schedule.empty()) {
        std::fputs(kUsage, stderr);
        die("--target and --schedule are required");
    }
    if (o.interval_ms == 0 || o.max_connections == 0 || o.timeout_ms == 0) {
        die("--interval-ms, --max-connections and --timeout-ms must be positive");
    }
    o.phases = parse_schedule(schedule);
    return o;
}

// ---------------------------------------------------------------------------------------------
// Accounting

struct Counts {
    std::uint64_t offered = 0;  // scheduled
    std::uint64_t ok = 0;       // 2xx
    std::uint64_t r429 = 0;
    std::uint64_t other = 0;   // any other status
    std::uint64_t errors = 0;  // connect/read errors, timeouts, unfinished at the end
    std::vector<std::uint64_t> offered_by_target;
    std::vector<std::uint64_t> ok_by_target;
    Histogram latency;  // all completed responses, from the scheduled time

    explicit Counts(std::size_t targets)
        : offered_by_target(targets, 0), ok_by_target(targets, 0) {}
};

struct PhaseStats : Counts {
    Histogram send_lag;  // actual send - scheduled send
    std::size_t queued_max = 0;
    explicit PhaseStats(std::size_t targets) : Counts(targets) {}
};

struct Req {
    std::uint64_t sched_ns = 0;
    std::uint32_t phase = 0;
};

// ---------------------------------------------------------------------------------------------
// Connections

struct Conn {
    int fd = -1;
    std::size_t target = 0;
    bool connecting = false;
    bool busy = false;  // has a request in flight (possibly waiting for connect)
    Req req;
    std::size_t wrote = 0;
    std::string rbuf;
};

struct Response {
    enum class State { Incomplete, Complete, Bad };
    State state = State::Incomplete;
    int status = 0;
    bool close = false;
};

bool header_is(std::string_view line, std::string_view name) {
    if (line.size() < name.size()) return false;
    for (std::size_t i = 0; i < name.size(); ++i) {
        char c = line[i];
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        if (c != name[i]) return false;
    }
    return true;
}

bool contains_ci(std::string_view s, std::string_view needle) {
    for (std::size_t i = 0; i + needle.size() <= s.size(); ++i) {
        if (header_is(s.substr(i), needle)) return true;
    }
    return false;
}

// Parses one response at the start of buf. `eof`: the peer closed (ends a body without length).
Response parse_response(const std::string& buf, bool eof) {
    Response r;
    auto hdr_end = buf.find("\r\n\r\n");
    if (hdr_end == std::string::npos) {
        if (buf.size() > 65536) r.state = Response::State::Bad;
        return r;
    }
    if (buf.compare(0, 7, "HTTP/1.") != 0 || buf.size() < 12) {
        r.state = Response::State::Bad;
        return r;
    }
    r.status = std::atoi(buf.c_str() + 9);
    bool http10 = buf[7] == '0';
    r.close = http10;
    long long content_length = -1;
    bool chunked = false;
    std::size_t pos = buf.find("\r\n") + 2;
    while (pos < hdr_end) {
        auto eol = buf.find("\r\n", pos);
        std::string_view line(buf.data() + pos, eol - pos);
        if (header_is(line, "content-length:")) {
            content_length = std::atoll(std::string(line.substr(15)).c_str());
        } else if (header_is(line, "transfer-encoding:")) {
            chunked = contains_ci(line, "chunked");
        } else if (header_is(line, "connection:")) {
            if (contains_ci(line, "close")) r.close = true;
            if (contains_ci(line, "keep-alive")) r.close = false;
        }
        pos = eol + 2;
    }
    std::size_t body = hdr_end + 4;
    bool no_body = (r.status >= 100 && r.status < 200) || r.status == 204 || r.status == 304;
    if (no_body) {
        r.state = Response::State::Complete;
    } else if (chunked) {
        std::size_t p = body;
        for (;;) {
            auto eol = buf.find("\r\n", p);
            if (eol == std::string::npos) return r;
            unsigned long long size = std::strtoull(buf.c_str() + p, nullptr, 16);
            p = eol + 2;
            if (size == 0) {
                if (buf.size() >= p + 2) r.state = Response::State::Complete;
                return r;
            }
            p += size + 2;
            if (p > buf.size()) return r;
        }
    } else if (content_length >= 0) {
        if (buf.size() >= body + static_cast<std::size_t>(content_length)) {
            r.state = Response::State::Complete;
        }
    } else {
        r.close = true;
        if (eof) r.state = Response::State::Complete;
    }
    return r;
}

class Generator {
  public:
    explicit Generator(Options o) : opt_(std::move(o)) {
        nt_ = opt_.targets.size();
        for (std::size_t i = 0; i < opt_.phases.size(); ++i) phase_stats_.emplace_back(nt_);
        double total_s = 0;
        for (const auto& p : opt_.phases) total_s += p.seconds;
        // Completions after the schedule (drain) land in trailing intervals.
        std::size_t n =
            static_cast<std::size_t>((total_s * 1000.0 + static_cast<double>(opt_.timeout_ms)) /
                                     static_cast<double>(opt_.interval_ms)) +
            2;
        for (std::size_t i = 0; i < n; ++i) intervals_.emplace_back(nt_);
        queues_.resize(nt_);
        idle_.resize(nt_);
        open_.assign(nt_, 0);
        for (const auto& t : opt_.targets) total_weight_ += t.weight;
        request_ = "GET " + opt_.path + " HTTP/1.1\r\nHost: bench\r\n";
        for (const auto& h : opt_.headers) request_ += h + "\r\n";
        request_ += "\r\n";
        ep_ = epoll_create1(EPOLL_CLOEXEC);
        if (ep_ < 0) die(std::string("epoll_create1: ") + std::strerror(errno));
    }

    void run();
    void write_json(std::FILE* f) const;
    void print_summary() const;

  private:
    std::size_t pick_target() {
        // Smooth weighted round robin (as nginx's upstream): deterministic, interleaved.
        std::size_t best = 0;
        for (std::size_t i = 0; i < nt_; ++i) {
            opt_.targets[i].current += opt_.targets[i].weight;
            if (opt_.targets[i].current > opt_.targets[best].current) best = i;
        }
        opt_.targets[best].current -= total_weight_;
        return best;
    }

    Counts& interval_at(std::uint64_t t_ns) {
        std::uint64_t rel = t_ns > t0_ ? t_ns - t0_ : 0;
        std::size_t i = static_cast<std::size_t>(rel / (opt_.interval_ms * 1000000ULL));
        if (i >= intervals_.size()) i = intervals_.size() - 1;
        return intervals_[i];
    }

    void dispatch(const Req& r, std::size_t target);
    void start_on(Conn* c, const Req& r);
    void flush(Conn* c);
    void on_event(Conn* c, std::uint32_t events);
    void on_readable(Conn* c);
    void complete(Conn* c, int status, bool close);
    void fail(Conn* c);  // the request in flight failed; closes the connection
    void close_conn(Conn* c);
    void after_free(std::size_t target);
    Conn* open_conn(std::size_t target);
    void record_error(const Req& r);
    void check_timeouts(std::uint64_t now);

    Options opt_;
    std::size_t nt_ = 0;
    double total_weight_ = 0;
    std::string request_;
    int ep_ = -1;
    std::uint64_t t0_ = 0;
    std::vector<PhaseStats> phase_stats_;
    std::vector<Counts> intervals_;
    std::vector<std::deque<Req>> queues_;
    std::vector<std::vector<Conn*>> idle_;
    std::vector<std::size_t> open_;
    std::vector<std::unique_ptr<Conn>> conns_;
    std::vector<Conn*> free_conns_;
    std::vector<Conn*> closed_conns_;
    std::uint64_t connections_opened_ = 0;
    std::uint64_t in_flight_ = 0;
    std::uint64_t unfinished_ = 0;
    double elapsed_s_ = 0;
};

Conn* Generator::open_conn(std::size_t target) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return nullptr;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const auto& a = opt_.targets[target].addr;
    int rc = connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    if (rc < 0 && errno != EINPROGRESS) {
        close(fd);
        return nullptr;
    }
    Conn* c;
    if (!free_conns_.empty()) {
        c = free_conns_.back();
        free_conns_.pop_back();
    } else {
        conns_.push_back(std::make_unique<Conn>());
        c = conns_.back().get();
    }
    c->fd = fd;
    c->target = target;
    c->connecting = rc < 0;
    c->busy = false;
    c->wrote = 0;
    c->rbuf.clear();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = c;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl ADD failed");
    open_[target]++;
    connections_opened_++;
    return c;
}

void Generator::record_error(const Req& r) {
    phase_stats_[r.phase].errors++;
    interval_at(now_ns()).errors++;
}

void Generator::dispatch(const Req& r, std::size_t target) {
    auto& idle = idle_[target];
    if (!idle.empty()) {
        Conn* c = idle.back();
        idle.pop_back();
        start_on(c, r);
        return;
    }
    if (open_[target] < opt_.max_connections) {
        Conn* c = open_conn(target);
        if (c == nullptr) {
            record_error(r);
            return;
        }
        start_on(c, r);
        return;
    }
    queues_[target].push_back(r);
    auto& ps = phase_stats_[r.phase];
    if (queues_[target].size() > ps.queued_max) ps.queued_max = queues_[target].size();
}

void Generator::start_on(Conn* c, const Req& r) {
    c->busy = true;
    c->req = r;
    c->wrote = 0;
    c->rbuf.clear();
    in_flight_++;
    if (!c->connecting) flush(c);
}

void Generator::flush(Conn* c) {
    if (c->wrote == 0) {
        std::uint64_t lag = now_ns() - c->req.sched_ns;
        phase_stats_[c->req.phase].send_lag.record(lag / 1000);
    }
    while (c->wrote < request_.size()) {
        ssize_t n =
            send(c->fd, request_.data() + c->wrote, request_.size() - c->wrote, MSG_NOSIGNAL);
        if (n > 0) {
            c->wrote += static_cast<std::size_t>(n);
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;  // EPOLLOUT (edge) continues
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            fail(c);
            return;
        }
    }
}

void Generator::close_conn(Conn* c) {
    if (c->fd < 0) return;
    epoll_ctl(ep_, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    c->fd = -1;
    open_[c->target]--;
    auto& idle = idle_[c->target];
    for (std::size_t i = 0; i < idle.size(); ++i) {
        if (idle[i] == c) {
            idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(i));
            break;
        }
    }
    // Reused only after the current batch of epoll events: one of them may still name it.
    closed_conns_.push_back(c);
}

void Generator::fail(Conn* c) {
    std::size_t target = c->target;
    if (c->busy) {
        c->busy = false;
        in_flight_--;
        record_error(c->req);
    }
    close_conn(c);
    after_free(target);
}

// A connection slot of `target` became available: serve the queue, if any.
void Generator::after_free(std::size_t target) {
    auto& q = queues_[target];
    while (!q.empty()) {
        if (!idle_[target].empty()) {
            Conn* c = idle_[target].back();
            idle_[target].pop_back();
            Req r = q.front();
            q.pop_front();
            start_on(c, r);
        } else if (open_[target] < opt_.max_connections) {
            Req r = q.front();
            q.pop_front();
            Conn* c = open_conn(target);
            if (c == nullptr) {
                record_error(r);
                continue;
            }
            start_on(c, r);
        } else {
            break;
        }
    }
}

void Generator::complete(Conn* c, int status, bool close) {
    std::uint64_t now = now_ns();
    const Req& r = c->req;
    std::uint64_t lat_us = (now - r.sched_ns) / 1000;
    auto& ps = phase_stats_[r.phase];
    auto& iv = interval_at(now);
    for (Counts* k : {static_cast<Counts*>(&ps), &iv}) {
        if (status >= 200 && status < 300) {
            k->ok++;
            k->ok_by_target[c->target]++;
        } else if (status == 429) {
            k->r429++;
        } else {
            k->other++;
        }
        k->latency.record(lat_us);
    }
    c->busy = false;
    in_flight_--;
    std::size_t target = c->target;
    if (close) {
        close_conn(c);
    } else {
        c->rbuf.clear();
        idle_[target].push_back(c);
    }
    after_free(target);
}

void Generator::on_readable(Conn* c) {
    char buf[16384];
    bool eof = false;
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n > 0) {
            if (c->busy) c->rbuf.append(buf, static_cast<std::size_t>(n));
            if (static_cast<std::size_t>(n) < sizeof buf) break;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {  // closed by the peer, or a connection error
            eof = true;
            break;
        }
    }
    if (!c->busy) {
        if (eof) {  // an idle keep-alive connection closed by the server
            std::size_t target = c->target;
            close_conn(c);
            after_free(target);
        }
        return;
    }
    Response r = parse_response(c->rbuf, eof);
    if (r.state == Response::State::Complete) {
        complete(c, r.status, r.close || eof);
    } else if (r.state == Response::State::Bad || eof) {
        fail(c);
    }
}

void Generator::on_event(Conn* c, std::uint32_t events) {
    if (c->fd < 0) return;
    if (c->connecting) {
        if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err != 0) {
                fail(c);
                return;
            }
            c->connecting = false;
            if (c->busy) {
                flush(c);
            } else {
                idle_[c->target].push_back(c);
                after_free(c->target);
            }
            if (c->fd < 0) return;
        } else {
            return;
        }
    } else if ((events & EPOLLOUT) && c->busy && c->wrote < request_.size()) {
        flush(c);
        if (c->fd < 0) return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) on_readable(c);
}

void Generator::check_timeouts(std::uint64_t now) {
    std::uint64_t limit = opt_.timeout_ms * 1000000ULL;
    for (std::size_t i = 0; i < conns_.size(); ++i) {  // fail() may add connections
        Conn* c = conns_[i].get();
        if (c->fd >= 0 && c->busy && now - c->req.sched_ns > limit) fail(c);
    }
}

void Generator::run() {
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // 1 µs: send on time
    t0_ = now_ns() + 20000000ULL;
    std::size_t phase = 0;
    std::uint64_t phase_start = t0_;
    std::uint64_t in_phase = 0;  // requests scheduled so far in this phase
    auto phase_end = [&](std::size_t p) {
        return phase_start + static_cast<std::uint64_t>(opt_.phases[p].seconds * 1e9);
    };
    std::uint64_t schedule_end = t0_;
    for (const auto& p : opt_.phases) schedule_end += static_cast<std::uint64_t>(p.seconds * 1e9);
    std::uint64_t deadline = schedule_end + opt_.timeout_ms * 1000000ULL + 100000000ULL;
    std::uint64_t last_timeout_check = 0;
    epoll_event events[512];
    bool done_sending = false;

    for (;;) {
        std::uint64_t now = now_ns();
        // Issue every request that is due.
        std::uint64_t next = 0;
        while (!done_sending) {
            if (phase >= opt_.phases.size()) {
                done_sending = true;
                break;
            }
            const Phase& p = opt_.phases[phase];
            std::uint64_t t = p.rate > 0
                                  ? phase_start + static_cast<std::uint64_t>(
                                                      static_cast<double>(in_phase) * 1e9 / p.rate)
                                  : phase_end(phase);
            if (t >= phase_end(phase)) {
                phase_start = phase_end(phase);
                phase++;
                in_phase = 0;
                continue;
            }
            if (t > now) {
                next = t;
                break;
            }
            Req r{t, static_cast<std::uint32_t>(phase)};
            std::size_t target = pick_target();
            auto& ps = phase_stats_[phase];
            ps.offered++;
            ps.offered_by_target[target]++;
            auto& iv = interval_at(t);
            iv.offered++;
            iv.offered_by_target[target]++;
            in_phase++;
            dispatch(r, target);
        }
        if (now - last_timeout_check > 10000000ULL) {
            check_timeouts(now);
            last_timeout_check = now;
        }
        if (done_sending) {
            bool queued = false;
            for (const auto& q : queues_) queued = queued || !q.empty();
            if ((in_flight_ == 0 && !queued) || now > deadline) break;
        }
        // Sleep until the next send or housekeeping, whichever is first.
        std::uint64_t wake = now + 10000000ULL;
        if (!done_sending && next != 0 && next < wake) wake = next;
        std::uint64_t wait = wake > now ? wake - now : 0;
        // Waking from a sleep takes tens of µs (more in a VM); spin for short waits so that
        // requests leave on schedule. This core is the generator's own.
        if (wait < opt_.spin_us * 1000ULL) wait = 0;
        timespec ts{static_cast<time_t>(wait / 1000000000ULL),
                    static_cast<long>(wait % 1000000000ULL)};
        int n = epoll_pwait2(ep_, events, 512, &ts, nullptr);
        if (n < 0 && errno != EINTR) die(std::string("epoll_pwait2: ") + std::strerror(errno));
        for (int i = 0; i < n; ++i) {
            on_event(static_cast<Conn*>(events[i].data.ptr), events[i].events);
        }
        free_conns_.insert(free_conns_.end(), closed_conns_.begin(), closed_conns_.end());
        closed_conns_.clear();
    }
    // Whatever is still queued or in flight did not finish in time.
    for (auto& q : queues_) {
        for (const Req& r : q) {
            record_error(r);
            unfinished_++;
        }
        q.clear();
    }
    for (std::size_t i = 0; i < conns_.size(); ++i) {
        Conn* c = conns_[i].get();
        if (c->fd >= 0 && c->busy) {
            unfinished_++;
            c->busy = false;
            in_flight_--;
            record_error(c->req);
        }
    }
    for (std::size_t i = 0; i < conns_.size(); ++i) {
        if (conns_[i]->fd >= 0) close_conn(conns_[i].get());
    }
    elapsed_s_ = static_cast<double>(now_ns() - t0_) / 1e9;
}

void write_counts(std::FILE* f, const Counts& c) {
    std::fprintf(f,
                 "\"offered\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"r429\":%" PRIu64
                 ",\"other\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"offered_by_target\":[",
                 c.offered, c.ok, c.r429, c.other, c.errors);
    for (std::size_t i = 0; i < c.offered_by_target.size(); ++i) {
        std::fprintf(f, "%s%" PRIu64, i ? "," : "", c.offered_by_target[i]);
    }
    std::fputs("],\"ok_by_target\":[", f);
    for (std::size_t i = 0; i < c.ok_by_target.size(); ++i) {
        std::fprintf(f, "%s%" PRIu64, i ? "," : "", c.ok_by_target[i]);
    }
    std::fputs("]", f);
}

void write_latency(std::FILE* f, const char* key, const Histogram& h) {
    std::fprintf(f,
                 "\"%s\":{\"count\":%" PRIu64 ",\"p50\":%" PRIu64 ",\"p90\":%" PRIu64
                 ",\"p99\":%" PRIu64 ",\"p995\":%" PRIu64 ",\"p999\":%" PRIu64 ",\"max\":%" PRIu64
                 "}",
                 key, h.count(), h.percentile(50), h.percentile(90), h.percentile(99),
                 h.percentile(99.5), h.percentile(99.9), h.max());
}

void Generator::write_json(std::FILE* f) const {
    std::fprintf(f, "{\"interval_ms\":%" PRIu64 ",\"elapsed_s\":%.3f,\"targets\":[",
                 opt_.interval_ms, elapsed_s_);
    for (std::size_t i = 0; i < nt_; ++i) {
        std::fprintf(f, "%s{\"target\":\"%s\",\"weight\":%g}", i ? "," : "",
                     opt_.targets[i].spec.c_str(), opt_.targets[i].weight);
    }
    std::fprintf(f, "],\"connections_opened\":%" PRIu64 ",\"unfinished\":%" PRIu64 ",\"phases\":[",
                 connections_opened_, unfinished_);
    double start = 0;
    for (std::size_t i = 0; i < phase_stats_.size(); ++i) {
        const auto& p = phase_stats_[i];
        std::fprintf(f, "%s\n{\"rate\":%g,\"seconds\":%g,\"start_s\":%g,\"queued_max\":%zu,",
                     i ? "," : "", opt_.phases[i].rate, opt_.phases[i].seconds, start,
                     p.queued_max);
        start += opt_.phases[i].seconds;
        write_counts(f, p);
        std::fputs(",", f);
        write_latency(f, "latency_us", p.latency);
        std::fputs(",", f);
        write_latency(f, "send_lag_us", p.send_lag);
        std::fputs("}", f);
    }
    std::fputs("],\"intervals\":[", f);
    // Trailing empty intervals (drain slack) are left out.
    std::size_t last = 0;
    for (std::size_t i = 0; i < intervals_.size(); ++i) {
        const auto& c = intervals_[i];
        if (c.offered || c.ok || c.r429 || c.other || c.errors) last = i + 1;
    }
    for (std::size_t i = 0; i < last; ++i) {
        const auto& c = intervals_[i];
        std::fprintf(f, "%s\n{\"t\":%g,", i ? "," : "",
                     static_cast<double>((i + 1) * opt_.interval_ms) / 1000.0);
        write_counts(f, c);
        std::fprintf(f, ",\"p50_us\":%" PRIu64 ",\"p99_us\":%" PRIu64 ",\"max_us\":%" PRIu64 "}",
                     c.latency.percentile(50), c.latency.percentile(99), c.latency.max());
    }
    std::fputs("]}\n", f);
}

void Generator::print_summary() const {
    for (std::size_t i = 0; i < phase_stats_.size(); ++i) {
        const auto& p = phase_stats_[i];
        std::fprintf(stderr,
                     "phase %zu: %g r/s x %gs: offered %" PRIu64 " 2xx %" PRIu64 " 429 %" PRIu64
                     " other %" PRIu64 " errors %" PRIu64 "; p50 %" PRIu64 " p99 %" PRIu64
                     " p99.9 %" PRIu64 " us; send lag p99 %" PRIu64 " us\n",
                     i, opt_.phases[i].rate, opt_.phases[i].seconds, p.offered, p.ok, p.r429,
                     p.other, p.errors, p.latency.percentile(50), p.latency.percentile(99),
                     p.latency.percentile(99.9), p.send_lag.percentile(99));
    }
}

}  // namespace

int main(int argc, char** argv) {
    Options o = parse_args(argc, argv);
    std::string out = o.out;
    Generator g(std::move(o));
    g.run();
    g.print_summary();
    std::FILE* f = stdout;
    if (!out.empty()) {
        f = std::fopen(out.c_str(), "w");
        if (f == nullptr) die("cannot write " + out + ": " + std::strerror(errno));
    }
    g.write_json(f);
    if (f != stdout) std::fclose(f);
    return 0;
}
