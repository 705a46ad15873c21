// A whole cycle: proposals, the rollout, the limits file that results, and applying it
// through a real SQLite config store and a real file (versions, rollback).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "apply.h"
#include "cycle.h"
#include "grl/daemon/limits_file.h"
#include "rlc_fixtures.h"
#include "versions.h"

using namespace grl;
using namespace grl::rlc;
using namespace grl::rlc::fixtures;

namespace {

constexpr std::int64_t kNow = kEpoch + 5 * kWeek;
constexpr std::int64_t kSince = kNow - 4 * kWeek;

struct TempDir {
    std::string path;
    TempDir() {
        char d[] = "/tmp/rlc-cycle-XXXXXX";
        path = mkdtemp(d);
    }
    ~TempDir() { std::system(("rm -rf " + path).c_str()); }
    std::string file(const std::string& name, const std::string& text = "") const {
        std::string p = path + "/" + name;
        if (!text.empty()) std::ofstream(p) << text;
        return p;
    }
};

std::string slurp(const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

const char* kLimits =
    "buckets:\n"
    "  api:\n    limit: 200r/s\n"
    "  search:\n    limit: 200r/s\n"
    "  bots:\n    caller_prefix: bot-\n    limit: 10r/s\n"
    "  legacy:\n    mode: shadow\n";

Config config(const TempDir& d) {
    d.file("quotas.yaml", "quotas:\n  partner-acme: 50r/s\n");
    d.file("rlc.yaml",
           "store: rlc.db\nlimits_file: limits.yaml\nwindow: 4w\nquota_file: quotas.yaml\n"
           "rollout:\n  soak: 1h\n  threshold: 0.1%\n"
           "rules:\n  - match: partner-*\n    policy: fixed\n");
    return load_config(d.path + "/rlc.yaml");
}

std::vector<Series> history() {
    return {
        make_series(global("api"), kSince, kNow, flat(100)),       // 200 -> 120: lowered
        make_series(global("search"), kSince, kNow, flat(300)),    // 200 -> 360, step guard: 300
        make_series(global("bots"), kSince, kNow, flat(5)),        // run-time: not managed
        make_series(global("young"), kNow - kDay, kNow, flat(5)),  // declined
    };
}

const CycleRow& row(const Plan& p, const std::string& bucket) {
    for (const auto& r : p.rows)
        if (r.proposal.bucket == bucket) return r;
    throw std::runtime_error("no row for " + bucket);
}

TEST(Cycle, PlansEveryBucketAndKeepsWhatItDoesNotManage) {
    TempDir d;
    Config cfg = config(d);
    auto current = daemon::parse_limits(kLimits, "limits.yaml");
    ASSERT_TRUE(current.ok) << current.error;
    auto h = history();
    Plan p = plan_cycle(cfg, h, current.limits, {}, kNow, false);

    EXPECT_EQ(row(p, "api").step.action, Action::Shadow);
    EXPECT_EQ(*row(p, "api").proposal.new_mrps, 120000u);
    // Every proposal replayed over the window: api at 120 r/s never drops its 100 r/s,
    // search at 300 r/s drops 0 of 300 r/s but is never over either.
    auto replayed = [&](const std::string& b) {
        for (const auto& [k, v] : row(p, b).proposal.evidence.notes)
            if (k == "replayed") return v;
        return std::string("none");
    };
    EXPECT_EQ(replayed("api"), "would drop 0.000%, 0 min over");
    EXPECT_EQ(replayed("search"), "would drop 0.000%, 0 min over");
    EXPECT_EQ(replayed("partner-acme"), "none");  // no history to replay
    EXPECT_EQ(row(p, "search").step.action, Action::Raise);
    EXPECT_EQ(*row(p, "search").proposal.new_mrps, 300000u);
    EXPECT_FALSE(row(p, "young").proposal.new_mrps);
    // A quota bucket with no history yet: new, so shadow first.
    EXPECT_EQ(row(p, "partner-acme").proposal.policy, "fixed");
    EXPECT_EQ(row(p, "partner-acme").step.action, Action::Shadow);
    ASSERT_EQ(p.skipped.size(), 1u);
    EXPECT_EQ(p.skipped[0], "bots: run-time bucket of the limits file, not managed");

    const auto& after = p.after.buckets;
    // api enforces 200 r/s (deny by default): it keeps doing so, 120 is its candidate.
    EXPECT_EQ(*after.at("api").limit_mrps, 200000u);
    EXPECT_EQ(*after.at("api").mode, Mode::Deny);
    EXPECT_EQ(*after.at("api").candidate_mrps, 120000u);
    EXPECT_EQ(*after.at("search").limit_mrps, 300000u);
    EXPECT_EQ(*after.at("search").mode, Mode::Deny);
    EXPECT_TRUE(after.at("bots") == current.limits.buckets.at("bots"));
    EXPECT_TRUE(after.at("legacy") == current.limits.buckets.at("legacy"));
    EXPECT_EQ(after.count("young"), 0u);
    EXPECT_EQ(p.changes.size(), 3u);  // api, partner-acme, search

    std::string text = render_plan(p);
    EXPECT_NE(text.find("api           global  200r/s deny  120r/s  -40.0%  peak"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("step guard +50% of 200r/s"), std::string::npos) << text;
    EXPECT_NE(text.find("young (peak): global: too little history"), std::string::npos) << text;
    EXPECT_NE(text.find("shadow -> 200r/s deny, candidate 120r/s"), std::string::npos) << text;
    EXPECT_NE(text.find("api: mode (none) -> deny, candidate (none) -> 120r/s"), std::string::npos)
        << text;
}

TEST(Cycle, EveryProposalIsReplayedOverTheWindow) {
    TempDir d;
    Config cfg = config(d);
    // p99.9 ignores a 10-minute spike to 1000 r/s: 120 r/s, which the spike overshoots.
    std::vector<Series> h = {
        make_series(global("spiky"), kSince, kNow, spike(100, kSince + kDay, 10 * kMin, 1000))};
    Plan p = plan_cycle(cfg, h, {}, {}, kNow, false);
    ASSERT_EQ(*row(p, "spiky").proposal.new_mrps, 120000u);
    const auto& notes = row(p, "spiky").proposal.evidence.notes;
    ASSERT_EQ(notes.size(), 1u);
    // 880 r/s over for 600 s, of 100 r/s for four weeks plus the spike's extra 900 r/s.
    double f = 880.0 * 600 / (100.0 * 4 * kWeek + 900.0 * 600) * 100;
    char want[64];
    std::snprintf(want, sizeof want, "would drop %.3f%%, 10 min over", f);
    EXPECT_EQ(notes[0].second, want);
    EXPECT_NE(render_plan(p).find(std::string("replayed: ") + want), std::string::npos);
}

TEST(Cycle, AHandEditedEntryRestartsTheRolloutFromTheFile) {
    TempDir d;
    Config cfg = config(d);
    auto current = daemon::parse_limits(kLimits, "limits.yaml");  // api: 200r/s, no mode
    BucketState s;
    s.bucket = "api";
    s.stage = Stage::Shadow;  // the rollout thinks api soaks at 150r/s in shadow
    s.limit_mrps = 150000;
    s.since_s = kNow - 10 * kMin;
    auto h = history();
    Plan p = plan_cycle(cfg, h, current.limits, {{"api", s}}, kNow, false);
    EXPECT_FALSE(row(p, "api").before);
    EXPECT_EQ(row(p, "api").step.action, Action::Shadow);  // 200 -> 120: lowered, from the file
    EXPECT_EQ(row(p, "api").step.next->previous_mrps, 200000u);
    EXPECT_TRUE(row(p, "api").step.next->beside);  // the file enforces 200 in deny
    EXPECT_EQ(p.after.buckets.at("api").limit_mrps, 200000u);
    EXPECT_EQ(p.after.buckets.at("api").mode, Mode::Deny);
    EXPECT_EQ(p.after.buckets.at("api").candidate_mrps, 120000u);
    ASSERT_EQ(p.notes.size(), 1u);
    EXPECT_EQ(p.notes[0],
              "api: the limits file no longer says 150r/s shadow (shadow): changed by hand, the "
              "rollout starts "
              "again from the file");
    // The same state with a file that agrees: still soaking.
    current.limits.buckets["api"].limit_mrps = 150000;
    current.limits.buckets["api"].mode = Mode::Shadow;
    p = plan_cycle(cfg, h, current.limits, {{"api", s}}, kNow, false);
    EXPECT_EQ(row(p, "api").step.action, Action::Soaking);
    EXPECT_TRUE(p.notes.empty());
}

TEST(Cycle, ASlicedCycleIsTheWholeCycleReadAFewBucketsAtATime) {
    TempDir d;
    Config cfg = config(d);
    auto current = daemon::parse_limits(kLimits, "limits.yaml");
    ASSERT_TRUE(current.ok) << current.error;
    std::vector<Series> h = history();
    h.push_back(make_series(zone("edge", "eu", "a"), kSince, kNow, flat(40)));
    h.push_back(make_series(zone("edge", "eu", "b"), kSince, kNow, flat(60)));
    h.push_back(make_series(global("gone"), kSince - kWeek, kSince, flat(9)));  // before the window
    // A bucket with a rollout state but no history any more: planned all the same.
    BucketState s;
    s.bucket = "retired";
    s.stage = Stage::Shadow;
    s.limit_mrps = 50000;
    s.since_s = kNow - kDay;
    current.limits.buckets["retired"].limit_mrps = 50000;
    current.limits.buckets["retired"].mode = Mode::Shadow;
    const std::map<std::string, BucketState> states = {{"retired", s}};

    // The whole window at once, as cycles read it before slices.
    const std::vector<Series> window = MemoryHistory(h).read(kSince, kNow);
    const Plan whole = plan_cycle(cfg, window, current.limits, states, kNow, false);
    ASSERT_EQ(whole.rows.size(), 6u);  // api edge partner-acme retired search young; bots skipped
    for (std::size_t slice : {1, 2, 3, 100}) {
        MemoryHistory source(h);
        Plan p = plan_cycle(cfg, source, current.limits, states, kNow, false, slice);
        EXPECT_EQ(render_plan(p), render_plan(whole)) << "slice " << slice;
        EXPECT_TRUE(p.after.buckets == whole.after.buckets);
        // Every name once, in order, no read larger than a slice, and only what it needs:
        // "gone" has nothing in the window.
        std::vector<std::string> names;
        for (const auto& r : source.reads) {
            EXPECT_LE(r.size(), slice);
            EXPECT_FALSE(r.empty());
            names.insert(names.end(), r.begin(), r.end());
        }
        EXPECT_EQ(names, (std::vector<std::string>{"api", "bots", "edge", "partner-acme", "retired",
                                                   "search", "young"}))
            << "slice " << slice;
    }
}

TEST(Cycle, CurrentLimitIsTheFilesElseTheLastRecorded) {
    Series s = make_series(global("api"), kSince, kNow, flat(100));
    s.samples.back().limit_rps = 250;
    s.samples.back().mode = Mode::Shadow;
    control::Limits file;
    Current c = current_limit("api", {&s}, file);
    EXPECT_EQ(c.limit_mrps, 250000u);
    EXPECT_EQ(c.mode, Mode::Shadow);
    file.buckets["api"].limit_mrps = 400000;
    c = current_limit("api", {&s}, file);
    EXPECT_EQ(c.limit_mrps, 400000u);
    EXPECT_EQ(c.mode, Mode::Shadow);
}

TEST(Apply, VersionsSoakPromotionAndRollback) {
    TempDir d;
    Config cfg = config(d);
    std::string limits = d.file("limits.yaml", kLimits);
    VersionStore store(cfg.store, /*create=*/true);
    auto h = history();

    // Cycle 1: api goes to shadow at 120, search is raised, partner-acme starts in shadow.
    Plan p1 = plan_cycle(cfg, h, read_limits(limits), store.states(), kNow, false);
    Applied a1 = apply_plan(cfg, store, p1, "alice", "first cycle");
    EXPECT_EQ(a1.version, 2);  // 1 is the limits file as found
    auto versions = store.list();
    ASSERT_EQ(versions.size(), 2u);
    EXPECT_EQ(versions[0].reason, "limits file as found before grl-rlc's first version");
    EXPECT_EQ(versions[0].content, kLimits);
    EXPECT_EQ(versions[1].author, "alice");
    EXPECT_EQ(versions[1].reason, "first cycle");
    EXPECT_EQ(versions[1].created_s, kNow);
    auto written = daemon::load_limits_file(limits);
    ASSERT_TRUE(written.ok) << written.error;
    EXPECT_EQ(versions[1].digest, control::digest(written.limits));
    EXPECT_EQ(written.limits.version, "2");  // what the controllers will report
    // api was enforcing 200 r/s: it keeps enforcing it, 120 soaks as its candidate.
    EXPECT_EQ(written.limits.buckets.at("api").limit_mrps, 200000u);
    EXPECT_EQ(*written.limits.buckets.at("api").mode, Mode::Deny);
    EXPECT_EQ(written.limits.buckets.at("api").candidate_mrps, 120000u);
    EXPECT_TRUE(store.states().at("api").beside);
    EXPECT_TRUE(written.limits.buckets.at("bots").has_match);
    EXPECT_EQ(store.states().at("api").stage, Stage::Shadow);
    EXPECT_EQ(store.counters().at("shadow"), 2);
    EXPECT_EQ(store.counters().at("raise"), 1);

    // An hour later the recorder saw api enforcing 200 r/s with its candidate 120 r/s
    // dropping nothing, and partner-acme (50 r/s quota) in shadow dropping 10 of 60 r/s.
    auto later = h;
    Series api_shadow = make_series(global("api"), kNow, kNow + kHour, flat(100));
    for (auto& s : api_shadow.samples)
        s.mode = Mode::Deny, s.limit_rps = 200, s.candidate_limit_rps = 120;
    later[0].samples.insert(later[0].samples.end(), api_shadow.samples.begin(),
                            api_shadow.samples.end());
    Series partner = make_series(global("partner-acme"), kNow, kNow + kHour, flat(60));
    for (auto& s : partner.samples)
        s.mode = Mode::Shadow, s.limit_rps = 50, s.shadow_dropped = {10, 10};
    later.push_back(partner);
    Plan p2 = plan_cycle(cfg, later, read_limits(limits), store.states(), kNow + kHour, false);
    EXPECT_EQ(row(p2, "api").step.action, Action::Promote);
    EXPECT_EQ(row(p2, "partner-acme").step.action, Action::Hold);
    Applied a2 = apply_plan(cfg, store, p2, "rlc", "cycle 2");
    EXPECT_EQ(a2.version, 3);
    EXPECT_EQ(*read_limits(limits).buckets.at("api").mode, Mode::Deny);
    EXPECT_EQ(read_limits(limits).buckets.at("api").limit_mrps, 120000u);
    EXPECT_FALSE(read_limits(limits).buckets.at("api").candidate_mrps);  // promoted: removed
    EXPECT_EQ(*read_limits(limits).buckets.at("partner-acme").mode, Mode::Shadow);
    EXPECT_EQ(store.states().at("partner-acme").stage, Stage::Held);
    EXPECT_EQ(store.counters().at("promote"), 1);
    EXPECT_EQ(store.counters().at("hold"), 1);
    // search was raised again (300 -> 360, within the step guard now).
    EXPECT_EQ(store.list()[2].diff,
              "api: limit 200r/s -> 120r/s, candidate 120r/s -> (none)\n"
              "search: limit 300r/s -> 360r/s\n");
    EXPECT_EQ(store.counters().at("raise"), 2);

    // Rollback to the file as found: written again as version 4, rollout forgotten.
    Applied r = rollback(limits, "", {}, store, 1, "bob", kNow + 2 * kHour);
    EXPECT_EQ(r.version, 4);
    auto back = daemon::load_limits_file(limits);
    ASSERT_TRUE(back.ok) << back.error;
    EXPECT_EQ(back.limits.version, "4");  // version 1's limits, under the new version's label
    EXPECT_EQ(control::digest(back.limits), store.get(1)->digest);
    EXPECT_EQ(store.get(4)->content, slurp(limits));
    EXPECT_EQ(slurp(limits), "version: \"4\"\n" + std::string(kLimits));  // the text, relabelled
    EXPECT_EQ(store.get(4)->reason, "rollback to 1");
    EXPECT_EQ(store.get(4)->digest, store.get(1)->digest);
    EXPECT_TRUE(store.states().empty());
    EXPECT_EQ(store.counters().at("rollback"), 1);
    EXPECT_THROW(rollback(limits, "", {}, store, 99, "bob", kNow), ConfigError);
}

TEST(Apply, RelabelKeepsCommentsAndLayout) {
    EXPECT_EQ(
        relabel("# by hand\n# do not edit\nbuckets:\n  api: # hot\n    limit: 5r/s\n", "7"),
        "# by hand\n# do not edit\nversion: \"7\"\nbuckets:\n  api: # hot\n    limit: 5r/s\n");
    EXPECT_EQ(relabel("version: 3 # old\nbuckets: {}\n", "9"), "version: \"9\"\nbuckets: {}\n");
    EXPECT_EQ(relabel("buckets:\n  version:\n    limit: 1r/s\n", "2"),
              "version: \"2\"\nbuckets:\n  version:\n    limit: 1r/s\n")
        << "a bucket named version is not the label";
    EXPECT_EQ(relabel("# only a comment", "1"), "# only a comment\nversion: \"1\"\n");
}

TEST(Apply, AVersionTheControllersWouldRejectIsNotApplied) {
    TempDir d;
    Config cfg = config(d);
    std::string limits = d.file("limits.yaml", kLimits);
    VersionStore store(cfg.store, /*create=*/true);
    // A bucket name the limits file cannot hold (a corrupt history row).
    std::vector<Series> h = {make_series(global("bad name"), kSince, kNow, flat(100))};
    Plan p = plan_cycle(cfg, h, read_limits(limits), {}, kNow, false);
    try {
        apply_plan(cfg, store, p, "alice", "x");
        FAIL() << "applied a file the controllers reject";
    } catch (const ConfigError& e) {
        EXPECT_NE(
            std::string(e.what()).find("would be rejected by the controllers, nothing applied"),
            std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("invalid bucket name \"bad name\""), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(slurp(limits), kLimits);
    EXPECT_TRUE(store.list().empty());
    EXPECT_TRUE(store.states().empty());
}

TEST(Apply, AFileChangedSinceThePlanIsNotOverwritten) {
    TempDir d;
    Config cfg = config(d);
    std::string limits = d.file("limits.yaml", kLimits);
    VersionStore store(cfg.store, /*create=*/true);
    auto h = history();
    Plan p = plan_cycle(cfg, h, read_limits(limits), {}, kNow, false);
    std::string edited = std::string(kLimits) + "  extra:\n    limit: 5r/s\n";
    d.file("limits.yaml", edited);  // an operator's edit between plan and apply
    try {
        apply_plan(cfg, store, p, "alice", "x");
        FAIL() << "overwrote an edited file";
    } catch (const ConfigError& e) {
        EXPECT_EQ(
            std::string(e.what()),
            limits + ": changed since this cycle read it, nothing applied: run the cycle again");
    }
    EXPECT_EQ(slurp(limits), edited);
    EXPECT_EQ(store.list().size(), 1u);  // the baseline (the file as found) only
    EXPECT_TRUE(store.states().empty());
    EXPECT_TRUE(store.counters().empty());
}

TEST(Apply, AFailedWriteRecordsNothing) {
    TempDir d;
    Config cfg = config(d);
    cfg.limits_file = d.path + "/no-such-dir/limits.yaml";
    VersionStore store(cfg.store, /*create=*/true);
    auto h = history();
    Plan p = plan_cycle(cfg, h, {}, {}, kNow, false);
    EXPECT_THROW(apply_plan(cfg, store, p, "alice", "x"), std::runtime_error);
    EXPECT_TRUE(store.list().empty());
    EXPECT_TRUE(store.states().empty());
    EXPECT_TRUE(store.counters().empty());
}

TEST(Versions, ACandidateBesideIsKeptAndAnOlderStoreGetsTheColumn) {
    TempDir d;
    std::string db = d.path + "/v.db";
    {
        // rlc_rollout as grl-rlc created it before candidates: no `beside` column.
        sqlite3* raw = nullptr;
        ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(raw,
                               "CREATE TABLE rlc_rollout (bucket TEXT PRIMARY KEY, stage TEXT NOT "
                               "NULL, limit_mrps INTEGER NOT NULL, since_s INTEGER NOT NULL, "
                               "previous_mrps INTEGER, fraction REAL NOT NULL, updated_s INTEGER "
                               "NOT NULL);"
                               "INSERT INTO rlc_rollout VALUES ('old', 'shadow', 5000, 42, NULL, "
                               "-1, 42);",
                               nullptr, nullptr, nullptr),
                  SQLITE_OK);
        sqlite3_close(raw);
    }
    {
        VersionStore s(db);
        EXPECT_FALSE(s.states().at("old").beside);  // a shadow-mode rollout, as it was
        Commit c;
        BucketState b;
        b.bucket = "api";
        b.stage = Stage::Held;
        b.limit_mrps = 120000;
        b.previous_mrps = 200000;
        b.beside = true;
        b.since_s = 7;
        c.states.push_back(b);
        s.commit(c, 100, nullptr);
    }
    VersionStore s(db);
    const BucketState st = s.states().at("api");
    EXPECT_TRUE(st.beside);
    EXPECT_EQ(st.mode(), Mode::Deny);
    EXPECT_EQ(st.published_mrps(), 200000u);
    EXPECT_EQ(st.limit_mrps, 120000u);
}

TEST(Versions, ReopenedStoreResumes) {
    TempDir d;
    std::string db = d.path + "/v.db";
    {
        VersionStore s(db, /*create=*/true);
        Commit c;
        c.version = Version{0, 0, "a", "r", "0123", "diff", "buckets: {}\n"};
        BucketState b;
        b.bucket = "api";
        b.stage = Stage::Shadow;
        b.limit_mrps = 5000;
        b.since_s = 42;
        c.states.push_back(b);
        EXPECT_EQ(s.commit(c, 100, nullptr), 1);
    }
    VersionStore s(db);
    ASSERT_EQ(s.list().size(), 1u);
    EXPECT_EQ(s.latest()->created_s, 100);
    auto st = s.states().at("api");
    EXPECT_EQ(st.stage, Stage::Shadow);
    EXPECT_EQ(st.limit_mrps, 5000u);
    EXPECT_EQ(st.since_s, 42);
    EXPECT_FALSE(st.previous_mrps);
    EXPECT_FALSE(st.beside);
    EXPECT_THROW(VersionStore("/nonexistent-dir/v.db", true), VersionsError);
    // Without create, a missing file is named as such (and not created).
    try {
        VersionStore missing(d.path + "/typo.db");
        FAIL() << "opened a missing store";
    } catch (const VersionsError& e) {
        EXPECT_EQ(std::string(e.what()),
                  d.path + "/typo.db: no such store (grl-rlc record, synth or import create it)");
    }
    EXPECT_NE(access((d.path + "/typo.db").c_str(), F_OK), 0);
}

}  // namespace
