// `grlctl explain BUCKET [KEY]`: why requests of a bucket are (or are not) being dropped, in
// sentences, per instance (docs/control-plane.md, "grlctl"). A pure function of the
// controller's replies, for the tests.
#pragma once

#include <cstdint>
#include <string>

#include "grl/wire/wire_control.h"

namespace grl::grlctl {

// `buckets`: the reply to a buckets request for the bucket, with hosts. `keys`: the reply to a
// keys request for it (a keyed bucket), or null. `key`: the API key asked about, "" none.
// `now_ms`: the wall clock, for "since".
std::string render_explain(const std::string& bucket, const wire::AdminReply& buckets,
                           const wire::AdminReply* keys, const std::string& key,
                           std::uint64_t now_ms);

}  // namespace grl::grlctl
