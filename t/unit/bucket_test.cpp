#include "grl/bucket.h"

#include <gtest/gtest.h>

#include <atomic>

#include <vector>

namespace grl {
namespace {

BucketDef make(std::string name, MatchSpec caller, MatchSpec procedure) {
    BucketDef d;
    d.name = std::move(name);
    d.caller = std::move(caller);
    d.procedure = std::move(procedure);
    d.limit_mrps = 1000;
    return d;
}

std::vector<std::uint16_t> run(const Matcher& m, std::string_view caller, bool has_caller,
                               std::string_view procedure) {
    std::uint16_t out[kMaxMatchesPerRequest];
    RequestKey k{caller, has_caller, procedure};
    std::size_t n = m.match(k, out, kMaxMatchesPerRequest);
    return {out, out + n};
}

using V = std::vector<std::uint16_t>;

TEST(Matcher, CallerExactAndPrefix) {
    Matcher m;
    ASSERT_EQ(m.add(make("alice", {MatchKind::Exact, "alice"}, {})), "");
    ASSERT_EQ(m.add(make("team", {MatchKind::Prefix, "team-"}, {})), "");
    EXPECT_EQ(run(m, "alice", true, "/x"), V({0}));
    EXPECT_EQ(run(m, "alice2", true, "/x"), V({}));
    EXPECT_EQ(run(m, "team-a", true, "/x"), V({1}));
    EXPECT_EQ(run(m, "team", true, "/x"), V({}));
}

TEST(Matcher, ProcedureExactPrefixRegex) {
    Matcher m;
    ASSERT_EQ(m.add(make("exact", {}, {MatchKind::Exact, "/api/users"})), "");
    ASSERT_EQ(m.add(make("prefix", {}, {MatchKind::Prefix, "/api/"})), "");
    ASSERT_EQ(m.add(make("regex", {}, {MatchKind::Regex, "^(GET|HEAD) /v[0-9]+/"})), "");
    EXPECT_EQ(run(m, "", false, "/api/users"), V({0, 1}));
    EXPECT_EQ(run(m, "", false, "/api/users/7"), V({1}));
    EXPECT_EQ(run(m, "", false, "GET /v2/items"), V({2}));
    EXPECT_EQ(run(m, "", false, "POST /v2/items"), V({}));
    EXPECT_EQ(run(m, "", false, ""), V({}));
}

TEST(Matcher, LiteralsAroundTheEightByteHead) {
    Matcher m;
    ASSERT_EQ(m.add(make("short", {}, {MatchKind::Exact, "/a"})), "");
    ASSERT_EQ(m.add(make("eight", {}, {MatchKind::Exact, "/abcdefg"})), "");
    ASSERT_EQ(m.add(make("long", {}, {MatchKind::Exact, "/abcdefghijklmnop"})), "");
    ASSERT_EQ(m.add(make("longp", {}, {MatchKind::Prefix, "/abcdefghij"})), "");
    EXPECT_EQ(run(m, "", false, "/a"), V({0}));
    EXPECT_EQ(run(m, "", false, "/ab"), V({}));
    EXPECT_EQ(run(m, "", false, "/abcdefg"), V({1}));
    EXPECT_EQ(run(m, "", false, "/abcdefghijklmnop"), V({2, 3}));
    EXPECT_EQ(run(m, "", false, "/abcdefghijklmnoX"), V({3}));
    EXPECT_EQ(run(m, "", false, "/abcdefghiX"), V({}));  // differs after the head
    EXPECT_EQ(run(m, "", false, "/abcdefghij"), V({3}));
    EXPECT_EQ(run(m, "", false, "/abcdefghi"), V({}));  // shorter than the prefix
    std::string with_nul("/a\0b", 4);
    EXPECT_EQ(run(m, "", false, with_nul), V({}));
}

TEST(Matcher, CallerAndProcedureBothRequired) {
    Matcher m;
    ASSERT_EQ(m.add(make("both", {MatchKind::Exact, "bob"}, {MatchKind::Prefix, "/pay"})), "");
    EXPECT_EQ(run(m, "bob", true, "/pay/now"), V({0}));
    EXPECT_EQ(run(m, "bob", true, "/other"), V({}));
    EXPECT_EQ(run(m, "eve", true, "/pay/now"), V({}));
}

TEST(Matcher, MissingCallerNeverMatchesCallerBuckets) {
    Matcher m;
    ASSERT_EQ(m.add(make("any-caller-regex", {MatchKind::Regex, ".*"}, {})), "");
    ASSERT_EQ(m.add(make("empty-prefix", {MatchKind::Prefix, "x"}, {})), "");
    ASSERT_EQ(m.add(make("proc", {}, {MatchKind::Prefix, "/"})), "");
    EXPECT_EQ(run(m, "", false, "/a"), V({2}));
    EXPECT_EQ(run(m, "xyz", true, "/a"), V({0, 1, 2}));
}

TEST(Matcher, CatchAllBucketMatchesEverything) {
    Matcher m;
    ASSERT_EQ(m.add(make("all", {}, {})), "");
    EXPECT_EQ(run(m, "", false, ""), V({0}));
}

// A pathological pattern (exponential backtracking) stops at kRegexMatchLimit steps: no
// match, counted; the other buckets still match.
TEST(Matcher, RegexThatHitsTheMatchLimitIsNoMatchAndCounted) {
    Matcher m;
    ASSERT_EQ(m.add(make("evil", {}, {MatchKind::Regex, "^/(a+)+$"})), "");
    ASSERT_EQ(m.add(make("api", {}, {MatchKind::Prefix, "/a"})), "");
    std::atomic<std::uint64_t> hits{0};
    m.count_limit_hits_in(&hits);
    const std::string path = "/" + std::string(64, 'a') + "b";
    EXPECT_EQ(run(m, "", false, path), V({1}));
    EXPECT_EQ(hits.load(), 1u);
    EXPECT_EQ(run(m, "", false, "/aaaa"), V({0, 1}));  // within the limit: a match
    EXPECT_EQ(run(m, "", false, "/aaab"), V({1}));     // a plain no match is not a hit
    EXPECT_EQ(hits.load(), 1u);
}

TEST(Matcher, RejectsDuplicatesAndBadRegex) {
    Matcher m;
    ASSERT_EQ(m.add(make("a", {}, {})), "");
    EXPECT_EQ(m.add(make("a", {}, {})), "duplicate bucket \"a\"");
    std::string err = m.add(make("b", {}, {MatchKind::Regex, "(unclosed"}));
    EXPECT_NE(err.find("invalid regex \"(unclosed\""), std::string::npos) << err;
    EXPECT_EQ(m.size(), 1u);
}

TEST(Matcher, RespectsMaxMatches) {
    Matcher m;
    for (int i = 0; i < 20; ++i) ASSERT_EQ(m.add(make("b" + std::to_string(i), {}, {})), "");
    std::uint16_t out[4];
    RequestKey k{"", false, "/"};
    EXPECT_EQ(m.match(k, out, 4), 4u);
    EXPECT_EQ(out[3], 3);
}

TEST(Names, Validity) {
    EXPECT_TRUE(valid_name("api.v1:read-all_x"));
    EXPECT_FALSE(valid_name(""));
    EXPECT_FALSE(valid_name("a b"));
    EXPECT_FALSE(valid_name("a/b"));
    EXPECT_FALSE(valid_name(std::string(64, 'a')));
    EXPECT_TRUE(valid_name(std::string(63, 'a')));
}

}  // namespace
}  // namespace grl
