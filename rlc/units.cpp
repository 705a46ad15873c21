#include "units.h"

#include <charconv>
#include <cmath>
#include <ctime>

namespace grl::rlc {

namespace {

template <typename T>
Parsed<T> fail(const std::string& msg) {
    Parsed<T> p;
    p.error = msg;
    return p;
}

template <typename T>
Parsed<T> ok(T v) {
    Parsed<T> p;
    p.value = v;
    return p;
}

bool digits(std::string_view s, std::size_t pos, std::size_t n, int& out) {
    if (pos + n > s.size()) return false;
    int v = 0;
    for (std::size_t i = pos; i < pos + n; ++i) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    out = v;
    return true;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil):
// no dependence on the process's time zone, unlike mktime.
std::int64_t days_from_civil(int y, int m, int d) {
    y -= m <= 2;
    const int era = (y >= 0 ? y : y - 399) / 400;
    const int yoe = y - era * 400;
    const int doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return static_cast<std::int64_t>(era) * 146097 + doe - 719468;
}

}  // namespace

Parsed<std::int64_t> parse_time_s(std::string_view s) {
    const std::string bad = "invalid time \"" + std::string(s) +
                            "\", expected unix seconds or ISO-8601 UTC like "
                            "2026-11-30T12:00:00Z";
    if (!s.empty() && s.find('-') == std::string_view::npos) {
        std::int64_t v = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || p != s.data() + s.size() || v < 0) return fail<std::int64_t>(bad);
        return ok(v);
    }
    int y, mo, d, h = 0, mi = 0, se = 0;
    if (!digits(s, 0, 4, y) || s.size() < 10 || s[4] != '-' || !digits(s, 5, 2, mo) ||
        s[7] != '-' || !digits(s, 8, 2, d))
        return fail<std::int64_t>(bad);
    std::size_t pos = 10;
    if (pos < s.size() && (s[pos] == 'T' || s[pos] == ' ')) {
        if (!digits(s, pos + 1, 2, h) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
            !digits(s, pos + 4, 2, mi))
            return fail<std::int64_t>(bad);
        pos += 6;
        if (pos < s.size() && s[pos] == ':') {
            if (!digits(s, pos + 1, 2, se)) return fail<std::int64_t>(bad);
            pos += 3;
        }
    }
    std::string_view zone = s.substr(pos);
    if (!(zone.empty() || zone == "Z" || zone == "+00:00" || zone == "+0000"))
        return fail<std::int64_t>(bad + " (only UTC: end with Z or +00:00)");
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
        return fail<std::int64_t>(bad);
    std::int64_t t =
        days_from_civil(y, mo, d) * 86400 + std::int64_t{h} * 3600 + std::int64_t{mi} * 60 + se;
    if (t < 0) return fail<std::int64_t>(bad + " (before 1970)");
    return ok(t);
}

Parsed<std::int64_t> parse_span_s(std::string_view s) {
    const std::string bad = "invalid span \"" + std::string(s) + "\", expected e.g. 35d, 12h, 60s";
    if (!s.empty() && (s.back() == 'd' || s.back() == 'h')) {
        std::int64_t n = 0;
        std::string_view num = s.substr(0, s.size() - 1);
        auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), n);
        if (ec != std::errc() || p != num.data() + num.size() || n <= 0 || n > 36500)
            return fail<std::int64_t>(bad);
        return ok(n * (s.back() == 'd' ? 86400 : 3600));
    }
    Parsed<std::uint64_t> ms = parse_duration_ms(s);
    if (!ms || ms.value < 1000) return fail<std::int64_t>(bad);
    return ok(static_cast<std::int64_t>(ms.value / 1000));
}

Parsed<double> parse_number(std::string_view s) {
    double v = 0;
    std::string_view t = s;
    if (!t.empty() && t.front() == '+') t.remove_prefix(1);
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size() || !std::isfinite(v))
        return fail<double>("\"" + std::string(s) + "\" is not a number");
    return ok(v);
}

Parsed<double> parse_rps(std::string_view s) {
    if (s.size() > 3 && (s.substr(s.size() - 3) == "r/s" || s.substr(s.size() - 3) == "r/m")) {
        Parsed<double> n = parse_number(s.substr(0, s.size() - 3));
        if (!n || n.value < 0)
            return fail<double>("invalid rate \"" + std::string(s) +
                                "\", expected e.g. 500, 500r/s or 600r/m");
        return ok(s.back() == 'm' ? n.value / 60.0 : n.value);
    }
    Parsed<double> n = parse_number(s);
    if (!n || n.value < 0)
        return fail<double>("invalid rate \"" + std::string(s) +
                            "\", expected e.g. 500, 500r/s or 600r/m");
    return n;
}

std::string format_time(std::int64_t unix_s) {
    std::time_t t = static_cast<std::time_t>(unix_s);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

}  // namespace grl::rlc
