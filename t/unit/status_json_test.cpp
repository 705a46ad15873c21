// Unit tests of controller/status_json.h: the bucket-status and zone-status JSON that
// `grlctl --json` and the dashboard's /api/state both write.
#include "status_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dashboard.h"

namespace grl::controller {
namespace {

using nlohmann::json;

// Through the text, as a client reads it.
json bucket_json(const wire::BucketStatus& b) {
    return json::parse(daemon::json_text(bucket_status_json(b)));
}

json zone_json(const wire::ZoneStatus& z) {
    return json::parse(daemon::json_text(zone_status_json(z)));
}

wire::BucketStatus runtime_bucket() {
    wire::BucketStatus b;
    b.name = "emergency";
    b.scope = Scope::Region;
    b.region = "eu";
    b.offered_mrps = 12500;
    b.admitted_mrps = 5000;
    b.shadow_dropped_mrps = 0;
    b.limit_mrps = 5000;
    b.ratio_ppm = 600000;
    b.mode = Mode::Deny;
    b.limit_source = "override";
    b.mode_source = "conf";
    b.expires_ms = 1'800'000'000'000;
    b.hosts = 2;
    b.host_names = {"h1", "h2"};
    wire::DefinitionCount d;
    d.def.scope = Scope::Region;
    d.def.limit_mrps = 5000;
    d.hosts = 2;
    b.definitions = {d};
    b.has_match = true;
    b.match.caller = "batch";
    b.match.procedure = "/api/emergency";
    b.match.procedure_kind = MatchKind::Prefix;
    b.match.scope = Scope::Region;
    return b;
}

TEST(StatusJson, ABucketInstanceWithEveryField) {
    json j = bucket_json(runtime_bucket());
    EXPECT_EQ(j["name"], "emergency");
    EXPECT_EQ(j["scope"], "region");
    EXPECT_EQ(j["region"], "eu");
    EXPECT_EQ(j["zone"], "");
    EXPECT_DOUBLE_EQ(j["offered_rps"].get<double>(), 12.5);
    EXPECT_DOUBLE_EQ(j["admitted_rps"].get<double>(), 5.0);
    EXPECT_DOUBLE_EQ(j["limit_rps"].get<double>(), 5.0);
    EXPECT_DOUBLE_EQ(j["ratio"].get<double>(), 0.6);
    EXPECT_FALSE(j.contains("candidate_limit_rps"));
    EXPECT_EQ(j["mode"], "deny");
    EXPECT_EQ(j["limit_source"], "override");
    EXPECT_EQ(j["mode_source"], "conf");
    EXPECT_EQ(j["expires_ms"], 1'800'000'000'000);
    EXPECT_EQ(j["hosts"], 2);
    EXPECT_EQ(j["host_names"], json::array({"h1", "h2"}));
    ASSERT_EQ(j["definitions"].size(), 1u);
    EXPECT_EQ(j["definitions"][0]["scope"], "region");
    EXPECT_DOUBLE_EQ(j["definitions"][0]["limit_rps"].get<double>(), 5.0);
    EXPECT_EQ(j["definitions"][0]["hosts"], 2);
    EXPECT_EQ(j["runtime"], true);
    EXPECT_EQ(j["match"]["caller"], "batch");
    EXPECT_EQ(j["match"]["caller_kind"], "exact");
    EXPECT_EQ(j["match"]["procedure"], "/api/emergency");
    EXPECT_EQ(j["match"]["procedure_kind"], "prefix");
    EXPECT_EQ(j["match"]["scope"], "region");
    EXPECT_EQ(j["keyed"], false);
    EXPECT_FALSE(j.contains("keys_limited"));
}

TEST(StatusJson, CandidateAndKeyedFieldsOnlyWhenThere) {
    wire::BucketStatus b;
    b.name = "api";
    b.candidate_limit_mrps = 450000;
    b.candidate_would_drop_mrps = 1500;
    b.keyed = true;
    b.keys_limited = 3;
    json j = bucket_json(b);
    EXPECT_DOUBLE_EQ(j["candidate_limit_rps"].get<double>(), 450.0);
    EXPECT_DOUBLE_EQ(j["candidate_would_drop_rps"].get<double>(), 1.5);
    EXPECT_EQ(j["keyed"], true);
    EXPECT_EQ(j["keys_limited"], 3);
    EXPECT_EQ(j["runtime"], false);
    EXPECT_FALSE(j.contains("match"));
    EXPECT_EQ(j["host_names"], json::array());
}

TEST(StatusJson, AZone) {
    wire::ZoneStatus z;
    z.zone = "z\"1";
    z.source = "col-1";
    z.hosts = 3;
    z.stale_hosts = 1;
    z.age_ms = 120;
    z.fresh = true;
    EXPECT_EQ(zone_json(z), json({{"zone", "z\"1"},
                                  {"collector", "col-1"},
                                  {"hosts", 3},
                                  {"stale_hosts", 1},
                                  {"age_ms", 120},
                                  {"fresh", true}}));
    z.usage_v = 1;
    EXPECT_EQ(zone_json(z)["usage_v"], 1);
}

// The dashboard writes its buckets and zones with the same writer as grlctl --json.
TEST(StatusJson, TheDashboardStateHoldsTheSameObjects) {
    DashboardSnapshot s;
    s.controller = "ctl-1";
    s.buckets = {runtime_bucket()};
    wire::ZoneStatus z;
    z.zone = "a";
    s.zones = {z};
    control::History h{control::History::Options{}};
    json state = json::parse(render_state(s, h, history_points(s)));
    EXPECT_EQ(state["buckets"][0], bucket_json(s.buckets[0]));
    EXPECT_EQ(state["zones"][0], zone_json(z));
}

}  // namespace
}  // namespace grl::controller
