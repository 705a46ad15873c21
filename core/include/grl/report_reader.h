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

#include "grl/bucket_types.h"
#include "grl/wire.h"

namespace grl::wire {

struct ReportBucketView : ReportCounts {
    std::string_view name;
};

// Valid while the bytes it was read from are.
struct ReportView : ReportFields {
    std::string_view host;
    std::string_view zone;
    std::string_view region;
    std::vector<ReportBucketView> buckets;
};

// Reads a report body. On failure returns false with a short reason in `error` (not
// necessarily worded like wire::decode's); `out` is then unspecified.
bool read_report(std::string_view bytes, ReportView& out, std::string& error);

// A view of a decoded Report (for tests and callers holding a wire::Report).
void view_of(const Report& r, ReportView& out);

}  // namespace grl::wire
