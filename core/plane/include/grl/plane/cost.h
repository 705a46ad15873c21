// A request's cost in units (`grl_bucket ... cost=N|$variable cost_after=$variable`,
// docs/directives.md): what a request counts as in a bucket's offered, dropped and
// shadow-dropped counters, and so in its rate. Header-only: read on the request path.
#pragma once

#include <cstdint>
#include <string_view>

namespace grl {

inline constexpr std::uint32_t kMaxCost = 0xffffffffU;

// The units in a variable's value: decimal digits, saturating at kMaxCost. False for an empty
// value or any other character; the caller then counts its default and the status page's
// `cost_invalid` counts the request.
inline bool read_cost(std::string_view s, std::uint32_t& out) {
    if (s.empty()) return false;
    std::uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
        if (v > kMaxCost) v = kMaxCost + 1ULL;  // saturate; keeps reading to check the digits
    }
    out = v > kMaxCost ? kMaxCost : static_cast<std::uint32_t>(v);
    return true;
}

}  // namespace grl
