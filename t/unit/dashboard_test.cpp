// Unit tests of the controller's dashboard (controller/dashboard.h): the JSON it renders, its
// routes, and the hand-over from the tick to its thread.
#include "dashboard.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "grl/daemon/loop.h"

namespace grl::controller {
namespace {

using nlohmann::json;

DashboardSnapshot snapshot(std::uint64_t mono_ms, std::uint64_t offered_mrps) {
    DashboardSnapshot s;
    s.mono_ms = mono_ms;
    s.wall_ms = 1'800'000'000'000 + mono_ms;
    s.controller = "ctl-1";
    s.region = "eu";
    s.interval_ms = 250;
    s.ttl_ms = 750;
    wire::BucketStatus api;
    api.name = "api";
    api.offered_mrps = offered_mrps;
    api.admitted_mrps = 300000;
    api.limit_mrps = 300000;
    api.ratio_ppm = 333333;
    api.limit_source = "conf";
    api.mode_source = "conf";
    api.hosts = 4;
    wire::BucketStatus zone;
    zone.name = "api-zone";
    zone.scope = Scope::Zone;
    zone.region = "eu";
    zone.zone = "z\"1";  // quoted in JSON
    zone.offered_mrps = 200000;
    zone.limit_mrps = 150000;
    zone.shadow_dropped_mrps = 50000;
    zone.mode = Mode::Shadow;
    s.buckets = {api, zone};
    wire::ZoneStatus z;
    z.zone = "z\"1";
    z.source = "col-1";
    z.hosts = 2;
    z.age_ms = 120;
    z.fresh = true;
    s.zones = {z};
    s.limits.file = "/etc/grl/limits.yaml";
    s.limits.ok = false;
    s.limits.error = "line 3: invalid rate";
    s.limits.version = "v7";
    s.hosts_fresh = 4;
    s.instruction_age_ms = 40;
    wire::Override o;
    o.name = "emergency";
    o.limit_mrps = 5000;
    o.has_match = true;
    o.match.procedure = "/api/emergency";
    o.match.procedure_kind = MatchKind::Prefix;
    o.origin = "ctl-1";
    s.overrides = {o};
    return s;
}

TEST(Dashboard, AKeyedBucketShowsItsLimitedKeyCount) {
    control::History h{control::History::Options{}};
    DashboardSnapshot s = snapshot(1000, 450000);
    s.buckets[0].keyed = true;
    s.buckets[0].keys_limited = 3;
    auto points = history_points(s);
    json j = json::parse(render_state(s, h, points));
    EXPECT_EQ(j["buckets"][0]["keyed"], true);
    EXPECT_EQ(j["buckets"][0]["keys_limited"], 3);
    EXPECT_EQ(j["buckets"][1]["keyed"], false);
    EXPECT_FALSE(j["buckets"][1].contains("keys_limited"));
}

TEST(Dashboard, StateCarriesEveryInstanceLoopHealthOverridesAndTheNewestPoint) {
    control::History h{control::History::Options{}};
    DashboardSnapshot s = snapshot(1000, 450000);
    auto points = history_points(s);
    ASSERT_TRUE(h.record(s.mono_ms, s.wall_ms, points));
    json j = json::parse(render_state(s, h, points));
    EXPECT_EQ(j["controller"], "ctl-1");
    ASSERT_EQ(j["buckets"].size(), 2u);
    EXPECT_EQ(j["buckets"][0]["name"], "api");
    EXPECT_DOUBLE_EQ(j["buckets"][0]["offered_rps"].get<double>(), 450.0);
    EXPECT_DOUBLE_EQ(j["buckets"][0]["limit_rps"].get<double>(), 300.0);
    EXPECT_NEAR(j["buckets"][0]["ratio"].get<double>(), 0.333333, 1e-6);
    EXPECT_EQ(j["buckets"][1]["zone"], "z\"1");
    EXPECT_EQ(j["buckets"][1]["mode"], "shadow");
    EXPECT_DOUBLE_EQ(j["buckets"][1]["shadow_dropped_rps"].get<double>(), 50.0);
    EXPECT_EQ(j["zones"][0]["collector"], "col-1");
    EXPECT_EQ(j["limits"]["ok"], false);
    EXPECT_EQ(j["limits"]["error"], "line 3: invalid rate");
    EXPECT_EQ(j["instruction_age_ms"], 40);
    EXPECT_EQ(j["overrides"][0]["bucket"], "emergency");
    EXPECT_EQ(j["overrides"][0]["match"], "procedure_prefix=/api/emergency");
    EXPECT_TRUE(j["overrides"][0]["mode"].is_null());
    EXPECT_EQ(j["history"]["recorded"], 1);
    EXPECT_EQ(j["history"]["capacity"], 900);
    ASSERT_EQ(j["history"]["last"].size(), 2u);
    EXPECT_DOUBLE_EQ(j["history"]["last"][1]["shadow_dropped"].get<double>(), 50.0);

    s.instruction_age_ms.reset();
    EXPECT_TRUE(json::parse(render_state(s, h, points))["instruction_age_ms"].is_null());
}

TEST(Dashboard, HistoryHasOneArrayPerFieldAndNullWhereAbsent) {
    control::History::Options o;
    o.step_ms = 1000;
    control::History h(o);
    DashboardSnapshot s = snapshot(1000, 450000);
    h.record(1000, 5000, history_points(s));
    s.buckets.pop_back();  // the zone instance left
    s.buckets[0].offered_mrps = 460500;
    h.record(2000, 6000, history_points(s));
    json j = json::parse(render_history(h));
    EXPECT_EQ(j["recorded"], 2);
    EXPECT_EQ(j["times"], json::array({5000, 6000}));
    ASSERT_EQ(j["series"].size(), 2u);
    EXPECT_EQ(j["series"][0]["bucket"], "api");
    EXPECT_EQ(j["series"][0]["offered"], json::array({450, 460.5}));
    EXPECT_EQ(j["series"][0]["limit"], json::array({300, 300}));
    EXPECT_EQ(j["series"][1]["zone"], "z\"1");
    EXPECT_EQ(j["series"][1]["shadow_dropped"][0], 50);
    EXPECT_TRUE(j["series"][1]["shadow_dropped"][1].is_null());
}

daemon::RequestHead get(const std::string& path) {
    daemon::RequestHead h;
    h.complete = true;
    h.method = "GET";
    h.path = path;
    return h;
}

// Polls a route until it answers 200 (the dashboard's thread works on its own time).
daemon::HttpResponse wait_ok(Dashboard& d, const std::string& path) {
    for (int i = 0; i < 400; ++i) {
        auto r = d.route(get(path));
        if (r && r->status == 200) return *r;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << path << " never answered 200";
    return {};
}

TEST(Dashboard, RoutesServeThePageAndTheDocumentsTheThreadRendered) {
    Dashboard d{control::History::Options{}};
    auto page = d.route(get("/"));
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_EQ(page->type, "text/html; charset=utf-8");
    EXPECT_NE(page->body->find("/dashboard.js"), std::string::npos);
    auto js = d.route(get("/dashboard.js"));
    ASSERT_TRUE(js);
    EXPECT_NE(js->body->find("/api/state"), std::string::npos);
    EXPECT_FALSE(d.route(get("/nothing")));

    // Nothing published yet: 503, retry.
    auto early = d.route(get("/api/state"));
    ASSERT_TRUE(early);
    EXPECT_EQ(early->status, 503);
    EXPECT_NE(early->headers.find("Retry-After: 1"), std::string::npos);

    d.publish(snapshot(1000, 450000));
    daemon::HttpResponse state = wait_ok(d, "/api/state");
    EXPECT_EQ(state.type, "application/json");
    EXPECT_EQ(json::parse(*state.body)["buckets"][0]["name"], "api");

    // The history is rendered on demand (the first request wakes the thread), then with every
    // new point while the page watches.
    daemon::HttpResponse hist = wait_ok(d, "/api/history");
    EXPECT_EQ(json::parse(*hist.body)["recorded"], 1);
    d.publish(snapshot(2000, 470000));
    for (int i = 0; i < 400; ++i) {
        auto r = d.route(get("/api/history"));
        if (r && r->status == 200 && json::parse(*r->body)["recorded"] == 2) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "the second point never reached /api/history";
}

// While nobody reads /api/state, the snapshots the history takes are not rendered (at 10,000
// instances a render costs the dashboard's thread more than a tick): the first read after a
// quiet spell answers 503 and wakes the thread, which renders the newest snapshot at once.
TEST(Dashboard, TheStateIsRenderedOnlyForAReader) {
    Dashboard d{control::History::Options{}};
    // Never read: neither snapshot is watched. The history's render shows that the thread
    // has taken the newest (the first may have been replaced before it was taken).
    d.publish(snapshot(1000, 450000));
    d.publish(snapshot(2000, 470000));
    bool taken = false;
    for (int i = 0; i < 400 && !taken; ++i) {
        const json hist = json::parse(*wait_ok(d, "/api/history").body);
        taken = !hist["times"].empty() && hist["times"].back() == 1'800'000'002'000;
        if (!taken) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(taken) << "the dashboard's thread never took the second snapshot";
    auto first = d.route(get("/api/state"));
    ASSERT_TRUE(first);
    EXPECT_EQ(first->status, 503);
    EXPECT_NE(first->headers.find("Retry-After: 1"), std::string::npos);
    daemon::HttpResponse state = wait_ok(d, "/api/state");  // rendered without another tick
    EXPECT_EQ(json::parse(*state.body)["buckets"][0]["offered_rps"], 470);
    // Read now: the next snapshot is rendered as it comes, and a newer one replaces it.
    d.publish(snapshot(3000, 490000));
    for (int i = 0; i < 400; ++i) {
        auto r = d.route(get("/api/state"));
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200);  // never 503 while read: the old one until the new one
        if (json::parse(*r->body)["buckets"][0]["offered_rps"] == 490) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "the snapshot published while /api/state was read never reached it";
}

// The tick copies a snapshot only when it is used: the history's next point (one per step,
// 90% of a step after the last, as History::record() takes them), or every tick while the
// page reads /api/state. At 10,000 instances the copy and its rendering each tick cost a tenth
// of a core that nobody looked at.
TEST(Dashboard, WantsASnapshotForTheNextHistoryPointOrWhileTheStateIsRead) {
    control::History::Options o;
    o.step_ms = 1000;
    Dashboard d{o};
    const std::uint64_t t0 = daemon::mono_ms() + 1'000'000;  // past any read of /api/state
    EXPECT_TRUE(d.wants_snapshot(t0));                       // the first
    d.publish(snapshot(t0, 450000));
    EXPECT_EQ(d.snapshots(), 1u);
    EXPECT_FALSE(d.wants_snapshot(t0 + 250));  // ticks of 250 ms: the next point is not due
    EXPECT_FALSE(d.wants_snapshot(t0 + 500));
    EXPECT_FALSE(d.wants_snapshot(t0 + 899));
    EXPECT_TRUE(d.wants_snapshot(t0 + 900));  // a tick a little early still gives the point
    d.publish(snapshot(t0 + 1000, 450000));
    EXPECT_FALSE(d.wants_snapshot(t0 + 1250));

    // A read of /api/state: every tick's snapshot for kStateWatchedMs, then one per step again.
    // `read` is taken before the read stamps its own clock, so that read + kStateWatchedMs - 1
    // is within the watched window even when the clock's millisecond turns in between.
    const std::uint64_t read = daemon::mono_ms();
    d.route(get("/api/state"));
    d.publish(snapshot(read, 450000));
    EXPECT_TRUE(d.wants_snapshot(read + 250));
    EXPECT_TRUE(d.wants_snapshot(read + Dashboard::kStateWatchedMs - 1));
    d.publish(snapshot(read + Dashboard::kStateWatchedMs - 1, 450000));
    EXPECT_FALSE(d.wants_snapshot(read + Dashboard::kStateWatchedMs + 250));
    EXPECT_EQ(d.snapshots(), 4u);
}

// When the page stops reading /api/state, the next point is due a step after the last snapshot
// the history took as a point, not after the last snapshot: those of the watched ticks between
// points are not points. Ticks of 250 ms (4 a step): points at +240, +1240, ..., +9240; the
// last watched tick is +9990, and the point due at +10240 was skipped (the next came at
// +10990, a step and three quarters after the one before).
TEST(Dashboard, AfterTheStateIsReadTheNextPointComesAStepAfterTheLastPoint) {
    control::History::Options o;
    o.step_ms = 1000;
    Dashboard d{o};
    const std::uint64_t before = daemon::mono_ms();
    d.route(get("/api/state"));  // watched from some time in [before, after]
    const std::uint64_t after = daemon::mono_ms();
    ASSERT_LT(after - before, 240u) << "the test thread stalled: the watch's end is unknown";
    std::uint64_t t = before + 240;
    for (; t < before + Dashboard::kStateWatchedMs; t += 250) {
        EXPECT_TRUE(d.wants_snapshot(t)) << t - before;  // every tick while watched
        d.publish(snapshot(t, 450000));
    }
    EXPECT_EQ(t, before + 10240);      // no longer watched (after + 10000 is earlier)
    EXPECT_TRUE(d.wants_snapshot(t));  // the point due a step after +9240
    d.publish(snapshot(t, 450000));
    EXPECT_FALSE(d.wants_snapshot(t + 250));
    EXPECT_FALSE(d.wants_snapshot(t + 750));
    EXPECT_TRUE(d.wants_snapshot(t + 1000));
}

}  // namespace
}  // namespace grl::controller
