// A small etcd v3 client over etcd's JSON gateway (`/v3/kv/range`, `/v3/kv/put`,
// `/v3/watch`): get, put and watch one key. The pure parts (the `etcd://HOST:PORT/KEY` URL,
// base64, the watch stream's line reader, the replies' JSON) are separate from the HTTP so
// that they are unit-tested without etcd (t/unit/etcd_test.cpp). Used by grl-controller
// (--limits etcd://...) and grl-rlc (pushing versions). See docs/control-plane.md, "Limits
// from etcd".
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace httplib {
class Client;
}

namespace grl::daemon::etcd {

struct Url {
    std::string host;
    std::uint16_t port = 0;
    std::string key;           // without the leading '/'
    bool tls = false;          // etcds://: HTTPS, the server's certificate verified
    std::string text() const;  // etcd[s]://HOST:PORT/KEY
};

bool is_url(std::string_view s);  // starts with "etcd://" or "etcds://"
// "etcd://HOST:PORT/KEY" or "etcds://HOST:PORT/KEY"; on failure returns nothing and sets
// `error`, naming the value.
std::optional<Url> parse_url(std::string_view s, std::string& error);

// How to reach a secured etcd (docs/control-plane.md, "Limits from etcd"): for etcds://, the
// CA that signed the server's certificate (empty: the system's) and an optional client
// certificate; etcd's own authentication with a user and password (empty user: none).
struct Access {
    std::string ca_file;
    std::string cert_file;
    std::string key_file;
    std::string user;
    std::string password;
    bool operator==(const Access& o) const {
        return ca_file == o.ca_file && cert_file == o.cert_file && key_file == o.key_file &&
               user == o.user && password == o.password;
    }
};
// The first line of a password file, without its line end; false (and `error` naming the
// file) when it cannot be read or is empty.
bool read_password_file(const std::string& path, std::string& out, std::string& error);
// An /v3/auth/authenticate reply: its token.
bool parse_auth_reply(std::string_view body, std::string& token, std::string& error);

std::string base64_encode(std::string_view in);
// Standard alphabet with padding (what the gateway sends); false on any other character.
bool base64_decode(std::string_view in, std::string& out);

// Cuts a byte stream (the watch reply: one JSON object per line) into lines. A line longer
// than `max_line` is an error: a limits file is small, a runaway stream must not grow memory.
class LineReader {
  public:
    explicit LineReader(std::size_t max_line) : max_line_(max_line) {}
    // False when a line (complete or not) exceeds max_line.
    bool feed(std::string_view chunk);
    // The next complete line (without '\n' or "\r\n"), or nothing.
    std::optional<std::string> next();

  private:
    std::string buf_;
    std::size_t pos_ = 0;
    std::size_t max_line_;
};

// One key's value as etcd holds it.
struct KeyValue {
    bool exists = false;            // false: no such key (never written, or deleted)
    std::string value;              // decoded
    std::int64_t mod_revision = 0;  // of the last change (put or delete) seen
};

// A /v3/kv/range reply for one key: the store's revision and the key.
struct RangeReply {
    std::int64_t revision = 0;
    KeyValue kv;
};
bool parse_range_reply(std::string_view body, RangeReply& out, std::string& error);

// One line of a /v3/watch stream.
struct WatchMessage {
    bool created = false;
    bool canceled = false;
    std::int64_t compact_revision = 0;  // when canceled because the start was compacted
    std::int64_t revision = 0;          // header revision
    std::string cancel_reason;
    std::vector<KeyValue> events;  // in order; exists=false for a DELETE
};
bool parse_watch_line(std::string_view line, WatchMessage& out, std::string& error);

// A put's reply: the revision it created.
bool parse_put_reply(std::string_view body, std::int64_t& revision, std::string& error);

// Blocking HTTP client for one key. Errors are thrown as std::runtime_error naming the URL and
// what failed. One Client per thread; stop() may be called from another thread to end a
// watch (or any request) at once.
class Client {
  public:
    explicit Client(Url url, Access access = {}, std::uint64_t timeout_ms = 3000);
    ~Client();
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;

    RangeReply get();
    std::int64_t put(const std::string& value);  // returns the new revision
    // Watches the key from `start_revision`. `on_message` gets every message (the first says
    // created); returning false ends the watch. Returns when the stream ends (etcd went
    // away, a read timed out, stop()) with the reason in words.
    std::string watch(std::int64_t start_revision,
                      const std::function<bool(const WatchMessage&)>& on_message);
    void stop();
    const Url& url() const { return url_; }

  private:
    std::unique_ptr<httplib::Client> http() const;
    std::string post(const char* path, const std::string& body);
    // A token from /v3/auth/authenticate (with access_.user); "" without a user.
    std::string token(bool renew);
    Url url_;
    Access access_;
    std::string token_;
    std::uint64_t timeout_ms_;
    std::mutex mu_;  // guards watch_client_ for stop()
    httplib::Client* watch_client_ = nullptr;
    std::atomic<bool> stopped_{false};
};

}  // namespace grl::daemon::etcd
