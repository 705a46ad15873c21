// One cycle: every bucket's proposal from its rule's policy, the rollout step it leads to,
// and the limits file that results, as a reviewable plan (docs/rlc.md, "A cycle").
// Pure logic: history, the current limits file, the rollout states and the time come in;
// apply.h writes the result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "grl/control/control.h"
#include "history.h"
#include "limits_out.h"
#include "rollout.h"

namespace grl::rlc {

struct CycleRow {
    Proposal proposal;
    std::optional<BucketState> before;  // rollout state at the start of the cycle
    Step step;
};

struct Plan {
    std::int64_t now_s = 0;
    std::int64_t since_s = 0;          // history window [since_s, now_s)
    std::vector<CycleRow> rows;        // every bucket considered, in name order
    std::vector<std::string> skipped;  // "bots: run-time bucket, not managed"
    std::vector<std::string> notes;    // rollout states dropped because the file was edited by hand
    control::Limits before, after;     // the limits file now, and after this cycle
    std::vector<LimitChange> changes;  // before -> after
};

// `history`: every instance with samples in [now - window, now) (HistorySource::read).
Plan plan_cycle(const Config& cfg, const std::vector<Series>& history,
                const control::Limits& current, const std::map<std::string, BucketState>& states,
                std::int64_t now_s, bool force);

// The same plan, reading `history` `slice` buckets at a time (in name order) and keeping
// only the rows: memory is bounded by one slice's history, not the fleet's.
Plan plan_cycle(const Config& cfg, HistorySource& history, const control::Limits& current,
                const std::map<std::string, BucketState>& states, std::int64_t now_s, bool force,
                std::size_t slice = kSliceBuckets);

// The limit in force for a bucket: the limits file's, else the last one recorded.
Current current_limit(const std::string& bucket, const std::vector<const Series*>& instances,
                      const control::Limits& file);

// The reviewable diff: one row per bucket with a proposal (bucket, scope, old, new,
// change %, policy, rollout action, evidence), then the declined ones with their reasons,
// then the limits file changes.
std::string render_plan(const Plan& p);
// "p99.9 of peak offered 100.0 r/s x 1.20 = 120.0 r/s; 40320 samples 2026-11-02..2026-11-30; bound
// by zone eu/b; ..."
std::string render_evidence(const Evidence& e);
// "2026-11-30T12:00:00Z". The history branch has the same as units.h format_time: one of
// the two goes at merge (both cannot be linked under one name).
std::string format_utc(std::int64_t unix_s);

}  // namespace grl::rlc
