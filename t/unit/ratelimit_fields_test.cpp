// The RateLimit header fields and the problem+json body (grl/ratelimit_fields.h).
#include "grl/plane/ratelimit_fields.h"

#include <gtest/gtest.h>

#include <string>

#include "grl/common/bucket.h"
#include "grl/common/parse.h"

using namespace grl;

namespace {

std::string policy(std::initializer_list<std::pair<const char*, std::uint64_t>> items) {
    char buf[512];
    char* p = buf;
    for (const auto& [name, mrps] : items) {
        p = fields::append_policy(buf, p, buf + sizeof(buf), name, mrps);
        if (p == nullptr) return "<overflow>";
    }
    return std::string(buf, static_cast<std::size_t>(p - buf));
}

}  // namespace

TEST(RateLimitFields, QuotaFromTheRateAsWritten) {
    auto q = [](const char* rate) {
        fields::Quota x = fields::quota_of(parse_rate(rate).value);
        return std::to_string(x.q) + "/" + std::to_string(x.w);
    };
    EXPECT_EQ(q("300r/s"), "300/1");
    EXPECT_EQ(q("600r/m"), "10/1");
    EXPECT_EQ(q("90r/m"), "90/60");
    EXPECT_EQ(q("100r/m"), "100/60");  // stored as 1666 mrps
    EXPECT_EQ(q("1r/m"), "1/60");      // stored as 16 mrps
    EXPECT_EQ(fields::quota_of(0).q, 0u);
    EXPECT_EQ(fields::quota_of(0).w, 1u);
    EXPECT_EQ(fields::quota_of(1).q, 1u);  // never a quota of 0 for a limit above 0
}

TEST(RateLimitFields, PolicyAndLimitLists) {
    EXPECT_EQ(policy({{"api", 300000}}), "\"api\";q=300;w=1");
    EXPECT_EQ(policy({{"api", 300000}, {"slow", 16}}), "\"api\";q=300;w=1, \"slow\";q=1;w=60");
    char buf[64];
    char* p = fields::append_exhausted(buf, buf, buf + sizeof(buf), "api", 3);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(std::string(buf, static_cast<std::size_t>(p - buf)), "\"api\";r=0;t=3");
    // Too small a buffer: nullptr, never a cut value.
    EXPECT_EQ(fields::append_policy(buf, buf, buf + 10, "api", 300000), nullptr);
}

TEST(RateLimitFields, ProblemBody) {
    char buf[fields::kProblemMax];
    std::string name(kMaxNameLen, 'n');
    char* p = fields::append_problem(buf, buf + sizeof(buf), 429, name);
    ASSERT_NE(p, nullptr) << "kProblemMax too small for the longest name";
    std::string body(buf, static_cast<std::size_t>(p - buf));
    EXPECT_NE(
        body.find("\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\""),
        std::string::npos);
    EXPECT_NE(body.find("\"status\":429"), std::string::npos);
    EXPECT_NE(body.find("\"violated-policies\":[\"" + name + "\"]"), std::string::npos);
    p = fields::append_problem(buf, buf + sizeof(buf), 503, "api");
    body.assign(buf, static_cast<std::size_t>(p - buf));
    EXPECT_NE(body.find("#temporary-reduced-capacity\",\"title\":\"Temporary Reduced Capacity\""),
              std::string::npos);
    EXPECT_EQ(fields::append_problem(buf, buf + 20, 429, "api"), nullptr);
    // A keyed bucket: the limit is each key's; the key itself is never written.
    p = fields::append_problem(buf, buf + sizeof(buf), 429, name, true);
    ASSERT_NE(p, nullptr) << "kProblemMax too small for the longest name, keyed";
    body.assign(buf, static_cast<std::size_t>(p - buf));
    EXPECT_NE(body.find("\"detail\":\"rejected by bucket " + name +
                        ": the request's key is over the bucket's limit for each key\""),
              std::string::npos)
        << body;
    EXPECT_NE(body.find("\"violated-policies\":[\"" + name + "\"]"), std::string::npos);
}
