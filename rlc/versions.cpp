#include "versions.h"

#include <sqlite3.h>

namespace grl::rlc {

namespace {

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS rlc_versions (
  id        INTEGER PRIMARY KEY AUTOINCREMENT,
  created_s INTEGER NOT NULL,
  author    TEXT NOT NULL,
  reason    TEXT NOT NULL,
  digest    TEXT NOT NULL,
  diff      TEXT NOT NULL,
  content   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rlc_rollout (
  bucket        TEXT PRIMARY KEY,
  stage         TEXT NOT NULL,
  limit_mrps    INTEGER NOT NULL,
  since_s       INTEGER NOT NULL,
  previous_mrps INTEGER,
  fraction      REAL NOT NULL,
  updated_s     INTEGER NOT NULL,
  beside        INTEGER NOT NULL DEFAULT 0  -- 1: a candidate beside previous_mrps, enforced
);
CREATE TABLE IF NOT EXISTS rlc_events (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  time_s     INTEGER NOT NULL,
  bucket     TEXT NOT NULL,
  action     TEXT NOT NULL,
  limit_mrps INTEGER NOT NULL,
  detail     TEXT NOT NULL,
  version    INTEGER NOT NULL
);
)";

// A prepared statement, finalized on scope exit; errors name the file and the step.
class Query {
  public:
    Query(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
        if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK) fail("prepare");
    }
    ~Query() { sqlite3_finalize(st_); }
    Query(const Query&) = delete;
    Query& operator=(const Query&) = delete;
    Query& bind(int i, std::int64_t v) {
        if (sqlite3_bind_int64(st_, i, v) != SQLITE_OK) fail("bind");
        return *this;
    }
    Query& bind(int i, double v) {
        if (sqlite3_bind_double(st_, i, v) != SQLITE_OK) fail("bind");
        return *this;
    }
    Query& bind(int i, const std::string& v) {
        if (sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT) !=
            SQLITE_OK)
            fail("bind");
        return *this;
    }
    Query& bind_null(int i) {
        if (sqlite3_bind_null(st_, i) != SQLITE_OK) fail("bind");
        return *this;
    }
    bool step() {
        int rc = sqlite3_step(st_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        fail("step");
    }
    std::int64_t i64(int c) const { return sqlite3_column_int64(st_, c); }
    double dbl(int c) const { return sqlite3_column_double(st_, c); }
    bool null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
    std::string text(int c) const {
        auto p = reinterpret_cast<const char*>(sqlite3_column_text(st_, c));
        return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(st_, c)))
                 : std::string();
    }

  private:
    [[noreturn]] void fail(const char* what) const {
        throw VersionsError(path_ + ": " + what + ": " + sqlite3_errmsg(db_));
    }
    sqlite3* db_;
    const std::string& path_;
    sqlite3_stmt* st_ = nullptr;
};

void exec(sqlite3* db, const std::string& path, const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : sqlite3_errmsg(db);
        sqlite3_free(err);
        throw VersionsError(path + ": " + msg);
    }
}

Version read_version(const Query& q) {
    Version v;
    v.id = q.i64(0);
    v.created_s = q.i64(1);
    v.author = q.text(2);
    v.reason = q.text(3);
    v.digest = q.text(4);
    v.diff = q.text(5);
    v.content = q.text(6);
    return v;
}

constexpr const char* kVersionCols =
    "SELECT id, created_s, author, reason, digest, diff, content FROM rlc_versions";

}  // namespace

VersionStore::VersionStore(const std::string& path, bool create, int busy_timeout_ms)
    : path_(path) {
    int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0);
    int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
    if (rc != SQLITE_OK) {
        std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
        sqlite3_close(db_);
        db_ = nullptr;
        if (rc == SQLITE_CANTOPEN && !create)
            throw VersionsError(path +
                                ": no such store (grl-rlc record, synth or import create it)");
        throw VersionsError(path + ": cannot open: " + msg);
    }
    try {
        sqlite3_busy_timeout(db_, busy_timeout_ms);
        exec(db_, path_, "PRAGMA journal_mode=WAL");
        exec(db_, path_, kSchema);
        // Stores written before candidates: rlc_rollout gets its `beside` column (0 for every
        // existing row, which were all shadow-mode rollouts).
        bool has_beside = false;
        {
            Query q(db_, path_, "SELECT name FROM pragma_table_info('rlc_rollout')");
            while (q.step()) has_beside = has_beside || q.text(0) == "beside";
        }
        if (!has_beside)
            exec(db_, path_,
                 "ALTER TABLE rlc_rollout ADD COLUMN beside INTEGER NOT NULL DEFAULT 0");
    } catch (...) {
        sqlite3_close(db_);
        db_ = nullptr;
        throw;
    }
}

VersionStore::~VersionStore() {
    sqlite3_close(db_);
}

std::int64_t VersionStore::commit(const Commit& c, std::int64_t now_s,
                                  const std::function<void()>& publish) {
    exec(db_, path_, "BEGIN IMMEDIATE");
    try {
        std::int64_t id = 0;
        if (c.version) {
            Query q(db_, path_,
                    "INSERT INTO rlc_versions (created_s, author, reason, digest, diff, content) "
                    "VALUES (?, ?, ?, ?, ?, ?)");
            q.bind(1, now_s).bind(2, c.version->author).bind(3, c.version->reason);
            q.bind(4, c.version->digest).bind(5, c.version->diff).bind(6, c.version->content);
            q.step();
            id = sqlite3_last_insert_rowid(db_);
        }
        if (c.clear_states) exec(db_, path_, "DELETE FROM rlc_rollout");
        for (const auto& s : c.states) {
            Query q(db_, path_,
                    "INSERT OR REPLACE INTO rlc_rollout (bucket, stage, limit_mrps, since_s, "
                    "previous_mrps, "
                    "fraction, updated_s, beside) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
            q.bind(1, s.bucket)
                .bind(2, to_string(s.stage))
                .bind(3, static_cast<std::int64_t>(s.limit_mrps));
            q.bind(4, s.since_s);
            if (s.previous_mrps)
                q.bind(5, static_cast<std::int64_t>(*s.previous_mrps));
            else
                q.bind_null(5);
            q.bind(6, s.fraction).bind(7, now_s).bind(8, std::int64_t{s.beside ? 1 : 0});
            q.step();
        }
        for (const auto& e : c.events) {
            Query q(db_, path_,
                    "INSERT INTO rlc_events (time_s, bucket, action, limit_mrps, detail, version) "
                    "VALUES (?, ?, ?, ?, ?, ?)");
            q.bind(1, e.time_s).bind(2, e.bucket).bind(3, e.action);
            q.bind(4, static_cast<std::int64_t>(e.limit_mrps)).bind(5, e.detail).bind(6, id);
            q.step();
        }
        if (publish) publish();
        exec(db_, path_, "COMMIT");
        return id;
    } catch (...) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

std::vector<Version> VersionStore::list() const {
    std::vector<Version> out;
    Query q(db_, path_, (std::string(kVersionCols) + " ORDER BY id").c_str());
    while (q.step()) out.push_back(read_version(q));
    return out;
}

std::optional<Version> VersionStore::get(std::int64_t id) const {
    Query q(db_, path_, (std::string(kVersionCols) + " WHERE id = ?").c_str());
    q.bind(1, id);
    if (!q.step()) return std::nullopt;
    return read_version(q);
}

std::optional<Version> VersionStore::latest() const {
    Query q(db_, path_, (std::string(kVersionCols) + " ORDER BY id DESC LIMIT 1").c_str());
    if (!q.step()) return std::nullopt;
    return read_version(q);
}

std::map<std::string, BucketState> VersionStore::states() const {
    std::map<std::string, BucketState> out;
    Query q(db_, path_,
            "SELECT bucket, stage, limit_mrps, since_s, previous_mrps, fraction, beside FROM "
            "rlc_rollout");
    while (q.step()) {
        BucketState s;
        s.bucket = q.text(0);
        auto st = parse_stage(q.text(1));
        if (!st)
            throw VersionsError(path_ + ": rlc_rollout: bucket \"" + s.bucket +
                                "\": unknown stage \"" + q.text(1) + "\"");
        s.stage = *st;
        s.limit_mrps = static_cast<std::uint64_t>(q.i64(2));
        s.since_s = q.i64(3);
        if (!q.null(4)) s.previous_mrps = static_cast<std::uint64_t>(q.i64(4));
        s.fraction = q.dbl(5);
        s.beside = q.i64(6) != 0 && s.stage != Stage::Enforced && s.previous_mrps;
        out.emplace(s.bucket, s);
    }
    return out;
}

std::vector<RolloutEvent> VersionStore::events(std::size_t last_n) const {
    std::vector<RolloutEvent> out;
    Query q(db_, path_,
            "SELECT time_s, bucket, action, limit_mrps, detail, version FROM "
            "(SELECT * FROM rlc_events ORDER BY id DESC LIMIT ?) ORDER BY id");
    q.bind(1, static_cast<std::int64_t>(last_n));
    while (q.step()) {
        RolloutEvent e;
        e.time_s = q.i64(0);
        e.bucket = q.text(1);
        e.action = q.text(2);
        e.limit_mrps = static_cast<std::uint64_t>(q.i64(3));
        e.detail = q.text(4);
        e.version = q.i64(5);
        out.push_back(e);
    }
    return out;
}

std::map<std::string, std::int64_t> VersionStore::counters() const {
    std::map<std::string, std::int64_t> out;
    Query q(db_, path_, "SELECT action, COUNT(*) FROM rlc_events GROUP BY action");
    while (q.step()) out[q.text(0)] = q.i64(1);
    return out;
}

}  // namespace grl::rlc
