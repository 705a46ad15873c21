#include "grl/daemon/etcd.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace grl::daemon::etcd {

namespace {

constexpr std::string_view kScheme = "etcd://";
constexpr std::string_view kTlsScheme = "etcds://";
// The gateway's JSON for one limits file: far below this. A longer line is not etcd.
constexpr std::size_t kMaxLine = 16u << 20;

using nlohmann::json;

// etcd's gateway writes int64 as strings ("revision":"5"); accept numbers too.
bool int64_of(const json& j, const char* key, std::int64_t& out) {
    auto it = j.find(key);
    if (it == j.end()) {
        out = 0;
        return true;
    }
    if (it->is_number_integer()) {
        out = it->get<std::int64_t>();
        return true;
    }
    if (!it->is_string()) return false;
    const std::string& s = it->get_ref<const std::string&>();
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0) return false;
    out = v;
    return true;
}

bool read_kv(const json& j, KeyValue& kv, std::string& error) {
    if (!j.is_object()) {
        error = "\"kv\" is not an object";
        return false;
    }
    if (!int64_of(j, "mod_revision", kv.mod_revision)) {
        error = "invalid \"mod_revision\"";
        return false;
    }
    kv.value.clear();
    auto v = j.find("value");  // absent for an empty value
    if (v != j.end()) {
        if (!v->is_string() || !base64_decode(v->get_ref<const std::string&>(), kv.value)) {
            error = "\"value\" is not base64";
            return false;
        }
    }
    kv.exists = true;
    return true;
}

bool header_revision(const json& j, std::int64_t& rev, std::string& error) {
    auto h = j.find("header");
    if (h == j.end() || !h->is_object() || !int64_of(*h, "revision", rev)) {
        error = "no valid \"header\".\"revision\"";
        return false;
    }
    return true;
}

// Notices a peer that vanished without closing (a partition): a watch is quiet for long
// stretches, so only TCP keepalive can tell (about 10 + 3 x 5 s).
void keepalive(socket_t sock) {
    int on = 1, idle = 10, intvl = 5, cnt = 3;
    setsockopt(sock, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    setsockopt(sock, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(sock, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(sock, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

}  // namespace

std::string Url::text() const {
    return std::string(tls ? kTlsScheme : kScheme) + host + ":" + std::to_string(port) + "/" + key;
}

bool is_url(std::string_view s) {
    return s.substr(0, kScheme.size()) == kScheme || s.substr(0, kTlsScheme.size()) == kTlsScheme;
}

std::optional<Url> parse_url(std::string_view s, std::string& error) {
    auto bad = [&](const std::string& why) {
        error = "invalid etcd URL \"" + std::string(s) + "\": " + why +
                " (expected etcd://HOST:PORT/KEY or etcds://HOST:PORT/KEY)";
        return std::nullopt;
    };
    if (!is_url(s)) return bad("not etcd:// or etcds://");
    const bool tls = s.substr(0, kTlsScheme.size()) == kTlsScheme;
    std::string_view rest = s.substr(tls ? kTlsScheme.size() : kScheme.size());
    std::size_t slash = rest.find('/');
    if (slash == std::string_view::npos) return bad("no key");
    std::string_view hostport = rest.substr(0, slash);
    Url u;
    u.tls = tls;
    u.key = std::string(rest.substr(slash + 1));
    if (u.key.empty()) return bad("empty key");
    std::size_t colon = hostport.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    u.host = std::string(hostport.substr(0, colon));
    if (u.host.empty()) return bad("empty host");
    std::string_view port = hostport.substr(colon + 1);
    unsigned long p = 0;
    for (char c : port) {
        if (c < '0' || c > '9') return bad("invalid port");
        p = p * 10 + static_cast<unsigned long>(c - '0');
        if (p > 65535) return bad("invalid port");
    }
    if (port.empty() || p == 0) return bad("invalid port");
    u.port = static_cast<std::uint16_t>(p);
    return u;
}

std::string base64_encode(std::string_view in) {
    static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 3 <= in.size(); i += 3) {
        std::uint32_t v =
            (std::uint8_t(in[i]) << 16) | (std::uint8_t(in[i + 1]) << 8) | std::uint8_t(in[i + 2]);
        out += t[v >> 18];
        out += t[(v >> 12) & 63];
        out += t[(v >> 6) & 63];
        out += t[v & 63];
    }
    if (i + 1 == in.size()) {
        std::uint32_t v = std::uint8_t(in[i]) << 16;
        out += t[v >> 18];
        out += t[(v >> 12) & 63];
        out += "==";
    } else if (i + 2 == in.size()) {
        std::uint32_t v = (std::uint8_t(in[i]) << 16) | (std::uint8_t(in[i + 1]) << 8);
        out += t[v >> 18];
        out += t[(v >> 12) & 63];
        out += t[(v >> 6) & 63];
        out += '=';
    }
    return out;
}

bool base64_decode(std::string_view in, std::string& out) {
    auto val = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    out.clear();
    if (in.size() % 4 != 0) return false;
    out.reserve(in.size() / 4 * 3);
    for (std::size_t i = 0; i < in.size(); i += 4) {
        int a = val(in[i]), b = val(in[i + 1]);
        if (a < 0 || b < 0) return false;
        bool last = i + 4 == in.size();
        int c = in[i + 2] == '=' && last ? -2 : val(in[i + 2]);
        int d = in[i + 3] == '=' && last ? -2 : val(in[i + 3]);
        if (c == -1 || d == -1 || (c == -2 && d != -2)) return false;
        out += static_cast<char>((a << 2) | (b >> 4));
        if (c >= 0) out += static_cast<char>(((b & 15) << 4) | (c >> 2));
        if (d >= 0) out += static_cast<char>(((c & 3) << 6) | d);
    }
    return true;
}

bool LineReader::feed(std::string_view chunk) {
    if (pos_ > 0 && pos_ == buf_.size()) {
        buf_.clear();
        pos_ = 0;
    } else if (pos_ > buf_.size() / 2) {
        buf_.erase(0, pos_);
        pos_ = 0;
    }
    buf_.append(chunk.data(), chunk.size());
    std::size_t nl = buf_.find('\n', pos_);
    std::size_t start = pos_;
    while (nl != std::string::npos) {
        if (nl - start > max_line_) return false;
        start = nl + 1;
        nl = buf_.find('\n', start);
    }
    return buf_.size() - start <= max_line_;
}

std::optional<std::string> LineReader::next() {
    std::size_t nl = buf_.find('\n', pos_);
    if (nl == std::string::npos) return std::nullopt;
    std::size_t end = nl > pos_ && buf_[nl - 1] == '\r' ? nl - 1 : nl;
    std::string line = buf_.substr(pos_, end - pos_);
    pos_ = nl + 1;
    return line;
}

bool parse_range_reply(std::string_view body, RangeReply& out, std::string& error) {
    out = RangeReply{};
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        error = "range reply is not a JSON object";
        return false;
    }
    if (!header_revision(j, out.revision, error)) return false;
    auto kvs = j.find("kvs");
    if (kvs == j.end()) return true;  // no such key
    if (!kvs->is_array() || kvs->size() > 1) {
        error = "\"kvs\" is not an array of at most one entry";
        return false;
    }
    if (kvs->empty()) return true;
    return read_kv((*kvs)[0], out.kv, error);
}

bool parse_watch_line(std::string_view line, WatchMessage& out, std::string& error) {
    out = WatchMessage{};
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        error = "watch line is not a JSON object";
        return false;
    }
    auto err = j.find("error");
    if (err != j.end()) {
        error = "watch error: " + err->dump();
        return false;
    }
    auto r = j.find("result");
    if (r == j.end() || !r->is_object()) {
        error = "watch line without \"result\"";
        return false;
    }
    if (!header_revision(*r, out.revision, error)) return false;
    out.created = r->value("created", false);
    out.canceled = r->value("canceled", false);
    if (!int64_of(*r, "compact_revision", out.compact_revision)) {
        error = "invalid \"compact_revision\"";
        return false;
    }
    out.cancel_reason = r->value("cancel_reason", std::string());
    auto events = r->find("events");
    if (events == r->end()) return true;
    if (!events->is_array()) {
        error = "\"events\" is not an array";
        return false;
    }
    for (const json& e : *events) {
        if (!e.is_object() || !e.contains("kv")) {
            error = "an event without \"kv\"";
            return false;
        }
        KeyValue kv;
        if (!read_kv(e["kv"], kv, error)) return false;
        kv.exists = e.value("type", std::string("PUT")) != "DELETE";
        if (!kv.exists) kv.value.clear();
        out.events.push_back(std::move(kv));
    }
    return true;
}

bool parse_put_reply(std::string_view body, std::int64_t& revision, std::string& error) {
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        error = "put reply is not a JSON object";
        return false;
    }
    return header_revision(j, revision, error);
}

bool read_password_file(const std::string& path, std::string& out, std::string& error) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
        error = "cannot read password file " + path + ": " + std::strerror(errno);
        return false;
    }
    char buf[1024];
    std::size_t n = std::fread(buf, 1, sizeof buf, f);
    std::fclose(f);
    std::string_view text(buf, n);
    text = text.substr(0, text.find('\n'));
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.empty()) {
        error = "password file " + path + " is empty";
        return false;
    }
    out = std::string(text);
    return true;
}

bool parse_auth_reply(std::string_view body, std::string& token, std::string& error) {
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("token") || !j["token"].is_string() ||
        j["token"].get<std::string>().empty()) {
        error = "authenticate reply has no token";
        return false;
    }
    token = j["token"].get<std::string>();
    return true;
}

Client::Client(Url url, Access access, std::uint64_t timeout_ms)
    : url_(std::move(url)), access_(std::move(access)), timeout_ms_(timeout_ms) {}

// Plain HTTP for etcd://; for etcds://, HTTPS with the server's certificate verified (against
// access_.ca_file, else the system's CAs) and the client certificate when given.
std::unique_ptr<httplib::Client> Client::http() const {
    const std::string where = url_.host + ":" + std::to_string(url_.port);
    if (!url_.tls) return std::make_unique<httplib::Client>(url_.host, url_.port);
    auto c =
        std::make_unique<httplib::Client>("https://" + where, access_.cert_file, access_.key_file);
    if (!c->is_valid())
        throw std::runtime_error(url_.text() + ": cannot use client certificate " +
                                 access_.cert_file + " / key " + access_.key_file);
    if (!access_.ca_file.empty()) c->set_ca_cert_path(access_.ca_file.c_str());
    c->enable_server_certificate_verification(true);
    return c;
}

std::string Client::token(bool renew) {
    if (access_.user.empty()) return {};
    if (!token_.empty() && !renew) return token_;
    token_.clear();
    json q = {{"name", access_.user}, {"password", access_.password}};
    auto c = http();
    const auto s = static_cast<time_t>(timeout_ms_ / 1000);
    const auto us = static_cast<time_t>(timeout_ms_ % 1000 * 1000);
    c->set_connection_timeout(s, us);
    c->set_read_timeout(s, us);
    httplib::Result res = c->Post("/v3/auth/authenticate", q.dump(), "application/json");
    if (!res)
        throw std::runtime_error(url_.text() + ": /v3/auth/authenticate: no answer (" +
                                 httplib::to_string(res.error()) + ")");
    if (res->status != 200)
        throw std::runtime_error(url_.text() + ": user " + access_.user +
                                 " cannot authenticate: HTTP " + std::to_string(res->status) +
                                 ": " + res->body.substr(0, 200));
    std::string error;
    if (!parse_auth_reply(res->body, token_, error))
        throw std::runtime_error(url_.text() + ": /v3/auth/authenticate: " + error);
    return token_;
}

Client::~Client() = default;

void Client::stop() {
    stopped_ = true;
    std::lock_guard<std::mutex> lock(mu_);
    if (watch_client_) watch_client_->stop();
}

std::string Client::post(const char* path, const std::string& body) {
    auto http_client = http();
    httplib::Client& http = *http_client;
    const auto s = static_cast<time_t>(timeout_ms_ / 1000);
    const auto us = static_cast<time_t>(timeout_ms_ % 1000 * 1000);
    http.set_connection_timeout(s, us);
    http.set_read_timeout(s, us);
    http.set_write_timeout(s, us);
    auto send = [&](bool renew) {
        httplib::Headers h;
        if (std::string t = token(renew); !t.empty()) h.emplace("Authorization", t);
        return http.Post(path, h, body, "application/json");
    };
    httplib::Result res = send(false);
    // Tokens expire (etcd's simple tokens after 5 minutes idle): once more with a new one.
    if (res && res->status != 200 && !access_.user.empty() &&
        res->body.find("auth token") != std::string::npos)
        res = send(true);
    if (!res)
        throw std::runtime_error(url_.text() + ": " + path + ": no answer (" +
                                 httplib::to_string(res.error()) + ")");
    if (res->status != 200)
        throw std::runtime_error(url_.text() + ": " + path + ": HTTP " +
                                 std::to_string(res->status) + ": " + res->body.substr(0, 200));
    return res->body;
}

RangeReply Client::get() {
    json q = {{"key", base64_encode(url_.key)}};
    std::string body = post("/v3/kv/range", q.dump());
    RangeReply r;
    std::string error;
    if (!parse_range_reply(body, r, error))
        throw std::runtime_error(url_.text() + ": /v3/kv/range: " + error);
    return r;
}

std::int64_t Client::put(const std::string& value) {
    json q = {{"key", base64_encode(url_.key)}, {"value", base64_encode(value)}};
    std::string body = post("/v3/kv/put", q.dump());
    std::int64_t rev = 0;
    std::string error;
    if (!parse_put_reply(body, rev, error))
        throw std::runtime_error(url_.text() + ": /v3/kv/put: " + error);
    return rev;
}

std::string Client::watch(std::int64_t start_revision,
                          const std::function<bool(const WatchMessage&)>& on_message) {
    const std::string auth = token(true);  // a watch lasts: a fresh token
    auto http_client = http();
    httplib::Client& http = *http_client;
    const auto s = static_cast<time_t>(timeout_ms_ / 1000);
    const auto us = static_cast<time_t>(timeout_ms_ % 1000 * 1000);
    http.set_connection_timeout(s, us);
    http.set_write_timeout(s, us);
    // A watch is quiet until the key changes: no read timeout worth the name (an hour, then
    // the caller watches again); a dead peer is noticed by TCP keepalive.
    http.set_read_timeout(3600, 0);
    http.set_socket_options(keepalive);
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopped_) return "stopped";
        watch_client_ = &http;
    }
    struct Clear {
        Client* c;
        ~Clear() {
            std::lock_guard<std::mutex> lock(c->mu_);
            c->watch_client_ = nullptr;
        }
    } clear{this};

    json q = {
        {"create_request",
         {{"key", base64_encode(url_.key)}, {"start_revision", std::to_string(start_revision)}}}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v3/watch";
    req.body = q.dump();
    req.set_header("Content-Type", "application/json");
    if (!auth.empty()) req.set_header("Authorization", auth);
    LineReader lines(kMaxLine);
    std::string why;
    req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t,
                               std::uint64_t) -> bool {
        if (!lines.feed(std::string_view(data, len))) {
            why = "a watch line longer than " + std::to_string(kMaxLine) + " bytes";
            return false;
        }
        while (auto line = lines.next()) {
            if (line->empty()) continue;
            WatchMessage m;
            std::string error;
            if (!parse_watch_line(*line, m, error)) {
                why = error;
                return false;
            }
            if (!on_message(m)) {
                why = "ended by the watcher";
                return false;
            }
        }
        return true;
    };
    httplib::Result res = http.send(req);
    if (stopped_) return "stopped";
    if (!why.empty()) return why;
    if (!res) return "watch stream ended (" + httplib::to_string(res.error()) + ")";
    if (res->status != 200) return "watch: HTTP " + std::to_string(res->status);
    return "watch stream ended by etcd";
}

}  // namespace grl::daemon::etcd
