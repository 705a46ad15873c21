#include "grl/common/quota.h"

#include <string>

namespace grl {
namespace {

constexpr std::uint64_t kMinuteMs = 60000;
constexpr std::uint64_t kHourMs = 60 * kMinuteMs;
constexpr std::uint64_t kDayMs = 24 * kHourMs;
constexpr std::uint64_t kMaxQuota = 1ULL << 40;

// Days since 1970-01-01 of the first day of month `m` (1..12) of year `y` (civil calendar,
// Howard Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m) {
    y -= m <= 2;
    const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
    const auto yoe = static_cast<unsigned>(y - era * 400);
    const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5;  // day 1 of the month
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

// Year and month (1..12) of the day `z` days since 1970-01-01 (civil_from_days).
void civil_from_days(std::int64_t z, std::int64_t& y, unsigned& m) {
    z += 719468;
    const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const auto doe = static_cast<unsigned>(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    m = mp < 10 ? mp + 3 : mp - 9;
    y = static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2);
}

// The UTC month holding `ms` (>= 0), as [start, end).
Window month_at(std::uint64_t ms) {
    std::int64_t y = 0;
    unsigned m = 0;
    civil_from_days(static_cast<std::int64_t>(ms / kDayMs), y, m);
    const std::int64_t first = days_from_civil(y, m);
    const std::int64_t next = m == 12 ? days_from_civil(y + 1, 1) : days_from_civil(y, m + 1);
    return {static_cast<std::uint64_t>(first) * kDayMs, static_cast<std::uint64_t>(next) * kDayMs};
}

}  // namespace

std::string_view to_string(Period p) {
    switch (p) {
        case Period::Minute: return "minute";
        case Period::Hour: return "hour";
        case Period::Day: return "day";
        case Period::Month: return "month";
    }
    return "minute";
}

std::optional<Period> parse_period(std::string_view s) {
    for (Period p : {Period::Minute, Period::Hour, Period::Day, Period::Month}) {
        if (s == to_string(p)) return p;
    }
    return std::nullopt;
}

std::uint64_t max_offset_ms(Period p) {
    switch (p) {
        case Period::Minute: return kMinuteMs;
        case Period::Hour: return kHourMs;
        case Period::Day: return kDayMs;
        case Period::Month: return 28 * kDayMs;
    }
    return kMinuteMs;
}

Parsed<QuotaSpec> parse_quota(std::string_view s) {
    Parsed<QuotaSpec> r;
    const std::size_t slash = s.find('/');
    std::uint64_t n = 0;
    std::optional<Period> p;
    if (slash != std::string_view::npos) p = parse_period(s.substr(slash + 1));
    if (slash == std::string_view::npos || !parse_uint(s.substr(0, slash), n) || n == 0 ||
        n > kMaxQuota || !p) {
        r.error = "invalid quota \"" + std::string(s) +
                  "\", expected N/minute, N/hour, N/day or N/month with N in 1-1099511627776";
        return r;
    }
    r.value.n = n;
    r.value.period = *p;
    return r;
}

Parsed<std::uint64_t> parse_window_offset(std::string_view s, Period p) {
    Parsed<std::uint64_t> r = parse_duration_ms(s);
    if (r && r.value >= max_offset_ms(p)) {
        r.error = "window_offset \"" + std::string(s) + "\" is not shorter than a " +
                  std::string(to_string(p));
    } else if (!r) {
        r.error = "invalid window_offset \"" + std::string(s) + "\", expected e.g. 30s, 5m or 2h";
    }
    return r;
}

Window window_at(const QuotaSpec& q, std::uint64_t wall_ms) {
    // Shift the clock back by the offset, find the plain UTC window, shift it forward again.
    const std::uint64_t off = q.offset_ms;
    const std::uint64_t t = wall_ms >= off ? wall_ms - off : 0;
    Window w;
    if (q.period == Period::Month) {
        w = month_at(t);
    } else {
        const std::uint64_t len = q.period == Period::Minute ? kMinuteMs
                                  : q.period == Period::Hour ? kHourMs
                                                             : kDayMs;
        w = {t - t % len, t - t % len + len};
    }
    return {w.start_ms + off, w.end_ms + off};
}

}  // namespace grl
