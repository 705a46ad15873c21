// Synthetic traffic history: weeks of one instance's samples in milliseconds, with the
// shapes limits must cope with (docs/rlc-history.md, "grl-rlc synth"). Deterministic for a
// seed on every platform: its own generator (grl::Prng), no std:: distributions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grl/common/parse.h"
#include "history.h"

namespace grl::rlc {

// Days and hours count from 00:00 UTC of the day the history starts in (day 0).
struct Spike {
    int day = 0;
    int hour = 0;       // UTC, 0-23; the spike lasts that hour
    double factor = 1;  // offered load multiplied by this
};
struct Gap {
    int day = 0;
    int hour = 0;   // UTC, 0-23
    int hours = 1;  // no sample at all for this long (the recorder was down)
};

struct SynthSpec {
    std::int64_t end_s = 0;  // exclusive; rounded down to a multiple of interval_s
    int weeks = 5;           // the history starts weeks x 7 days before end_s
    std::int32_t interval_s = 60;
    double base = 300;    // r/s: mean offered load at the start, before seasonality
    double daily = 0.4;   // daily swing: x(1 + daily cos), highest at 15:00 UTC
    double weekly = 0.2;  // weekly swing: highest Wednesday 12:00 UTC, lowest Sunday 00:00
    double trend = 0.05;  // growth per week, linear: x(1 + trend x weeks since the start)
    double noise = 0.05;  // relative standard deviation of each interval's mean
    double burst = 0.1;   // the peak tick is the mean x (1 + burst x (1 + |N(0, 1/2)|))
    std::vector<Spike> spikes;
    std::vector<Gap> gaps;
    double limit_rps = -1;  // -1: no limit (nothing dropped, limit unknown)
    Mode mode = Mode::Deny;
    // A candidate evaluated beside the limit (the limits file's `candidate:`): each sample
    // records it and its would-drops, max(0, offered - candidate). -1: none.
    double candidate_rps = -1;
    std::uint64_t seed = 1;
};

// "" when the spec can be synthesized, else what is wrong with which field.
std::string validate(const SynthSpec& spec);

// The first sample's start.
std::int64_t synth_start_s(const SynthSpec& spec);

// The offered mean at `t_s` before noise: base x trend x daily x weekly x spikes.
double synth_level(const SynthSpec& spec, std::int64_t t_s);

// Every sample from synth_start_s to end_s, gaps left out. Each sample is one interval of
// 1 s controller ticks (ticks = length_s). Offered peak >= mean; with a limit L, deny mode
// drops what is over L (admitted <= L, admitted + dropped = offered), shadow mode admits
// everything and counts what is over L as shadow-dropped.
std::vector<Sample> synthesize(const SynthSpec& spec);

// The seed of one instance of a multi-bucket synth: `seed` mixed with the key, so that
// buckets of one run differ and each is reproducible alone.
std::uint64_t instance_seed(std::uint64_t seed, const InstanceKey& key);

// "DAY:HOUR:FACTOR", e.g. "10:14:3" (day 10, 14:00-15:00 UTC, 3x the load).
Parsed<Spike> parse_spike(std::string_view s);
// "DAY:HOURS" (from 00:00 UTC) or "DAY:HOUR:HOURS", e.g. "12:6:4".
Parsed<Gap> parse_gap(std::string_view s);

}  // namespace grl::rlc
