#include "rollout.h"

#include <cmath>
#include <cstdio>

namespace grl::rlc {

namespace {

std::string pct(double f) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f%%", f * 100);
    return buf;
}

BucketState make(const std::string& bucket, Stage st, std::uint64_t mrps, std::int64_t since,
                 std::optional<std::uint64_t> prev) {
    BucketState s;
    s.bucket = bucket;
    s.stage = st;
    s.limit_mrps = mrps;
    s.since_s = since;
    s.previous_mrps = prev;
    return s;
}

}  // namespace

std::string to_string(Stage s) {
    switch (s) {
        case Stage::Enforced: return "enforced";
        case Stage::Shadow: return "shadow";
        case Stage::Held: return "held";
    }
    return "?";
}

std::optional<Stage> parse_stage(const std::string& s) {
    for (Stage st : {Stage::Enforced, Stage::Shadow, Stage::Held})
        if (to_string(st) == s) return st;
    return std::nullopt;
}

std::string to_string(Action a) {
    switch (a) {
        case Action::None: return "none";
        case Action::Raise: return "raise";
        case Action::Shadow: return "shadow";
        case Action::Soaking: return "soaking";
        case Action::Promote: return "promote";
        case Action::Hold: return "hold";
        case Action::Still: return "still held";
    }
    return "?";
}

ShadowMeasure measure_shadow(const std::vector<const Series*>& instances, std::uint64_t limit_mrps,
                             std::int64_t since_s, std::int64_t until_s) {
    double offered = 0, shadow = 0;
    ShadowMeasure m;
    const double limit = static_cast<double>(limit_mrps) / 1000;
    for (const Series* s : instances) {
        for (const Sample& smp : s->samples) {
            if (smp.start_s < since_s || smp.start_s >= until_s || smp.ticks <= 0) continue;
            if (smp.mode != Mode::Shadow) continue;
            // The controller may still have published the previous limit for a moment.
            if (smp.limit_rps >= 0 && std::fabs(smp.limit_rps - limit) > 0.01 * limit + 0.001)
                continue;
            offered += smp.offered.mean * smp.length_s;
            shadow += smp.shadow_dropped.mean * smp.length_s;
            ++m.samples;
        }
    }
    if (m.samples > 0) m.fraction = offered > 0 ? shadow / offered : 0;
    return m;
}

ShadowMeasure measure_candidate(const std::vector<const Series*>& instances,
                                std::uint64_t limit_mrps, std::int64_t since_s,
                                std::int64_t until_s) {
    double offered = 0, would_drop = 0;
    ShadowMeasure m;
    m.candidate = true;
    const double limit = static_cast<double>(limit_mrps) / 1000;
    for (const Series* s : instances) {
        for (const Sample& smp : s->samples) {
            if (smp.start_s < since_s || smp.start_s >= until_s || smp.ticks <= 0) continue;
            // Unlike the limit, an unknown candidate (-1) did not measure this one: the
            // controllers had not loaded the file yet, or predate candidates.
            if (smp.candidate_limit_rps < 0 ||
                std::fabs(smp.candidate_limit_rps - limit) > 0.01 * limit + 0.001)
                continue;
            offered += smp.offered.mean * smp.length_s;
            would_drop += smp.candidate_would_drop.mean * smp.length_s;
            ++m.samples;
        }
    }
    if (m.samples > 0) m.fraction = offered > 0 ? would_drop / offered : 0;
    return m;
}

std::int64_t measure_since(const BucketState& state, std::int64_t now_s,
                           const RolloutOptions& opt) {
    if (state.stage == Stage::Shadow) return state.since_s;
    return now_s - opt.soak_s;
}

namespace {

using Limit = std::optional<std::uint64_t>;

std::string measured(const ShadowMeasure& measure, const RolloutOptions& opt) {
    const std::string what = measure.candidate ? "candidate would-drops " : "shadow drops ";
    return measure.fraction
               ? what + pct(*measure.fraction) + " over " + std::to_string(measure.samples) +
                     " samples, threshold " + pct(opt.threshold)
           : measure.candidate ? std::string("no samples of the candidate's would-drops")
                               : std::string("no shadow samples at the candidate limit");
}

// In soak: a forced new candidate replaces it; after the soak it is promoted or held.
Step from_shadow(const BucketState& state, Limit n, const ShadowMeasure& measure,
                 std::int64_t now_s, const RolloutOptions& opt, bool force) {
    Step st;
    st.next = state;
    if (force && n && *n != state.limit_mrps) {
        st.next = make(state.bucket, Stage::Shadow, *n, now_s, state.previous_mrps);
        st.next->beside = state.beside;
        st.action = Action::Shadow;
        st.why = "new candidate (--force) replaces " + format_limit(state.limit_mrps) + " in soak";
        return st;
    }
    if (now_s - state.since_s < opt.soak_s) {
        st.action = Action::Soaking;
        st.why = "soaking " + std::to_string((now_s - state.since_s) / 60) + " of " +
                 std::to_string(opt.soak_s / 60) + " min";
        if (n && *n != state.limit_mrps)
            st.why += "; proposal " + format_limit(*n) + " waits for the soak (or --force)";
        return st;
    }
    BucketState next = state;
    next.fraction = measure.fraction.value_or(-1);
    next.since_s = now_s;
    if (measure.fraction && *measure.fraction < opt.threshold) {
        next.stage = Stage::Enforced;
        next.beside = false;
        st.action = Action::Promote;
    } else {
        next.stage = Stage::Held;
        st.action = Action::Hold;
    }
    st.next = next;
    st.why = measured(measure, opt);
    return st;
}

// Held after a soak: promoted once the drops fall under the threshold, replaced by a new
// candidate, else still held.
Step from_held(const BucketState& state, Limit n, const ShadowMeasure& measure, std::int64_t now_s,
               const RolloutOptions& opt) {
    Step st;
    BucketState next = state;
    next.fraction = measure.fraction.value_or(-1);
    if (measure.fraction && *measure.fraction < opt.threshold) {
        next.stage = Stage::Enforced;
        next.beside = false;
        next.since_s = now_s;
        st.next = next;
        st.action = Action::Promote;
        st.why = measured(measure, opt);
        return st;
    }
    if (n && *n != state.limit_mrps) {
        st.next = make(state.bucket, Stage::Shadow, *n, now_s, state.previous_mrps);
        st.next->beside = state.beside;
        st.action = Action::Shadow;
        st.why = "new candidate replaces held " + format_limit(state.limit_mrps);
        return st;
    }
    st.next = next;
    st.action = Action::Still;
    st.why = measured(measure, opt);
    return st;
}

// Enforced, or not managed yet: the limit in force is the state's or the proposal's old.
Step from_enforced(const std::optional<BucketState>& state, const Proposal* proposal,
                   const std::string& bucket, Limit n, std::int64_t now_s,
                   const RolloutOptions& opt) {
    Step st;
    st.next = state;
    if (!n) return st;
    Limit old;
    Mode old_mode = Mode::Deny;
    if (state) {
        old = state->limit_mrps;
    } else if (proposal) {
        old = proposal->old.limit_mrps;
        old_mode = proposal->old.mode;
    }
    if (old && *n == *old && old_mode == Mode::Deny) return st;
    if (old && *n > *old && old_mode == Mode::Deny && opt.raise_directly) {
        st.next = make(bucket, Stage::Enforced, *n, now_s, old);
        st.action = Action::Raise;
        st.why = "raise from " + format_limit(*old) + " goes straight out (raise_directly)";
        return st;
    }
    st.next = make(bucket, Stage::Shadow, *n, now_s, old);
    st.action = Action::Shadow;
    if (old && old_mode == Mode::Deny) {
        // Enforcing: the new limit soaks as a candidate beside the old one, so that the
        // bucket never stops dropping during the soak.
        st.next->beside = true;
        st.why = *n < *old ? "lowered from " + format_limit(*old) +
                                 ": candidate beside the enforced limit"
                           : "raise from " + format_limit(*old) +
                                 " soaks beside the enforced limit (raise_directly: false)";
        return st;
    }
    st.why = !old ? "new limit: shadow first"
                  : "was in shadow at " + format_limit(*old) + ": soak at the new limit";
    return st;
}

}  // namespace

Step advance(const std::optional<BucketState>& state, const Proposal* proposal,
             const ShadowMeasure& measure, std::int64_t now_s, const RolloutOptions& opt,
             bool force) {
    Limit n;
    if (proposal && proposal->new_mrps) n = proposal->new_mrps;
    const std::string& bucket = state ? state->bucket : proposal ? proposal->bucket : std::string();
    // A candidate beside an enforced limit that a proposal at or above that limit replaces:
    // the enforced limit is where the bucket stands, so the proposal is judged from there.
    if (state && state->stage != Stage::Enforced && state->beside && state->previous_mrps && n &&
        *n >= *state->previous_mrps && *n != state->limit_mrps &&
        (force || state->stage == Stage::Held)) {
        const BucketState enforced =
            make(bucket, Stage::Enforced, *state->previous_mrps, now_s, std::nullopt);
        Step from = advance(enforced, proposal, ShadowMeasure{}, now_s, opt, force);
        const std::string dropped = "candidate " + format_limit(state->limit_mrps) + " dropped";
        if (!from.next || from.action == Action::None) {  // N is the enforced limit
            from.next = enforced;
            from.action = Action::None;
            from.why = dropped + ": the proposal is the enforced " + format_limit(*n);
        } else {
            from.why = dropped + "; " + from.why;
        }
        return from;
    }
    if (state && state->stage == Stage::Shadow)
        return from_shadow(*state, n, measure, now_s, opt, force);
    if (state && state->stage == Stage::Held) return from_held(*state, n, measure, now_s, opt);
    return from_enforced(state, proposal, bucket, n, now_s, opt);
}

}  // namespace grl::rlc
