// Reads a grl-controller's Prometheus /metrics text into the recorder's observations:
// per instance grl_bucket_{offered,admitted,shadow_dropped,limit}_rps, grl_bucket_ratio,
// grl_bucket_shadow (labels bucket, scope, zone), the controller's region from
// grl_controller_info and its tick marker from grl_controller_instructions_published_total.
#pragma once

#include <string>
#include <string_view>

#include "grl/common/parse.h"
#include "recorder.h"

namespace grl::rlc {

struct ControllerScrape {
    ControllerReport report;
    std::string region;  // "" when the controller does not export grl_controller_info
    std::string name;
    // Region- and zone-scope instances left out because the region is unknown.
    std::size_t skipped_no_region = 0;
};

// `source` names the controller in the report and in errors. An error only for text that
// is not Prometheus exposition format; unknown metrics are ignored.
Parsed<ControllerScrape> parse_controller_metrics(std::string_view text, const std::string& source);

}  // namespace grl::rlc
