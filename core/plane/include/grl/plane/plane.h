// The data plane's side of the control loop, as pure functions over the shm:
// building a report from the counters, applying received instructions, and
// rendering the status page. The nginx glue calls these; tests call them too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grl/common/bucket.h"
#include "grl/plane/keyed_spec.h"
#include "grl/common/quota.h"
#include "grl/wire/wire.h"
#include "grl/plane/shm_layout.h"

namespace grl {

struct Identity {
    std::string host;
    std::string zone;
    std::string region;
};

// The buckets of one configuration and the shm slot each one uses.
struct BucketTable {
    std::vector<BucketDef> defs;
    std::vector<std::uint16_t> slots;  // slots[i] is the shm slot of defs[i]
    // keyed[i]: defs[i]'s per-key options (KeyedSpec::keyed false for a plain bucket); may be
    // shorter than defs (the rest are plain).
    std::vector<KeyedSpec> keyed;
    const KeyedSpec* keyed_spec(std::size_t i) const {
        return i < keyed.size() && keyed[i].keyed ? &keyed[i] : nullptr;
    }
    // quotas[i]: defs[i]'s quota= (n 0: none); may be shorter than defs.
    std::vector<QuotaSpec> quotas;
    QuotaSpec quota(std::size_t i) const { return i < quotas.size() ? quotas[i] : QuotaSpec{}; }
    // Index into defs of `name`, or -1.
    int find(std::string_view name) const;
};

// A run-time bucket as a worker sees it: its definition and shm slot.
struct RuntimeBucket {
    BucketDef def;
    std::uint16_t slot = 0;
};

// Copies the run-time bucket definitions out of the shm (consistent per
// definition, via their sequence locks); `gen` receives the generation read.
std::vector<RuntimeBucket> load_runtime(const shm::View& shm, std::uint64_t& gen);

// Removes run-time buckets whose instruction has expired at `now_ms` (fail
// open); returns their names. Called by the reporter only.
std::vector<std::string> expire_runtime(const shm::View& shm, std::uint64_t now_ms);

// Run-time definitions whose lock a dead writer left held and a reporter took over
// (status page: runtime_takeovers).
std::uint64_t runtime_takeovers(const shm::Header& h);

// Fills `r` with the cumulative counters of every configured bucket and of
// the run-time buckets.
void build_report(const shm::View& shm, const BucketTable& t, const Identity& id,
                  std::uint64_t interval_ms, std::uint64_t wall_ms, wire::Report& r);

// Adds each keyed bucket's heavy hitters to its entry of `r` (built by build_report just
// before): the keys whose traffic since the previous call is at least 1/64 of the limit, the
// `report_keys=` busiest, with their rates on this host over that span (`now_ms`, monotonic);
// their text is left out with `hash_keys=on`. Called by the reporter only.
// `sent_ms`: the wall-clock stamp of the last report that was sent (0: none yet). A quota
// bucket whose window began more than two intervals after it drops the use held back since
// (keyed::Table::drop_unlisted): use of an ended window does not count in the next.
void add_key_rates(const shm::View& shm, const BucketTable& t, std::uint64_t now_ms,
                   wire::Report& r, std::uint64_t sent_ms = 0);
// A report that could not be sent gives its keys' quota use back (keyed::Table::unlist), so
// that the next report lists it again.
void unlist_key_use(const shm::View& shm, const BucketTable& t, const wire::Report& r);

// Adds to `r` each bucket's counts since `prev` (the reporter's previous report, `span_ms`
// earlier on the monotonic clock) as `recent`, so that a collector without a baseline for
// this host rates it from one report. Nothing is added when `prev` is of another epoch or
// the span is 0; a bucket that is new, or whose counters went back, gets none.
void add_recent(wire::Report& r, const wire::Report& prev, std::uint64_t span_ms);

// Whether a keyed bucket limits keys (docs/per-key.md "Ratios per key"): the reporter logs one
// line when a bucket starts limiting keys (its instruction names a key with a ratio above 0)
// and one when it stops (no such key any more, or its instruction expired), never per request.
enum class KeyLimiting : std::uint8_t { Unchanged, Started, Stopped };
// The keys of a keyed instruction entry with a ratio above 0 (a key sent with ratio 0 is being
// cleared: it is no longer limited).
std::size_t limited_keys(const wire::Instruction& in);
// Updates `limiting` (the bucket's state so far) from the instruction just applied.
KeyLimiting key_limiting(bool& limiting, const wire::Instruction& in);

// Applies one decoded instruction message received at monotonic `now_ms`.
// `ttl_cap_ms` is grl_instruction_ttl. Entries with a `match` for a name that
// is not configured define (or update) a run-time bucket. Called by the
// reporter only (the single writer of instructions). Returns how many entries
// were applied.
std::size_t apply_instructions(const shm::View& shm, const BucketTable& t,
                               const wire::Instructions& m, std::uint64_t now_ms,
                               std::uint64_t ttl_cap_ms);

// State of one bucket's instruction at `now_ms`.
shm::PlaneState bucket_state(const shm::BucketSlot& s, std::uint64_t now_ms);
// State of the control plane as a whole: waiting (never heard), active (a
// valid message within the TTL), expired.
shm::PlaneState plane_state(const shm::View& shm, std::uint64_t now_ms, std::uint64_t ttl_ms);

// One bucket as the status page shows it at `now_ms` (monotonic).
struct BucketView {
    const BucketDef* def;
    bool runtime;
    shm::View::Totals tot;  // summed over the worker slots
    shm::PlaneState state;
    std::uint64_t threshold;   // 0 unless active
    std::uint64_t age_ms;      // since the last instruction; 0 when none
    Mode mode;                 // effective
    std::uint64_t limit_mrps;  // effective
    std::uint16_t slot;
    const KeyedSpec* keyed;  // null: not a keyed bucket (view_bucket leaves it null)
    bool key_quota = false;  // a keyed bucket with quota=: each key's quota
};
BucketView view_bucket(const shm::View& shm, const BucketDef& def, std::uint16_t slot,
                       std::uint64_t now_ms);

struct StatusInput {
    const shm::View* shm = nullptr;
    const BucketTable* table = nullptr;
    Identity id;
    std::string shm_name;
    std::uint64_t now_ms = 0;
    std::uint64_t ttl_ms = 0;
    bool reporting = false;  // a collector endpoint is configured
    bool curve = false;      // grl_curve_keypair is set
};

std::string render_status_json(const StatusInput& in);
std::string render_status_prometheus(const StatusInput& in);

}  // namespace grl
