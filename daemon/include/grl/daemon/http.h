// The /metrics endpoint: a minimal HTTP/1.0 server on a TCP port, driven by the daemon's
// Loop (no thread, no extra dependency). GET /metrics answers the text of `render()`; other
// paths go to `routes` (the controller's dashboard), else 404 (405 for another method than
// GET or HEAD). One request per connection.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "grl/daemon/loop.h"

namespace grl::daemon {

// The head of an HTTP request as the /metrics server reads it: the request line's method,
// path and query (after '?', "" without one). `complete` is false until the blank line that
// ends the head.
struct RequestHead {
    bool complete = false;
    std::string method;
    std::string path;
    std::string query;
};
RequestHead parse_request_head(std::string_view in);

// The answer of a route. The body is shared, not copied: a document rendered elsewhere (the
// dashboard's thread) costs the loop one reference per request.
struct HttpResponse {
    int status = 200;
    std::string type = "text/plain; charset=utf-8";
    std::shared_ptr<const std::string> body;
    std::string headers;  // more header lines, each ending "\r\n"
};
// Called in the loop for every GET or HEAD of a path other than /metrics: an answer, or
// nullopt for 404. Must not block.
using Routes = std::function<std::optional<HttpResponse>(const RequestHead&)>;

class MetricsServer {
  public:
    // `address` is "host:port" (port 0: any free port). Throws std::runtime_error.
    MetricsServer(Loop& loop, const std::string& address, std::function<std::string()> render,
                  Routes routes = {});
    ~MetricsServer();
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    std::string address() const { return bound_; }  // "127.0.0.1:45678"

  private:
    struct Client {
        std::string in;
        std::string out;                          // the head, or all of a small answer
        std::shared_ptr<const std::string> body;  // a route's body, after `out`
        std::size_t sent = 0;                     // of out, then of body
        std::uint64_t deadline_ms = 0;
    };
    void on_accept();
    void on_client(int fd, short revents);
    void respond(int fd, Client& c);
    void drop(int fd);
    void expire();

    Loop& loop_;
    std::function<std::string()> render_;
    Routes routes_;
    int listen_fd_ = -1;
    std::string bound_;
    std::map<int, Client> clients_;
};

}  // namespace grl::daemon
