// A zero-copy reader of `report` messages (docs/protocol.md) for the collector's hot path.
//
// It accepts exactly what grl::wire::decode(bytes, Report&) accepts (same size, nesting,
// key, type, name, count and uniqueness rules; unknown keys skipped), but reads the msgpack
// bytes in one pass without building an object tree or allocating: names are string_views
// into `bytes`, and the bucket vector keeps its capacity between calls. Its unit test checks
// the equivalence on valid, malformed and randomly mutated messages.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grl/bucket_types.h"
#include "grl/wire.h"

namespace grl::wire {

struct ReportBucketView {
    std::string_view name;
    Scope scope = Scope::Global;
    Mode mode = Mode::Deny;
    std::uint64_t limit_mrps = 0;
    std::uint64_t offered = 0;
    std::uint64_t admitted = 0;
    std::uint64_t dropped = 0;
    std::uint64_t shadow_dropped = 0;
    bool has_recent = false;  // see wire::ReportBucket
    std::array<std::uint64_t, 4> recent{};
};

// Valid while the bytes it was read from are.
struct ReportView {
    std::string_view host;
    std::string_view zone;
    std::string_view region;
    std::uint64_t epoch = 0;
    std::uint64_t seq = 0;
    std::uint64_t ts_ms = 0;
    std::uint64_t interval_ms = 0;
    std::uint64_t reports_dropped = 0;
    std::uint64_t recent_ms = 0;
    std::vector<ReportBucketView> buckets;
};

// Reads a report body. On failure returns false with a short reason in `error` (not
// necessarily worded like wire::decode's); `out` is then unspecified.
bool read_report(std::string_view bytes, ReportView& out, std::string& error);

// A view of a decoded Report (for tests and callers holding a wire::Report).
void view_of(const Report& r, ReportView& out);

}  // namespace grl::wire
