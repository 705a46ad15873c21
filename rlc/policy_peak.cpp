// peak (the default policy): a high percentile of the recorded peak offered rates over the
// window, times (1 + buffer), then the step guard, floor and ceiling. Offered load includes
// what was dropped, so it is the demand whatever limit was in force.
#include <cstdio>

#include "policy.h"

namespace grl::rlc {

namespace {

std::string pct_name(double p) {
    if (p >= 100) return "max";
    char buf[32];
    std::snprintf(buf, sizeof buf, "p%g", p);
    return buf;
}

class PeakPolicy : public Policy {
  public:
    explicit PeakPolicy(const PeakParams& p) : p_(p) {}
    Proposal propose(const PolicyInput& in) const override { return propose_peak(p_, in, "peak"); }

  private:
    PeakParams p_;
};

}  // namespace

PeakParams read_peak_params(ParamReader& r, const PolicyEnv& env) {
    PeakParams p;
    p.percentile = r.percentile("percentile", p.percentile);
    p.buffer = r.fraction("buffer", p.buffer, 0, 10);
    p.clamps.floor_rps = r.rate("floor", std::nullopt);
    p.clamps.ceiling_rps = r.rate("ceiling", std::nullopt);
    p.clamps.step = r.fraction("step", env.step_guard, 0, 100);
    p.clamps.min_change = r.fraction("min_change", p.clamps.min_change, 0, 1);
    p.screen.min_history_s = static_cast<double>(r.duration("min_history", 7LL * 86400));
    p.screen.min_coverage = r.fraction("min_coverage", p.screen.min_coverage, 0, 1);
    return p;
}

Proposal propose_peak(const PeakParams& p, const PolicyInput& in, const std::string& policy_name) {
    Proposal out;
    out.bucket = in.bucket;
    out.old = in.current;
    out.policy = policy_name;
    out.evidence.since_s = in.since_s;
    out.evidence.until_s = in.until_s;
    out.evidence.buffer = p.buffer;
    if (!in.instances.empty()) out.scope = in.instances.front()->key.scope;

    // The limit applies to each instance: it must cover the instance that needs the most.
    double best = -1;
    for (const Series* s : in.instances) {
        Screened sc = screen(*s, in.since_s, in.until_s, p.screen);
        if (sc.gone) {
            out.evidence.notes.emplace_back("ignored " + describe(s->key), sc.declined);
            continue;
        }
        out.evidence.resets += sc.resets;
        if (!sc.declined.empty()) {
            out.declined = describe(s->key) + ": " + sc.declined;
            return out;
        }
        std::vector<double> peaks;
        peaks.reserve(sc.samples.size());
        for (const Sample* smp : sc.samples) peaks.push_back(smp->offered.peak);
        out.evidence.samples += peaks.size();
        double v = percentile_of(peaks, p.percentile);
        if (v > best) {
            best = v;
            out.evidence.bound_by = describe(s->key);
            out.evidence.coverage = sc.coverage;
        }
    }
    if (best < 0) {
        out.declined = "no instance with recent samples in the window";
        return out;
    }
    out.evidence.basis = pct_name(p.percentile) + " of peak offered";
    out.evidence.basis_rps = best;
    out.evidence.raw_rps = best * (1 + p.buffer);
    out.new_mrps =
        clamp_and_round(out.evidence.raw_rps, p.clamps, in.current, in.force, out.evidence);
    return out;
}

std::unique_ptr<Policy> make_peak_policy(const Params& params, const PolicyEnv& env) {
    ParamReader r(params, "policy peak");
    PeakParams p = read_peak_params(r, env);
    r.finish();
    return std::make_unique<PeakPolicy>(p);
}

}  // namespace grl::rlc
