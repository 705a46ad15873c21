// The controller's limits file (YAML): per-bucket overrides of nginx.conf, and run-time
// buckets. Format and rules: docs/control-plane.md, "Limits file".
//
//   buckets:
//     api:                 # a bucket of nginx.conf: override its limit and/or mode
//       limit: 500r/s
//       mode: shadow
//     bots:                # a run-time bucket: defined here (caller/procedure match)
//       caller_prefix: bot-
//       procedure_regex: ^/search
//       scope: zone
//       limit: 10r/s
//   version: 42            # optional label (string or number; grl-rlc writes its version)
#pragma once

#include <string>

#include "grl/control/control.h"

namespace grl::daemon {

struct LimitsLoad {
    bool ok = false;
    control::Limits limits;
    std::string error;  // "<file>:<line>: bucket \"x\": field \"limit\": ..." when !ok
};

LimitsLoad parse_limits(const std::string& text, const std::string& file_name);
LimitsLoad load_limits_file(const std::string& path);

}  // namespace grl::daemon
