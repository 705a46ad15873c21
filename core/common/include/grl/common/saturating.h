// Saturating arithmetic on counts, rates and stamps that come from other processes: a sum that
// does not fit says "as much as can be said" instead of wrapping to almost nothing.
#pragma once

#include <cstdint>

namespace grl {

inline std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
    std::uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

}  // namespace grl
