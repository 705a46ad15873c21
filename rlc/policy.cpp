#include "policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "grl/common/parse.h"

namespace grl::rlc {

namespace {

// Every policy. A new policy: its own file defining make_<name>_policy (declared in
// policy.h) and one line here.
const std::vector<PolicyInfo> kPolicies = {
    {"peak", make_peak_policy,
     "a high percentile of the peak rates over the window, plus a buffer"},
    {"forecast", make_forecast_policy,
     "next week's peak from weekly seasonality and trend; peak when history is short"},
    {"fixed", make_fixed_policy, "the bucket's quota from the quota file (contracts)"},
};

std::string fmt(double v, int digits = 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

}  // namespace

const std::vector<PolicyInfo>& policies() {
    return kPolicies;
}

const PolicyInfo* find_policy(const std::string& name) {
    for (const auto& p : kPolicies)
        if (name == p.name) return &p;
    return nullptr;
}

std::optional<std::int64_t> parse_duration_s(const std::string& s) {
    if (s.empty()) return std::nullopt;
    std::size_t i = 0;
    std::int64_t n = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        if (n > 1'000'000'000) return std::nullopt;
        n = n * 10 + (s[i] - '0');
        ++i;
    }
    if (i == 0) return std::nullopt;
    std::string unit = s.substr(i);
    std::int64_t mult = 0;
    if (unit.empty() || unit == "s")
        mult = 1;
    else if (unit == "m")
        mult = 60;
    else if (unit == "h")
        mult = 3600;
    else if (unit == "d")
        mult = 86400;
    else if (unit == "w")
        mult = 7LL * 86400;
    else
        return std::nullopt;
    return n * mult;
}

std::optional<double> parse_fraction(const std::string& s) {
    if (s.empty()) return std::nullopt;
    bool percent = s.back() == '%';
    std::string num = percent ? s.substr(0, s.size() - 1) : s;
    if (num.empty()) return std::nullopt;
    char* end = nullptr;
    double v = std::strtod(num.c_str(), &end);
    if (end != num.c_str() + num.size() || !std::isfinite(v)) return std::nullopt;
    return percent ? v / 100 : v;
}

const Param* ParamReader::get(const std::string& name) {
    used_.push_back(name);
    auto it = p_.find(name);
    return it == p_.end() ? nullptr : &it->second;
}

double ParamReader::fraction(const std::string& name, double def, double lo, double hi) {
    const Param* p = get(name);
    if (!p) return def;
    auto v = parse_fraction(p->value);
    if (!v || *v < lo || *v > hi) {
        throw ConfigError(p->origin + ": invalid value \"" + p->value +
                          "\", expected a number from " + fmt(lo, 2) + " to " + fmt(hi, 2) +
                          " or a percentage (e.g. 20%)");
    }
    return *v;
}

double ParamReader::percentile(const std::string& name, double def) {
    const Param* p = get(name);
    if (!p) return def;
    if (p->value == "max") return 100;
    char* end = nullptr;
    double v = std::strtod(p->value.c_str(), &end);
    if (p->value.empty() || end != p->value.c_str() + p->value.size() || !(v > 0 && v <= 100)) {
        throw ConfigError(p->origin + ": invalid percentile \"" + p->value +
                          "\", expected a number in (0, 100] or max");
    }
    return v;
}

std::optional<double> ParamReader::rate(const std::string& name, std::optional<double> def) {
    const Param* p = get(name);
    if (!p) return def;
    Parsed<std::uint64_t> mrps = parse_limit(p->value);
    if (!mrps) throw ConfigError(p->origin + ": " + mrps.error);
    return static_cast<double>(mrps.value) / 1000;
}

std::int64_t ParamReader::duration(const std::string& name, std::int64_t def) {
    const Param* p = get(name);
    if (!p) return def;
    auto v = parse_duration_s(p->value);
    if (!v) {
        throw ConfigError(p->origin + ": invalid duration \"" + p->value +
                          "\", expected e.g. 30m, 12h, 14d or 2w");
    }
    return *v;
}

int ParamReader::count(const std::string& name, int def, int lo, int hi) {
    const Param* p = get(name);
    if (!p) return def;
    char* end = nullptr;
    long v = std::strtol(p->value.c_str(), &end, 10);
    if (p->value.empty() || end != p->value.c_str() + p->value.size() || v < lo || v > hi) {
        throw ConfigError(p->origin + ": invalid value \"" + p->value +
                          "\", expected a whole number from " + std::to_string(lo) + " to " +
                          std::to_string(hi));
    }
    return static_cast<int>(v);
}

void ParamReader::finish() const {
    for (const auto& [name, param] : p_) {
        if (std::find(used_.begin(), used_.end(), name) == used_.end()) {
            std::string known;
            for (const auto& u : used_) known += (known.empty() ? "" : ", ") + u;
            throw ConfigError(param.origin + ": unknown parameter for " + where_ +
                              (known.empty() ? " (it takes none)" : " (expected " + known + ")"));
        }
    }
}

std::uint64_t round_up_limit(double rps) {
    if (!(rps > 0)) return 0;
    if (rps >= 1) return static_cast<std::uint64_t>(std::ceil(rps - 1e-9)) * 1000;
    // Below 1 r/s only whole requests per minute can be written.
    auto per_min = static_cast<std::uint64_t>(std::ceil(rps * 60 - 1e-9));
    return per_min * 1000 / 60;
}

std::string format_limit(std::uint64_t mrps) {
    if (mrps == 0) return "0";
    if (mrps % 1000 == 0) return std::to_string(mrps / 1000) + "r/s";
    auto per_min = static_cast<std::uint64_t>(std::llround(static_cast<double>(mrps) * 60 / 1000));
    return std::to_string(std::max<std::uint64_t>(per_min, 1)) + "r/m";
}

std::string describe(const InstanceKey& k) {
    switch (k.scope) {
        case Scope::Global: return "global";
        case Scope::Region: return "region " + k.region;
        case Scope::Zone: return "zone " + k.region + "/" + k.zone;
    }
    return "?";
}

double percentile_of(std::vector<double>& v, double p) {
    // Nearest rank: the smallest value with at least p% of the values at or below it.
    auto n = v.size();
    auto rank = static_cast<std::size_t>(std::ceil(p / 100 * static_cast<double>(n) - 1e-9));
    std::size_t idx = rank == 0 ? 0 : rank - 1;
    if (idx >= n) idx = n - 1;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(idx), v.end());
    return v[idx];
}

namespace {

// A sample that cannot come from consistent counters: a counter that went backwards
// (a restart mis-read as a negative rate, or a wrap read as a huge one) shows as a
// negative or non-finite rate, or as more admitted than offered.
bool is_reset(const Sample& s) {
    for (const Rate* r : {&s.offered, &s.admitted, &s.dropped, &s.shadow_dropped}) {
        if (!std::isfinite(r->mean) || !std::isfinite(r->peak) || r->mean < 0 || r->peak < 0)
            return true;
    }
    return s.admitted.mean > s.offered.mean * 1.05 + 1;
}

}  // namespace

Screened screen(const Series& s, std::int64_t since_s, std::int64_t until_s, const Screen& opt) {
    Screened out;
    out.series = &s;
    std::int64_t first = -1, last_end = -1;
    double covered = 0;
    std::size_t seen = 0;
    for (const auto& smp : s.samples) {
        if (smp.start_s < since_s || smp.start_s >= until_s || smp.ticks <= 0) continue;
        ++seen;
        if (first < 0) first = smp.start_s;
        last_end = smp.start_s + smp.length_s;
        covered += smp.length_s;
        if (is_reset(smp)) {
            ++out.resets;
            continue;
        }
        out.samples.push_back(&smp);
    }
    if (seen == 0) {
        out.gone = true;
        out.declined = "no samples in the window";
        return out;
    }
    if (static_cast<double>(until_s - last_end) > opt.live_s) {
        out.gone = true;
        out.declined = "no sample in the last " + fmt(opt.live_s / 86400, 1) + " d";
        return out;
    }
    double span = static_cast<double>(until_s - first);
    out.coverage = span > 0 ? std::min(1.0, covered / span) : 0;
    if (span < opt.min_history_s) {
        out.declined = "too little history: " + fmt(span / 86400) +
                       " d since its first sample, need " + fmt(opt.min_history_s / 86400) +
                       " d (min_history)";
    } else if (out.coverage < opt.min_coverage) {
        out.declined = "gaps: samples cover " + fmt(out.coverage * 100) + "% of " +
                       fmt(span / 86400) + " d, need " + fmt(opt.min_coverage * 100) +
                       "% (min_coverage)";
    } else if (static_cast<double>(out.resets) > 0.05 * static_cast<double>(seen)) {
        out.declined = "counter resets: " + std::to_string(out.resets) + " of " +
                       std::to_string(seen) + " samples inconsistent (more than 5%)";
    } else if (out.samples.empty()) {
        out.declined = "no usable sample";
    }
    return out;
}

std::uint64_t clamp_and_round(double rps, const Clamps& c, const Current& old, bool force,
                              Evidence& ev) {
    double v = rps;
    // The step guard first, then floor and ceiling: those are the operator's hard bounds.
    if (c.step > 0 && old.limit_mrps && *old.limit_mrps > 0) {
        double o = static_cast<double>(*old.limit_mrps) / 1000;
        double hi = o * (1 + c.step), lo = o * (1 - c.step);
        std::string pct = fmt(c.step * 100, 0) + "%";
        if (v > hi || v < lo) {
            std::string side = v > hi ? "+" : "-";
            if (force) {
                ev.clamps.push_back("step guard " + side + pct + " of " +
                                    format_limit(*old.limit_mrps) + " overridden by --force");
            } else {
                v = v > hi ? hi : lo;
                ev.clamps.push_back("step guard " + side + pct + " of " +
                                    format_limit(*old.limit_mrps));
            }
        }
    }
    if (c.floor_rps && v < *c.floor_rps) {
        v = *c.floor_rps;
        ev.clamps.push_back("floor " + format_limit(round_up_limit(v)));
    }
    if (c.ceiling_rps && v > *c.ceiling_rps) {
        v = *c.ceiling_rps;
        ev.clamps.push_back("ceiling " + format_limit(round_up_limit(v)));
    }
    std::uint64_t out = round_up_limit(v);
    if (c.min_change > 0 && old.limit_mrps && *old.limit_mrps > 0 && out != *old.limit_mrps) {
        double o = static_cast<double>(*old.limit_mrps);
        if (std::fabs(static_cast<double>(out) - o) < c.min_change * o) {
            ev.clamps.push_back("within " + fmt(c.min_change * 100, 0) + "% of " +
                                format_limit(*old.limit_mrps) + ": unchanged (min_change)");
            return *old.limit_mrps;
        }
    }
    return out;
}

}  // namespace grl::rlc
