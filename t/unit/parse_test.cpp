#include "grl/common/parse.h"

#include <gtest/gtest.h>

namespace grl {
namespace {

TEST(ParseRate, PerSecondAndPerMinute) {
    EXPECT_EQ(parse_rate("100r/s").value, 100000u);
    EXPECT_EQ(parse_rate("1r/s").value, 1000u);
    EXPECT_EQ(parse_rate("60r/m").value, 1000u);
    EXPECT_EQ(parse_rate("1r/m").value, 16u);  // 1000/60, truncated like limit_req
}

TEST(ParseRate, RejectsBadInputNamingTheValue) {
    for (const char* bad : {"", "r/s", "0r/s", "-1r/s", "10", "10r/h", "1.5r/s", "abc", "10 r/s",
                            "99999999999999999999r/s"}) {
        auto r = parse_rate(bad);
        EXPECT_FALSE(r) << bad;
        EXPECT_EQ(r.error, std::string("invalid rate \"") + bad + "\"");
    }
}

TEST(ParseLimit, RateOrZero) {
    EXPECT_EQ(parse_limit("100r/s").value, 100000u);
    EXPECT_EQ(parse_limit("600r/m").value, 10000u);
    for (const char* zero : {"0", "0r/s", "0r/m"}) {
        auto l = parse_limit(zero);
        EXPECT_TRUE(l) << zero;
        EXPECT_EQ(l.value, 0u) << zero;
    }
    for (const char* bad : {"", "00", "fast", "100/s", "-1r/s"}) {
        auto l = parse_limit(bad);
        EXPECT_FALSE(l) << bad;
        EXPECT_EQ(l.error,
                  std::string("invalid rate \"") + bad + "\", expected e.g. 100r/s, 600r/m or 0");
    }
}

TEST(ParseSize, Suffixes) {
    EXPECT_EQ(parse_size("4096").value, 4096u);
    EXPECT_EQ(parse_size("512k").value, 512u * 1024);
    EXPECT_EQ(parse_size("1m").value, 1024u * 1024);
    EXPECT_EQ(parse_size("2M").value, 2u * 1024 * 1024);
    for (const char* bad : {"", "k", "0", "1g", "1.5m", "-1m"})
        EXPECT_FALSE(parse_size(bad)) << bad;
}

TEST(ParseDuration, Units) {
    EXPECT_EQ(parse_duration_ms("100ms").value, 100u);
    EXPECT_EQ(parse_duration_ms("5s").value, 5000u);
    EXPECT_EQ(parse_duration_ms("5").value, 5000u);
    EXPECT_EQ(parse_duration_ms("2m").value, 120000u);
    EXPECT_EQ(parse_duration_ms("1h").value, 3600000u);
    for (const char* bad : {"", "ms", "s", "1.5s", "1d", "-1s", "1 s"}) {
        auto d = parse_duration_ms(bad);
        EXPECT_FALSE(d) << bad;
        EXPECT_NE(d.error.find(bad), std::string::npos);
    }
}

TEST(ParseRatio, PartsPerMillion) {
    EXPECT_EQ(parse_ratio_ppm("0").value, 0u);
    EXPECT_EQ(parse_ratio_ppm("1").value, 1000000u);
    EXPECT_EQ(parse_ratio_ppm("0.33").value, 330000u);
    EXPECT_EQ(parse_ratio_ppm("0.000001").value, 1u);
    EXPECT_EQ(parse_ratio_ppm("1.000000").value, 1000000u);
    for (const char* bad : {"", ".", "1.1", "2", "0.0000001", "-0.1", "0.5x"}) {
        EXPECT_FALSE(parse_ratio_ppm(bad)) << bad;
    }
}

}  // namespace
}  // namespace grl
