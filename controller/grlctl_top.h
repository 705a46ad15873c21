// `grlctl top`: a live terminal view of the busiest bucket instances (docs/control-plane.md,
// "grlctl top"). The screen is a pure function of the controller's replies, for the tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "grl/wire/wire_control.h"

namespace grl::grlctl {

// The instances of a buckets reply, busiest first: by offered rate, then by name, scope, zone
// (a stable order, so that rows do not swap places between refreshes at equal rates).
std::vector<const wire::BucketStatus*> busiest(const wire::AdminReply& buckets);

struct TopView {
    std::string controller_endpoint;
    std::uint64_t now_ms = 0;       // wall clock, for the header
    std::uint64_t interval_ms = 0;  // refresh period
    std::size_t width = 0;          // 0: no limit (not a terminal)
    std::size_t height = 0;         // lines; 0: no limit
    std::string error;              // the last request's failure, "" when answered
};

// One screen: a header (controller, time, zones and hosts, limits), the table of the busiest
// instances (as many as fit), and a line for those that did not fit. `status` may be null
// (its request failed); `buckets` too, with view.error saying why.
std::string render_top(const wire::AdminReply* buckets, const wire::AdminReply* status,
                       const TopView& view);

}  // namespace grl::grlctl
