// rlc.yaml: where history and limits live, the window, the rollout and which policy
// decides each bucket (docs/rlc.md, "rlc.yaml"). Loading it makes every rule's policy,
// so a bad parameter or quota file is an error here, before anything is computed or
// applied. Errors name the file, the line and the field.
#pragma once

#include "grl/daemon/etcd.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "policy.h"

namespace grl::rlc {

// Shadow-first rollout (docs/rlc.md, "Rollout").
struct RolloutOptions {
    std::int64_t soak_s = 3600;  // how long a new or lowered limit runs in shadow
    double threshold = 0.001;    // promoted when the shadow-drop fraction stays under this
    bool raise_directly = true;  // a raise of an enforced limit goes straight out
};

struct Rule {
    std::string match;   // glob on the bucket name (fnmatch); "*" for the default
    std::string policy;  // a name from policies()
    std::shared_ptr<const Policy> impl;
    std::string origin;  // "rlc.yaml:12: rule 2 (match \"api*\")" or "rlc.yaml: default"
};

struct Config {
    std::string file;         // rlc.yaml's own path
    std::string store;        // SQLite file: history and versions ("" if not set)
    std::string limits_file;  // the controllers' limits file this writes, or etcd://HOST:PORT/KEY
    std::string etcd;         // "" or etcd://HOST:PORT/KEY: every version is also put there
    daemon::etcd::Access
        etcd_access;  // etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file
    std::int64_t window_s = 28LL * 86400;
    std::string quota_file;  // "" if none
    double step_guard = 0.5;
    RolloutOptions rollout;
    std::vector<Rule> rules;  // first match wins...
    Rule default_rule;        // ...else this

    const Rule& rule_for(const std::string& bucket) const;
};

// Relative paths in the file are relative to the file's directory (base_dir for parse).
Config load_config(const std::string& path);
Config parse_config(const std::string& text, const std::string& file_name,
                    const std::string& base_dir);

}  // namespace grl::rlc
