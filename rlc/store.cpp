#include "store.h"

#include "prometheus_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace grl::rlc {

namespace {

// Rates are stored as integer milli-requests per second and ratios as parts per million,
// as everywhere else in grl: SQLite keeps small integers in 1 to 4 bytes where a REAL
// always takes 8, which halves the file (docs/rlc-history.md, "Measured").
std::int64_t to_milli(double v) {
    return static_cast<std::int64_t>(std::llround(v * 1000.0));
}

const char* const kSchema = R"sql(
CREATE TABLE IF NOT EXISTS schema_version (
    component TEXT PRIMARY KEY,
    version   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS instances (
    id     INTEGER PRIMARY KEY,
    bucket TEXT NOT NULL,
    scope  TEXT NOT NULL,          -- global | region | zone
    region TEXT NOT NULL,          -- '' for global scope
    zone   TEXT NOT NULL,          -- '' unless zone scope
    UNIQUE (bucket, scope, region, zone)
);
CREATE TABLE IF NOT EXISTS samples (
    instance           INTEGER NOT NULL REFERENCES instances (id),
    start_s            INTEGER NOT NULL,  -- unix seconds, start of the interval
    length_s           INTEGER NOT NULL,
    ticks              INTEGER NOT NULL,  -- controller ticks seen in the interval
    offered_mean_mrps  INTEGER NOT NULL,  -- rates in milli-requests per second
    offered_peak_mrps  INTEGER NOT NULL,
    admitted_mean_mrps INTEGER NOT NULL,
    admitted_peak_mrps INTEGER NOT NULL,
    dropped_mean_mrps  INTEGER NOT NULL,
    dropped_peak_mrps  INTEGER NOT NULL,
    shadow_mean_mrps   INTEGER NOT NULL,
    shadow_peak_mrps   INTEGER NOT NULL,
    limit_mrps         INTEGER,           -- NULL: unknown
    mode               INTEGER NOT NULL,  -- 0 deny, 1 shadow
    ratio_ppm          INTEGER NOT NULL,
    candidate_limit_mrps INTEGER,                    -- NULL: no candidate (schema 2)
    candidate_mean_mrps  INTEGER NOT NULL DEFAULT 0,  -- the candidate's would-drops
    candidate_peak_mrps  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (instance, start_s)
) WITHOUT ROWID;
)sql";

// The view is dropped and created again by a migration, so it is kept apart from the tables.
const char* const kView = R"sql(
CREATE VIEW IF NOT EXISTS history AS
SELECT i.bucket, i.scope, i.region, i.zone,
       strftime('%Y-%m-%dT%H:%M:%SZ', s.start_s, 'unixepoch') AS start, s.length_s, s.ticks,
       s.offered_mean_mrps / 1000.0 AS offered_mean, s.offered_peak_mrps / 1000.0 AS offered_peak,
       s.admitted_mean_mrps / 1000.0 AS admitted_mean, s.admitted_peak_mrps / 1000.0 AS admitted_peak,
       s.dropped_mean_mrps / 1000.0 AS dropped_mean, s.dropped_peak_mrps / 1000.0 AS dropped_peak,
       s.shadow_mean_mrps / 1000.0 AS shadow_mean, s.shadow_peak_mrps / 1000.0 AS shadow_peak,
       s.limit_mrps / 1000.0 AS "limit", CASE s.mode WHEN 1 THEN 'shadow' ELSE 'deny' END AS mode,
       s.ratio_ppm / 1e6 AS ratio, s.candidate_limit_mrps / 1000.0 AS candidate_limit,
       s.candidate_mean_mrps / 1000.0 AS candidate_would_drop_mean,
       s.candidate_peak_mrps / 1000.0 AS candidate_would_drop_peak
FROM samples s JOIN instances i ON i.id = s.instance;
)sql";

// The read cache of whole days (sample_block.h; docs/rlc-history.md, "Sample blocks"), its
// own schema component so that the history schema and its readers stay as they are. A block
// is dropped by SQL triggers whenever a row of its day is inserted, updated or deleted, by
// whatever program (grl-rlc record, prune, the sqlite3 shell), so a block that exists is
// the day's rows as they are; read() writes it again from the rows.
constexpr std::int64_t kBlocksSchemaVersion = 1;
const char* const kBlocksSchema = R"sql(
CREATE TABLE IF NOT EXISTS sample_blocks (
    instance INTEGER NOT NULL,
    day      INTEGER NOT NULL,  -- unix seconds, 00:00 UTC; holds the samples starting that day
    data     BLOB NOT NULL,     -- encode_block() of the day's rows (maybe none)
    PRIMARY KEY (instance, day)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS sample_blocks_insert AFTER INSERT ON samples BEGIN
    DELETE FROM sample_blocks WHERE instance = NEW.instance
        AND day = NEW.start_s - ((NEW.start_s % 86400) + 86400) % 86400;
END;
CREATE TRIGGER IF NOT EXISTS sample_blocks_update AFTER UPDATE ON samples BEGIN
    DELETE FROM sample_blocks WHERE instance = OLD.instance
        AND day = OLD.start_s - ((OLD.start_s % 86400) + 86400) % 86400;
    DELETE FROM sample_blocks WHERE instance = NEW.instance
        AND day = NEW.start_s - ((NEW.start_s % 86400) + 86400) % 86400;
END;
CREATE TRIGGER IF NOT EXISTS sample_blocks_delete AFTER DELETE ON samples BEGIN
    DELETE FROM sample_blocks WHERE instance = OLD.instance
        AND day = OLD.start_s - ((OLD.start_s % 86400) + 86400) % 86400;
END;
)sql";
static_assert(kBlockSpan == 86400, "the triggers' day is kBlockSpan");

const char* const kColumns =
    "start_s, length_s, ticks, offered_mean_mrps, offered_peak_mrps, admitted_mean_mrps, "
    "admitted_peak_mrps, dropped_mean_mrps, dropped_peak_mrps, shadow_mean_mrps, "
    "shadow_peak_mrps, limit_mrps, mode, ratio_ppm, candidate_limit_mrps, candidate_mean_mrps, "
    "candidate_peak_mrps";

std::string insert_sql(WriteMode mode) {
    std::string sql = std::string("INSERT INTO samples (instance, ") + kColumns +
                      ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, "
                      "?15, ?16, ?17, ?18) ON CONFLICT (instance, start_s) DO UPDATE SET ";
    if (mode == WriteMode::Replace) {
        sql += "length_s = excluded.length_s, ticks = excluded.ticks";
        for (const char* c : {"offered", "admitted", "dropped", "shadow", "candidate"}) {
            for (const char* k : {"_mean_mrps", "_peak_mrps"}) {
                std::string col = std::string(c) + k;
                sql += ", " + col + " = excluded." + col;
            }
        }
        sql += ", ratio_ppm = excluded.ratio_ppm";
    } else {
        // Every expression sees the row as it was before the update (SQL semantics), so
        // `ticks` below is the old count.
        auto weighted = [](const std::string& col) {
            return col + " = (" + col + " * ticks + excluded." + col +
                   " * excluded.ticks) / max(1, ticks + excluded.ticks)";
        };
        sql += "length_s = max(length_s, excluded.length_s), ticks = ticks + excluded.ticks";
        for (const char* c : {"offered", "admitted", "dropped", "shadow", "candidate"}) {
            std::string mean = std::string(c) + "_mean_mrps";
            std::string peak = std::string(c) + "_peak_mrps";
            sql += ", " + weighted(mean);
            sql += ", " + peak + " = max(" + peak + ", excluded." + peak + ")";
        }
        sql += ", " + weighted("ratio_ppm");
    }
    // Limit and mode are those in force at the end of the interval: the newest write's.
    sql += ", limit_mrps = excluded.limit_mrps, mode = excluded.mode";
    sql += ", candidate_limit_mrps = excluded.candidate_limit_mrps";
    return sql;
}

bool file_exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

namespace {
const std::string& existing(const std::string& path, bool create) {
    if (!create && !file_exists(path))
        throw StoreError("history store " + path +
                         " does not exist (grl-rlc record, synth or import create it)");
    return path;
}
}  // namespace

Store::Store(const std::string& path, bool create, int busy_timeout_ms)
    : db_(existing(path, create), create, busy_timeout_ms), busy_timeout_ms_(busy_timeout_ms) {
    // WAL: readers see the last committed state and never block the writer (nor it them).
    // synchronous=NORMAL: a committed batch survives a crash of grl-rlc; a power cut may
    // lose the last batches, which is one recording interval, not a corrupt file.
    db_.exec("PRAGMA journal_mode = WAL");
    db_.exec("PRAGMA synchronous = NORMAL");
    if (create) create_schema();
    bool has_version = false;
    {
        Stmt t(db_, "SELECT count(*) FROM sqlite_master WHERE name = 'schema_version'");
        t.step();
        has_version = t.int64(0) > 0;
    }
    if (!has_version)
        throw StoreError(path + ": not a grl-rlc history store (no schema_version table)");
    Stmt v(db_, "SELECT version FROM schema_version WHERE component = 'history'");
    if (!v.step())
        throw StoreError(path + ": not a grl-rlc history store (no 'history' schema version)");
    std::int64_t version = v.int64(0);
    if (version > kHistorySchemaVersion)
        throw StoreError(path + ": history schema version " + std::to_string(version) +
                         " is newer than this grl-rlc's (" + std::to_string(kHistorySchemaVersion) +
                         ")");
    if (version < kHistorySchemaVersion) migrate(version);
    add_blocks();
}

Store::~Store() = default;

void Store::add_blocks() {
    std::optional<std::int64_t> version;
    {
        Stmt v(db_, "SELECT version FROM schema_version WHERE component = 'sample_blocks'");
        if (v.step()) version = v.int64(0);
    }
    if (!version) {
        // A store written before blocks (or by a grl-rlc without them): the table and its
        // triggers are added, nothing else changes. A file this process may not write keeps
        // working without blocks.
        try {
            Transaction tx(db_);
            db_.exec(kBlocksSchema);
            // OR IGNORE: another process opening the same old store may have added them first.
            {
                Stmt v(db_,
                       "INSERT OR IGNORE INTO schema_version (component, version) VALUES "
                       "('sample_blocks', ?1)");
                v.bind(1, kBlocksSchemaVersion).step();
                Stmt now(db_,
                         "SELECT version FROM schema_version WHERE component = 'sample_blocks'");
                if (now.step()) version = now.int64(0);
            }
            tx.commit();
        } catch (const StoreError&) {
            return;
        }
    }
    // Another format of blocks (a newer grl-rlc): not read; its triggers still keep them right.
    blocks_ = version == kBlocksSchemaVersion;
    block_writes_ = std::make_unique<BlockWrites>();
}

// Each step brings a file one schema version up, in one transaction with its version row, so
// that a file is at one version or the next, never between.
void Store::migrate(std::int64_t from) {
    if (from < 2) {
        // 2: the candidate limit evaluated beside the enforced one, and its would-drops.
        // Older rows had no candidate: NULL limit, zero would-drops.
        Transaction tx(db_);
        db_.exec(
            "ALTER TABLE samples ADD COLUMN candidate_limit_mrps INTEGER;"
            "ALTER TABLE samples ADD COLUMN candidate_mean_mrps INTEGER NOT NULL DEFAULT 0;"
            "ALTER TABLE samples ADD COLUMN candidate_peak_mrps INTEGER NOT NULL DEFAULT 0;"
            "DROP VIEW IF EXISTS history;");
        db_.exec(kView);
        db_.exec("UPDATE schema_version SET version = 2 WHERE component = 'history'");
        tx.commit();
    }
}

void Store::create_schema() {
    Transaction tx(db_);
    db_.exec(kSchema);
    db_.exec(kView);
    Stmt v(db_, "INSERT OR IGNORE INTO schema_version (component, version) VALUES ('history', ?1)");
    v.bind(1, std::int64_t{kHistorySchemaVersion}).step();
    tx.commit();
}

std::int64_t Store::instance_id(const InstanceKey& key) {
    Stmt ins(
        db_,
        "INSERT OR IGNORE INTO instances (bucket, scope, region, zone) VALUES (?1, ?2, ?3, ?4)");
    ins.bind(1, key.bucket)
        .bind(2, std::string(to_string(key.scope)))
        .bind(3, key.region)
        .bind(4, key.zone)
        .step();
    Stmt sel(db_,
             "SELECT id FROM instances WHERE bucket = ?1 AND scope = ?2 AND region = ?3 AND "
             "zone = ?4");
    sel.bind(1, key.bucket)
        .bind(2, std::string(to_string(key.scope)))
        .bind(3, key.region)
        .bind(4, key.zone);
    if (!sel.step()) db_.fail("instance id of bucket " + key.bucket);
    return sel.int64(0);
}

void Store::write(const std::vector<Series>& batch, WriteMode mode) {
    Transaction tx(db_);
    Stmt ins(db_, insert_sql(mode));
    for (const Series& s : batch) {
        // Looked up per write, not cached: another process (grl-rlc prune) may delete an
        // instance between two writes.
        std::int64_t id = instance_id(s.key);
        for (const Sample& x : s.samples) {
            ins.bind(1, id).bind(2, x.start_s).bind(3, std::int64_t{x.length_s});
            ins.bind(4, std::int64_t{x.ticks});
            int col = 5;
            for (const Rate* r : {&x.offered, &x.admitted, &x.dropped, &x.shadow_dropped}) {
                ins.bind(col++, to_milli(r->mean));
                ins.bind(col++, to_milli(r->peak));
            }
            if (x.limit_rps < 0)
                ins.bind_null(13);
            else
                ins.bind(13, to_milli(x.limit_rps));
            ins.bind(14, std::int64_t{x.mode == Mode::Shadow ? 1 : 0});
            ins.bind(15, static_cast<std::int64_t>(std::llround(x.ratio * 1e6)));
            if (x.candidate_limit_rps < 0)
                ins.bind_null(16);
            else
                ins.bind(16, to_milli(x.candidate_limit_rps));
            ins.bind(17, to_milli(x.candidate_would_drop.mean));
            ins.bind(18, to_milli(x.candidate_would_drop.peak));
            ins.step();
            ins.reset();
        }
    }
    tx.commit();
}

std::vector<InstanceKey> Store::instances() {
    std::vector<InstanceKey> out;
    Stmt q(db_, "SELECT bucket, scope, region, zone FROM instances ORDER BY id");
    while (q.step()) {
        InstanceKey k;
        k.bucket = q.text(0);
        std::optional<Scope> sc = parse_scope(q.text(1));
        if (!sc) throw StoreError(path() + ": instance " + k.bucket + ": bad scope " + q.text(1));
        k.scope = *sc;
        k.region = q.text(2);
        k.zone = q.text(3);
        out.push_back(std::move(k));
    }
    return out;
}

std::vector<std::string> Store::buckets(std::int64_t since_s, std::int64_t until_s) {
    std::vector<std::string> out;
    // Per instance one seek into samples' primary key (instance, start_s): cheap whatever
    // the size of the history.
    Stmt q(db_,
           "SELECT DISTINCT i.bucket FROM instances i WHERE EXISTS (SELECT 1 FROM samples s "
           "WHERE s.instance = i.id AND s.start_s >= ?1 AND s.start_s < ?2) ORDER BY i.bucket");
    q.bind(1, since_s).bind(2, until_s);
    while (q.step()) out.push_back(q.text(0));
    return out;
}

namespace {

// A JSON array of strings, for json_each(): one parameter whatever the slice's size, so one
// prepared statement serves every slice.
std::string json_array(const std::vector<std::string>& names) {
    std::string out = "[";
    for (const std::string& n : names) {
        if (out.size() > 1) out += ',';
        out += '"';
        for (char c : n) {
            if (c == '"' || c == '\\') {
                out += '\\';
                out += c;
            } else if (static_cast<unsigned char>(c) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
                out += buf;
            } else {
                out += c;
            }
        }
        out += '"';
    }
    return out + "]";
}

}  // namespace

std::string slice_instances_sql() {
    return "SELECT id, bucket, scope, region, zone FROM instances"
           " WHERE bucket IN (SELECT value FROM json_each(?1))"
           " ORDER BY bucket, scope, region, zone";
}

std::string slice_samples_sql() {
    return std::string("SELECT instance, ") + kColumns +
           " FROM samples WHERE instance IN (SELECT value FROM json_each(?1))"
           " AND start_s >= ?2 AND start_s < ?3 ORDER BY instance, start_s";
}

std::string instance_blocks_sql() {
    return "SELECT day, data FROM sample_blocks WHERE instance = ?1 AND day >= ?2 AND day < ?3"
           " ORDER BY day";
}

struct Store::BlockWrites {
    // Cleared at the first block that cannot be written (a read-only file, a full disk):
    // reads go on from samples, and block_write_error() says why.
    std::atomic<bool> enabled{true};
    std::mutex mu;
    std::string error;
    void fail(const std::string& why) {
        std::lock_guard<std::mutex> lock(mu);
        if (error.empty()) error = why;
        enabled = false;
    }
};

std::string Store::block_write_error() const {
    if (!block_writes_) return "";
    std::lock_guard<std::mutex> lock(block_writes_->mu);
    return block_writes_->error;
}

struct Store::Reader {
    Db& db;
    Stmt recent;  // slice_samples_sql
    // With blocks only: an instance's blocks, its rows of one day, a block written.
    std::unique_ptr<Stmt> blocks, day_rows, put_block;
    Reader(Db& d, bool with_blocks) : db(d), recent(d, slice_samples_sql()) {
        if (!with_blocks) return;
        blocks = std::make_unique<Stmt>(d, instance_blocks_sql());
        day_rows = std::make_unique<Stmt>(d, std::string("SELECT ") + kColumns +
                                                 " FROM samples WHERE instance = ?1 AND start_s "
                                                 ">= ?2 AND start_s < ?3 ORDER BY start_s");
        put_block = std::make_unique<Stmt>(
            d, "INSERT OR REPLACE INTO sample_blocks (instance, day, data) VALUES (?1, ?2, ?3)");
    }
};

namespace {

using SliceIndex = std::vector<std::pair<std::int64_t, std::size_t>>;  // instance id -> out[i]

std::string json_ids(const SliceIndex& index, std::size_t from, std::size_t to) {
    std::string ids = "[";
    for (std::size_t i = from; i < to; ++i) {
        if (i > from) ids += ',';
        ids += std::to_string(index[i].first);
    }
    return ids + "]";
}

// Columns [first, first + 17) of the current row of `q`, as stored.
SampleRow row_of(const Stmt& q, int first) {
    SampleRow r;
    for (int c = 0; c < SampleRow::kColumns; ++c) r.v[c] = q.int64(first + c);
    r.limit_null = q.is_null(first + SampleRow::kLimit);
    r.candidate_null = q.is_null(first + SampleRow::kCandidate);
    return r;
}

// Appends the sample of `r`, reserving room for the rest of the range at the first one: one
// allocation instead of doublings that would leave up to half of it unused.
void append(std::vector<Sample>& samples, const SampleRow& r, std::int64_t until_s) {
    if (samples.empty()) samples.reserve(samples_until(r.v[0], r.v[1], until_s));
    samples.push_back(to_sample(r));
}

// The samples in [since_s, until_s) of the instances index[from, to) with `q`
// (slice_samples_sql), appended to their out[] elements: two threads fill distinct elements.
void read_samples(const std::string& path, Stmt& q, const SliceIndex& index, std::size_t from,
                  std::size_t to, std::int64_t since_s, std::int64_t until_s,
                  std::vector<Series>& out) {
    SliceIndex sorted(index.begin() + static_cast<std::ptrdiff_t>(from),
                      index.begin() + static_cast<std::ptrdiff_t>(to));
    std::sort(sorted.begin(), sorted.end());
    q.bind(1, json_ids(index, from, to)).bind(2, since_s).bind(3, until_s);
    try {
        std::int64_t id = -1;
        std::vector<Sample>* samples = nullptr;
        while (q.step()) {
            if (q.int64(0) != id) {
                id = q.int64(0);
                auto it = std::lower_bound(sorted.begin(), sorted.end(),
                                           std::pair<std::int64_t, std::size_t>{id, 0});
                if (it == sorted.end() || it->first != id)
                    throw StoreError(path + ": samples of instance " + std::to_string(id) +
                                     " not asked for");
                samples = &out[it->second].samples;
            }
            append(*samples, row_of(q, 1), until_s);
        }
    } catch (...) {
        q.reset();
        throw;
    }
    q.reset();
}

// Resets a statement when leaving a scope, thrown out of or not.
struct ResetOnExit {
    Stmt& q;
    ~ResetOnExit() { q.reset(); }
};

}  // namespace

// Instance `id`'s samples in [since_s, until_s) that start in the days [first_day, end_day):
// each day from its block, or from its rows, and then the rows become the day's block when
// `writes` allows it (days before yesterday only: today's and yesterday's rows still change).
// One transaction: the days are one snapshot, and a block written is the rows read.
void Store::read_days(Reader& r, BlockWrites& writes, std::int64_t id, std::int64_t since_s,
                      std::int64_t until_s, std::int64_t first_day, std::int64_t end_day,
                      std::vector<Sample>& samples) {
    // Which days have a block: those are read whatever happens; a missing one is written if
    // this transaction can take the write lock now (else a later read writes it).
    std::vector<std::int64_t> have;
    auto list_blocks = [&] {
        have.clear();
        Stmt& q = *r.blocks;
        ResetOnExit reset{q};
        q.bind(1, id).bind(2, first_day).bind(3, end_day);
        while (q.step()) have.push_back(q.int64(0));
    };
    const auto days = static_cast<std::size_t>((end_day - first_day) / kBlockSpan);
    bool writing = false;
    if (writes.enabled) {
        list_blocks();
        if (have.size() < days) {
            try {
                r.db.exec("BEGIN IMMEDIATE");
                writing = true;
            } catch (const StoreError&) {
                // Busy (another writer held on past the busy timeout) or read-only: read
                // the rows this time.
            }
        }
    }
    if (!writing) r.db.exec("BEGIN");
    try {
        Stmt& q = *r.blocks;
        {
            ResetOnExit reset{q};
            q.bind(1, id).bind(2, first_day).bind(3, end_day);
            bool more = q.step();
            for (std::int64_t day = first_day; day < end_day; day += kBlockSpan) {
                if (more && q.int64(0) == day) {
                    try {
                        decode_block(q.blob(1), since_s, until_s, samples);
                    } catch (const BlockError& e) {
                        throw StoreError(r.db.path() + ": block of instance " + std::to_string(id) +
                                         " on " + std::to_string(day) + ": " + e.what());
                    }
                    more = q.step();
                    continue;
                }
                std::vector<SampleRow> rows;
                {
                    Stmt& d = *r.day_rows;
                    ResetOnExit reset_rows{d};
                    d.bind(1, id).bind(2, day).bind(3, day + kBlockSpan);
                    while (d.step()) rows.push_back(row_of(d, 0));
                }
                for (const SampleRow& row : rows)
                    if (row.v[0] >= since_s && row.v[0] < until_s) append(samples, row, until_s);
                if (!writing) continue;
                try {
                    Stmt& put = *r.put_block;
                    ResetOnExit reset_put{put};
                    put.bind(1, id).bind(2, day).bind_blob(3, encode_block(rows)).step();
                } catch (const StoreError& e) {
                    writes.fail(e.what());
                    writing = false;
                }
            }
        }
        r.db.exec("COMMIT");
    } catch (...) {
        try {
            r.db.exec("ROLLBACK");
        } catch (const StoreError&) {
            // Already rolled back by SQLite (an I/O error): nothing more to undo.
        }
        throw;
    }
}

std::vector<Series> Store::read(std::int64_t since_s, std::int64_t until_s,
                                const std::vector<std::string>& buckets) {
    std::vector<Series> out;
    if (buckets.empty()) return out;
    if (!reader_) reader_ = std::make_unique<Reader>(db_, blocks_);
    // The slice's instances, through instances' UNIQUE (bucket, scope, region, zone) index,
    // in key order. Their samples are read apart: a join row would carry the instance's five
    // columns too, a third more column reads per sample.
    if (!slice_instances_) slice_instances_ = std::make_unique<Stmt>(db_, slice_instances_sql());
    Stmt& qi = *slice_instances_;
    SliceIndex index;  // in key order, as `out`
    {
        ResetOnExit reset{qi};
        qi.bind(1, json_array(buckets));
        while (qi.step()) {
            InstanceKey k;
            k.bucket = qi.text(1);
            std::optional<Scope> sc = parse_scope(qi.text(2));
            if (!sc)
                throw StoreError(path() + ": instance " + k.bucket + ": bad scope " + qi.text(2));
            k.scope = *sc;
            k.region = qi.text(3);
            k.zone = qi.text(4);
            index.emplace_back(qi.int64(0), out.size());
            out.emplace_back().key = std::move(k);
        }
    }
    // Whole days before yesterday come from sample blocks (decoding SQLite's rows column by
    // column is ~300 ns a sample, a block ~40: docs/rlc.md, "Measured"); the rest, which the
    // recorder is still writing, from the rows, for the whole half slice in one query.
    const std::int64_t first_day = block_day(since_s);
    const std::int64_t end_day =
        blocks_ ? std::max(first_day, block_day(until_s) - kBlockSpan) : first_day;
    const std::int64_t rows_since = std::max(since_s, end_day);
    auto read_half = [&](Reader& r, std::size_t from, std::size_t to) {
        if (end_day > first_day)
            for (std::size_t i = from; i < to; ++i)
                read_days(r, *block_writes_, index[i].first, since_s, until_s, first_day, end_day,
                          out[index[i].second].samples);
        read_samples(path(), r.recent, index, from, to, rows_since, until_s, out);
    };
    // A second connection reads half of the instances on a second thread. `out` is not
    // resized meanwhile, and each half fills its own elements.
    const std::size_t half = index.size() / 2;
    std::exception_ptr helper_error;
    std::thread helper;
    if (half > 0) {
        if (!helper_db_) {
            helper_db_ = std::make_unique<Db>(path(), false, busy_timeout_ms_);
            helper_reader_ = std::make_unique<Reader>(*helper_db_, blocks_);
        }
        helper = std::thread([&] {
            try {
                read_half(*helper_reader_, 0, half);
            } catch (...) {
                helper_error = std::current_exception();
            }
        });
    }
    try {
        read_half(*reader_, half, index.size());
    } catch (...) {
        if (helper.joinable()) helper.join();
        throw;
    }
    if (helper.joinable()) helper.join();
    if (helper_error) std::rethrow_exception(helper_error);
    // An instance with nothing in the range is not part of the answer.
    out.erase(
        std::remove_if(out.begin(), out.end(), [](const Series& s) { return s.samples.empty(); }),
        out.end());
    return out;
}

std::int64_t Store::prune(std::int64_t before_s) {
    Transaction tx(db_);
    Stmt del(db_, "DELETE FROM samples WHERE start_s < ?1");
    del.bind(1, before_s).step();
    std::int64_t n = db_.changes();
    db_.exec(
        "DELETE FROM instances WHERE NOT EXISTS (SELECT 1 FROM samples WHERE instance = "
        "instances.id)");
    tx.commit();
    return n;
}

std::int64_t Store::rollup(std::int64_t before_s, std::int32_t length_s) {
    const std::int64_t cutoff = before_s - ((before_s % length_s) + length_s) % length_s;
    std::vector<std::pair<std::int64_t, InstanceKey>> ids;
    {
        Stmt q(db_, "SELECT id FROM instances ORDER BY id");
        while (q.step()) ids.emplace_back(q.int64(0), InstanceKey{});
    }
    Stmt sel(db_, std::string("SELECT ") + kColumns +
                      " FROM samples WHERE instance = ?1 AND start_s < ?2 AND length_s < ?3 "
                      "ORDER BY start_s");
    Stmt del(db_, "DELETE FROM samples WHERE instance = ?1 AND start_s < ?2 AND length_s < ?3");
    Stmt ins(db_, insert_sql(WriteMode::Merge));
    std::int64_t folded = 0;
    for (const auto& [id, unused] : ids) {
        Transaction tx(db_);
        struct Acc {
            std::int64_t ticks = 0;
            std::int64_t sum[5] = {}, peak[5] = {}, ratio_sum = 0;  // 4: the candidate's
            std::optional<std::int64_t> limit, candidate;
            std::int64_t mode = 0;
            std::int64_t rows = 0;
        };
        std::map<std::int64_t, Acc> windows;
        sel.bind(1, id).bind(2, cutoff).bind(3, std::int64_t{length_s});
        while (sel.step()) {
            std::int64_t start = sel.int64(0);
            Acc& a = windows[start - ((start % length_s) + length_s) % length_s];
            std::int64_t ticks = std::max<std::int64_t>(1, sel.int64(2));
            for (int i = 0; i < 4; ++i) {
                a.sum[i] += sel.int64(3 + 2 * i) * ticks;
                a.peak[i] = std::max(a.peak[i], sel.int64(4 + 2 * i));
            }
            a.limit = sel.is_null(11) ? std::nullopt : std::optional<std::int64_t>(sel.int64(11));
            a.mode = sel.int64(12);
            a.ratio_sum += sel.int64(13) * ticks;
            a.candidate =
                sel.is_null(14) ? std::nullopt : std::optional<std::int64_t>(sel.int64(14));
            a.sum[4] += sel.int64(15) * ticks;
            a.peak[4] = std::max(a.peak[4], sel.int64(16));
            a.ticks += ticks;
            ++a.rows;
        }
        sel.reset();
        if (windows.empty()) continue;  // the transaction rolls back: nothing to do
        del.bind(1, id).bind(2, cutoff).bind(3, std::int64_t{length_s}).step();
        del.reset();
        for (const auto& [start, a] : windows) {
            ins.bind(1, id).bind(2, start).bind(3, std::int64_t{length_s}).bind(4, a.ticks);
            for (int i = 0; i < 4; ++i) {
                ins.bind(5 + 2 * i, a.sum[i] / a.ticks);
                ins.bind(6 + 2 * i, a.peak[i]);
            }
            if (a.limit)
                ins.bind(13, *a.limit);
            else
                ins.bind_null(13);
            ins.bind(14, a.mode).bind(15, a.ratio_sum / a.ticks);
            if (a.candidate)
                ins.bind(16, *a.candidate);
            else
                ins.bind_null(16);
            ins.bind(17, a.sum[4] / a.ticks).bind(18, a.peak[4]);
            ins.step();
            ins.reset();
            folded += a.rows - 1;
        }
        tx.commit();
    }
    return folded;
}

std::unique_ptr<HistorySource> open_history(const std::string& path) {
    if (path.rfind("http://", 0) == 0) {
        PrometheusOptions o;
        o.url = path;
        return std::make_unique<PrometheusSource>(o);
    }
    return std::make_unique<Store>(path, false);
}

}  // namespace grl::rlc
