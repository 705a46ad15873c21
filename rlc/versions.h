// The config store: every applied limits set is a version (author, time, reason, diff,
// digest, content), with the rollout state of every managed bucket and the log of rollout
// events, in the same SQLite file as the history but in tables of their own (schema:
// docs/rlc.md, "Versions"). WAL, so readers never wait; a busy timeout, so two writers
// queue instead of failing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "rollout.h"

struct sqlite3;

namespace grl::rlc {

class VersionsError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct Version {
    std::int64_t id = 0;
    std::int64_t created_s = 0;
    std::string author;
    std::string reason;
    std::string digest;   // control::digest of the content: what the controllers report
    std::string diff;     // against the previous version (render_diff)
    std::string content;  // the limits file as written
};

// One logged and counted rollout event (promote, hold, raise, shadow, rollback).
struct RolloutEvent {
    std::int64_t time_s = 0;
    std::string bucket;  // "" for a rollback (all buckets)
    std::string action;  // to_string(Action), or "rollback"
    std::uint64_t limit_mrps = 0;
    std::string detail;
    std::int64_t version = 0;  // the version it was part of; 0: none (a hold changes no file)
};

// What one cycle (or a rollback) records, in one transaction.
struct Commit {
    std::optional<Version> version;   // id and created_s are assigned
    std::vector<BucketState> states;  // upserted
    bool clear_states = false;        // a rollback: every bucket unmanaged again
    std::vector<RolloutEvent> events;
};

class VersionStore {
  public:
    // Opens `path` and creates the tables if missing. The file itself is the history
    // store's: it must exist unless `create` (tests), so that a mistyped path is an error and
    // never an empty file that the history store would then refuse. Throws VersionsError
    // naming the file.
    explicit VersionStore(const std::string& path, bool create = false, int busy_timeout_ms = 5000);
    ~VersionStore();
    VersionStore(const VersionStore&) = delete;
    VersionStore& operator=(const VersionStore&) = delete;

    // Records `c` and runs `publish` (writing the limits file) inside the transaction:
    // if publish throws, nothing is recorded and the error propagates. Returns the new
    // version's id (0 when c has no version).
    std::int64_t commit(const Commit& c, std::int64_t now_s, const std::function<void()>& publish);

    std::vector<Version> list() const;  // oldest first
    std::optional<Version> get(std::int64_t id) const;
    std::optional<Version> latest() const;
    std::map<std::string, BucketState> states() const;
    std::vector<RolloutEvent> events(std::size_t last_n) const;  // newest last
    std::map<std::string, std::int64_t> counters() const;        // action -> events

    const std::string& path() const { return path_; }

  private:
    sqlite3* db_ = nullptr;
    std::string path_;
};

}  // namespace grl::rlc
