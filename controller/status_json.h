// The JSON of a bucket instance's status and of a zone's, written once for the two places that
// show them: `grlctl ... --json` (controller/grlctl.cpp) and the dashboard's /api/state
// (controller/dashboard.cpp). Field names are grlctl's, which operators' scripts read
// (docs/control-plane.md "grlctl"); rates in r/s, ratios in 0..1.
#pragma once

#include "grl/daemon/json.h"
#include "grl/wire/wire_control.h"

namespace grl::controller {

// One object: name, scope, region, zone, the rates, ratio, candidate limit (when there is
// one), mode and where limit and mode come from, override expiry, hosts and host_names (empty
// unless the request asked for them), definitions, runtime (and its match), keyed and
// keys_limited.
nlohmann::ordered_json bucket_status_json(const wire::BucketStatus& b);

// One object: zone, collector, hosts, stale_hosts, age_ms, fresh.
nlohmann::ordered_json zone_status_json(const wire::ZoneStatus& z);

// A run-time bucket's match: caller, procedure, their kinds (exact, prefix, regex) and scope.
nlohmann::ordered_json match_json(const wire::RuntimeMatch& m);

}  // namespace grl::controller
