// Sample blocks (rlc/sample_block.h), the store's per-day read cache: the codec, and that a
// read through blocks gives exactly what the rows give, whoever changes the rows.
#include "sample_block.h"
#include "temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "store.h"
#include "synth.h"

namespace grl::rlc {
namespace {

using test::TempDir;

constexpr std::int64_t kDay = kBlockSpan;
constexpr std::int64_t kT0 = 1'795'996'800 - 10 * kDay;  // a 00:00 UTC

SampleRow row(std::int64_t start, std::int64_t base) {
    SampleRow r;
    r.v[0] = start;
    r.v[1] = 60;
    r.v[2] = 60;
    for (int c = 3; c < 11; ++c) r.v[c] = base * c;
    r.v[SampleRow::kLimit] = 400'000;
    r.v[SampleRow::kMode] = 1;
    r.v[SampleRow::kRatio] = 12'345;
    r.candidate_null = true;
    r.v[15] = 7;
    r.v[16] = 9;
    return r;
}

std::uint64_t bits(double v) {
    std::uint64_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;
}

bool same(const Rate& a, const Rate& b) {
    return bits(a.mean) == bits(b.mean) && bits(a.peak) == bits(b.peak);
}

bool same(const Sample& a, const Sample& b) {
    // Bit for bit: the cache must not move a single limit by an ulp.
    return same(a.offered, b.offered) && same(a.admitted, b.admitted) &&
           same(a.dropped, b.dropped) && same(a.shadow_dropped, b.shadow_dropped) &&
           same(a.candidate_would_drop, b.candidate_would_drop) && a.start_s == b.start_s &&
           a.length_s == b.length_s && a.ticks == b.ticks &&
           bits(a.limit_rps) == bits(b.limit_rps) && a.mode == b.mode &&
           bits(a.ratio) == bits(b.ratio) &&
           bits(a.candidate_limit_rps) == bits(b.candidate_limit_rps);
}

void expect_same(const std::vector<Series>& a, const std::vector<Series>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].key, b[i].key);
        ASSERT_EQ(a[i].samples.size(), b[i].samples.size()) << a[i].key.bucket;
        for (std::size_t j = 0; j < a[i].samples.size(); ++j)
            ASSERT_TRUE(same(a[i].samples[j], b[i].samples[j]))
                << a[i].key.bucket << " sample " << j << " at " << a[i].samples[j].start_s;
    }
}

TEST(RlcSampleBlock, RoundTripsEveryValueIncludingNullsAndExtremes) {
    std::vector<SampleRow> rows;
    rows.reserve(5);
    for (std::int64_t i = 0; i < 5; ++i) rows.push_back(row(kT0 + 60 * i, 1000 + i * 37));
    rows[1].limit_null = true;
    rows[2].candidate_null = false;
    rows[2].v[SampleRow::kCandidate] = 350'000;
    rows[3].v[4] = -5;  // a counter reset misread: negative, kept as is
    rows[4].v[5] = std::numeric_limits<std::int64_t>::max();
    rows[4].v[6] = std::numeric_limits<std::int64_t>::min();
    std::string blob = encode_block(rows);
    std::vector<Sample> got;
    decode_block(blob, 0, std::numeric_limits<std::int64_t>::max(), got);
    ASSERT_EQ(got.size(), rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i)
        EXPECT_TRUE(same(got[i], to_sample(rows[i]))) << i;
    EXPECT_DOUBLE_EQ(got[0].offered.mean, 3.0);  // 1000 x 3 mrps
    EXPECT_DOUBLE_EQ(got[1].limit_rps, -1);      // NULL: unknown
    EXPECT_DOUBLE_EQ(got[0].limit_rps, 400);
    EXPECT_DOUBLE_EQ(got[2].candidate_limit_rps, 350);
    EXPECT_DOUBLE_EQ(got[0].candidate_limit_rps, -1);
    EXPECT_EQ(got[0].mode, Mode::Shadow);
    EXPECT_DOUBLE_EQ(got[0].ratio, 0.012345);
    EXPECT_DOUBLE_EQ(got[3].offered.peak, -0.005);

    // Only the samples starting in the range asked for.
    got.clear();
    decode_block(blob, kT0 + 60, kT0 + 180, got);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].start_s, kT0 + 60);
    // A day without samples is a block too.
    got.clear();
    decode_block(encode_block({}), 0, kT0, got);
    EXPECT_TRUE(got.empty());
}

TEST(RlcSampleBlock, ABlobItDidNotWriteIsAnError) {
    std::string blob = encode_block({row(kT0, 1000), row(kT0 + 60, 1001)});
    std::vector<Sample> out;
    EXPECT_THROW(decode_block(blob.substr(0, blob.size() - 3), 0, kT0 + kDay, out), BlockError);
    EXPECT_THROW(decode_block(blob + "x", 0, kT0 + kDay, out), BlockError);
    EXPECT_THROW(decode_block("", 0, kT0 + kDay, out), BlockError);
    std::string other = blob;
    other[0] = 9;  // another format
    EXPECT_THROW(decode_block(other, 0, kT0 + kDay, out), BlockError);
}

TEST(RlcSampleBlock, BlockDayIsTheUtcDayAlsoBefore1970) {
    EXPECT_EQ(block_day(kT0), kT0);
    EXPECT_EQ(block_day(kT0 + kDay - 1), kT0);
    EXPECT_EQ(block_day(-1), -kDay);
    EXPECT_EQ(block_day(0), 0);
}

// Ten days of minutes from kT0 for two instances.
std::vector<Series> history() {
    std::vector<Series> out;
    for (const char* b : {"api", "search"}) {
        SynthSpec spec;
        spec.end_s = kT0 + 10 * kDay;
        spec.weeks = 2;
        spec.limit_rps = 400;
        spec.candidate_rps = 380;
        spec.seed = 7;
        spec.gaps.push_back({6, 5, 3});  // hours missing on kT0's day 2
        Series s{{b, Scope::Global, "", ""}, {}};
        for (const Sample& x : synthesize(spec))
            if (x.start_s >= kT0) s.samples.push_back(x);  // days 0-9 from kT0
        out.push_back(std::move(s));
    }
    out[1].samples[100].limit_rps = -1;
    out[1].samples[100].mode = Mode::Shadow;
    return out;
}

std::int64_t blocks_in(const std::string& file) {
    Db raw(file, false, 1000);
    Stmt q(raw, "SELECT count(*) FROM sample_blocks");
    q.step();
    return q.int64(0);
}

TEST(RlcSampleBlock, AReadThroughBlocksIsTheReadOfTheRows) {
    TempDir d{"rlc-block"};
    Store st(d.file("h.db"));
    ASSERT_TRUE(st.uses_blocks());
    const std::vector<Series> h = history();
    st.write(h, WriteMode::Replace);
    const std::int64_t since = kT0 + 3600, until = kT0 + 10 * kDay - 600;
    // The reference: the same rows in a store whose blocks are of a format this grl-rlc
    // does not use, so that it reads rows only (as grl-rlc did before blocks).
    { Store(d.file("rows.db")).write(h, WriteMode::Replace); }
    {
        Db raw(d.file("rows.db"), false, 1000);
        raw.exec("UPDATE schema_version SET version = 2 WHERE component = 'sample_blocks'");
    }
    Store plain(d.file("rows.db"), false);
    ASSERT_FALSE(plain.uses_blocks());
    const std::vector<Series> rows = plain.read(since, until);
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_GT(rows[0].samples.size(), 12000u);
    EXPECT_EQ(blocks_in(d.file("rows.db")), 0);
    std::vector<Series> cold = st.read(since, until);  // rows, and blocks written
    expect_same(cold, rows);
    // Days 0-7 end before yesterday (until is on day 9): 2 x 8 blocks.
    EXPECT_EQ(blocks_in(d.file("h.db")), 16);
    std::vector<Series> warm = st.read(since, until);
    expect_same(warm, rows);
    Store other(d.file("h.db"), false);  // another process: the blocks are in the file
    expect_same(other.read(since, until), rows);
    EXPECT_EQ(st.block_write_error(), "");

    // The blocks really are read: one spoiled is an error naming the file and the block.
    {
        Db raw(d.file("h.db"), false, 1000);
        raw.exec("UPDATE sample_blocks SET data = x'0900' WHERE day = " +
                 std::to_string(kT0 + 4 * kDay));
    }
    try {
        st.read(since, until);
        FAIL() << "a spoiled block must be an error";
    } catch (const StoreError& e) {
        EXPECT_NE(std::string(e.what()).find("h.db: block of instance"), std::string::npos)
            << e.what();
    }
}

TEST(RlcSampleBlock, EveryChangeOfTheRowsDropsTheDaysBlock) {
    TempDir d{"rlc-block"};
    Store st(d.file("h.db"));
    std::vector<Series> h = history();
    st.write(h, WriteMode::Replace);
    const std::int64_t since = kT0, until = kT0 + 10 * kDay;
    st.read(since, until);
    ASSERT_EQ(blocks_in(d.file("h.db")), 18);  // days 0-8, until on day 10
    auto api = [&] { return st.read(since, until, {"api"}).at(0).samples; };
    auto at = [](const std::vector<Sample>& v, std::int64_t t) {
        for (const Sample& x : v)
            if (x.start_s == t) return x;
        return Sample{};
    };

    // Replace: the new row is read, not the block's.
    const std::int64_t t4 = kT0 + 4 * kDay + 600;
    Sample x = at(api(), t4);
    x.offered.peak = 9999;
    st.write({{h[0].key, {x}}}, WriteMode::Replace);
    EXPECT_EQ(blocks_in(d.file("h.db")), 17);
    EXPECT_DOUBLE_EQ(at(api(), t4).offered.peak, 9999);
    EXPECT_EQ(blocks_in(d.file("h.db")), 18);  // written again from the rows

    // Merge (a restarted recorder): the peak is the max of both.
    Sample y = x;
    y.offered.peak = 12000;
    st.write({{h[0].key, {y}}}, WriteMode::Merge);
    EXPECT_DOUBLE_EQ(at(api(), t4).offered.peak, 12000);

    // Someone else's SQL (the sqlite3 shell): an update and a delete.
    {
        Db raw(d.file("h.db"), false, 1000);
        raw.exec("UPDATE samples SET offered_peak_mrps = 777000 WHERE start_s = " +
                 std::to_string(kT0 + 5 * kDay));
        raw.exec("DELETE FROM samples WHERE start_s = " + std::to_string(kT0 + 6 * kDay));
    }
    EXPECT_DOUBLE_EQ(at(api(), kT0 + 5 * kDay).offered.peak, 777);
    EXPECT_EQ(at(api(), kT0 + 6 * kDay).start_s, 0);  // gone

    // Prune and rollup go through the rows too.
    st.prune(kT0 + 5 * kDay);
    EXPECT_EQ(api().front().start_s, kT0 + 5 * kDay);
    st.rollup(kT0 + 7 * kDay);
    std::vector<Sample> v = api();
    EXPECT_EQ(at(v, kT0 + 6 * kDay).length_s, 3600);  // an hour row now
    EXPECT_EQ(at(v, kT0 + 8 * kDay).length_s, 60);
    // And a read straight after every change equals a read of rows alone.
    std::vector<Series> now = st.read(since, until);
    {
        Db raw(d.file("h.db"), false, 1000);
        raw.exec("DELETE FROM sample_blocks");
    }
    expect_same(now, st.read(since, until));
}

TEST(RlcSampleBlock, AStoreFromBeforeBlocksGetsThemWhenOpened) {
    TempDir d{"rlc-block"};
    const std::vector<Series> h = history();
    {
        Store st(d.file("old.db"));
        st.write(h, WriteMode::Replace);
    }
    {
        // As a grl-rlc before blocks wrote it: no table, no triggers, no schema row.
        Db raw(d.file("old.db"), false, 1000);
        raw.exec(
            "DROP TRIGGER sample_blocks_insert; DROP TRIGGER sample_blocks_update;"
            "DROP TRIGGER sample_blocks_delete; DROP TABLE sample_blocks;"
            "DELETE FROM schema_version WHERE component = 'sample_blocks'");
    }
    Store st(d.file("old.db"), false);
    EXPECT_TRUE(st.uses_blocks());
    std::vector<Series> got = st.read(kT0, kT0 + 10 * kDay);
    EXPECT_EQ(blocks_in(d.file("old.db")), 18);
    expect_same(st.read(kT0, kT0 + 10 * kDay), got);
    EXPECT_EQ(got.at(0).samples.size(), h[0].samples.size());
}

TEST(RlcSampleBlock, ABusyStoreIsReadFromItsRowsAndABlockFormatItDoesNotKnowIsLeftAlone) {
    TempDir d{"rlc-block"};
    const std::vector<Series> h = history();
    { Store(d.file("h.db")).write(h, WriteMode::Replace); }
    Store reader(d.file("h.db"), false, /*busy_timeout_ms=*/0);
    {
        Db busy(d.file("h.db"), false, 0);
        Transaction tx(busy);  // a writer in the middle of its batch
        std::vector<Series> got = reader.read(kT0, kT0 + 10 * kDay);
        ASSERT_EQ(got.size(), 2u);
        EXPECT_EQ(got[0].samples.size(), h[0].samples.size());
        EXPECT_EQ(blocks_in(d.file("h.db")), 0);    // could not write them: later
        EXPECT_EQ(reader.block_write_error(), "");  // busy is not a failure
    }
    // (Its two connections may not wait for each other either: another reader writes them.)
    Store(d.file("h.db"), false).read(kT0, kT0 + 10 * kDay);
    EXPECT_EQ(blocks_in(d.file("h.db")), 18);

    {
        Db raw(d.file("h.db"), false, 1000);
        raw.exec("UPDATE schema_version SET version = 2 WHERE component = 'sample_blocks'");
        raw.exec("UPDATE sample_blocks SET data = x'02'");  // a format of a newer grl-rlc
    }
    Store newer(d.file("h.db"), false);
    EXPECT_FALSE(newer.uses_blocks());
    std::vector<Series> got = newer.read(kT0, kT0 + 10 * kDay);
    EXPECT_EQ(got.at(1).samples.size(), h[1].samples.size());
}

}  // namespace
}  // namespace grl::rlc
