#include "config.h"

#include <fnmatch.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

#include "grl/daemon/etcd.h"

namespace grl::rlc {

namespace {

std::string at(const std::string& file, const YAML::Node& n) {
    const YAML::Mark m = n.Mark();
    return m.line < 0 ? file : file + ":" + std::to_string(m.line + 1);
}

std::string key_of(const YAML::Node& k) {
    return k.IsScalar() ? k.Scalar() : "?";
}

std::string scalar(const std::string& where, const YAML::Node& v) {
    if (!v.IsScalar()) throw ConfigError(where + ": expected a single value");
    return v.Scalar();
}

std::string resolve(const std::string& base_dir, const std::string& p) {
    if (p.empty() || p[0] == '/' || base_dir.empty()) return p;
    return base_dir + "/" + p;
}

std::int64_t duration(const std::string& where, const YAML::Node& v) {
    std::string s = scalar(where, v);
    auto d = parse_duration_s(s);
    if (!d || *d <= 0)
        throw ConfigError(where + ": invalid duration \"" + s +
                          "\", expected e.g. 30m, 12h, 14d or 2w");
    return *d;
}

double fraction(const std::string& where, const YAML::Node& v, double hi) {
    std::string s = scalar(where, v);
    auto f = parse_fraction(s);
    if (!f || *f < 0 || *f > hi)
        throw ConfigError(where + ": invalid value \"" + s + "\", expected e.g. 0.1 or 10%");
    return *f;
}

std::string known_policies() {
    std::string s;
    for (const auto& p : policies()) s += (s.empty() ? "" : ", ") + std::string(p.name);
    return s;
}

// A rule, or the default (a rule without `match`): policy + its parameters.
Rule read_rule(const YAML::Node& node, const std::string& file, const std::string& what,
               bool is_default, const Config& cfg) {
    Rule r;
    r.origin = at(file, node) + ": " + what;
    if (is_default && node.IsScalar()) {  // default: peak
        r.policy = node.Scalar();
        r.match = "*";
    } else if (!node.IsMap()) {
        throw ConfigError(r.origin + ": expected a map (match, policy, parameters)");
    }
    Params params;
    // Where `policy` was written. A Mark, not a Node: assigning to a YAML::Node that refers
    // to a node of the tree overwrites that node.
    std::string policy_at = at(file, node);
    for (const auto& kv : node.IsMap() ? node : YAML::Node(YAML::NodeType::Map)) {
        std::string key = key_of(kv.first);
        std::string where = at(file, kv.second) + ": " + what + ": field \"" + key + "\"";
        if (key == "match") {
            if (is_default) throw ConfigError(where + ": the default has no match");
            r.match = scalar(where, kv.second);
            if (r.match.empty()) throw ConfigError(where + ": empty glob");
        } else if (key == "policy") {
            r.policy = scalar(where, kv.second);
            policy_at = at(file, kv.second);
        } else {
            params[key] = Param{scalar(where, kv.second), where};
        }
    }
    if (!is_default && r.match.empty())
        throw ConfigError(r.origin + ": field \"match\" is required");
    if (is_default && r.match.empty()) r.match = "*";
    if (r.policy.empty()) throw ConfigError(r.origin + ": field \"policy\" is required");
    if (!r.match.empty() && !is_default) r.origin += " (match \"" + r.match + "\")";
    const PolicyInfo* info = find_policy(r.policy);
    if (!info) {
        throw ConfigError(policy_at + ": " + what + ": field \"policy\": unknown policy \"" +
                          r.policy + "\" (expected " + known_policies() + ")");
    }
    r.impl = info->make(params, PolicyEnv{cfg.quota_file, r.origin, cfg.step_guard});
    return r;
}

}  // namespace

const Rule& Config::rule_for(const std::string& bucket) const {
    for (const auto& r : rules)
        if (fnmatch(r.match.c_str(), bucket.c_str(), 0) == 0) return r;
    return default_rule;
}

Config parse_config(const std::string& text, const std::string& file, const std::string& base_dir) {
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        throw ConfigError(file + ":" + std::to_string(e.mark.line + 1) + ":" +
                          std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
    }
    if (!root.IsMap())
        throw ConfigError(at(file, root) + ": expected a map (store, limits_file, rules, ...)");
    Config cfg;
    cfg.file = file;
    YAML::Node rules, def;
    bool has_default = false;
    // Scalars first: rules need quota_file and step_guard whatever the order in the file.
    for (const auto& kv : root) {
        std::string key = key_of(kv.first);
        const YAML::Node& v = kv.second;
        std::string where = at(file, v) + ": field \"" + key + "\"";
        if (key == "store") {
            cfg.store = resolve(base_dir, scalar(where, v));
        } else if (key == "limits_file" || key == "etcd") {
            std::string target = scalar(where, v);
            if (key == "etcd" || daemon::etcd::is_url(target)) {
                std::string error;
                if (!daemon::etcd::parse_url(target, error))
                    throw ConfigError(where + ": " + error);
            } else {
                target = resolve(base_dir, target);
            }
            (key == "etcd" ? cfg.etcd : cfg.limits_file) = target;
        } else if (key == "etcd_ca" || key == "etcd_cert" || key == "etcd_key" ||
                   key == "etcd_user") {
            std::string value = scalar(where, v);
            if (key != "etcd_user") value = resolve(base_dir, value);
            (key == "etcd_ca"     ? cfg.etcd_access.ca_file
             : key == "etcd_cert" ? cfg.etcd_access.cert_file
             : key == "etcd_key"  ? cfg.etcd_access.key_file
                                  : cfg.etcd_access.user) = value;
        } else if (key == "etcd_password_file") {
            std::string error;
            if (!daemon::etcd::read_password_file(resolve(base_dir, scalar(where, v)),
                                                  cfg.etcd_access.password, error))
                throw ConfigError(where + ": " + error);
        } else if (key == "quota_file") {
            cfg.quota_file = resolve(base_dir, scalar(where, v));
        } else if (key == "window") {
            cfg.window_s = duration(where, v);
        } else if (key == "step_guard") {
            cfg.step_guard = fraction(where, v, 100);
        } else if (key == "rollout") {
            if (!v.IsMap())
                throw ConfigError(where + ": expected a map (soak, threshold, raise_directly)");
            for (const auto& r : v) {
                std::string k = key_of(r.first);
                std::string w = at(file, r.second) + ": field \"rollout." + k + "\"";
                if (k == "soak") {
                    cfg.rollout.soak_s = duration(w, r.second);
                } else if (k == "threshold") {
                    cfg.rollout.threshold = fraction(w, r.second, 1);
                } else if (k == "raise_directly") {
                    std::string s = scalar(w, r.second);
                    if (s != "true" && s != "false")
                        throw ConfigError(w + ": invalid value \"" + s +
                                          "\", expected true or false");
                    cfg.rollout.raise_directly = s == "true";
                } else {
                    throw ConfigError(at(file, r.first) + ": unknown field \"rollout." + k +
                                      "\" (expected soak, threshold, raise_directly)");
                }
            }
        } else if (key == "rules") {
            if (!v.IsSequence() && !v.IsNull())
                throw ConfigError(where +
                                  ": expected a list of rules (- match: GLOB, policy: NAME)");
            rules = v;
        } else if (key == "default") {
            def = v;
            has_default = true;
        } else {
            throw ConfigError(
                at(file, kv.first) + ": unknown field \"" + key +
                "\" (expected store, limits_file, etcd, etcd_ca, etcd_cert, etcd_key, etcd_user, "
                "etcd_password_file, window, quota_file, step_guard, "
                "rollout, default, rules)");
        }
    }
    if (cfg.limits_file.empty()) throw ConfigError(file + ": field \"limits_file\" is required");
    if (has_default) {
        cfg.default_rule = read_rule(def, file, "default", true, cfg);
    } else {
        cfg.default_rule.match = "*";
        cfg.default_rule.policy = "peak";
        cfg.default_rule.origin = file + ": default";
        cfg.default_rule.impl = make_peak_policy(
            {}, PolicyEnv{cfg.quota_file, cfg.default_rule.origin, cfg.step_guard});
    }
    if (rules && rules.IsSequence()) {
        for (std::size_t i = 0; i < rules.size(); ++i)
            cfg.rules.push_back(
                read_rule(rules[i], file, "rule " + std::to_string(i + 1), false, cfg));
    }
    return cfg;
}

Config load_config(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw ConfigError(path + ": cannot read the configuration");
    std::stringstream ss;
    ss << f.rdbuf();
    auto slash = path.rfind('/');
    return parse_config(ss.str(), path, slash == std::string::npos ? "." : path.substr(0, slash));
}

}  // namespace grl::rlc
