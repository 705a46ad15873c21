#include "grl/daemon/json.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace grl::daemon {

void Json::comma() {
    if (after_key_) {
        after_key_ = false;
        return;
    }
    if (!first_.empty()) {
        if (!first_.back()) out_ += ',';
        first_.back() = false;
    }
}

Json& Json::begin_object() {
    comma();
    out_ += '{';
    first_.push_back(true);
    return *this;
}
Json& Json::end_object() {
    out_ += '}';
    first_.pop_back();
    return *this;
}
Json& Json::begin_array() {
    comma();
    out_ += '[';
    first_.push_back(true);
    return *this;
}
Json& Json::end_array() {
    out_ += ']';
    first_.pop_back();
    return *this;
}
namespace {
void quote_into(std::string& out, std::string_view v) {
    out += '"';
    for (char c : v) {
        auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", u);
            out += buf;
        } else {
            out += c;
        }
    }
    out += '"';
}
}  // namespace

Json& Json::key(std::string_view k) {
    comma();
    quote_into(out_, k);
    out_ += ':';
    after_key_ = true;
    return *this;
}

Json& Json::str(std::string_view v) {
    comma();
    quote_into(out_, v);
    return *this;
}

Json& Json::num(double v) {
    comma();
    if (!std::isfinite(v)) {
        out_ += "null";
        return *this;
    }
    char buf[40];
    if (v == std::floor(v) && std::fabs(v) < 1e15) {
        std::snprintf(buf, sizeof(buf), "%.0f", v);
    } else {
        std::snprintf(buf, sizeof(buf), "%.6f", v);
    }
    out_ += buf;
    return *this;
}

Json& Json::uint(std::uint64_t v) {
    comma();
    out_ += std::to_string(v);
    return *this;
}

Json& Json::boolean(bool v) {
    comma();
    out_ += v ? "true" : "false";
    return *this;
}

Json& Json::null() {
    comma();
    out_ += "null";
    return *this;
}

void write_endpoints_file(const std::string& path,
                          const std::vector<std::pair<std::string, std::string>>& endpoints) {
    Json j;
    j.begin_object();
    for (const auto& [name, ep] : endpoints) j.key(name).str(ep);
    j.end_object();
    std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::trunc);
        f << j.text() << "\n";
        if (!f) throw std::runtime_error(path + ": cannot write");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        throw std::runtime_error(path + ": cannot rename " + tmp);
    }
}

}  // namespace grl::daemon
