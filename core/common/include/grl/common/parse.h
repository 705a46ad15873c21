// Parsers for the values operators write in nginx.conf and YAML:
// rates ("100r/s", "600r/m"), sizes ("1m", "512k"), durations ("250ms", "5s").
// Each returns the value or an error naming the input; none throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace grl {

template <typename T>
struct Parsed {
    T value{};
    std::string error;  // empty on success
    explicit operator bool() const { return error.empty(); }
};

// A run of decimal digits into `out`; false on empty input, another character or overflow.
bool parse_uint(std::string_view s, std::uint64_t& out);

// Rate in milli-requests per second (1 r/s = 1000), like limit_req's fixed point.
// Accepts "<N>r/s" and "<N>r/m" with N a positive integer.
Parsed<std::uint64_t> parse_rate(std::string_view s);

// A bucket limit: a rate as above, or zero ("0", "0r/s", "0r/m": block everything). The error
// names the value and the accepted forms (it is shown to operators as it is).
Parsed<std::uint64_t> parse_limit(std::string_view s);

// Size in bytes: "<N>", "<N>k", "<N>m" (case-insensitive suffix).
Parsed<std::uint64_t> parse_size(std::string_view s);

// Duration in milliseconds: "<N>ms", "<N>s", "<N>m", "<N>h", or "<N>" (seconds).
Parsed<std::uint64_t> parse_duration_ms(std::string_view s);

// "1.5" style decimal ratio in [0,1] to parts per million.
Parsed<std::uint32_t> parse_ratio_ppm(std::string_view s);

}  // namespace grl
