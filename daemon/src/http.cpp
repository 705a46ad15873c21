#include "grl/daemon/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace grl::daemon {

namespace {
constexpr std::size_t kMaxClients = 64;
constexpr std::size_t kMaxRequest = 8192;
constexpr std::uint64_t kClientTimeoutMs = 5000;

std::string status_head(int code, const char* reason, std::size_t length, const std::string& type,
                        const std::string& headers = {}) {
    return "HTTP/1.0 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
           "\r\nContent-Length: " + std::to_string(length) + "\r\n" + headers +
           "Connection: close\r\n\r\n";
}

std::string response(int code, const char* reason, const std::string& body,
                     const char* type = "text/plain; charset=utf-8") {
    return status_head(code, reason, body.size(), type) + body;
}

const char* reason_of(int code) {
    switch (code) {
        case 200: return "OK";
        case 304: return "Not Modified";
        case 400: return "Bad Request";
        case 404: return "Not Found";
        case 503: return "Service Unavailable";
        default: return code < 400 ? "OK" : "Error";
    }
}
}  // namespace

MetricsServer::MetricsServer(Loop& loop, const std::string& address,
                             std::function<std::string()> render, Routes routes)
    : loop_(loop), render_(std::move(render)), routes_(std::move(routes)) {
    auto colon = address.rfind(':');
    if (colon == std::string::npos) {
        throw std::runtime_error("metrics address \"" + address + "\": expected host:port");
    }
    std::string host = address.substr(0, colon), port = address.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    if (host.empty() || host == "*") host = "0.0.0.0";
    struct addrinfo hints;
    std::memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    struct addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
        throw std::runtime_error("metrics address \"" + address + "\": " + gai_strerror(rc));
    }
    listen_fd_ = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (listen_fd_ >= 0) setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (listen_fd_ < 0 || ::bind(listen_fd_, res->ai_addr, res->ai_addrlen) != 0 ||
        listen(listen_fd_, 64) != 0) {
        std::string e = strerror(errno);
        freeaddrinfo(res);
        if (listen_fd_ >= 0) close(listen_fd_);
        throw std::runtime_error("cannot listen on " + address + ": " + e);
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    getsockname(listen_fd_, reinterpret_cast<struct sockaddr*>(&ss), &len);
    char buf[INET6_ADDRSTRLEN] = "?";
    int bound_port = 0;
    if (ss.ss_family == AF_INET) {
        auto* a = reinterpret_cast<struct sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
        bound_port = ntohs(a->sin_port);
        bound_ = std::string(buf) + ":" + std::to_string(bound_port);
    } else {
        auto* a = reinterpret_cast<struct sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
        bound_port = ntohs(a->sin6_port);
        bound_ = "[" + std::string(buf) + "]:" + std::to_string(bound_port);
    }
    loop_.on_fd(listen_fd_, POLLIN, [this](short) { on_accept(); });
    loop_.every(1000, [this] { expire(); });
}

MetricsServer::~MetricsServer() {
    for (auto& [fd, c] : clients_) close(fd);
    if (listen_fd_ >= 0) close(listen_fd_);
}

void MetricsServer::on_accept() {
    for (;;) {
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        if (clients_.size() >= kMaxClients) {
            close(fd);
            continue;
        }
        clients_[fd].deadline_ms = mono_ms() + kClientTimeoutMs;
        loop_.on_fd(fd, POLLIN, [this, fd](short ev) { on_client(fd, ev); });
    }
}

void MetricsServer::on_client(int fd, short revents) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    Client& c = it->second;
    if (revents & (POLLERR | POLLNVAL)) return drop(fd);
    if (c.out.empty()) {
        char buf[2048];
        for (;;) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n > 0) {
                c.in.append(buf, static_cast<std::size_t>(n));
                if (c.in.size() > kMaxRequest) return drop(fd);
                continue;
            }
            if (n == 0) {
                if (!parse_request_head(c.in).complete) return drop(fd);
                break;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return drop(fd);
        }
        if (!parse_request_head(c.in).complete) return;  // request not complete yet
        respond(fd, c);
        loop_.set_fd_events(fd, POLLOUT);
    }
    const std::size_t total = c.out.size() + (c.body ? c.body->size() : 0);
    while (c.sent < total) {
        const bool in_out = c.sent < c.out.size();
        const char* p = in_out ? c.out.data() + c.sent : c.body->data() + (c.sent - c.out.size());
        const std::size_t left = in_out ? c.out.size() - c.sent : total - c.sent;
        ssize_t n = write(fd, p, left);
        if (n > 0) {
            c.sent += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        return drop(fd);
    }
    drop(fd);
}

RequestHead parse_request_head(std::string_view in) {
    RequestHead h;
    h.complete =
        in.find("\r\n\r\n") != std::string_view::npos || in.find("\n\n") != std::string_view::npos;
    std::string_view line = in.substr(0, in.find('\n'));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto sp1 = line.find(' ');
    h.method = std::string(line.substr(0, sp1));
    if (sp1 != std::string_view::npos) {
        std::string_view path = line.substr(sp1 + 1);
        path = path.substr(0, path.find(' '));
        const auto q = path.find('?');
        h.path = std::string(path.substr(0, q));
        if (q != std::string_view::npos) h.query = std::string(path.substr(q + 1));
    }
    return h;
}

void MetricsServer::respond(int, Client& c) {
    const RequestHead head = parse_request_head(c.in);
    const std::string& method = head.method;
    const std::string& path = head.path;
    if (method != "GET" && method != "HEAD") {
        c.out = response(405, "Method Not Allowed", "only GET\n");
    } else if (path != "/metrics") {
        std::optional<HttpResponse> r;
        try {
            if (routes_) r = routes_(head);
        } catch (const std::exception& e) {
            c.out = response(500, "Internal Server Error", std::string(e.what()) + "\n");
            return;
        }
        if (!r) {
            c.out = response(404, "Not Found", "try /metrics\n");
            return;
        }
        const std::size_t length = r->body ? r->body->size() : 0;
        c.out = status_head(r->status, reason_of(r->status), length, r->type, r->headers);
        if (method != "HEAD") c.body = std::move(r->body);
    } else {
        std::string body;
        try {
            body = render_();
        } catch (const std::exception& e) {
            c.out = response(500, "Internal Server Error", std::string(e.what()) + "\n");
            return;
        }
        c.out = response(200, "OK", method == "HEAD" ? std::string() : body,
                         "text/plain; version=0.0.4; charset=utf-8");
    }
}

void MetricsServer::drop(int fd) {
    loop_.remove_fd(fd);
    close(fd);
    clients_.erase(fd);
}

void MetricsServer::expire() {
    std::uint64_t now = mono_ms();
    std::vector<int> old;
    for (const auto& [fd, c] : clients_) {
        if (now > c.deadline_ms) old.push_back(fd);
    }
    for (int fd : old) drop(fd);
}

}  // namespace grl::daemon
