#include "grl/common/bucket.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
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
    ASSERT_EQ(m.add(make("all too", {}, {})), "");
    EXPECT_EQ(run(m, "c", true, "/x"), V({0, 1}));
    // One bucket with a matcher: the others still match everything, it only its requests.
    ASSERT_EQ(m.add(make("api", {}, {MatchKind::Prefix, "/a"})), "");
    ASSERT_EQ(m.add(make("also all", {}, {})), "");
    EXPECT_EQ(run(m, "c", true, "/x"), V({0, 1, 3}));
    EXPECT_EQ(run(m, "", false, "/a"), V({0, 1, 2, 3}));
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

// A value that has more prefix keys than match() keeps lists for (kMaxFoundLists) is matched
// by the linear scan: defined longest first, so that keeping the first lists found (the
// shortest prefixes, the last definitions) would answer other buckets.
TEST(Matcher, AValueWithMorePrefixesThanListsFallsBackToTheLinearScan) {
    Matcher m;
    const std::string path(24, 'a');
    for (int len = 20; len >= 1; --len) {
        ASSERT_EQ(
            m.add(make("p" + std::to_string(len), {},
                       {MatchKind::Prefix, "/" + path.substr(0, static_cast<std::size_t>(len))})),
            "");
    }
    for (int len = 20; len >= 1; --len) {
        ASSERT_EQ(
            m.add(make("c" + std::to_string(len),
                       {MatchKind::Prefix, path.substr(0, static_cast<std::size_t>(len))}, {})),
            "");
    }
    V want;
    for (std::uint16_t i = 0; i < kMaxMatchesPerRequest; ++i) want.push_back(i);
    EXPECT_EQ(run(m, "x", true, "/" + path), want);  // 20 procedure prefixes
    V callers;
    for (std::uint16_t i = 20; i < 20 + kMaxMatchesPerRequest; ++i) callers.push_back(i);
    EXPECT_EQ(run(m, path, true, "/x"), callers);  // 20 caller prefixes
    std::uint16_t a[kMaxMatchesPerRequest], b[kMaxMatchesPerRequest];
    const std::string short_path = "/" + path.substr(0, 10);
    const RequestKey both{path, true, short_path};  // 10 + 20 lists
    const std::size_t na = m.match(both, a, kMaxMatchesPerRequest);
    EXPECT_EQ(V(a, a + na), V(b, b + m.match_linear(both, b, kMaxMatchesPerRequest)));
    EXPECT_EQ(na, kMaxMatchesPerRequest);
}

// The indexed match() against the linear scan (the matcher before the index) and
// against the definition written out naively: random configurations of up to
// 600 buckets over a small alphabet, so that values share prefixes, exact values
// repeat and prefixes nest; requests derived from the buckets' own values.
bool naive(const MatchSpec& s, bool present, std::string_view v) {
    switch (s.kind) {
        case MatchKind::Any: return true;
        case MatchKind::Exact: return present && v == s.value;
        case MatchKind::Prefix: return present && v.substr(0, s.value.size()) == s.value;
        case MatchKind::Regex: return false;  // not generated for the naive reference
    }
    return false;
}

TEST(Matcher, IndexedMatchEqualsLinearScanOnRandomConfigurations) {
    std::mt19937_64 rng(20261201);
    auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
    auto word = [&](std::size_t max_len) {
        std::string w;
        const std::size_t len = pick(max_len + 1);
        for (std::size_t i = 0; i < len; ++i) w += "/ab9x"[pick(5)];
        return w;
    };
    const char* regexes[] = {"^/a", "b$", "^/[ab]+/9", "x"};
    std::size_t compared = 0, nonempty = 0, truncated = 0;
    for (int config = 0; config < 300; ++config) {
        const bool with_regex = config % 3 == 0;
        const std::size_t size = 1 + pick(config % 10 == 0 ? 600 : 40);
        Matcher m;
        std::vector<BucketDef> defs;
        auto spec = [&]() -> MatchSpec {
            switch (pick(with_regex ? 4 : 3)) {
                case 0: return {};
                case 1: return {MatchKind::Exact, word(12)};
                case 2: return {MatchKind::Prefix, word(12)};
                default: return {MatchKind::Regex, regexes[pick(4)]};
            }
        };
        for (std::size_t i = 0; i < size; ++i) {
            BucketDef d = make("b" + std::to_string(i), spec(), spec());
            ASSERT_EQ(m.add(d), "");
            defs.push_back(d);
        }
        for (int q = 0; q < 200; ++q) {
            auto value = [&]() {
                const BucketDef& d = defs[pick(defs.size())];
                std::string v = pick(2) ? d.procedure.value : d.caller.value;
                if (pick(3) == 0) v += word(6);
                if (pick(4) == 0) v = v.substr(0, pick(v.size() + 1));
                return pick(8) == 0 ? word(16) : v;
            };
            const std::string caller = value(), procedure = value();
            const bool has_caller = pick(5) != 0;
            const std::size_t max =
                pick(4) == 0 ? 1 + pick(kMaxMatchesPerRequest) : kMaxMatchesPerRequest;
            std::uint16_t a[kMaxMatchesPerRequest], b[kMaxMatchesPerRequest];
            const RequestKey key{caller, has_caller, procedure};
            const std::size_t na = m.match(key, a, max);
            const std::size_t nb = m.match_linear(key, b, max);
            ASSERT_EQ(V(a, a + na), V(b, b + nb))
                << "config " << config << ": caller \"" << caller << "\" (" << has_caller
                << "), procedure \"" << procedure << "\", max " << max;
            if (!with_regex) {
                V want;
                for (std::size_t i = 0; i < defs.size() && want.size() < max; ++i) {
                    if (naive(defs[i].caller, has_caller, caller) &&
                        naive(defs[i].procedure, true, procedure)) {
                        want.push_back(static_cast<std::uint16_t>(i));
                    }
                }
                ASSERT_EQ(V(a, a + na), want) << "config " << config;
            }
            ++compared;
            nonempty += na > 0;
            truncated += na == max;
        }
    }
    // The comparison saw matches, and truncation at `max`, not only empty answers.
    EXPECT_GT(nonempty, compared / 4);
    EXPECT_GT(truncated, compared / 50);
}

TEST(Names, Validity) {
    EXPECT_TRUE(valid_name("api.v1:read-all_x"));
    EXPECT_FALSE(valid_name(""));
    EXPECT_FALSE(valid_name("a b"));
    EXPECT_FALSE(valid_name("a/b"));
    EXPECT_FALSE(valid_name(std::string(64, 'a')));
    EXPECT_TRUE(valid_name(std::string(63, 'a')));
}

// Every byte value, at the start, in the middle and at the end of a name: exactly letters,
// digits and _ . : - are accepted (valid_name() reads a table of them).
TEST(Names, EveryByte) {
    const std::string allowed =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-";
    for (int v = 0; v < 256; ++v) {
        const char c = static_cast<char>(v);
        const bool ok = allowed.find(c) != std::string::npos;
        for (const std::string& name :
             {std::string(1, c), "ab" + std::string(1, c) + "cd", "abcd" + std::string(1, c)}) {
            EXPECT_EQ(valid_name(name), ok) << "byte " << v << " in \"" << name << "\"";
        }
    }
}

}  // namespace
}  // namespace grl
