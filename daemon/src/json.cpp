#include "grl/daemon/json.h"

#include <charconv>
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
// The characters between two that need an escape are appended as one run.
void quote_into(std::string& out, std::string_view v) {
    out += '"';
    std::size_t run = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const char c = v[i];
        const auto u = static_cast<unsigned char>(c);
        if (c != '"' && c != '\\' && u >= 0x20) continue;
        out.append(v.data() + run, i - run);
        run = i + 1;
        if (u < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", u);
            out += buf;
        } else {
            out += '\\';
            out += c;
        }
    }
    out.append(v.data() + run, v.size() - run);
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
    // std::to_chars in fixed notation writes what printf's "%.0f" and "%.6f" write (the C++
    // standard defines it so), without parsing a format for every number.
    char buf[400];  // the longest %.6f of a finite double: 309 digits, a sign, a point, 6 more
    const int precision = v == std::floor(v) && std::fabs(v) < 1e15 ? 0 : 6;
    const auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, precision);
    out_.append(buf, r.ptr);
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
