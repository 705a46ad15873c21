// Sample blocks: one instance's samples of one UTC day packed into one blob, the history
// store's read cache (docs/rlc-history.md, "Sample blocks"). The samples table stays the
// record; a block is a copy that a cycle decodes ~8 times faster than SQLite returns the
// same rows column by column. Pure logic: the store reads and writes the blobs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "history.h"

namespace grl::rlc {

// A block holds the samples starting in [day, day + kBlockSpan), day a multiple of it.
inline constexpr std::int64_t kBlockSpan = 86400;

// The block (UTC day) a sample starting at `start_s` belongs to; also right before 1970.
inline std::int64_t block_day(std::int64_t start_s) {
    return start_s - ((start_s % kBlockSpan) + kBlockSpan) % kBlockSpan;
}

// One samples row as SQLite returns it (sqlite3_column_int64 of each column), in the order
// of the store's columns: start_s, length_s, ticks, offered mean/peak, admitted mean/peak,
// dropped mean/peak, shadow mean/peak (mrps), limit_mrps, mode, ratio_ppm,
// candidate_limit_mrps, candidate mean/peak (mrps).
struct SampleRow {
    static constexpr int kColumns = 17;
    static constexpr int kLimit = 11, kMode = 12, kRatio = 13, kCandidate = 14;
    std::int64_t v[kColumns] = {};
    bool limit_null = false;      // limit_mrps IS NULL: unknown
    bool candidate_null = false;  // candidate_limit_mrps IS NULL: no candidate
};

// The one conversion from a stored row to a Sample, shared by the row path and the block
// path so that both give the same doubles, bit for bit.
inline Sample to_sample(const SampleRow& r) {
    auto milli = [](std::int64_t x) { return static_cast<double>(x) / 1000.0; };
    Sample x;
    x.start_s = r.v[0];
    x.length_s = static_cast<std::int32_t>(r.v[1]);
    x.ticks = static_cast<std::int32_t>(r.v[2]);
    int col = 3;
    for (Rate* rate : {&x.offered, &x.admitted, &x.dropped, &x.shadow_dropped}) {
        rate->mean = milli(r.v[col++]);
        rate->peak = milli(r.v[col++]);
    }
    x.limit_rps = r.limit_null ? -1 : milli(r.v[SampleRow::kLimit]);
    x.mode = r.v[SampleRow::kMode] == 1 ? Mode::Shadow : Mode::Deny;
    x.ratio = static_cast<double>(r.v[SampleRow::kRatio]) / 1e6;
    x.candidate_limit_rps = r.candidate_null ? -1 : milli(r.v[SampleRow::kCandidate]);
    x.candidate_would_drop.mean = milli(r.v[15]);
    x.candidate_would_drop.peak = milli(r.v[16]);
    return x;
}

// How many samples of `length_s` fit in [start_s, until_s): what a reader reserves at an
// instance's first sample, instead of doublings that would leave up to half unused. At
// most 2^20 (two years of minutes), whatever range is asked for.
inline std::size_t samples_until(std::int64_t start_s, std::int64_t length_s,
                                 std::int64_t until_s) {
    if (length_s <= 0 || until_s <= start_s) return 1;
    return static_cast<std::size_t>(
        std::min<std::int64_t>((until_s - start_s) / length_s + 1, std::int64_t{1} << 20));
}

class BlockError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Rows (ascending start_s) as a blob: a format byte, the row count, then per row its NULL
// flags and each column as the zigzag varint of its difference from the previous row's
// (most columns barely move from one minute to the next: ~30 bytes a row). Lossless.
std::string encode_block(const std::vector<SampleRow>& rows);

// Appends to `out` the samples of `blob` that start in [since_s, until_s), as to_sample()
// of their rows. Throws BlockError when the blob is not one encode_block() wrote.
void decode_block(std::string_view blob, std::int64_t since_s, std::int64_t until_s,
                  std::vector<Sample>& out);

}  // namespace grl::rlc
