// The /metrics endpoint: a minimal HTTP/1.0 server on a TCP port, driven by the daemon's
// Loop (no thread, no extra dependency). GET /metrics answers the text of `render()`;
// anything else is 404 (or 405 for another method). One request per connection.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "grl/daemon/loop.h"

namespace grl::daemon {

// The head of an HTTP request as the /metrics server reads it: the request line's method
// and path (query removed). `complete` is false until the blank line that ends the head.
struct RequestHead {
    bool complete = false;
    std::string method;
    std::string path;
};
RequestHead parse_request_head(std::string_view in);

class MetricsServer {
  public:
    // `address` is "host:port" (port 0: any free port). Throws std::runtime_error.
    MetricsServer(Loop& loop, const std::string& address, std::function<std::string()> render);
    ~MetricsServer();
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    std::string address() const { return bound_; }  // "127.0.0.1:45678"

  private:
    struct Client {
        std::string in;
        std::string out;
        std::size_t sent = 0;
        std::uint64_t deadline_ms = 0;
    };
    void on_accept();
    void on_client(int fd, short revents);
    void respond(int fd, Client& c);
    void drop(int fd);
    void expire();

    Loop& loop_;
    std::function<std::string()> render_;
    int listen_fd_ = -1;
    std::string bound_;
    std::map<int, Client> clients_;
};

}  // namespace grl::daemon
