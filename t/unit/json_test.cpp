// grl::daemon::Json, the writer of grlctl --json, /api/state and the endpoints file: numbers as
// printf's "%.0f" (whole, below 1e15) or "%.6f" wrote them, strings escaped, parsed back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "grl/daemon/json.h"

namespace grl::daemon {
namespace {

std::string printf_form(double v) {
    char buf[400];
    const bool whole = v == std::floor(v) && std::fabs(v) < 1e15;
    std::snprintf(buf, sizeof(buf), whole ? "%.0f" : "%.6f", v);
    return buf;
}

std::string one(double v) {
    Json j;
    j.begin_array().num(v).end_array();
    const std::string& t = j.text();
    return t.substr(1, t.size() - 2);
}

TEST(Json, NumbersAreWhatPrintfWrote) {
    for (double v : {0.0,
                     -0.0,
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
        EXPECT_EQ(one(v), printf_form(v)) << v;
    }
    EXPECT_EQ(one(std::nan("")), "null");
    EXPECT_EQ(one(std::numeric_limits<double>::infinity()), "null");
    EXPECT_EQ(one(450000), "450000");
    EXPECT_EQ(one(0.25), "0.250000");
}

TEST(Json, StringsAreEscapedAndParseBack) {
    const std::string odd = std::string("a\"b\\c\nd") + '\x01' + "e\x1f" + "\xc3\xa9" + "end";
    for (const std::string& s : {std::string(), std::string("plain"), odd, std::string("\"\"\\\\"),
                                 std::string(1, '\0')}) {
        Json j;
        j.begin_object().key(s).str(s).end_object();
        const auto parsed = nlohmann::json::parse(j.text());
        ASSERT_EQ(parsed.size(), 1u) << j.text();
        EXPECT_EQ(parsed.begin().key(), s);
        EXPECT_EQ(parsed.begin().value(), s);
    }
    Json j;
    j.str(odd);
    EXPECT_EQ(j.text(),
              "\"a\\\"b\\\\c\\u000ad\\u0001e\\u001f\xc3\xa9"
              "end\"");
}

}  // namespace
}  // namespace grl::daemon
