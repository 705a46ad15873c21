// Values grl-rlc's history commands and CSV files are written with: points in time, spans
// ("35d"), numbers and rates. Each returns the value or an error naming the input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "grl/common/parse.h"

namespace grl::rlc {

// A point in time in unix seconds: "1764500000", or ISO-8601 UTC "2026-11-30T12:00:00Z"
// ("T" or a space; the "Z" or "+00:00" may be left out: UTC is the only zone accepted).
Parsed<std::int64_t> parse_time_s(std::string_view s);

// A span in seconds: "<N>d", "<N>h", "<N>m", "<N>s", or a duration grl::parse_duration_ms
// takes ("250ms" rounds down to whole seconds, and is an error if that makes 0).
Parsed<std::int64_t> parse_span_s(std::string_view s);

// A finite decimal number ("12", "-3.5", "1e3"); no "nan" or "inf". Locale independent.
Parsed<double> parse_number(std::string_view s);

// A rate in requests per second: a number ("500", "12.5"), or "500r/s", "600r/m".
Parsed<double> parse_rps(std::string_view s);

// "2026-11-30T12:00:00Z".
std::string format_time(std::int64_t unix_s);

}  // namespace grl::rlc
