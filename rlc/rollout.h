// Shadow-first rollout: the state machine of one managed bucket (docs/rlc.md, "Rollout").
// Pure logic: time comes in as `now_s`, the shadow-drop fraction is measured from history
// by measure_shadow(); nothing here does I/O.
//
// Transitions, per cycle (N: this cycle's proposed limit, C: the bucket's limit or candidate):
//   unmanaged/enforced, N == C           -> unchanged                   (none)
//   unmanaged/enforced, N > C, raise_directly, in deny -> enforced at N (raise)
//   unmanaged/enforced, any other N, in deny -> shadow at N beside C    (shadow, beside)
//   any other N (new bucket, bucket in shadow) -> shadow at N           (shadow)
// "Beside": the bucket keeps enforcing C in deny and N is the limits file's `candidate:`,
// judged by the controllers' candidate would-drops (measure_candidate) instead of nginx's
// shadow drops; promotion writes N and removes the candidate, a hold keeps enforcing C.
// A held or (with --force) soaking candidate beside C that a new proposal N >= C, other than
// the candidate, replaces is dropped: the bucket is enforced at C again and N is judged from
// there.
//   shadow, soak not over                -> shadow (soaking; N waits unless --force)
//   shadow, soak over, fraction < threshold -> enforced at C            (promote)
//   shadow, soak over, otherwise         -> held at C                   (hold)
//   held, last soak's fraction < threshold -> enforced at C             (promote)
//   held, N != C                          -> shadow at N                (shadow)
//   held, otherwise                       -> held                       (still)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "history.h"
#include "policy.h"

namespace grl::rlc {

enum class Stage : std::uint8_t {
    Enforced,  // limit in force, mode deny
    Shadow,    // candidate limit published in shadow mode, soaking since `since_s`
    Held,      // soaked, but would have dropped too much: stays shadow, reported every cycle
};
std::string to_string(Stage s);
std::optional<Stage> parse_stage(const std::string& s);

struct BucketState {
    std::string bucket;
    Stage stage = Stage::Enforced;
    std::uint64_t limit_mrps = 0;  // in force (Enforced) or the candidate (Shadow, Held)
    std::int64_t since_s = 0;      // when this stage began
    std::optional<std::uint64_t> previous_mrps;  // the limit before the candidate, if known
    double fraction = -1;  // the last shadow-drop fraction measured (-1: none yet)
    // Shadow or Held only: the candidate is evaluated beside `previous_mrps`, which stays
    // enforced in deny (a lowered limit of a bucket that was enforcing).
    bool beside = false;
    Mode mode() const { return stage == Stage::Enforced || beside ? Mode::Deny : Mode::Shadow; }
    // The limit nginx enforces or counts against: the candidate's only when not beside.
    std::uint64_t published_mrps() const {
        return beside && previous_mrps ? *previous_mrps : limit_mrps;
    }
};

// What a cycle did to a bucket; each one but None and Soaking is counted and logged.
enum class Action : std::uint8_t {
    None,     // nothing to do (no proposal, or the same limit)
    Raise,    // a higher limit goes straight out in deny (raise_directly)
    Shadow,   // a new candidate goes out in shadow; soak starts
    Soaking,  // still soaking; the candidate stays (a new proposal waits, unless forced)
    Promote,  // soaked under the threshold: enforced
    Hold,     // soaked at or over the threshold (or unmeasured): held in shadow
    Still,    // held, and still over the threshold
};
std::string to_string(Action a);

struct Step {
    std::optional<BucketState> next;  // none: the bucket stays unmanaged
    Action action = Action::None;
    std::string why;  // for the log and the table
};

// Shadow-drop fraction of a bucket's instances over [since_s, until_s): the shadow-dropped
// volume over the offered volume (sums of mean x interval length), counting only samples
// recorded in shadow mode at `limit_mrps` (or with an unknown limit): those are the ones
// that measured this candidate. none: no such sample.
struct ShadowMeasure {
    std::optional<double> fraction;
    std::size_t samples = 0;
    bool candidate = false;  // measured by measure_candidate (the wording of the log line)
};
ShadowMeasure measure_shadow(const std::vector<const Series*>& instances, std::uint64_t limit_mrps,
                             std::int64_t since_s, std::int64_t until_s);

// The same for a candidate evaluated beside the enforced limit: the candidate's would-drop
// volume over the offered volume, counting only samples whose recorded candidate limit is
// `limit_mrps` (any mode: the bucket stays in deny).
ShadowMeasure measure_candidate(const std::vector<const Series*>& instances,
                                std::uint64_t limit_mrps, std::int64_t since_s,
                                std::int64_t until_s);

// One cycle for one bucket: its state (none: not managed yet), this cycle's proposal (none
// or declined: no new candidate), the shadow measure over the relevant window (the soak
// for a Shadow bucket, the last `soak` for a Held one), the time and the options.
Step advance(const std::optional<BucketState>& state, const Proposal* proposal,
             const ShadowMeasure& measure, std::int64_t now_s, const RolloutOptions& opt,
             bool force);

// The window advance() needs measured for `state` at `now_s`: [since, now).
std::int64_t measure_since(const BucketState& state, std::int64_t now_s, const RolloutOptions& opt);

}  // namespace grl::rlc
