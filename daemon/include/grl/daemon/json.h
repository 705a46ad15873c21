// What the daemons' JSON (grlctl --json, the dashboard's /api, grl-rlc whatif --json) adds to
// nlohmann::ordered_json: numbers as clients have always read them, and text that never throws.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace grl::daemon {

// A rate, ratio or fraction: whole values below 1e15 as integers ("5", not "5.0"), others to
// 6 decimals (what printf's "%.6f" wrote: a float's 0.6f is "0.6", not "0.6000000238418579"),
// null when not finite.
inline nlohmann::ordered_json json_number(double v) {
    if (!std::isfinite(v)) return nullptr;
    if (std::fabs(v) >= 1e15) return v;
    if (v == std::floor(v)) return static_cast<std::int64_t>(v);
    char buf[32];  // below 1e15: a sign, 15 digits, a point and 6 more
    const char* end = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed, 6).ptr;
    std::from_chars(buf, end, v);  // "%.6f" rounds the exact value; v * 1e6 would not always
    return v;
}

// The compact text of `j`; bucket names and keys come from the wire, so bytes that are not
// UTF-8 become U+FFFD rather than an exception.
inline std::string json_text(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace grl::daemon
