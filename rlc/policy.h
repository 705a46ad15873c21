// Policies: how grl-rlc turns a bucket's traffic history into a proposed limit
// (docs/rlc.md, "Policies").
//
// A policy is pure logic: it reads the bucket's instances' history over the window, the
// limit in force and its own parameters, and returns one Proposal. It does no I/O after
// it is made (the fixed policy reads its quota file when it is made, i.e. when rlc.yaml
// is loaded). A new policy is one file defining its factory plus one line in the table
// of policy.cpp (`kPolicies`).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "history.h"

namespace grl::rlc {

// A configuration error (rlc.yaml, the quota file, a policy's parameters). The message
// names the file, the line and the field: "rlc.yaml:12: rule 2: field \"buffer\": ...".
class ConfigError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// One parameter as written in rlc.yaml: its text and where it was written, for errors.
struct Param {
    std::string value;
    std::string origin;  // "rlc.yaml:12: rule 2 (match \"api*\"): field \"buffer\""
};
using Params = std::map<std::string, Param>;

// What a policy may need besides its parameters, from rlc.yaml.
struct PolicyEnv {
    std::string quota_file;   // absolute or relative to the working directory; "" if none
    std::string rule;         // "rlc.yaml:12: rule 2 (match \"api*\")", for error messages
    double step_guard = 0.5;  // rlc.yaml's step_guard: the default of a policy's `step`
};

// The limit in force for a bucket before this cycle.
struct Current {
    std::optional<std::uint64_t> limit_mrps;  // none: unknown (never recorded, not in the file)
    Mode mode = Mode::Deny;
};

struct PolicyInput {
    std::string bucket;
    std::vector<const Series*> instances;  // the bucket's instances, samples in the window
    std::int64_t since_s = 0;              // window [since_s, until_s)
    std::int64_t until_s = 0;
    Current current;
    bool force = false;  // --force: the step guard does not apply
};

// The figures a proposal came from, so that a reviewer can check it.
struct Evidence {
    std::int64_t since_s = 0, until_s = 0;  // the window read
    std::size_t samples = 0;                // samples used (after excluding gaps and resets)
    std::size_t resets = 0;                 // samples excluded as counter resets
    double coverage = 0;   // share of the binding instance's span with samples, 0..1
    std::string bound_by;  // the instance that needed the most ("zone eu/az1", "global")
    std::string basis;     // what was measured: "p99.9 of peak offered", "forecast", "quota"
    double basis_rps = 0;  // its value
    double buffer = 0;     // the multiplier applied was (1 + buffer)
    double raw_rps = 0;    // basis x (1 + buffer), before clamps and rounding
    std::vector<std::string> clamps;  // "floor 10r/s", "step guard +50%", ...
    std::vector<std::pair<std::string, std::string>> notes;  // policy-specific figures
};

struct Proposal {
    std::string bucket;
    std::optional<Scope> scope;  // from history; none when the bucket has none (quota only)
    Current old;
    std::optional<std::uint64_t> new_mrps;  // none: declined, see `declined`
    std::string declined;                   // why no limit is proposed
    std::string policy;                     // the policy that decided
    Evidence evidence;
};

class Policy {
  public:
    virtual ~Policy() = default;
    virtual Proposal propose(const PolicyInput& in) const = 0;
};

// Makes a policy from its parameters; throws ConfigError naming the parameter's origin.
using PolicyFactory = std::function<std::unique_ptr<Policy>(const Params&, const PolicyEnv&)>;

struct PolicyInfo {
    const char* name;
    PolicyFactory make;
    const char* summary;
};

// Every policy, in the order of kPolicies (policy.cpp).
const std::vector<PolicyInfo>& policies();
const PolicyInfo* find_policy(const std::string& name);

// The factories, one per policy file.
std::unique_ptr<Policy> make_peak_policy(const Params& p, const PolicyEnv& env);
std::unique_ptr<Policy> make_forecast_policy(const Params& p, const PolicyEnv& env);
std::unique_ptr<Policy> make_fixed_policy(const Params& p, const PolicyEnv& env);

// ---- Helpers shared by the policies -------------------------------------------------

// Reads parameters by name and rejects, at finish(), any that was not read (a typo).
class ParamReader {
  public:
    ParamReader(const Params& p, std::string where) : p_(p), where_(std::move(where)) {}
    // A fraction: "0.2" or "20%". Bounds are inclusive.
    double fraction(const std::string& name, double def, double lo, double hi);
    // A percentile in (0, 100], or "max" (= 100).
    double percentile(const std::string& name, double def);
    // A rate ("10r/s", "600r/m", "0"), in r/s; none when absent and def is none.
    std::optional<double> rate(const std::string& name, std::optional<double> def);
    // A duration ("1d", "12h", "2w"), in seconds.
    std::int64_t duration(const std::string& name, std::int64_t def);
    // A whole number in [lo, hi].
    int count(const std::string& name, int def, int lo, int hi);
    void finish() const;

  private:
    const Param* get(const std::string& name);
    const Params& p_;
    std::string where_;
    std::vector<std::string> used_;
};

// "45s", "30m", "12h", "14d", "2w" (or a bare number of seconds) to seconds; none if bad.
std::optional<std::int64_t> parse_duration_s(const std::string& s);
// "0.2" or "20%" to 0.2; none if bad.
std::optional<double> parse_fraction(const std::string& s);

// Rounds a rate up to what a limits file can say: whole r/s from 1 r/s, whole r/m below.
std::uint64_t round_up_limit(double rps);
// "500r/s", "30r/m" or "0": the limits file's spelling of a limit.
std::string format_limit(std::uint64_t mrps);
// "global", "region eu", "zone eu/az1".
std::string describe(const InstanceKey& k);
// The p-th percentile (nearest rank, p in (0,100]) of `v`; reorders v. v must not be empty.
double percentile_of(std::vector<double>& v, double p);

// Screening common to history-based policies: which samples count, and whether an
// instance has enough history to propose from.
struct Screen {
    double min_history_s = 7 * 86400.0;  // the instance's span must be at least this
    double min_coverage = 0.9;           // share of the span with samples
    double live_s = 86400.0;  // an instance silent this long before until_s has gone away
};
struct Screened {
    const Series* series = nullptr;
    std::vector<const Sample*> samples;  // usable samples (ticks > 0, no reset)
    std::size_t resets = 0;
    double coverage = 0;
    std::string declined;  // non-empty: this instance cannot be used (too little history...)
    bool gone = false;     // no sample in the last live_s: ignored, not a reason to decline
};
Screened screen(const Series& s, std::int64_t since_s, std::int64_t until_s, const Screen& opt);

// Step guard (no change larger than `step` of the old limit per cycle unless forced), floor,
// ceiling, rounding, then the dead band (no change smaller than `min_change`); records each
// clamp applied in `ev`.
struct Clamps {
    std::optional<double> floor_rps, ceiling_rps;
    double step = 0.5;  // 0: no step guard
    // A change smaller than this share of the old limit is not worth a new version and a
    // new soak: the old limit is proposed again. 0: every change counts.
    double min_change = 0.05;
};
std::uint64_t clamp_and_round(double rps, const Clamps& c, const Current& old, bool force,
                              Evidence& ev);

// The fixed policy's quota file: `quotas: {BUCKET: RATE, ...}`. Throws ConfigError naming
// the file, the line and the bucket.
struct Quota {
    std::uint64_t mrps = 0;
    std::string origin;  // "quotas.yaml:3"
};
std::map<std::string, Quota> load_quota_file(const std::string& path);
std::map<std::string, Quota> parse_quotas(const std::string& text, const std::string& file_name);

// The peak policy's parameters and computation, shared with forecast (its fallback).
struct PeakParams {
    double percentile = 99.9;  // of the samples' peak offered rates; 100 = max
    double buffer = 0.2;       // the limit is percentile x (1 + buffer)
    Clamps clamps;
    Screen screen;
};
// Reads percentile, buffer, floor, ceiling, step, min_change, min_history, min_coverage.
PeakParams read_peak_params(ParamReader& r, const PolicyEnv& env);
Proposal propose_peak(const PeakParams& p, const PolicyInput& in, const std::string& policy_name);

}  // namespace grl::rlc
