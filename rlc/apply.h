// Applying a cycle's plan or a rollback: the new limits file is checked with the
// controllers' own parser, written atomically, and recorded as a version with the rollout
// states and events, all in one store transaction (docs/rlc.md, "Versions and push").
#pragma once

#include <cstdint>
#include <string>

#include "config.h"
#include "cycle.h"
#include "versions.h"

namespace grl::rlc {

struct Applied {
    std::int64_t version = 0;  // 0: the limits file did not change
    std::size_t events = 0;    // rollout events recorded
};

// Reads the limits file (or etcd key) as the controllers would (missing: an empty set);
// throws ConfigError with the parser's message when it does not parse.
control::Limits read_limits(const std::string& path, const daemon::etcd::Access& access = {});

// Writes plan.after, labelled `version: N` with its version number, to cfg.limits_file (and
// cfg.etcd) and records it. Before the first version ever, the
// limits file as found is recorded as a version of its own, so that it can be rolled
// back to. Throws (nothing applied) when the new content does not parse.
Applied apply_plan(const Config& cfg, VersionStore& store, const Plan& plan,
                   const std::string& author, const std::string& reason);

// Writes version `id`'s limits again as a new version (reason "rollback to N", labelled
// with the new version's number), and forgets every bucket's rollout state: the rolled-back
// file says what is in force. `etcd` (or "") is rlc.yaml's additional push target.
Applied rollback(const std::string& limits_file, const std::string& etcd,
                 const daemon::etcd::Access& access, VersionStore& store, std::int64_t id,
                 const std::string& author, std::int64_t now_s);

}  // namespace grl::rlc
