// The history store: one SQLite file in WAL mode holding every instance's samples
// (docs/rlc-history.md, "The store"). Writers batch a poll's or a file's rows in one
// transaction; readers (policies, what-if) never wait for a writer, except to write a
// missing sample block (one instance's day, a short transaction; skipped when the lock is
// not free within the busy timeout).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "history.h"
#include "sample_block.h"
#include "sqlite.h"

namespace grl::rlc {

// The schema of the history tables this code reads and writes (schema_version row
// component = 'history'). A later version migrates older files when it opens them.
inline constexpr int kHistorySchemaVersion = 2;  // 2: candidate columns

enum class WriteMode {
    // The row given replaces any row of the same (instance, start_s): import and synth,
    // so that bringing the same file in twice changes nothing.
    Replace,
    // The row given is folded into an existing row of the same (instance, start_s): means
    // weighted by ticks, peaks the max, ticks summed, limit and mode the newest. The
    // recorder's partial interval flushed at shutdown and the rest of that interval
    // recorded after a restart make one row.
    Merge,
};

class Store : public HistorySource {
  public:
    // Opens `path`, creating the file and the schema when `create` (else a missing file is
    // an error). Throws StoreError naming the file.
    explicit Store(const std::string& path, bool create = true, int busy_timeout_ms = 10000);
    ~Store() override;

    // Writes every sample of every series in one transaction (all or nothing).
    void write(const std::vector<Series>& batch, WriteMode mode);
    // buckets(): one indexed query. read(): the slice's instances (instances' UNIQUE index),
    // then per instance its whole UTC days before yesterday from sample blocks (sealing
    // the days that have none yet, when it can take the write lock), and the rest from
    // samples' primary key. Each instance's days are one snapshot, the recent part
    // another: an instance pruned in between reads nothing and is left out.
    std::vector<std::string> buckets(std::int64_t since_s, std::int64_t until_s) override;
    std::vector<Series> read(std::int64_t since_s, std::int64_t until_s,
                             const std::vector<std::string>& buckets) override;
    using HistorySource::read;
    std::vector<InstanceKey> instances();

    // Deletes the samples that start before `before_s`, and the instances left without
    // any; returns the number of samples deleted.
    std::int64_t prune(std::int64_t before_s);

    // Folds the samples that start before `before_s` and are shorter than `length_s` into
    // one row per instance and `length_s` window (means weighted by ticks, peaks the max,
    // limit and mode of the last row); only whole windows before `before_s`. One
    // transaction per instance, so a recorder writing meanwhile waits briefly, not for the
    // whole store. Returns the number of rows folded away.
    std::int64_t rollup(std::int64_t before_s, std::int32_t length_s = 3600);

    const std::string& path() const { return db_.path(); }
    // Whether read() uses sample blocks (false: a newer block format, or a read-only file
    // that could not get the table), and why blocks could not be written, if they could not
    // ("": they could). A read never fails for want of blocks: it reads samples instead.
    bool uses_blocks() const { return blocks_; }
    std::string block_write_error() const;

  private:
    void create_schema();
    void migrate(std::int64_t from);  // an older file's schema, up to kHistorySchemaVersion
    void add_blocks();                // the sample_blocks cache and its triggers, if missing
    std::int64_t instance_id(const InstanceKey& key);

    Db db_;
    int busy_timeout_ms_;
    bool blocks_ = false;
    // The statements of read() on one connection, prepared once, reused by every slice:
    // this connection's, and a second connection's, used only by read()'s helper thread
    // while read() waits for it.
    struct Reader;
    std::unique_ptr<Reader> reader_, helper_reader_;
    std::unique_ptr<Db> helper_db_;
    struct BlockWrites;  // shared by both readers: whether to seal days, and why not
    std::unique_ptr<BlockWrites> block_writes_;
    std::unique_ptr<Stmt> slice_instances_;
    static void read_days(Reader& r, BlockWrites& writes, std::int64_t id, std::int64_t since_s,
                          std::int64_t until_s, std::int64_t first_day, std::int64_t end_day,
                          std::vector<Sample>& samples);
};

// The queries of Store::read for a slice, public so that a test checks their plans
// (indexes, no sort): the instances of ?1, a JSON array of bucket names; the samples in
// [?2, ?3) of ?1, a JSON array of instance ids; the blocks of instance ?1 for the days in
// [?2, ?3).
std::string slice_instances_sql();
std::string slice_samples_sql();
std::string instance_blocks_sql();

// The history at `path` for the readers of grl-rlc (policies, what-if): a store file, which
// must exist (grl-rlc record, synth and import create it: a mistyped path is an error, not
// an empty history), or http://HOST:PORT of a Prometheus server scraping the controllers
// (60 s intervals, 15 s scrapes; PrometheusSource for others).
std::unique_ptr<HistorySource> open_history(const std::string& path);

}  // namespace grl::rlc
