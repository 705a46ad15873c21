#include "synth.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "grl/common/prng.h"
#include "units.h"

namespace grl::rlc {

namespace {

constexpr std::int64_t kDay = 86400;
constexpr std::int64_t kWeek = 7 * kDay;
constexpr double kPi = 3.14159265358979323846;

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    std::int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// Uniform in (0, 1]: 53 random bits, never 0 (log(0) below).
double uniform(Prng& p) {
    return static_cast<double>((p.next64() >> 11) + 1) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller (one of the pair): only log, sqrt and cos, so the same
// seed gives the same history wherever libm is correctly rounded.
double gaussian(Prng& p) {
    double u1 = uniform(p), u2 = uniform(p);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

std::int64_t day0_s(const SynthSpec& spec) {
    return floor_div(synth_start_s(spec), kDay) * kDay;
}

bool in_gap(const SynthSpec& spec, std::int64_t t) {
    const std::int64_t d0 = day0_s(spec);
    for (const Gap& g : spec.gaps) {
        std::int64_t from = d0 + g.day * kDay + std::int64_t{g.hour} * 3600;
        if (t >= from && t < from + static_cast<std::int64_t>(g.hours) * 3600) return true;
    }
    return false;
}

bool parse_int(std::string_view s, int& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    std::size_t from = 0;
    for (;;) {
        std::size_t at = s.find(sep, from);
        out.push_back(s.substr(from, at == std::string_view::npos ? s.npos : at - from));
        if (at == std::string_view::npos) return out;
        from = at + 1;
    }
}

}  // namespace

std::string validate(const SynthSpec& s) {
    if (s.weeks < 1 || s.weeks > 520) return "--weeks " + std::to_string(s.weeks) + ": 1 to 520";
    if (s.interval_s < 1 || s.interval_s > 3600)
        return "--interval " + std::to_string(s.interval_s) + "s: 1s to 1h";
    if (!(s.base >= 0)) return "--base " + std::to_string(s.base) + ": must be >= 0";
    if (!(s.daily >= 0 && s.daily < 1)) return "--daily " + std::to_string(s.daily) + ": 0 to <1";
    if (!(s.weekly >= 0 && s.weekly < 1))
        return "--weekly " + std::to_string(s.weekly) + ": 0 to <1";
    if (!(s.trend > -1.0 / s.weeks))
        return "--trend " + std::to_string(s.trend) + ": the load would fall below zero";
    if (!(s.noise >= 0 && s.noise < 1)) return "--noise " + std::to_string(s.noise) + ": 0 to <1";
    if (!(s.burst >= 0)) return "--burst " + std::to_string(s.burst) + ": must be >= 0";
    for (const Spike& sp : s.spikes) {
        if (sp.day < 0 || sp.day > s.weeks * 7)
            return "--spike day " + std::to_string(sp.day) + ": outside the " +
                   std::to_string(s.weeks) + " weeks";
    }
    for (const Gap& g : s.gaps) {
        if (g.day < 0 || g.day > s.weeks * 7)
            return "--gap day " + std::to_string(g.day) + ": outside the " +
                   std::to_string(s.weeks) + " weeks";
    }
    return "";
}

std::int64_t synth_start_s(const SynthSpec& spec) {
    std::int64_t end = floor_div(spec.end_s, spec.interval_s) * spec.interval_s;
    return end - spec.weeks * kWeek;
}

double synth_level(const SynthSpec& spec, std::int64_t t) {
    const std::int64_t start = synth_start_s(spec);
    double weeks_in = static_cast<double>(t - start) / static_cast<double>(kWeek);
    double hour = static_cast<double>(t - floor_div(t, kDay) * kDay) / 3600.0;
    // 1970-01-01 was a Thursday: +3 makes Monday day 0 of the week.
    double week_pos = static_cast<double>((floor_div(t, kDay) + 3) % 7) + hour / 24.0;
    double level = spec.base * (1.0 + spec.trend * weeks_in) *
                   (1.0 + spec.daily * std::cos(2.0 * kPi * (hour - 15.0) / 24.0)) *
                   (1.0 + spec.weekly * std::cos(2.0 * kPi * (week_pos - 2.5) / 7.0));
    const std::int64_t d0 = day0_s(spec);
    for (const Spike& sp : spec.spikes) {
        std::int64_t from = d0 + sp.day * kDay + std::int64_t{sp.hour} * 3600;
        if (t >= from && t < from + 3600) level *= sp.factor;
    }
    return std::max(0.0, level);
}

std::vector<Sample> synthesize(const SynthSpec& spec) {
    std::vector<Sample> out;
    Prng prng(spec.seed);
    const std::int64_t start = synth_start_s(spec);
    const std::int64_t end = start + spec.weeks * kWeek;
    const double L = spec.limit_rps;
    out.reserve(static_cast<std::size_t>((end - start) / spec.interval_s));
    for (std::int64_t t = start; t < end; t += spec.interval_s) {
        // Draw before deciding on a gap, so a gap does not shift the rest of the history.
        double g_mean = gaussian(prng), g_peak = gaussian(prng);
        if (in_gap(spec, t)) continue;
        Sample s;
        s.start_s = t;
        s.length_s = spec.interval_s;
        s.ticks = spec.interval_s;
        double mean = synth_level(spec, t) * std::max(0.0, 1.0 + spec.noise * g_mean);
        double peak = mean * (1.0 + spec.burst * (1.0 + 0.5 * std::fabs(g_peak)));
        s.offered = {mean, peak};
        s.admitted = s.offered;
        s.limit_rps = L;
        s.mode = spec.mode;
        if (L >= 0) {
            // Per tick a deny bucket admits at most L; the mean and the peak tick are
            // treated alike (a tick-level model would add nothing a policy can see).
            Rate over{std::max(0.0, mean - L), std::max(0.0, peak - L)};
            s.ratio = L == 0 ? 1.0 : (mean > 0 ? over.mean / mean : 0.0);
            if (spec.mode == Mode::Deny) {
                s.dropped = over;
                s.admitted = {mean - over.mean, peak - over.peak};
            } else {
                s.shadow_dropped = over;
            }
        }
        if (spec.candidate_rps >= 0) {
            const double c = spec.candidate_rps;
            s.candidate_limit_rps = c;
            s.candidate_would_drop = {std::max(0.0, mean - c), std::max(0.0, peak - c)};
        }
        out.push_back(s);
    }
    return out;
}

std::uint64_t instance_seed(std::uint64_t seed, const InstanceKey& key) {
    // FNV-1a over the key's fields, then one SplitMix64 step with the seed.
    std::uint64_t h = 0xcbf29ce484222325ULL;
    auto mix = [&h](std::string_view s) {
        for (unsigned char c : s) {
            h ^= c;
            h *= 0x100000001b3ULL;
        }
        h ^= 0xff;
        h *= 0x100000001b3ULL;
    };
    mix(key.bucket);
    mix(to_string(key.scope));
    mix(key.region);
    mix(key.zone);
    return Prng(seed ^ h).next64();
}

Parsed<Spike> parse_spike(std::string_view s) {
    Parsed<Spike> p;
    auto f = split(s, ':');
    Parsed<double> factor = f.size() == 3 ? parse_number(f[2]) : Parsed<double>{};
    if (f.size() != 3 || !parse_int(f[0], p.value.day) || !parse_int(f[1], p.value.hour) ||
        !factor || p.value.day < 0 || p.value.hour < 0 || p.value.hour > 23 || factor.value < 0) {
        p.error = "invalid spike \"" + std::string(s) +
                  "\", expected DAY:HOUR:FACTOR, e.g. 10:14:3 (day >= 0, hour 0-23, factor >= 0)";
        return p;
    }
    p.value.factor = factor.value;
    return p;
}

Parsed<Gap> parse_gap(std::string_view s) {
    Parsed<Gap> p;
    auto f = split(s, ':');
    bool ok = false;
    if (f.size() == 2) {
        ok = parse_int(f[0], p.value.day) && parse_int(f[1], p.value.hours);
        p.value.hour = 0;
    } else if (f.size() == 3) {
        ok = parse_int(f[0], p.value.day) && parse_int(f[1], p.value.hour) &&
             parse_int(f[2], p.value.hours);
    }
    if (!ok || p.value.day < 0 || p.value.hour < 0 || p.value.hour > 23 || p.value.hours < 1)
        p.error = "invalid gap \"" + std::string(s) +
                  "\", expected DAY:HOURS or DAY:HOUR:HOURS, e.g. 12:6:4 (day >= 0, hour 0-23, "
                  "hours >= 1)";
    return p;
}

}  // namespace grl::rlc
