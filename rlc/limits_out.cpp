#include "limits_out.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "grl/common/bucket.h"
#include "grl/daemon/etcd.h"
#include "policy.h"

namespace grl::rlc {

namespace {

const char* match_key(bool caller, MatchKind k) {
    switch (k) {
        case MatchKind::Prefix: return caller ? "caller_prefix" : "procedure_prefix";
        case MatchKind::Regex: return caller ? "caller_regex" : "procedure_regex";
        default: return caller ? "caller" : "procedure";
    }
}

std::string describe_entry(const control::FileLimit& f) {
    std::string s;
    if (f.limit_mrps) s += "limit " + format_limit(*f.limit_mrps);
    if (f.mode) s += std::string(s.empty() ? "" : ", ") + "mode " + std::string(to_string(*f.mode));
    if (f.candidate_mrps)
        s += std::string(s.empty() ? "" : ", ") + "candidate " + format_limit(*f.candidate_mrps);
    if (f.has_match) s += std::string(s.empty() ? "" : ", ") + "run-time bucket";
    return s;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error(path + ": " + what + ": " + std::strerror(errno));
}

}  // namespace

std::string render_limits(const control::Limits& limits, const std::string& header) {
    YAML::Emitter out;
    out << YAML::BeginMap << YAML::Key << "buckets" << YAML::Value << YAML::BeginMap;
    for (const auto& [name, f] : limits.buckets) {
        out << YAML::Key << name << YAML::Value << YAML::BeginMap;
        if (f.has_match) {
            if (!f.match.caller.empty())
                out << YAML::Key << match_key(true, f.match.caller_kind) << YAML::Value
                    << f.match.caller;
            if (!f.match.procedure.empty())
                out << YAML::Key << match_key(false, f.match.procedure_kind) << YAML::Value
                    << f.match.procedure;
            out << YAML::Key << "scope" << YAML::Value << std::string(to_string(f.match.scope));
        }
        if (f.limit_mrps) out << YAML::Key << "limit" << YAML::Value << format_limit(*f.limit_mrps);
        if (f.mode) out << YAML::Key << "mode" << YAML::Value << std::string(to_string(*f.mode));
        if (f.candidate_mrps)
            out << YAML::Key << "candidate" << YAML::Value << format_limit(*f.candidate_mrps);
        out << YAML::EndMap;
    }
    out << YAML::EndMap;
    // A label the controllers report (grlctl status, grl_controller_limits_info); quoted so
    // that YAML reads "7" back as the string it is.
    if (!limits.version.empty())
        out << YAML::Key << "version" << YAML::Value << YAML::DoubleQuoted << limits.version;
    out << YAML::EndMap;
    std::string text;
    if (!header.empty()) text += "# " + header + "\n";
    text += out.c_str();
    text += "\n";
    return text;
}

std::vector<LimitChange> diff_limits(const control::Limits& a, const control::Limits& b) {
    std::vector<LimitChange> out;
    auto ia = a.buckets.begin(), ib = b.buckets.begin();
    while (ia != a.buckets.end() || ib != b.buckets.end()) {
        if (ib == b.buckets.end() || (ia != a.buckets.end() && ia->first < ib->first)) {
            out.push_back({ia->first, ia->second, std::nullopt});
            ++ia;
        } else if (ia == a.buckets.end() || ib->first < ia->first) {
            out.push_back({ib->first, std::nullopt, ib->second});
            ++ib;
        } else {
            if (!(ia->second == ib->second)) out.push_back({ia->first, ia->second, ib->second});
            ++ia, ++ib;
        }
    }
    return out;
}

std::string describe(const LimitChange& c) {
    if (!c.before) return "+ " + c.bucket + ": " + describe_entry(*c.after);
    if (!c.after) return "- " + c.bucket + ": " + describe_entry(*c.before);
    const auto &x = *c.before, &y = *c.after;
    std::string s = c.bucket + ":";
    auto lim = [](const std::optional<std::uint64_t>& v) {
        return v ? format_limit(*v) : std::string("(none)");
    };
    auto mode = [](const std::optional<Mode>& m) {
        return m ? std::string(to_string(*m)) : std::string("(none)");
    };
    std::string sep = " ";
    if (x.limit_mrps != y.limit_mrps)
        s += sep + "limit " + lim(x.limit_mrps) + " -> " + lim(y.limit_mrps), sep = ", ";
    if (x.mode != y.mode) s += sep + "mode " + mode(x.mode) + " -> " + mode(y.mode), sep = ", ";
    if (x.candidate_mrps != y.candidate_mrps)
        s += sep + "candidate " + lim(x.candidate_mrps) + " -> " + lim(y.candidate_mrps),
            sep = ", ";
    if (x.has_match != y.has_match || (x.has_match && !(x.match == y.match)))
        s += sep + "match changed";
    return s;
}

std::string render_diff(const std::vector<LimitChange>& changes) {
    if (changes.empty()) return "no change\n";
    std::string s;
    for (const auto& c : changes) s += describe(c) + "\n";
    return s;
}

void write_atomically(const std::string& path, const std::string& content) {
    auto slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    std::string tmp = path + ".tmp.XXXXXX";
    int fd = mkstemp(tmp.data());
    if (fd < 0) fail(tmp, "cannot create the temporary file");
    // The controllers may run as another user: the file is world-readable like any config.
    if (fchmod(fd, 0644) != 0) {
        ::close(fd);
        ::unlink(tmp.c_str());
        fail(tmp, "fchmod");
    }
    std::size_t off = 0;
    while (off < content.size()) {
        ssize_t n = ::write(fd, content.data() + off, content.size() - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            ::close(fd);
            ::unlink(tmp.c_str());
            fail(tmp, "write");
        }
        off += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        ::unlink(tmp.c_str());
        fail(tmp, "fsync");
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        fail(path, "rename");
    }
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd < 0) fail(dir, "open directory");
    int rc = ::fsync(dfd);
    ::close(dfd);
    if (rc != 0) fail(dir, "fsync directory");
}

std::optional<std::string> read_text_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) {
        struct stat st;
        if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;
        throw std::runtime_error(path + ": cannot read");
    }
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace grl::rlc

namespace grl::rlc {

std::string relabel(const std::string& content, const std::string& version) {
    const std::string label = "version: \"" + version + "\"";
    std::string out;
    std::size_t pos = 0, insert_at = std::string::npos;
    bool leading = true, replaced = false;
    while (pos < content.size()) {
        std::size_t nl = content.find('\n', pos);
        std::size_t end = nl == std::string::npos ? content.size() : nl + 1;
        std::string_view line(content.data() + pos, end - pos);
        // Top level only: a bucket's fields are indented.
        if (!replaced && line.substr(0, 8) == "version:") {
            out += label + (nl == std::string::npos ? "" : "\n");
            replaced = true;
        } else {
            if (leading && !(line.substr(0, 1) == "#" || line == "\n")) {
                leading = false;
                insert_at = out.size();
            }
            out += line;
        }
        pos = end;
    }
    if (replaced) return out;
    if (insert_at == std::string::npos) insert_at = out.size();
    if (insert_at > 0 && out[insert_at - 1] != '\n') {
        out.insert(insert_at, "\n");
        ++insert_at;
    }
    out.insert(insert_at, label + "\n");
    return out;
}

namespace {
daemon::etcd::Url etcd_url(const std::string& target) {
    std::string error;
    auto u = daemon::etcd::parse_url(target, error);
    if (!u) throw std::runtime_error(error);
    return *u;
}
}  // namespace

std::optional<std::string> read_limits_text(const std::string& target,
                                            const daemon::etcd::Access& access) {
    if (!daemon::etcd::is_url(target)) return read_text_file(target);
    daemon::etcd::Client c(etcd_url(target), access);
    daemon::etcd::RangeReply r = c.get();
    if (!r.kv.exists) return std::nullopt;
    return r.kv.value;
}

void push_limits(const std::string& target, const std::string& content,
                 const daemon::etcd::Access& access) {
    if (!daemon::etcd::is_url(target)) return write_atomically(target, content);
    daemon::etcd::Client c(etcd_url(target), access);
    c.put(content);
}

}  // namespace grl::rlc
