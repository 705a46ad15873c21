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

// The per-key options of a keyed bucket (`grl_bucket NAME key=VALUE ...`, docs/per-key.md);
// `key=` itself is an nginx complex value, compiled by the module.
inline constexpr std::uint32_t kDefaultKeys = 10000;
inline constexpr std::uint32_t kMaxKeys = 16u << 20;  // 16 Mi entries, 1.9 GiB of zone
inline constexpr std::uint32_t kDefaultReportKeys = 64;
struct KeyedSpec {
    bool keyed = false;
    std::string key;  // the VALUE as written, e.g. "$http_x_api_key"
    std::uint32_t keys = kDefaultKeys;
    std::uint32_t report_keys = kDefaultReportKeys;  // at most wire::kMaxReportKeys
    bool hash_keys = false;
    std::uint8_t given = 0;  // parameters taken so far (bits), to refuse a repeated one
};

// Takes one `keys=`, `report_keys=` or `hash_keys=` parameter into `spec`. Returns false when
// `arg` is none of them; else true, with `error` set (naming the value and what is expected)
// when the value is invalid or the parameter repeated.
bool take_keyed_param(std::string_view arg, KeyedSpec& spec, std::string& error);

}  // namespace grl
