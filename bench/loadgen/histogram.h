// Latency histogram with log-linear buckets (as HdrHistogram with 2 significant digits):
// exact below 128 µs, then 64 sub-buckets per power of two (under 1.6% relative error), up to
// 2^40 µs. Percentiles report the middle of the bucket that holds the requested rank.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace loadgen {

class Histogram {
  public:
    static constexpr int kLinear = 128;
    static constexpr int kSub = 64;
    static constexpr int kMaxBit = 40;
    static constexpr int kBuckets = kLinear + (kMaxBit - 7 + 1) * kSub;

    Histogram() : counts_(kBuckets, 0) {}

    void record(std::uint64_t us) {
        counts_[index(us)]++;
        n_++;
        max_ = std::max(max_, us);
    }

    void merge(const Histogram& o) {
        for (int i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
        n_ += o.n_;
        max_ = std::max(max_, o.max_);
    }

    std::uint64_t count() const { return n_; }
    std::uint64_t max() const { return max_; }

    // Value (µs) at percentile p (0..100]; 0 when empty.
    std::uint64_t percentile(double p) const {
        if (n_ == 0) return 0;
        auto rank = static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(n_)));
        rank = std::clamp<std::uint64_t>(rank, 1, n_);
        std::uint64_t seen = 0;
        for (int i = 0; i < kBuckets; ++i) {
            seen += counts_[i];
            if (seen >= rank) return std::min(middle(i), max_);
        }
        return max_;
    }

    static int index(std::uint64_t v) {
        if (v < kLinear) return static_cast<int>(v);
        int m = 63 - __builtin_clzll(v);  // most significant bit, >= 7
        if (m > kMaxBit) return kBuckets - 1;
        int shift = m - 6;
        return kLinear + (m - 7) * kSub + static_cast<int>((v >> shift) - kSub);
    }

    static std::uint64_t middle(int idx) {
        if (idx < kLinear) return static_cast<std::uint64_t>(idx);
        int m = (idx - kLinear) / kSub + 7;
        std::uint64_t sub = static_cast<std::uint64_t>((idx - kLinear) % kSub + kSub);
        int shift = m - 6;
        std::uint64_t lo = sub << shift;
        return lo + ((std::uint64_t{1} << shift) >> 1);
    }

  private:
    std::vector<std::uint32_t> counts_;
    std::uint64_t n_ = 0;
    std::uint64_t max_ = 0;
};

}  // namespace loadgen
