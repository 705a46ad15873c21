#include "grl/common/parse.h"

#include <limits>

namespace grl {
namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

template <typename T>
Parsed<T> fail(std::string_view what, std::string_view s) {
    Parsed<T> p;
    p.error = "invalid " + std::string(what) + " \"" + std::string(s) + "\"";
    return p;
}

template <typename T>
Parsed<T> ok(T v) {
    Parsed<T> p;
    p.value = v;
    return p;
}

}  // namespace

bool parse_uint(std::string_view s, std::uint64_t& out) {
    if (s.empty()) return false;
    std::uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        std::uint64_t d = static_cast<std::uint64_t>(c - '0');
        if (v > (kMax - d) / 10) return false;
        v = v * 10 + d;
    }
    out = v;
    return true;
}

Parsed<std::uint64_t> parse_rate(std::string_view s) {
    std::uint64_t per_unit = 0;
    std::uint64_t n = 0;
    if (ends_with(s, "r/s")) {
        per_unit = 1;
    } else if (ends_with(s, "r/m")) {
        per_unit = 60;
    } else {
        return fail<std::uint64_t>("rate", s);
    }
    if (!parse_uint(s.substr(0, s.size() - 3), n) || n == 0 || n > kMax / 1000) {
        return fail<std::uint64_t>("rate", s);
    }
    std::uint64_t mrps = n * 1000 / per_unit;
    if (mrps == 0) return fail<std::uint64_t>("rate", s);
    return ok(mrps);
}

Parsed<std::uint64_t> parse_limit(std::string_view s) {
    if (s == "0" || s == "0r/s" || s == "0r/m") return ok<std::uint64_t>(0);
    Parsed<std::uint64_t> r = parse_rate(s);
    if (!r) r.error += ", expected e.g. 100r/s, 600r/m or 0";
    return r;
}

Parsed<std::uint64_t> parse_size(std::string_view s) {
    std::uint64_t mult = 1;
    std::string_view digits = s;
    if (!s.empty()) {
        char last = s.back();
        if (last == 'k' || last == 'K') mult = 1024;
        if (last == 'm' || last == 'M') mult = 1024ULL * 1024;
        if (mult != 1) digits = s.substr(0, s.size() - 1);
    }
    std::uint64_t n = 0;
    if (!parse_uint(digits, n) || n == 0 || n > kMax / mult) return fail<std::uint64_t>("size", s);
    return ok(n * mult);
}

Parsed<std::uint64_t> parse_duration_ms(std::string_view s) {
    std::uint64_t mult = 1000;
    std::string_view digits = s;
    if (ends_with(s, "ms")) {
        mult = 1;
        digits = s.substr(0, s.size() - 2);
    } else if (ends_with(s, "s")) {
        digits = s.substr(0, s.size() - 1);
    } else if (ends_with(s, "m")) {
        mult = 60ULL * 1000;
        digits = s.substr(0, s.size() - 1);
    } else if (ends_with(s, "h")) {
        mult = 3600ULL * 1000;
        digits = s.substr(0, s.size() - 1);
    }
    std::uint64_t n = 0;
    if (!parse_uint(digits, n) || n > kMax / mult) return fail<std::uint64_t>("duration", s);
    return ok(n * mult);
}

Parsed<std::uint32_t> parse_ratio_ppm(std::string_view s) {
    // "0", "1", "0.33", "1.000000": at most 6 fractional digits.
    std::size_t dot = s.find('.');
    std::string_view ip = s.substr(0, dot);
    std::string_view fp = dot == std::string_view::npos ? std::string_view{} : s.substr(dot + 1);
    std::uint64_t i = 0;
    std::uint64_t f = 0;
    if (!parse_uint(ip, i) || i > 1) return fail<std::uint32_t>("ratio", s);
    if (dot != std::string_view::npos) {
        if (fp.empty() || fp.size() > 6 || !parse_uint(fp, f))
            return fail<std::uint32_t>("ratio", s);
        for (std::size_t k = fp.size(); k < 6; ++k) f *= 10;
    }
    std::uint64_t ppm = i * 1000000 + f;
    if (ppm > 1000000) return fail<std::uint32_t>("ratio", s);
    return ok(static_cast<std::uint32_t>(ppm));
}

}  // namespace grl
