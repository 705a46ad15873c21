// Drop-ratio arithmetic in fixed point. On the wire a ratio is parts per
// million; in the zone it is a threshold on a 32-bit random number.
#pragma once

#include <cstdint>

namespace grl {

inline constexpr std::uint32_t kPpmOne = 1000000;

// Threshold t such that P(rand32 < t) = ppm / 1e6 (rounded to nearest).
constexpr std::uint64_t ppm_to_threshold(std::uint32_t ppm) {
    if (ppm >= kPpmOne) return 1ULL << 32;
    return ((static_cast<std::uint64_t>(ppm) << 32) + kPpmOne / 2) / kPpmOne;
}

constexpr std::uint32_t threshold_to_ppm(std::uint64_t t) {
    if (t >= (1ULL << 32)) return kPpmOne;
    return static_cast<std::uint32_t>((t * kPpmOne + (1ULL << 31)) >> 32);
}

// drop_ratio = max(0, (offered - limit) / offered), rates in milli-requests/s.
constexpr std::uint32_t drop_ratio_ppm(std::uint64_t offered_mrps, std::uint64_t limit_mrps) {
    if (offered_mrps <= limit_mrps || offered_mrps == 0) return 0;
    // (offered - limit) * 1e6 / offered without overflow for rates < 1.8e13 mr/s.
    unsigned __int128 num = static_cast<unsigned __int128>(offered_mrps - limit_mrps) * kPpmOne;
    return static_cast<std::uint32_t>(num / offered_mrps);
}

}  // namespace grl
