// A per-process pseudo-random generator for drop sampling: fast, not for secrets.
#pragma once

#include <cstdint>

namespace grl {

// SplitMix64 is one multiply-xorshift chain per
// call, passes BigCrush on its 64-bit output, and needs one word of state.
class Prng {
  public:
    explicit Prng(std::uint64_t seed = 0x9e3779b97f4a7c15ULL) : s_(seed) {}
    void seed(std::uint64_t seed) { s_ = seed; }

    std::uint64_t next64() {
        std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    // Uniform in [0, 2^32).
    std::uint32_t next32() { return static_cast<std::uint32_t>(next64() >> 32); }

  private:
    std::uint64_t s_;
};

}  // namespace grl
