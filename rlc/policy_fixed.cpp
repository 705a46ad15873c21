// fixed: the bucket's limit is its quota in the quota file (contracts), whatever the
// traffic. No buffer, no step guard: a contract is a decision, not a measurement.
//
//   quotas:
//     partner-acme: 200r/s
//     partner-beta: 600r/m
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "grl/common/bucket_types.h"
#include "grl/common/parse.h"
#include "policy.h"

namespace grl::rlc {

namespace {

std::string at(const std::string& file, const YAML::Node& n) {
    const YAML::Mark m = n.Mark();
    return m.line < 0 ? file : file + ":" + std::to_string(m.line + 1);
}

class FixedPolicy : public Policy {
  public:
    FixedPolicy(std::map<std::string, Quota> q, std::string file)
        : quotas_(std::move(q)), file_(std::move(file)) {}

    Proposal propose(const PolicyInput& in) const override {
        Proposal out;
        out.bucket = in.bucket;
        out.old = in.current;
        out.policy = "fixed";
        out.evidence.since_s = in.since_s;
        out.evidence.until_s = in.until_s;
        if (!in.instances.empty()) out.scope = in.instances.front()->key.scope;
        auto it = quotas_.find(in.bucket);
        if (it == quotas_.end()) {
            out.declined = "no quota for this bucket in " + file_;
            return out;
        }
        out.evidence.basis = "quota at " + it->second.origin;
        out.evidence.basis_rps = static_cast<double>(it->second.mrps) / 1000;
        out.evidence.raw_rps = out.evidence.basis_rps;
        out.new_mrps = it->second.mrps;
        return out;
    }

  private:
    std::map<std::string, Quota> quotas_;
    std::string file_;
};

}  // namespace

std::map<std::string, Quota> parse_quotas(const std::string& text, const std::string& file) {
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        throw ConfigError(file + ":" + std::to_string(e.mark.line + 1) + ":" +
                          std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
    }
    std::map<std::string, Quota> out;
    if (!root || root.IsNull()) return out;
    if (!root.IsMap()) throw ConfigError(at(file, root) + ": expected a map with a \"quotas\" key");
    YAML::Node quotas;
    for (const auto& kv : root) {
        std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
        if (key != "quotas")
            throw ConfigError(at(file, kv.first) + ": unknown field \"" + key +
                              "\" (expected quotas)");
        quotas = kv.second;
    }
    if (!quotas || quotas.IsNull()) return out;
    if (!quotas.IsMap())
        throw ConfigError(at(file, quotas) + ": field \"quotas\": expected a map of bucket: rate");
    for (const auto& kv : quotas) {
        std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
        if (!valid_name(name)) {
            throw ConfigError(at(file, kv.first) + ": invalid bucket name \"" + name +
                              "\", expected 1-63 of [A-Za-z0-9_.:-]");
        }
        if (out.count(name))
            throw ConfigError(at(file, kv.first) + ": bucket \"" + name + "\": is duplicate");
        if (!kv.second.IsScalar()) {
            throw ConfigError(at(file, kv.second) + ": bucket \"" + name +
                              "\": expected a rate (e.g. 200r/s, 600r/m or 0)");
        }
        Quota q;
        Parsed<std::uint64_t> mrps = parse_limit(kv.second.Scalar());
        if (!mrps)
            throw ConfigError(at(file, kv.second) + ": bucket \"" + name + "\": " + mrps.error);
        q.mrps = mrps.value;
        q.origin = at(file, kv.second);
        out.emplace(name, q);
    }
    return out;
}

std::map<std::string, Quota> load_quota_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw ConfigError(path + ": cannot read the quota file");
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_quotas(ss.str(), path);
}

std::unique_ptr<Policy> make_fixed_policy(const Params& params, const PolicyEnv& env) {
    ParamReader r(params, "policy fixed");
    r.finish();  // fixed has no parameters: the quotas are in the quota file
    if (env.quota_file.empty())
        throw ConfigError(env.rule + ": policy fixed needs \"quota_file\" in rlc.yaml");
    return std::make_unique<FixedPolicy>(load_quota_file(env.quota_file), env.quota_file);
}

}  // namespace grl::rlc
