// Unit tests of the controller's limits file (daemon/limits_file.h): what is accepted, and
// that every rejection names the file, the line and the field.
#include "grl/daemon/limits_file.h"

#include <gtest/gtest.h>

#include <string>

namespace grl::daemon {
namespace {

LimitsLoad parse(const std::string& text) {
    return parse_limits(text, "limits.yaml");
}

void expect_error(const std::string& text, const std::string& error) {
    LimitsLoad l = parse(text);
    EXPECT_FALSE(l.ok) << text;
    EXPECT_EQ(l.error, error) << text;
}

TEST(LimitsFile, OverridesAndRuntimeBuckets) {
    LimitsLoad l = parse(R"(# comments are fine
buckets:
  api:
    limit: 500r/s
  checkout:
    limit: 600r/m
    mode: shadow
  trial:
    mode: deny
  blocked:
    limit: 0
    caller: evil
  bots:
    caller_prefix: bot-
    procedure_regex: ^/search/
    scope: zone
    limit: 10r/s
)");
    ASSERT_TRUE(l.ok) << l.error;
    const auto& b = l.limits.buckets;
    ASSERT_EQ(b.size(), 5u);
    EXPECT_EQ(b.at("api").limit_mrps, 500000u);
    EXPECT_FALSE(b.at("api").mode.has_value());
    EXPECT_FALSE(b.at("api").has_match);
    EXPECT_EQ(b.at("checkout").limit_mrps, 10000u);
    EXPECT_EQ(b.at("checkout").mode, Mode::Shadow);
    EXPECT_FALSE(b.at("trial").limit_mrps.has_value());
    EXPECT_EQ(b.at("blocked").limit_mrps, 0u);
    EXPECT_TRUE(b.at("blocked").has_match);
    EXPECT_EQ(b.at("blocked").match.caller, "evil");
    EXPECT_EQ(b.at("blocked").match.caller_kind, MatchKind::Exact);
    EXPECT_TRUE(b.at("blocked").match.procedure.empty());
    EXPECT_EQ(b.at("blocked").match.scope, Scope::Global);
    const control::FileLimit& bots = b.at("bots");
    EXPECT_EQ(bots.match.caller_kind, MatchKind::Prefix);
    EXPECT_EQ(bots.match.procedure, "^/search/");
    EXPECT_EQ(bots.match.procedure_kind, MatchKind::Regex);
    EXPECT_EQ(bots.match.scope, Scope::Zone);
}

TEST(LimitsFile, CandidateBesideTheLimitOrAlone) {
    LimitsLoad l = parse(
        "buckets:\n  api:\n    limit: 500r/s\n    candidate: 400r/s\n"
        "  search:\n    candidate: 30r/m\n");
    ASSERT_TRUE(l.ok) << l.error;
    const auto& b = l.limits.buckets;
    EXPECT_EQ(b.at("api").limit_mrps, 500000u);
    EXPECT_EQ(b.at("api").candidate_mrps, 400000u);
    EXPECT_FALSE(b.at("search").limit_mrps.has_value());  // the limit stays nginx.conf's
    EXPECT_EQ(b.at("search").candidate_mrps, 500u);
    EXPECT_FALSE(parse("buckets:\n  api:\n    limit: 5r/s\n")
                     .limits.buckets.at("api")
                     .candidate_mrps.has_value());
    LimitsLoad bad = parse("buckets:\n  api:\n    limit: 5r/s\n    candidate: fast\n");
    EXPECT_FALSE(bad.ok);
    EXPECT_EQ(bad.error.rfind("limits.yaml:4: bucket \"api\": field \"candidate\": ", 0), 0u)
        << bad.error;
}

TEST(LimitsFile, EmptyFilesMeanNoOverrides) {
    EXPECT_TRUE(parse("").ok);
    EXPECT_TRUE(parse("# nothing yet\n").ok);
    EXPECT_TRUE(parse("buckets:\n").ok);
    EXPECT_TRUE(parse("buckets: {}\n").ok);
    EXPECT_TRUE(parse("").limits.buckets.empty());
}

TEST(LimitsFile, RejectionsNameLineAndField) {
    expect_error(
        "buckets:\n  api:\n    limit: 50/s\n",
        "limits.yaml:3: bucket \"api\": field \"limit\": invalid rate \"50/s\", expected e.g. "
        "100r/s, 600r/m or 0");
    expect_error(
        "buckets:\n  api:\n    limit: 5r/s\n    mode: block\n",
        "limits.yaml:4: bucket \"api\": field \"mode\": invalid mode \"block\", expected deny "
        "or shadow");
    expect_error(
        "buckets:\n  api:\n    limt: 5r/s\n",
        "limits.yaml:3: bucket \"api\": unknown field \"limt\" (expected limit, mode, candidate, "
        "scope, caller, caller_prefix, procedure, procedure_prefix, procedure_regex)");
    expect_error(
        "buckets:\n  \"bad name\":\n    limit: 5r/s\n",
        "limits.yaml:2: invalid bucket name \"bad name\", expected 1-63 of [A-Za-z0-9_.:-]");
    expect_error("bucket:\n  api:\n    limit: 5r/s\n",
                 "limits.yaml:1: unknown field \"bucket\" (expected buckets, version)");
    expect_error("buckets:\n  api: 5r/s\n",
                 "limits.yaml:2: bucket \"api\": expected a map of fields (limit, mode, ...)");
    expect_error(
        "buckets:\n  api: {}\n",
        "limits.yaml:2: bucket \"api\": needs field \"limit\", \"mode\" and/or \"candidate\"");
    expect_error("buckets:\n  api:\n    limit: [1, 2]\n",
                 "limits.yaml:3: bucket \"api\": field \"limit\": expected a single value");
    expect_error("buckets:\n  api:\n    limit: 5r/s\n    scope: zone\n",
                 "limits.yaml:4: bucket \"api\": field \"scope\": only a run-time bucket (with "
                 "caller/procedure) has a scope here; a configured bucket's scope comes from "
                 "nginx.conf");
    expect_error("buckets:\n  bots:\n    caller: x\n",
                 "limits.yaml:2: bucket \"bots\": a run-time bucket (caller/procedure) must have "
                 "field \"limit\"");
    expect_error("buckets:\n  bots:\n    limit: 1r/s\n    procedure_regex: \"(\"\n",
                 "limits.yaml:4: bucket \"bots\": field \"procedure_regex\": " + check_regex("("));
    expect_error(
        "buckets:\n  bots:\n    limit: 1r/s\n    caller: a\n    caller_prefix: b\n",
        "limits.yaml:5: bucket \"bots\": field \"caller_prefix\": more than one caller match");
    expect_error(
        "buckets:\n  bots:\n    limit: 1r/s\n    scope: planet\n    caller: a\n",
        "limits.yaml:4: bucket \"bots\": field \"scope\": invalid scope \"planet\", expected "
        "global, region or zone");
    expect_error("- a\n- b\n", "limits.yaml:1: expected a map with a \"buckets\" key");
    expect_error("buckets:\n  - api\n",
                 "limits.yaml:2: \"buckets\": expected a map of bucket names");
}

TEST(LimitsFile, AVersionLabel) {
    LimitsLoad l = parse("version: 42\nbuckets:\n  api:\n    limit: 5r/s\n");
    ASSERT_TRUE(l.ok) << l.error;
    EXPECT_EQ(l.limits.version, "42");
    l = parse("buckets: {}\nversion: \"2026-11-30.a\"\n");
    ASSERT_TRUE(l.ok) << l.error;
    EXPECT_EQ(l.limits.version, "2026-11-30.a");
    // A label, not a limit: two sets that differ only by it have one digest.
    LimitsLoad a = parse("version: 1\nbuckets:\n  api:\n    limit: 5r/s\n");
    LimitsLoad b = parse("buckets:\n  api:\n    limit: 5r/s\n");
    EXPECT_EQ(control::digest(a.limits), control::digest(b.limits));
    EXPECT_EQ(b.limits.version, "");
    expect_error("version: [1, 2]\nbuckets: {}\n",
                 "limits.yaml:1: field \"version\": expected a single value");
    expect_error("version: \"two words\"\n",
                 "limits.yaml:1: field \"version\": invalid version \"two words\", expected "
                 "printable ASCII without spaces");
    expect_error("version: " + std::string(65, '9') + "\n",
                 "limits.yaml:1: field \"version\": invalid version \"" + std::string(65, '9') +
                     "\", expected 1-64 characters");
    expect_error("versoin: 1\n",
                 "limits.yaml:1: unknown field \"versoin\" (expected buckets, version)");
}

TEST(LimitsFile, DuplicateBucketsRejected) {
    LimitsLoad l = parse("buckets:\n  api:\n    limit: 1r/s\n  api:\n    limit: 2r/s\n");
    EXPECT_FALSE(l.ok);
    EXPECT_NE(l.error.find("limits.yaml:"), std::string::npos) << l.error;
    EXPECT_NE(l.error.find("api"), std::string::npos) << l.error;
}

TEST(LimitsFile, SyntaxErrorsNameLineAndColumn) {
    LimitsLoad l = parse("buckets:\n  api:\n    limit: 5r/s\n   mode: [\n");
    EXPECT_FALSE(l.ok);
    EXPECT_EQ(l.error.rfind("limits.yaml:4:", 0), 0u) << l.error;
    EXPECT_NE(l.error.find("YAML syntax error"), std::string::npos) << l.error;
}

TEST(LimitsFile, TooManyRuntimeBuckets) {
    std::string text = "buckets:\n";
    for (int i = 0; i < 17; ++i) {
        text += "  rt" + std::to_string(i) + ":\n    limit: 1r/s\n    caller: c" +
                std::to_string(i) + "\n";
    }
    LimitsLoad l = parse(text);
    EXPECT_FALSE(l.ok);
    EXPECT_NE(l.error.find("more than 16 run-time buckets"), std::string::npos) << l.error;
}

TEST(LimitsFile, MissingFile) {
    LimitsLoad l = load_limits_file("/nonexistent/limits.yaml");
    EXPECT_FALSE(l.ok);
    EXPECT_EQ(l.error, "/nonexistent/limits.yaml: cannot read");
}

}  // namespace
}  // namespace grl::daemon
