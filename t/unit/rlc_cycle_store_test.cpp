// A cycle over the real SQLite store proposes what the same history in memory proposes,
// whether the store answers from its rows (the first cycle) or from its sample blocks (every
// cycle after it): the blocks are a cache, never a second opinion (docs/rlc-history.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "cycle.h"
#include "store.h"
#include "synth.h"

using namespace grl;
using namespace grl::rlc;

namespace {

constexpr std::int64_t kNow = 1'795'996'800 + 13 * 3600 + 17 * 60;  // mid-day: a partial day

struct TempDir {
    std::string path;
    TempDir() {
        char d[] = "/tmp/rlc-cycle-store-XXXXXX";
        path = mkdtemp(d);
    }
    ~TempDir() { std::system(("rm -rf " + path).c_str()); }
    std::string file(const std::string& name, const std::string& text = "") const {
        std::string p = path + "/" + name;
        if (!text.empty()) std::ofstream(p) << text;
        return p;
    }
};

// Three weeks of minutes per instance, with what each policy looks at: trend, a spike, a gap,
// limits in force, a zone bucket with two zones.
std::vector<Series> history() {
    std::vector<Series> out;
    auto add = [&](InstanceKey key, double base, double limit, std::uint64_t seed) {
        SynthSpec spec;
        spec.end_s = kNow;
        spec.weeks = 3;
        spec.base = base;
        spec.limit_rps = limit;
        spec.seed = seed;
        spec.spikes.push_back({9, 14, 3});
        spec.gaps.push_back({4, 2, 2});
        out.push_back({std::move(key), synthesize(spec)});
    };
    add({"api", Scope::Global, "", ""}, 300, 400, 1);
    add({"search", Scope::Global, "", ""}, 120, -1, 2);
    add({"upload", Scope::Zone, "eu", "a"}, 50, 80, 3);
    add({"upload", Scope::Zone, "eu", "b"}, 70, 80, 4);
    return out;
}

TEST(CycleStore, ProposalsFromBlocksAreThoseFromRowsAndFromMemory) {
    TempDir d;
    d.file("limits.yaml", "buckets:\n  api:\n    limit: 400r/s\n  upload:\n    limit: 80r/s\n");
    d.file("rlc.yaml",
           "limits_file: limits.yaml\nwindow: 3w\n"
           "rules:\n  - match: search\n    policy: forecast\n    min_weeks: 2\n");
    Config cfg = load_config(d.path + "/rlc.yaml");
    const std::vector<Series> h = history();
    Store st(d.file("h.db"));
    st.write(h, WriteMode::Replace);
    const control::Limits limits;  // the file's limits do not matter here: the same for all

    Plan memory = plan_cycle(cfg, h, limits, {}, kNow, false);
    Plan rows = plan_cycle(cfg, st, limits, {}, kNow, false, 2);  // writes the blocks
    Plan blocks = plan_cycle(cfg, st, limits, {}, kNow, false, 2);
    Plan other = plan_cycle(cfg, st, limits, {}, kNow, false, 1);  // other slices

    ASSERT_EQ(memory.rows.size(), 3u);
    for (const CycleRow& r : memory.rows) EXPECT_TRUE(r.proposal.new_mrps) << r.proposal.bucket;
    const std::string want = render_plan(memory);
    EXPECT_EQ(render_plan(rows), want);
    EXPECT_EQ(render_plan(blocks), want);
    EXPECT_EQ(render_plan(other), want);
    // The later cycles did have blocks to read: per instance, the days from the window's
    // first (partial) day to the day before yesterday, 20 of the 21 days back.
    Db raw(d.file("h.db"), false, 1000);
    Stmt q(raw, "SELECT count(DISTINCT instance), count(*) FROM sample_blocks");
    ASSERT_TRUE(q.step());
    EXPECT_EQ(q.int64(0), 4);
    EXPECT_EQ(q.int64(1), 4 * 20);
}

}  // namespace
