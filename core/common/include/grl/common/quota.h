// Quotas over long windows (`grl_bucket ... quota=N/hour [window_offset=D]`, docs/directives.md):
// the spec, its parsers, and the windows it defines on the UTC wall clock. Pure, no allocation.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "grl/common/parse.h"

namespace grl {

enum class Period : std::uint8_t { Minute = 1, Hour = 2, Day = 3, Month = 4 };
std::string_view to_string(Period p);
std::optional<Period> parse_period(std::string_view s);

// N units per window; n == 0: no quota. Windows start at UTC boundaries of `period`
// (00:00 of the 1st for a month) plus `offset_ms`, which is shorter than the shortest window
// of the period (28 days for a month).
struct QuotaSpec {
    std::uint64_t n = 0;
    Period period = Period::Minute;
    std::uint64_t offset_ms = 0;
    explicit operator bool() const { return n != 0; }
    bool operator==(const QuotaSpec& o) const {
        return n == o.n && period == o.period && offset_ms == o.offset_ms;
    }
    bool operator!=(const QuotaSpec& o) const { return !(*this == o); }
};

// The limit_mrps a bucket with quota= and no rate= reports and is published with: a rate no
// fleet reaches, so that its ratio comes from the quota alone.
inline constexpr std::uint64_t kNoRateMrps = 1ULL << 46;

// "600/hour", "1000000/month": N in 1..2^40 (errors name the value and the accepted forms).
Parsed<QuotaSpec> parse_quota(std::string_view s);
// A window_offset= duration ("30s", "5m", "2h") shorter than the shortest window of `p`.
Parsed<std::uint64_t> parse_window_offset(std::string_view s, Period p);
// The longest offset a period allows, exclusive: its shortest window.
std::uint64_t max_offset_ms(Period p);

// The window [start, end) holding the wall-clock instant `wall_ms` (Unix ms, UTC).
struct Window {
    std::uint64_t start_ms = 0;
    std::uint64_t end_ms = 0;
    bool operator==(const Window& o) const { return start_ms == o.start_ms && end_ms == o.end_ms; }
};
Window window_at(const QuotaSpec& q, std::uint64_t wall_ms);

}  // namespace grl
