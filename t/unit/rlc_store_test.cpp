// The history store on real SQLite files in a temporary directory: round trip, restart,
// a reader beside a writer, merge and replace, retention.
#include "store.h"
#include "temp_dir.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace grl::rlc {
namespace {

using test::TempDir;

Sample sample(std::int64_t start, double offered_mean, double offered_peak, int ticks = 60) {
    Sample s;
    s.start_s = start;
    s.length_s = 60;
    s.ticks = ticks;
    s.offered = {offered_mean, offered_peak};
    s.admitted = {offered_mean * 0.75, offered_peak * 0.5};
    s.dropped = {offered_mean * 0.25, offered_peak * 0.5};
    s.shadow_dropped = {1.25, 2.5};
    s.limit_rps = 300;
    s.mode = Mode::Deny;
    s.ratio = 0.125;
    return s;
}

InstanceKey zone_key(const std::string& bucket) {
    return {bucket, Scope::Zone, "eu-west", "az1"};
}

TEST(RlcStore, RoundTripKeepsEveryFieldAndOrder) {
    TempDir d{"rlc-store"};
    Store st(d.file("h.db"));
    Series a{zone_key("api"), {sample(120, 400.5, 512.25), sample(60, 300, 350)}};
    Series g{{"search", Scope::Global, "", ""}, {sample(60, 10, 12)}};
    g.samples[0].limit_rps = -1;  // unknown
    g.samples[0].mode = Mode::Shadow;
    st.write({a, g}, WriteMode::Replace);

    std::vector<Series> got = st.read(0, 1000);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].key, a.key);
    ASSERT_EQ(got[0].samples.size(), 2u);
    EXPECT_EQ(got[0].samples[0].start_s, 60);  // ascending start_s whatever the write order
    const Sample& s = got[0].samples[1];
    EXPECT_EQ(s.start_s, 120);
    EXPECT_EQ(s.length_s, 60);
    EXPECT_EQ(s.ticks, 60);
    EXPECT_DOUBLE_EQ(s.offered.mean, 400.5);
    EXPECT_DOUBLE_EQ(s.offered.peak, 512.25);
    EXPECT_DOUBLE_EQ(s.admitted.mean, 400.5 * 0.75);
    EXPECT_DOUBLE_EQ(s.dropped.peak, 512.25 * 0.5);
    EXPECT_DOUBLE_EQ(s.shadow_dropped.mean, 1.25);
    EXPECT_DOUBLE_EQ(s.shadow_dropped.peak, 2.5);
    EXPECT_DOUBLE_EQ(s.limit_rps, 300);
    EXPECT_EQ(s.mode, Mode::Deny);
    EXPECT_DOUBLE_EQ(s.ratio, 0.125);
    EXPECT_EQ(got[1].key.bucket, "search");
    EXPECT_EQ(got[1].samples[0].limit_rps, -1);
    EXPECT_EQ(got[1].samples[0].mode, Mode::Shadow);
}

TEST(RlcStore, ReadIsRestrictedToTheRangeAndSkipsEmptyInstances) {
    TempDir d{"rlc-store"};
    Store st(d.file("h.db"));
    st.write({{zone_key("a"), {sample(0, 1, 1), sample(60, 2, 2), sample(120, 3, 3)}},
              {zone_key("b"), {sample(600, 5, 5)}}},
             WriteMode::Replace);
    std::vector<Series> got = st.read(60, 120);  // [since, until)
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].samples.size(), 1u);
    EXPECT_EQ(got[0].samples[0].start_s, 60);
}

TEST(RlcStore, ReplaceOverwritesAndMergeFoldsARow) {
    TempDir d{"rlc-store"};
    Store st(d.file("h.db"));
    st.write({{zone_key("a"), {sample(60, 100, 150, 20)}}}, WriteMode::Replace);
    st.write({{zone_key("a"), {sample(60, 200, 210, 60)}}}, WriteMode::Replace);
    Sample r = st.read(0, 1000)[0].samples.at(0);
    EXPECT_DOUBLE_EQ(r.offered.mean, 200);
    EXPECT_EQ(r.ticks, 60);

    // Merge: 60 ticks at 200 r/s then 20 at 400 r/s -> mean weighted by ticks.
    Sample later = sample(60, 400, 180, 20);
    later.limit_rps = 500;
    later.mode = Mode::Shadow;
    st.write({{zone_key("a"), {later}}}, WriteMode::Merge);
    Sample m = st.read(0, 1000)[0].samples.at(0);
    EXPECT_EQ(m.ticks, 80);
    EXPECT_NEAR(m.offered.mean, (200.0 * 60 + 400.0 * 20) / 80, 0.001);
    EXPECT_DOUBLE_EQ(m.offered.peak, 210);  // the higher peak
    EXPECT_DOUBLE_EQ(m.limit_rps, 500);     // the newest limit and mode
    EXPECT_EQ(m.mode, Mode::Shadow);
    EXPECT_EQ(st.read(0, 1000)[0].samples.size(), 1u);
}

TEST(RlcStore, SurvivesCloseAndReopen) {
    TempDir d{"rlc-store"};
    {
        Store st(d.file("h.db"));
        st.write({{zone_key("a"), {sample(60, 7, 9)}}}, WriteMode::Replace);
    }
    Store again(d.file("h.db"));
    std::vector<Series> got = again.read(0, 1000);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_DOUBLE_EQ(got[0].samples[0].offered.peak, 9);
    std::unique_ptr<HistorySource> h = open_history(d.file("h.db"));
    EXPECT_EQ(h->read(0, 1000).size(), 1u);
}

TEST(RlcStore, IsInWalModeWithASchemaVersion) {
    TempDir d{"rlc-store"};
    { Store st(d.file("h.db")); }
    Db raw(d.file("h.db"), false, 1000);
    Stmt j(raw, "PRAGMA journal_mode");
    ASSERT_TRUE(j.step());
    EXPECT_EQ(j.text(0), "wal");
    Stmt v(raw, "SELECT version FROM schema_version WHERE component = 'history'");
    ASSERT_TRUE(v.step());
    EXPECT_EQ(v.int64(0), kHistorySchemaVersion);
}

TEST(RlcStore, CandidateColumnsRoundTripMergeAndRollUp) {
    TempDir d{"rlc-store"};
    Store st(d.file("h.db"));
    Sample a = sample(0, 100, 120, 30), b = sample(0, 100, 120, 30);
    a.candidate_limit_rps = b.candidate_limit_rps = 90;
    a.candidate_would_drop = {10, 30};
    b.candidate_would_drop = {20, 25};
    st.write({{zone_key("api"), {a}}}, WriteMode::Replace);
    std::vector<Series> got = st.read(0, 1000);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_DOUBLE_EQ(got[0].samples[0].candidate_limit_rps, 90);
    EXPECT_DOUBLE_EQ(got[0].samples[0].candidate_would_drop.mean, 10);
    EXPECT_DOUBLE_EQ(got[0].samples[0].candidate_would_drop.peak, 30);
    st.write({{zone_key("api"), {b}}}, WriteMode::Merge);  // weighted by ticks, peak the max
    got = st.read(0, 1000);
    EXPECT_DOUBLE_EQ(got[0].samples[0].candidate_would_drop.mean, 15);
    EXPECT_DOUBLE_EQ(got[0].samples[0].candidate_would_drop.peak, 30);
    Sample c = sample(60, 100, 120, 60);  // no candidate in the next minute
    st.write({{zone_key("api"), {c}}}, WriteMode::Replace);
    got = st.read(0, 1000);
    EXPECT_DOUBLE_EQ(got[0].samples[1].candidate_limit_rps, -1);
    EXPECT_EQ(st.rollup(3600, 3600), 1);  // two minutes into one hour
    got = st.read(0, 7200);
    ASSERT_EQ(got[0].samples.size(), 1u);
    EXPECT_DOUBLE_EQ(got[0].samples[0].candidate_would_drop.mean, 7.5);  // (15x60 + 0x60)/120
    EXPECT_DOUBLE_EQ(got[0].samples[0].candidate_would_drop.peak, 30);
    EXPECT_DOUBLE_EQ(got[0].samples[0].candidate_limit_rps, -1);  // the newest row's
}

TEST(RlcStore, AFileOfSchemaOneIsMigratedWhenOpened) {
    TempDir d{"rlc-store"};
    {
        // A history store as grl-rlc wrote it before candidates: schema version 1, its
        // samples table without the candidate columns, one row.
        Db raw(d.file("old.db"), true, 1000);
        raw.exec(R"sql(
CREATE TABLE schema_version (component TEXT PRIMARY KEY, version INTEGER NOT NULL);
INSERT INTO schema_version VALUES ('history', 1);
CREATE TABLE instances (id INTEGER PRIMARY KEY, bucket TEXT NOT NULL, scope TEXT NOT NULL,
    region TEXT NOT NULL, zone TEXT NOT NULL, UNIQUE (bucket, scope, region, zone));
CREATE TABLE samples (instance INTEGER NOT NULL REFERENCES instances (id),
    start_s INTEGER NOT NULL, length_s INTEGER NOT NULL, ticks INTEGER NOT NULL,
    offered_mean_mrps INTEGER NOT NULL, offered_peak_mrps INTEGER NOT NULL,
    admitted_mean_mrps INTEGER NOT NULL, admitted_peak_mrps INTEGER NOT NULL,
    dropped_mean_mrps INTEGER NOT NULL, dropped_peak_mrps INTEGER NOT NULL,
    shadow_mean_mrps INTEGER NOT NULL, shadow_peak_mrps INTEGER NOT NULL,
    limit_mrps INTEGER, mode INTEGER NOT NULL, ratio_ppm INTEGER NOT NULL,
    PRIMARY KEY (instance, start_s)) WITHOUT ROWID;
CREATE VIEW history AS SELECT i.bucket, s.start_s FROM samples s JOIN instances i
    ON i.id = s.instance;
INSERT INTO instances VALUES (1, 'api', 'global', '', '');
INSERT INTO samples VALUES (1, 60, 60, 60, 100000, 120000, 90000, 100000, 10000, 20000, 0, 0,
    300000, 0, 100000);
)sql");
    }
    {
        Store st(d.file("old.db"), false);
        std::vector<Series> got = st.read(0, 1000);
        ASSERT_EQ(got.size(), 1u);
        const Sample& old = got[0].samples.at(0);
        EXPECT_DOUBLE_EQ(old.offered.mean, 100);
        EXPECT_DOUBLE_EQ(old.limit_rps, 300);
        EXPECT_DOUBLE_EQ(old.candidate_limit_rps, -1);  // recorded before candidates: none
        EXPECT_DOUBLE_EQ(old.candidate_would_drop.peak, 0);
        Sample n = sample(120, 100, 120);
        n.candidate_limit_rps = 80;
        n.candidate_would_drop = {20, 40};
        st.write({{{"api", Scope::Global, "", ""}, {n}}}, WriteMode::Merge);
        got = st.read(0, 1000);
        EXPECT_DOUBLE_EQ(got[0].samples.at(1).candidate_would_drop.peak, 40);
    }
    Db raw(d.file("old.db"), false, 1000);
    Stmt v(raw, "SELECT version FROM schema_version WHERE component = 'history'");
    ASSERT_TRUE(v.step());
    EXPECT_EQ(v.int64(0), 2);
    Stmt view(raw, "SELECT candidate_limit, candidate_would_drop_peak FROM history ORDER BY start");
    ASSERT_TRUE(view.step());
    EXPECT_TRUE(view.is_null(0));
    ASSERT_TRUE(view.step());
    EXPECT_EQ(view.int64(1), 40);
    // Opened again: already at 2, nothing to migrate.
    EXPECT_NO_THROW(Store(d.file("old.db"), false));
}

TEST(RlcStore, AReaderNeverFailsWhileAWriterHoldsItsTransaction) {
    TempDir d{"rlc-store"};
    Store writer(d.file("h.db"));
    writer.write({{zone_key("a"), {sample(0, 1, 1)}}}, WriteMode::Replace);
    Store reader(d.file("h.db"), false, /*busy_timeout_ms=*/0);  // would fail at once if blocked

    // A write transaction left open on a third connection (record in the middle of a batch).
    Db busy(d.file("h.db"), false, 0);
    Transaction tx(busy);
    busy.exec("DELETE FROM samples");
    std::vector<Series> got = reader.read(0, 1000);  // the last committed state
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].samples.size(), 1u);
    tx.commit();
    EXPECT_TRUE(reader.read(0, 1000).empty());
}

TEST(RlcStore, ASecondWriterWaitsForTheLockInsteadOfFailing) {
    TempDir d{"rlc-store"};
    Store a(d.file("h.db"));
    Store b(d.file("h.db"), false, /*busy_timeout_ms=*/5000);
    auto busy = std::make_unique<Db>(d.file("h.db"), false, 0);
    auto tx = std::make_unique<Transaction>(*busy);
    // Release the lock from another thread shortly; b's write must wait, then succeed.
    std::thread release([&] {
        usleep(200 * 1000);
        tx->commit();
    });
    b.write({{zone_key("a"), {sample(0, 1, 1)}}}, WriteMode::Replace);
    release.join();
    EXPECT_EQ(a.read(0, 1000).size(), 1u);

    Store impatient(d.file("h.db"), false, 0);
    Transaction hold(*busy);
    EXPECT_THROW(impatient.write({{zone_key("b"), {sample(0, 1, 1)}}}, WriteMode::Replace),
                 StoreError);
}

TEST(RlcStore, PruneDeletesOldSamplesAndEmptyInstances) {
    TempDir d{"rlc-store"};
    Store st(d.file("h.db"));
    st.write({{zone_key("old"), {sample(0, 1, 1), sample(60, 1, 1)}},
              {zone_key("both"), {sample(60, 1, 1), sample(3600, 2, 2)}}},
             WriteMode::Replace);
    EXPECT_EQ(st.prune(120), 3);
    std::vector<InstanceKey> left = st.instances();
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0].bucket, "both");
    std::vector<Series> got = st.read(0, 10000);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].samples.size(), 1u);
    EXPECT_EQ(got[0].samples[0].start_s, 3600);
    // A pruned instance comes back when it is written again.
    st.write({{zone_key("old"), {sample(7200, 1, 1)}}}, WriteMode::Replace);
    EXPECT_EQ(st.read(0, 10000).size(), 2u);
}

TEST(RlcStore, RollupFoldsWholeOldHoursAndLeavesTheRestAlone) {
    TempDir d{"rlc-store"};
    Store st(d.file("h.db"));
    std::vector<Sample> v;
    for (int m = 0; m < 180; ++m) {  // three hours of minutes
        Sample s = sample(m * 60, 100 + m % 60, 200 + m % 60, 60);
        s.limit_rps = m < 60 ? 300 : 400;
        v.push_back(s);
    }
    v[30].offered.peak = 5000;  // a one-minute burst in the first hour
    v[90].ticks = 30;           // half a minute seen
    st.write({{zone_key("a"), v}}, WriteMode::Replace);
    // Roll up what is older than 2:30: hours 0 and 1 only (2 is not whole before 2:30).
    EXPECT_EQ(st.rollup(2 * 3600 + 1800), 118);
    std::vector<Sample> got = st.read(0, 100000).at(0).samples;
    ASSERT_EQ(got.size(), 2u + 60u);
    const Sample& h0 = got[0];
    EXPECT_EQ(h0.start_s, 0);
    EXPECT_EQ(h0.length_s, 3600);
    EXPECT_EQ(h0.ticks, 3600);
    EXPECT_NEAR(h0.offered.mean, 129.5, 0.001);  // mean of 100..159
    EXPECT_EQ(h0.offered.peak, 5000);            // the burst survives the rollup
    EXPECT_EQ(h0.limit_rps, 300);
    const Sample& h1 = got[1];
    EXPECT_EQ(h1.start_s, 3600);
    EXPECT_EQ(h1.ticks, 59 * 60 + 30);
    // Weighted by ticks: minute 90 (offered 130) counts half.
    double sum = 0;
    for (int m = 60; m < 120; ++m) sum += (100 + m % 60) * (m == 90 ? 30 : 60);
    EXPECT_NEAR(h1.offered.mean, sum / (59 * 60 + 30), 0.001);
    EXPECT_EQ(h1.limit_rps, 400);
    EXPECT_EQ(got[2].start_s, 7200);  // hour 2 untouched
    EXPECT_EQ(got[2].length_s, 60);
    EXPECT_EQ(st.rollup(2 * 3600 + 1800), 0);  // idempotent
}

// The store in bucket slices (cycles and what-if read ~50 buckets at a time): buckets()
// lists exactly the buckets with samples in the range; read() of a slice returns exactly
// the rows of its buckets, instances in key order, samples ascending, gaps kept as gaps.
std::vector<Series> slice_fixture() {
    std::vector<Series> out;
    auto instance = [&](InstanceKey k, std::vector<std::int64_t> starts) {
        Series s{std::move(k), {}};
        for (std::int64_t t : starts) s.samples.push_back(sample(t, 10 + t / 60, 20 + t / 60));
        out.push_back(std::move(s));
    };
    // Written out of key and time order, so that the order read is the store's doing.
    instance({"search", Scope::Global, "", ""}, {300, 60, 120});
    instance({"api", Scope::Zone, "eu", "b"}, {120, 60, 240});  // 180 missing: a gap
    instance({"api", Scope::Global, "", ""}, {60, 120, 180});
    instance({"api", Scope::Zone, "eu", "a"}, {60});
    instance({"api.v2", Scope::Region, "eu", ""}, {60, 120});
    instance({"old", Scope::Global, "", ""}, {0});  // before the range read below
    return out;
}

TEST(RlcStore, BucketsListsExactlyThoseWithSamplesInTheRangeInNameOrder) {
    TempDir d{"rlc-store"};
    Store st(d.file("h.db"));
    st.write(slice_fixture(), WriteMode::Replace);
    EXPECT_EQ(st.buckets(60, 1000), (std::vector<std::string>{"api", "api.v2", "search"}));
    EXPECT_EQ(st.buckets(0, 60), (std::vector<std::string>{"old"}));
    EXPECT_EQ(st.buckets(250, 300), (std::vector<std::string>{}));  // [since, until)
    EXPECT_EQ(st.buckets(240, 301), (std::vector<std::string>{"api", "search"}));
}

TEST(RlcStore, ASliceReadReturnsExactlyTheRowsOfItsBuckets) {
    TempDir d{"rlc-store"};
    Store st(d.file("h.db"));
    const std::vector<Series> written = slice_fixture();
    st.write(written, WriteMode::Replace);

    std::vector<Series> got = st.read(60, 1000, {"api", "search"});
    ASSERT_EQ(got.size(), 4u);
    // Instances in InstanceKey order: bucket, then global < region < zone, region, zone.
    EXPECT_EQ(got[0].key, (InstanceKey{"api", Scope::Global, "", ""}));
    EXPECT_EQ(got[1].key, (InstanceKey{"api", Scope::Zone, "eu", "a"}));
    EXPECT_EQ(got[2].key, (InstanceKey{"api", Scope::Zone, "eu", "b"}));
    EXPECT_EQ(got[3].key, (InstanceKey{"search", Scope::Global, "", ""}));
    auto starts = [](const Series& s) {
        std::vector<std::int64_t> out;
        for (const Sample& x : s.samples) out.push_back(x.start_s);
        return out;
    };
    EXPECT_EQ(starts(got[0]), (std::vector<std::int64_t>{60, 120, 180}));
    EXPECT_EQ(starts(got[1]), (std::vector<std::int64_t>{60}));
    EXPECT_EQ(starts(got[2]), (std::vector<std::int64_t>{60, 120, 240}));  // the gap stays one
    EXPECT_EQ(starts(got[3]), (std::vector<std::int64_t>{60, 120, 300}));
    // Every field as written (the sample of eu/b at 240 carries its own figures).
    const Sample& x = got[2].samples[2];
    EXPECT_DOUBLE_EQ(x.offered.mean, 14);
    EXPECT_DOUBLE_EQ(x.offered.peak, 24);
    EXPECT_DOUBLE_EQ(x.admitted.mean, 14 * 0.75);
    EXPECT_DOUBLE_EQ(x.dropped.peak, 24 * 0.5);
    EXPECT_DOUBLE_EQ(x.shadow_dropped.peak, 2.5);
    EXPECT_DOUBLE_EQ(x.limit_rps, 300);
    EXPECT_DOUBLE_EQ(x.ratio, 0.125);
    EXPECT_EQ(x.ticks, 60);

    // A slice is the whole read restricted to its buckets, sample for sample.
    std::vector<Series> all = st.read(60, 1000);
    std::vector<Series> rest = st.read(60, 1000, {"api.v2"});
    ASSERT_EQ(all.size(), got.size() + rest.size());
    ASSERT_EQ(rest.size(), 1u);
    EXPECT_EQ(all[3].key, rest[0].key);  // "api" < "api.v2" < "search"
    EXPECT_EQ(starts(all[3]), starts(rest[0]));

    // The range applies within a slice too; an instance with nothing in it is left out.
    std::vector<Series> late = st.read(200, 1000, {"api"});
    ASSERT_EQ(late.size(), 1u);
    EXPECT_EQ(late[0].key, (InstanceKey{"api", Scope::Zone, "eu", "b"}));
    EXPECT_EQ(starts(late[0]), (std::vector<std::int64_t>{240}));
}

TEST(RlcStore, ASliceOfUnknownNamesOrNoNamesReadsNothing) {
    TempDir d{"rlc-store"};
    Store st(d.file("h.db"));
    st.write(slice_fixture(), WriteMode::Replace);
    EXPECT_TRUE(st.read(0, 1000, {"nope", "ap", "api%", "\"api\""}).empty());
    EXPECT_TRUE(st.read(0, 1000, {}).empty());
    EXPECT_TRUE(st.read(60, 1000, {"old"}).empty());  // known, but nothing in the range
    // The statement is reused: a read after an empty one still answers.
    EXPECT_EQ(st.read(0, 1000, {"old"}).size(), 1u);
}

std::string query_plan(const std::string& file, const std::string& sql) {
    sqlite3* db = nullptr;
    if (sqlite3_open(file.c_str(), &db) != SQLITE_OK) return "cannot open " + file;
    sqlite3_stmt* q = nullptr;
    std::string full = "EXPLAIN QUERY PLAN " + sql, plan;
    if (sqlite3_prepare_v2(db, full.c_str(), -1, &q, nullptr) != SQLITE_OK)
        plan = std::string("cannot prepare: ") + sqlite3_errmsg(db);
    while (q && sqlite3_step(q) == SQLITE_ROW)
        plan += reinterpret_cast<const char*>(sqlite3_column_text(q, 3)) + std::string("\n");
    sqlite3_finalize(q);
    sqlite3_close(db);
    return plan;
}

TEST(RlcStore, ASliceReadIsTwoIndexedQueriesWithoutASort) {
    TempDir d{"rlc-store"};
    { Store st(d.file("h.db")); }
    std::string plan = query_plan(d.file("h.db"), slice_instances_sql());
    EXPECT_NE(plan.find("SEARCH instances USING COVERING INDEX sqlite_autoindex_instances_1 "
                        "(bucket=?)"),
              std::string::npos)
        << plan;
    EXPECT_EQ(plan.find("TEMP B-TREE"), std::string::npos) << plan;  // no sort
    plan = query_plan(d.file("h.db"), slice_samples_sql());
    EXPECT_NE(plan.find("SEARCH samples USING PRIMARY KEY (instance=? AND start_s>? AND "
                        "start_s<?)"),
              std::string::npos)
        << plan;
    EXPECT_EQ(plan.find("TEMP B-TREE"), std::string::npos) << plan;
    EXPECT_EQ(plan.find("SCAN samples"), std::string::npos) << plan;
}

TEST(RlcStore, ErrorsNameTheFile) {
    TempDir d{"rlc-store"};
    try {
        open_history(d.file("missing.db"));
        FAIL() << "a missing store must be an error";
    } catch (const StoreError& e) {
        EXPECT_NE(std::string(e.what()).find("missing.db does not exist"), std::string::npos)
            << e.what();
    }
    std::ofstream(d.file("junk.db")) << "this is not a database, just text that is long enough";
    try {
        Store st(d.file("junk.db"));
        FAIL() << "a non-database file must be an error";
    } catch (const StoreError& e) {
        EXPECT_NE(std::string(e.what()).find("junk.db"), std::string::npos) << e.what();
    }
    {
        Db other(d.file("other.db"), true, 0);
        other.exec("CREATE TABLE t (x)");
    }
    EXPECT_THROW(open_history(d.file("other.db")), StoreError);
    { Store st(d.file("future.db")); }
    {
        Db raw(d.file("future.db"), false, 0);
        raw.exec("UPDATE schema_version SET version = 99 WHERE component = 'history'");
    }
    try {
        Store st(d.file("future.db"));
        FAIL() << "a newer schema must be refused";
    } catch (const StoreError& e) {
        EXPECT_NE(std::string(e.what()).find("version 99"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace grl::rlc
