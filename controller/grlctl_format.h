// Numbers and instants as every grlctl command prints them: one place, so that `status`,
// `top` and `explain` agree on a figure's form.
#pragma once

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>

namespace grl::grlctl {

// A rate from milli-requests per second: "12.5".
inline std::string rps(std::uint64_t mrps) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.1f", static_cast<double>(mrps) / 1000.0);
    return b;
}

// A drop ratio from parts per million: "0.3333".
inline std::string ratio(std::uint32_t ppm) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.4f", ppm / 1e6);
    return b;
}

// The same ratio as a percentage: "33.3%".
inline std::string percent(std::uint32_t ppm) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.1f%%", ppm / 1e4);
    return b;
}

// A wall-clock instant (Unix ms) in UTC: "2026-12-05T22:40:29Z"; 0 (never) is "-".
inline std::string utc(std::uint64_t wall_ms) {
    if (wall_ms == 0) return "-";
    const auto t = static_cast<time_t>(wall_ms / 1000);
    struct tm tm {};
    gmtime_r(&t, &tm);
    char b[32];
    std::strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return b;
}

}  // namespace grl::grlctl
