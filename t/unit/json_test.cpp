// grl/daemon/json.h: numbers read back as printf's "%.0f" (whole, below 1e15) or "%.6f" wrote
// them, whole ones as integers; text that is not UTF-8 written, not thrown.
#include "grl/daemon/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

namespace grl::daemon {
namespace {

std::string printf_form(double v) {
    char buf[400];
    const bool whole = v == std::floor(v) && std::fabs(v) < 1e15;
    std::snprintf(buf, sizeof(buf), whole ? "%.0f" : "%.6f", v);
    return buf;
}

std::string one(double v) {
    return json_text(json_number(v));
}

TEST(Json, NumbersReadBackAsPrintfWroteThem) {
    for (double v : {0.0,
                     1.0,
                     -1.0,
                     0.5,
                     0.1,
                     2.0 / 3.0,
                     1e-7,
                     -1e-7,
                     0.0000005,
                     0.0000015,
                     123456.789012345,
                     1e15 - 1,
                     1e15,
                     1e15 + 0.5,
                     4.5e15,
                     1e300,
                     -1e300,
                     std::numeric_limits<double>::max(),
                     std::numeric_limits<double>::lowest(),
                     std::numeric_limits<double>::min(),
                     std::numeric_limits<double>::denorm_min(),
                     9007199254740993.0}) {
        const auto parsed = nlohmann::json::parse(one(v));
        EXPECT_EQ(parsed.get<double>(), std::strtod(printf_form(v).c_str(), nullptr))
            << v << " " << one(v);
    }
    EXPECT_EQ(one(std::nan("")), "null");
    EXPECT_EQ(one(std::numeric_limits<double>::infinity()), "null");
    EXPECT_EQ(one(450000), "450000");
    EXPECT_EQ(one(1e15 - 1), "999999999999999");
    EXPECT_EQ(one(0.25), "0.25");
    EXPECT_EQ(one(2.0 / 3.0), "0.666667");
    EXPECT_EQ(one(static_cast<double>(0.6F)), "0.6");  // a float's rate, not 0.6000000238418579
    EXPECT_EQ(one(12345 / 1000.0), "12.345");
}

TEST(Json, StringsAreEscapedAndParseBack) {
    const std::string odd = std::string("a\"b\\c\nd") + '\x01' + "e\x1f" + "\xc3\xa9" + "end";
    for (const std::string& s : {std::string(), std::string("plain"), odd, std::string("\"\"\\\\"),
                                 std::string(1, '\0')}) {
        nlohmann::ordered_json j;
        j[s] = s;
        const auto parsed = nlohmann::json::parse(json_text(j));
        ASSERT_EQ(parsed.size(), 1u) << json_text(j);
        EXPECT_EQ(parsed.begin().key(), s);
        EXPECT_EQ(parsed.begin().value(), s);
    }
}

// A bucket name or API key from the wire may be any bytes: written with U+FFFD, not thrown.
TEST(Json, BytesThatAreNotUtf8BecomeReplacementCharacters) {
    const std::string bad = std::string("a") + '\xff' + "b" + '\xc3';
    nlohmann::ordered_json j{{"name", bad}};
    EXPECT_EQ(json_text(j),
              "{\"name\":\"a\xef\xbf\xbd"
              "b\xef\xbf\xbd\"}");
    EXPECT_EQ(nlohmann::json::parse(json_text(j))["name"],
              "a\xef\xbf\xbd"
              "b\xef\xbf\xbd");
}

}  // namespace
}  // namespace grl::daemon
