// forecast: predicts the peak of the next week from weekly seasonality and trend, a seasonal
// naive forecast with a linear trend, per instance:
//
//   - the window's last K whole weeks (counted back from the end of the window) are cut
//     into hours; H[k][h] is the highest peak offered rate in hour h of week k;
//   - the trend b (r/s per week) is the least-squares slope of the weeks' mean hourly
//     values (a one-hour spike moves a week's mean by 1/168 of its size);
//   - hour h of next week is forecast as the median over the weeks of H[k][h] carried
//     forward by the trend, H[k][h] + b x (K - k): each past week says what hour h looks
//     like, the trend says how much it has grown since, the median ignores a one-off spike
//     (from 3 weeks on);
//   - the forecast peak is the highest forecast hour; the limit is that times (1 + buffer),
//     with the same step guard, floor and ceiling as peak.
//
// With fewer than min_weeks (default 2) whole weeks of history it says so and falls back to
// peak (which may itself decline).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "policy.h"

namespace grl::rlc {

namespace {

constexpr std::int64_t kWeek = 7LL * 86400;
constexpr int kHours = 168;

struct Forecast {
    double peak = -1;
    int hour = 0;      // hour of next week of the forecast peak
    double trend = 0;  // r/s per week
    int weeks = 0;
};

double median(std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    auto n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Forecast forecast_one(const std::vector<const Sample*>& samples, std::int64_t until_s, int weeks) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<std::vector<double>> H(static_cast<std::size_t>(weeks),
                                       std::vector<double>(kHours, nan));
    const std::int64_t start = until_s - weeks * kWeek;
    for (const Sample* s : samples) {
        if (s->start_s < start) continue;
        std::int64_t off = s->start_s - start;
        auto k = static_cast<std::size_t>(off / kWeek);
        auto h = static_cast<std::size_t>((off % kWeek) / 3600);
        double& cell = H[k][h];
        if (std::isnan(cell) || s->offered.peak > cell) cell = s->offered.peak;
    }
    // Trend: least squares of the weekly means over the weeks with at least half their hours.
    std::vector<std::pair<double, double>> pts;
    for (int k = 0; k < weeks; ++k) {
        double sum = 0;
        int n = 0;
        for (double v : H[static_cast<std::size_t>(k)])
            if (!std::isnan(v)) sum += v, ++n;
        if (n >= kHours / 2) pts.emplace_back(k, sum / n);
    }
    Forecast f;
    f.weeks = weeks;
    if (pts.size() >= 2) {
        double mx = 0, my = 0;
        for (auto [x, y] : pts) mx += x, my += y;
        mx /= static_cast<double>(pts.size());
        my /= static_cast<double>(pts.size());
        double sxy = 0, sxx = 0;
        for (auto [x, y] : pts) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
        f.trend = sxx > 0 ? sxy / sxx : 0;
    }
    for (int h = 0; h < kHours; ++h) {
        std::vector<double> carried;
        for (int k = 0; k < weeks; ++k) {
            double v = H[static_cast<std::size_t>(k)][static_cast<std::size_t>(h)];
            if (!std::isnan(v)) carried.push_back(v + f.trend * (weeks - k));
        }
        if (carried.empty()) continue;
        double v = std::max(0.0, median(carried));
        if (v > f.peak) f.peak = v, f.hour = h;
    }
    return f;
}

std::string fmt(double v, int digits = 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

class ForecastPolicy : public Policy {
  public:
    ForecastPolicy(const PeakParams& p, int min_weeks) : p_(p), min_weeks_(min_weeks) {}

    Proposal propose(const PolicyInput& in) const override {
        // Whole weeks of history: the window's, and every live instance's own.
        std::int64_t weeks = (in.until_s - in.since_s) / kWeek;
        std::string short_reason;
        for (const Series* s : in.instances) {
            Screened sc = screen(*s, in.since_s, in.until_s, p_.screen);
            if (sc.gone || sc.samples.empty()) continue;
            std::int64_t span = in.until_s - sc.samples.front()->start_s;
            if (span / kWeek < weeks) weeks = span / kWeek;
            if (span / kWeek < min_weeks_ && short_reason.empty()) {
                short_reason = describe(s->key) + " has " + fmt(static_cast<double>(span) / 86400) +
                               " d of history, forecast needs " + std::to_string(min_weeks_) +
                               " weeks (min_weeks)";
            }
        }
        if (weeks < min_weeks_ && short_reason.empty())
            short_reason = "the window holds " + std::to_string(weeks) +
                           " whole weeks, forecast needs " + std::to_string(min_weeks_) +
                           " (min_weeks)";
        if (!short_reason.empty()) {
            Proposal out = propose_peak(p_, in, "forecast");
            out.evidence.notes.emplace_back("fell back to peak", short_reason);
            return out;
        }

        Proposal out;
        out.bucket = in.bucket;
        out.old = in.current;
        out.policy = "forecast";
        out.evidence.since_s = in.since_s;
        out.evidence.until_s = in.until_s;
        out.evidence.buffer = p_.buffer;
        if (!in.instances.empty()) out.scope = in.instances.front()->key.scope;
        Forecast best;
        for (const Series* s : in.instances) {
            Screened sc = screen(*s, in.since_s, in.until_s, p_.screen);
            if (sc.gone) {
                out.evidence.notes.emplace_back("ignored " + describe(s->key), sc.declined);
                continue;
            }
            out.evidence.resets += sc.resets;
            if (!sc.declined.empty()) {
                out.declined = describe(s->key) + ": " + sc.declined;
                return out;
            }
            out.evidence.samples += sc.samples.size();
            Forecast f = forecast_one(sc.samples, in.until_s, static_cast<int>(weeks));
            if (f.peak > best.peak) {
                best = f;
                out.evidence.bound_by = describe(s->key);
                out.evidence.coverage = sc.coverage;
            }
        }
        if (best.peak < 0) {
            out.declined = "no instance with recent samples in the window";
            return out;
        }
        out.evidence.basis = "forecast peak of the next 7 d";
        out.evidence.basis_rps = best.peak;
        out.evidence.raw_rps = best.peak * (1 + p_.buffer);
        out.evidence.notes.emplace_back("weeks", std::to_string(best.weeks));
        out.evidence.notes.emplace_back(
            "trend", (best.trend >= 0 ? "+" : "") + fmt(best.trend, 2) + " r/s per week");
        out.evidence.notes.emplace_back("peak hour",
                                        "+" + std::to_string(best.hour) + " h after the window");
        out.new_mrps =
            clamp_and_round(out.evidence.raw_rps, p_.clamps, in.current, in.force, out.evidence);
        return out;
    }

  private:
    PeakParams p_;
    int min_weeks_;
};

}  // namespace

std::unique_ptr<Policy> make_forecast_policy(const Params& params, const PolicyEnv& env) {
    ParamReader r(params, "policy forecast");
    PeakParams p = read_peak_params(r, env);
    int min_weeks = r.count("min_weeks", 2, 1, 52);
    r.finish();
    return std::make_unique<ForecastPolicy>(p, min_weeks);
}

}  // namespace grl::rlc
