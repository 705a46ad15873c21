// What-if: replays recorded history against proposed limits (docs/rlc.md, "What-if").
// Pure logic: history and the two limits sets in, figures out; the renderings (table,
// JSON, HTML with inline SVG) are strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "grl/control/control.h"
#include "history.h"

namespace grl::rlc {

// One limit replayed over a bucket's instances (the limit applies to each instance).
struct Replay {
    double offered = 0;        // offered volume: sum of mean offered x interval length (requests)
    double would_drop = 0;     // sum of max(0, mean offered - limit) x interval length
    double drop_fraction = 0;  // would_drop / offered (0 when nothing was offered)
    double minutes_over = 0;  // minutes in which an instance's peak offered rate exceeded the limit
    double worst_overshoot = 0;  // max (peak offered - limit) / limit; 0 if never over
    double worst_rps = 0;        // the peak offered rate at the worst overshoot
    std::int64_t worst_at_s = 0;
    std::string worst_instance;  // describe(InstanceKey)
};
Replay replay(const std::vector<const Series*>& instances, std::uint64_t limit_mrps,
              std::int64_t since_s, std::int64_t until_s);

struct WhatIfRow {
    std::string bucket;
    std::optional<Scope> scope;
    std::optional<std::uint64_t> old_mrps, new_mrps;  // none: no limit known / proposed
    std::optional<Replay> old_replay, new_replay;
    // For the chart, per time step (kChartSteps over the window): the highest peak and mean
    // offered rate of any instance, -1 where none has a sample. Kept instead of the
    // history, which what-if reads a slice at a time.
    std::vector<double> chart_peak, chart_mean;
};

inline constexpr std::size_t kChartSteps = 450;

struct WhatIf {
    std::int64_t since_s = 0, until_s = 0;
    std::vector<WhatIfRow> rows;  // buckets with history in the window, by name
};

// Old limits: the current limits file's, else the last recorded. New: the proposed file's,
// else the old (unchanged).
WhatIf what_if(const std::vector<Series>& history, const control::Limits& current,
               const control::Limits& proposed, std::int64_t since_s, std::int64_t until_s);
// The same, reading `history` `slice` buckets at a time: memory is bounded by a slice.
WhatIf what_if(HistorySource& history, const control::Limits& current,
               const control::Limits& proposed, std::int64_t since_s, std::int64_t until_s,
               std::size_t slice = kSliceBuckets);

std::string render_whatif_table(const WhatIf& w);
std::string render_whatif_json(const WhatIf& w);
// A self-contained HTML page: per bucket a table row and an SVG chart of peak and mean
// offered rates (the busiest instance per time step) against the old and the new limit.
std::string render_whatif_html(const WhatIf& w);

}  // namespace grl::rlc
