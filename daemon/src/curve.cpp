#include "grl/daemon/curve.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "grl/daemon/log.h"
#include "grl/daemon/loop.h"

namespace grl::daemon {

namespace {

bool z85_key(const std::string& s) {
    if (s.size() != 40) return false;
    static const std::string kAlphabet =
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    for (char c : s) {
        if (kAlphabet.find(c) == std::string::npos) return false;
    }
    std::uint8_t bin[32];
    return zmq_z85_decode(bin, s.c_str()) != nullptr;
}

std::string trim(const std::string& s) {
    std::size_t b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return "";
    std::size_t e = s.find_last_not_of(" \t\r");
    return s.substr(b, e - b + 1);
}

// Parses `name = "value"` (quotes optional); false when the line is not about `name`.
bool keyed_value(const std::string& line, const std::string& name, std::string& value) {
    std::string t = trim(line);
    if (t.compare(0, name.size(), name) != 0) return false;
    std::string rest = trim(t.substr(name.size()));
    if (rest.empty() || rest[0] != '=') return false;
    value = trim(rest.substr(1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
    }
    return true;
}

std::vector<std::string> read_lines(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error(path + ": cannot read");
    std::vector<std::string> lines;
    std::string line;
    while (std::getline(f, line)) lines.push_back(line);
    return lines;
}

struct Keys {
    std::string pub, sec;
};

Keys read_key_file(const std::string& path) {
    Keys k;
    std::vector<std::string> lines = read_lines(path);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        std::string v;
        std::string where = path + ":" + std::to_string(i + 1);
        if (keyed_value(lines[i], "public-key", v)) {
            if (!z85_key(v))
                throw std::runtime_error(where +
                                         ": invalid public-key, expected 40 Z85 characters");
            k.pub = v;
        } else if (keyed_value(lines[i], "secret-key", v)) {
            if (!z85_key(v))
                throw std::runtime_error(where +
                                         ": invalid secret-key, expected 40 Z85 characters");
            k.sec = v;
        }
    }
    return k;
}

}  // namespace

KeyPair load_keypair(const std::string& path) {
    Keys k = read_key_file(path);
    if (k.pub.empty() || k.sec.empty()) {
        throw std::runtime_error(path + ": a key pair file needs public-key and secret-key lines");
    }
    return {k.pub, k.sec};
}

std::string load_public_key(const std::string& path) {
    Keys k = read_key_file(path);
    if (k.pub.empty()) throw std::runtime_error(path + ": no public-key line");
    return k.pub;
}

std::set<std::string> load_authorized(const std::string& path) {
    std::set<std::string> keys;
    std::vector<std::string> lines = read_lines(path);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        // '#' is a Z85 character: only a line starting with it is a comment.
        std::string t = trim(lines[i]);
        if (t.empty() || t[0] == '#' || t == "curve" || t == "metadata") continue;
        std::string v;
        if (keyed_value(t, "secret-key", v)) continue;  // a key-pair file used as a list
        if (!keyed_value(t, "public-key", v)) v = t;
        if (!z85_key(v)) {
            throw std::runtime_error(path + ":" + std::to_string(i + 1) +
                                     ": invalid public key, expected 40 Z85 characters");
        }
        keys.insert(v);
    }
    return keys;
}

KeyPair generate_keypair() {
    char pub[41], sec[41];
    if (zmq_curve_keypair(pub, sec) != 0) {
        throw std::runtime_error("zmq_curve_keypair: " + zmq_error() + " (libzmq without CURVE?)");
    }
    return {pub, sec};
}

void write_keypair(const std::string& base, const KeyPair& k) {
    auto write = [](const std::string& path, const std::string& text, mode_t mode) {
        std::string tmp = path + ".tmp";
        {
            std::ofstream f(tmp, std::ios::trunc);
            if (!f) throw std::runtime_error(path + ": cannot write");
            f << text;
            if (!f) throw std::runtime_error(path + ": cannot write");
        }
        chmod(tmp.c_str(), mode);
        if (std::rename(tmp.c_str(), path.c_str()) != 0) {
            throw std::runtime_error(path + ": cannot rename " + tmp);
        }
    };
    std::string head = "#   grl CURVE key pair (ZeroMQ certificate layout)\ncurve\n";
    write(base,
          head + "    public-key = \"" + k.public_key + "\"\n    secret-key = \"" + k.secret_key +
              "\"\n",
          0600);
    write(base + ".pub",
          "#   grl CURVE public key\ncurve\n    public-key = \"" + k.public_key + "\"\n", 0644);
}

void make_curve_server(Socket& s, const KeyPair& server, const std::string& domain) {
    s.set(ZMQ_CURVE_SERVER, 1);
    s.set(ZMQ_CURVE_SECRETKEY, std::string_view(server.secret_key));
    s.set(ZMQ_ZAP_DOMAIN, std::string_view(domain));
}

void make_curve_client(Socket& s, const KeyPair& client, const std::string& server_public) {
    s.set(ZMQ_CURVE_SERVERKEY, std::string_view(server_public));
    s.set(ZMQ_CURVE_PUBLICKEY, std::string_view(client.public_key));
    s.set(ZMQ_CURVE_SECRETKEY, std::string_view(client.secret_key));
}

ZapHandler::ZapHandler(Context& ctx) : sock_(ctx, ZMQ_REP) {
    sock_.bind("inproc://zeromq.zap.01");
}

void ZapHandler::allow(const std::string& domain, std::set<std::string> keys) {
    keys_[domain] = std::move(keys);
}

void ZapHandler::handle() {
    for (int guard = 0; guard < 256; ++guard) {
        std::size_t n = sock_.recv_frames(frames_, 8);
        if (n == 0) return;
        // version, request id, domain, address, identity, mechanism, credentials...
        std::string version, request_id, domain, address, mechanism, key;
        if (n >= 6) {
            version = std::string(frames_[0].view());
            request_id = std::string(frames_[1].view());
            domain = std::string(frames_[2].view());
            address = std::string(frames_[3].view());
            mechanism = std::string(frames_[5].view());
        }
        bool ok = false;
        if (n >= 7 && version == "1.0" && mechanism == "CURVE" && frames_[6].view().size() == 32) {
            char z85[41];
            zmq_z85_encode(z85, reinterpret_cast<const std::uint8_t*>(frames_[6].view().data()),
                           32);
            key = z85;
            auto it = keys_.find(domain);
            ok = it != keys_.end() && it->second.count(key) > 0;
        }
        (ok ? accepted_ : denied_)[domain.empty() ? "-" : domain]++;
        if (!ok) {
            refused_log_.hit(LogLevel::Warn, {},
                             "CURVE: refused " +
                                 (mechanism.empty() ? std::string("a") : mechanism) + " client " +
                                 (key.empty() ? std::string("?") : key) + " from " +
                                 (address.empty() ? std::string("?") : address) + " on " +
                                 (domain.empty() ? std::string("?") : domain),
                             mono_ms());
        }
        sock_.send_frames({"1.0", request_id, ok ? "200" : "400",
                           ok ? "OK" : "client key not authorised", ok ? key : "", ""});
    }
}

}  // namespace grl::daemon
