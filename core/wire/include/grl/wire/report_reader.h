// A zero-copy reader of `report` messages (docs/protocol.md) for the collector's hot path.
//
// It accepts exactly what grl::wire::decode(bytes, Report&) accepts (same size, nesting,
// key, type, name, count and uniqueness rules; unknown keys skipped), but reads the msgpack
// bytes in one pass without building an object tree or allocating: names are string_views
// into `bytes`, and the bucket vector keeps its capacity between calls. Its unit test checks
// the equivalence on valid, malformed and randomly mutated messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grl/common/bucket_types.h"
#include "grl/wire/wire.h"

namespace grl::wire {

// One heavy hitter of a keyed bucket (wire::KeyRate without copies; a report's `hosts` is 1).
struct KeyRateView {
    std::uint64_t hash = 0;
    std::string_view text;  // empty when sent hashed
    std::uint64_t offered_mrps = 0;
    std::uint64_t dropped_mrps = 0;
    std::uint64_t used = 0;  // wire::KeyRate::used
};

struct ReportBucketView : ReportCounts {
    std::string_view name;
    bool keyed = false;
    // keyed: this bucket's keys are ReportView::keys[keys_first, keys_first + keys_count).
    std::uint32_t keys_first = 0;
    std::uint32_t keys_count = 0;
};

// Valid while the bytes it was read from are.
struct ReportView : ReportFields {
    std::string_view host;
    std::string_view zone;
    std::string_view region;
    std::vector<ReportBucketView> buckets;
    std::vector<KeyRateView> keys;  // every bucket's keys, one contiguous run per bucket
};

// The keys of bucket `b` of `v`: [first, last).
struct KeyRange {
    const KeyRateView* first = nullptr;
    const KeyRateView* last = nullptr;
    const KeyRateView* begin() const { return first; }
    const KeyRateView* end() const { return last; }
    std::size_t size() const { return static_cast<std::size_t>(last - first); }
};
inline KeyRange keys_of(const ReportView& v, const ReportBucketView& b) {
    if (b.keys_count == 0) return {};
    const KeyRateView* p = v.keys.data() + b.keys_first;
    return {p, p + b.keys_count};
}

// Reads a report body. On failure returns false with a short reason in `error` (not
// necessarily worded like wire::decode's); `out` is then unspecified.
bool read_report(std::string_view bytes, ReportView& out, std::string& error);

// A view of a decoded Report (for tests and callers holding a wire::Report).
void view_of(const Report& r, ReportView& out);

}  // namespace grl::wire
