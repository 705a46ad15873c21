// grl-rlc import's CSV reader: documented columns and defaults, and for every kind of bad
// input an error naming the file, the line and the field (and nothing returned).
#include "csv_import.h"

#include <gtest/gtest.h>

namespace grl::rlc {
namespace {

const char* kFull =
    "bucket,scope,region,zone,start,length_s,ticks,offered_mean,offered_peak,admitted_mean,"
    "admitted_peak,dropped_mean,dropped_peak,shadow_mean,shadow_peak,limit,mode,ratio\n"
    "api,zone,eu-west,az1,2026-11-30T12:01:00Z,60,240,400,520.5,300,300,100,220.5,0,0,300,deny,"
    "0.25\n"
    "api,zone,eu-west,az1,1796040000,60,240,200,260,200,260,0,0,0,0,300r/s,deny,0\n"
    "search,global,,,2026-11-30 12:00,300,,50,80,,,,,10,30,,shadow,0.1\n";

TEST(RlcCsv, EveryColumnIsReadAndRowsAreGroupedAndSorted) {
    Parsed<std::vector<Series>> p = parse_history_csv(kFull, "data.csv");
    ASSERT_TRUE(p) << p.error;
    ASSERT_EQ(p.value.size(), 2u);
    const Series& api = p.value[0];
    EXPECT_EQ(api.key, (InstanceKey{"api", Scope::Zone, "eu-west", "az1"}));
    ASSERT_EQ(api.samples.size(), 2u);
    EXPECT_EQ(api.samples[0].start_s, 1796040000);  // 12:00, sorted before 12:01
    const Sample& s = api.samples[1];
    EXPECT_EQ(s.start_s, 1796040060);
    EXPECT_EQ(s.length_s, 60);
    EXPECT_EQ(s.ticks, 240);
    EXPECT_EQ(s.offered.mean, 400);
    EXPECT_EQ(s.offered.peak, 520.5);
    EXPECT_EQ(s.admitted.mean, 300);
    EXPECT_EQ(s.dropped.peak, 220.5);
    EXPECT_EQ(s.limit_rps, 300);
    EXPECT_EQ(s.mode, Mode::Deny);
    EXPECT_EQ(s.ratio, 0.25);
    EXPECT_EQ(api.samples[0].limit_rps, 300);  // "300r/s"
    const Sample& g = p.value[1].samples.at(0);
    EXPECT_EQ(p.value[1].key, (InstanceKey{"search", Scope::Global, "", ""}));
    EXPECT_EQ(g.start_s, 1796040000);
    EXPECT_EQ(g.ticks, 300);         // empty: length_s
    EXPECT_EQ(g.admitted.mean, 50);  // empty: offered - dropped
    EXPECT_EQ(g.admitted.peak, 80);
    EXPECT_EQ(g.shadow_dropped.peak, 30);
    EXPECT_EQ(g.limit_rps, -1);  // empty: unknown
    EXPECT_EQ(g.mode, Mode::Shadow);
}

TEST(RlcCsv, CandidateColumnsAreRead) {
    Parsed<std::vector<Series>> p = parse_history_csv(
        "bucket,start,offered_mean,limit,candidate,candidate_would_drop_mean,"
        "candidate_would_drop_peak\n"
        "api,1796040000,400,500r/s,300r/s,100,180\n"
        "api,1796040060,200,500,,,\n",
        "c.csv");
    ASSERT_TRUE(p) << p.error;
    ASSERT_EQ(p.value.size(), 1u);
    const Sample& with = p.value[0].samples.at(0);
    EXPECT_EQ(with.candidate_limit_rps, 300);
    EXPECT_EQ(with.candidate_would_drop.mean, 100);
    EXPECT_EQ(with.candidate_would_drop.peak, 180);
    const Sample& without = p.value[0].samples.at(1);
    EXPECT_EQ(without.candidate_limit_rps, -1);  // empty: no candidate
    EXPECT_EQ(without.candidate_would_drop.mean, 0);
    EXPECT_EQ(without.candidate_would_drop.peak, 0);
    // Would-drops need a candidate, and cannot exceed what was offered.
    Parsed<std::vector<Series>> orphan = parse_history_csv(
        "bucket,start,offered_mean,candidate_would_drop_mean\napi,1796040000,400,10\n", "c.csv");
    EXPECT_EQ(orphan.error,
              "c.csv:2: field \"candidate_would_drop_mean\": would-drops without a candidate "
              "limit (the \"candidate\" column)");
    Parsed<std::vector<Series>> over = parse_history_csv(
        "bucket,start,offered_mean,candidate,candidate_would_drop_mean\n"
        "api,1796040000,400,100,500\n",
        "c.csv");
    EXPECT_EQ(over.error,
              "c.csv:2: field \"candidate_would_drop_mean\": 500 is above offered_mean 400");
    Parsed<std::vector<Series>> bad = parse_history_csv(
        "bucket,start,offered_mean,candidate\napi,1796040000,400,lots\n", "c.csv");
    EXPECT_NE(bad.error.find("c.csv:2: field \"candidate\": invalid rate \"lots\""),
              std::string::npos)
        << bad.error;
}

TEST(RlcCsv, OnlyTheRequiredColumnsInAnyOrderWithQuotesCrlfAndABom) {
    Parsed<std::vector<Series>> p = parse_history_csv(
        "\xEF\xBB\xBFoffered_mean,\"start\",bucket\r\n\r\n 120 ,1796040000,\"api\"\r\n", "x.csv");
    ASSERT_TRUE(p) << p.error;
    const Sample& s = p.value.at(0).samples.at(0);
    EXPECT_EQ(p.value[0].key, (InstanceKey{"api", Scope::Global, "", ""}));
    EXPECT_EQ(s.offered.mean, 120);
    EXPECT_EQ(s.offered.peak, 120);  // no peak column: the mean (documented: under-states peaks)
    EXPECT_EQ(s.admitted.mean, 120);
    EXPECT_EQ(s.dropped.mean, 0);
    EXPECT_EQ(s.length_s, 60);
    EXPECT_EQ(s.ticks, 60);
    EXPECT_EQ(s.mode, Mode::Deny);
    EXPECT_EQ(s.limit_rps, -1);
}

struct Bad {
    const char* name;
    const char* csv;
    const char* error;  // the whole message
};

// gtest prints the case's name rather than its bytes.
void PrintTo(const Bad& b, std::ostream* os) {
    *os << b.name;
}

class RlcCsvBad : public ::testing::TestWithParam<Bad> {};

TEST_P(RlcCsvBad, IsRefusedWithFileLineAndField) {
    Parsed<std::vector<Series>> p = parse_history_csv(GetParam().csv, "data.csv");
    EXPECT_FALSE(p);
    EXPECT_TRUE(p.value.empty());
    EXPECT_EQ(p.error, GetParam().error);
}

const char* kHead = "bucket,scope,region,zone,start,offered_mean,offered_peak,limit,mode,ratio\n";
std::string with_head(const char* rows) {
    return std::string(kHead) + rows;
}

// Kept alive for the parameter table's pointers.
const std::string kRows[] = {
    with_head("api,global,,,1796040000,abc,1,,,\n"),
    with_head("api,global,,,1796040000,100,90,,,\n"),
    with_head("api,global,,,1796040000,-5,1,,,\n"),
    with_head("api,global,,,1796040000,nan,1,,,\n"),
    with_head("a b,global,,,1796040000,1,1,,,\n"),
    with_head(",global,,,1796040000,1,1,,,\n"),
    with_head("api,planet,,,1796040000,1,1,,,\n"),
    with_head("api,region,,,1796040000,1,1,,,\n"),
    with_head("api,zone,eu,,1796040000,1,1,,,\n"),
    with_head("api,global,eu,,1796040000,1,1,,,\n"),
    with_head("api,region,eu,az1,1796040000,1,1,,,\n"),
    with_head("api,global,,,yesterday,1,1,,,\n"),
    with_head("api,global,,,2026-11-30T12:00:00+01:00,1,1,,,\n"),
    with_head("api,global,,,2026-13-30T12:00:00Z,1,1,,,\n"),
    with_head("api,global,,,,1,1,,,\n"),
    with_head("api,global,,,1796040000,,1,,,\n"),
    with_head("api,global,,,1796040000,1,1,fast,,\n"),
    with_head("api,global,,,1796040000,1,1,,block,\n"),
    with_head("api,global,,,1796040000,1,1,,,1.5\n"),
    with_head("api,global,,,1796040000,1,1,,\n"),
    with_head("api,global,,,1796040000,1,1,,,,\n"),
    with_head("api,global,,,1796040000,1,1,,,\n\napi,global,,,2026-11-30T12:00:00Z,2,2,,,\n"),
    with_head("\"api,global,,,1796040000,1,1,,,\n"),
};

INSTANTIATE_TEST_SUITE_P(
    Rows, RlcCsvBad,
    ::testing::Values(
        Bad{"NotANumber", kRows[0].c_str(),
            "data.csv:2: field \"offered_mean\": \"abc\" is not a number"},
        Bad{"PeakBelowMean", kRows[1].c_str(),
            "data.csv:2: field \"offered_peak\": 90 is below offered_mean 100"},
        Bad{"Negative", kRows[2].c_str(), "data.csv:2: field \"offered_mean\": \"-5\" is negative"},
        Bad{"NaN", kRows[3].c_str(), "data.csv:2: field \"offered_mean\": \"nan\" is not a number"},
        Bad{"BadBucketName", kRows[4].c_str(),
            "data.csv:2: field \"bucket\": \"a b\" is not a valid name ([A-Za-z0-9_.:-]{1,63})"},
        Bad{"NoBucket", kRows[5].c_str(), "data.csv:2: field \"bucket\": missing"},
        Bad{"BadScope", kRows[6].c_str(),
            "data.csv:2: field \"scope\": \"planet\" is not global, region or zone"},
        Bad{"RegionScopeWithoutRegion", kRows[7].c_str(), "data.csv:2: field \"region\": missing"},
        Bad{"ZoneScopeWithoutZone", kRows[8].c_str(), "data.csv:2: field \"zone\": missing"},
        Bad{"GlobalWithRegion", kRows[9].c_str(),
            "data.csv:2: field \"region\": must be empty for a global bucket (it is summed over "
            "every region)"},
        Bad{"RegionWithZone", kRows[10].c_str(),
            "data.csv:2: field \"zone\": must be empty unless scope is zone"},
        Bad{"BadTime", kRows[11].c_str(),
            "data.csv:2: field \"start\": invalid time \"yesterday\", expected unix seconds or "
            "ISO-8601 UTC like 2026-11-30T12:00:00Z"},
        Bad{"NotUtc", kRows[12].c_str(),
            "data.csv:2: field \"start\": invalid time \"2026-11-30T12:00:00+01:00\", expected "
            "unix seconds or ISO-8601 UTC like 2026-11-30T12:00:00Z (only UTC: end with Z or "
            "+00:00)"},
        Bad{"Month13", kRows[13].c_str(),
            "data.csv:2: field \"start\": invalid time \"2026-13-30T12:00:00Z\", expected unix "
            "seconds or ISO-8601 UTC like 2026-11-30T12:00:00Z"},
        Bad{"NoStart", kRows[14].c_str(), "data.csv:2: field \"start\": missing"},
        Bad{"NoOffered", kRows[15].c_str(), "data.csv:2: field \"offered_mean\": missing"},
        Bad{"BadLimit", kRows[16].c_str(),
            "data.csv:2: field \"limit\": invalid rate \"fast\", expected e.g. 500, 500r/s or "
            "600r/m"},
        Bad{"BadMode", kRows[17].c_str(),
            "data.csv:2: field \"mode\": \"block\" is not deny or shadow"},
        Bad{"RatioAboveOne", kRows[18].c_str(), "data.csv:2: field \"ratio\": \"1.5\" is above 1"},
        Bad{"TooFewFields", kRows[19].c_str(), "data.csv:2: 9 fields, the header has 10"},
        Bad{"TooManyFields", kRows[20].c_str(), "data.csv:2: 11 fields, the header has 10"},
        Bad{"DuplicateInterval", kRows[21].c_str(),
            "data.csv:4: bucket \"api\" (global) at 2026-11-30T12:00:00Z is already on line 2"},
        Bad{"UnterminatedQuote", kRows[22].c_str(), "data.csv:2: unterminated quoted field 1"},
        Bad{"UnknownColumn", "bucket,start,offerd_mean\n",
            "data.csv:1: unknown column \"offerd_mean\" (the header must name columns among: "
            "bucket, scope, region, zone, start, length_s, ticks, offered_mean, offered_peak, "
            "admitted_mean, admitted_peak, dropped_mean, dropped_peak, shadow_mean, shadow_peak, "
            "limit, mode, ratio, candidate, candidate_would_drop_mean, candidate_would_drop_peak)"},
        Bad{"RepeatedColumn", "bucket,start,offered_mean,start\n",
            "data.csv:1: column \"start\" appears twice"},
        Bad{"MissingRequiredColumn", "bucket,offered_mean\napi,1\n",
            "data.csv:1: the header has no column \"start\" (bucket, start and offered_mean are "
            "required)"},
        Bad{"Empty", "\n\n", "data.csv: empty file, expected a header line naming the columns"},
        Bad{"AdmittedAboveOffered", "bucket,start,offered_mean,admitted_mean\napi,0,10,11\n",
            "data.csv:2: field \"admitted_mean\": 11 is above offered_mean 10"},
        Bad{"DroppedAboveOffered", "bucket,start,offered_mean,dropped_mean\napi,0,10,11\n",
            "data.csv:2: field \"dropped_mean\": 11 is above offered_mean 10"},
        Bad{"LengthNotWhole", "bucket,start,offered_mean,length_s\napi,0,10,60.5\n",
            "data.csv:2: field \"length_s\": \"60.5\" is not a whole number"},
        Bad{"LengthZero", "bucket,start,offered_mean,length_s\napi,0,10,0\n",
            "data.csv:2: field \"length_s\": \"0\" is not in 1..86400"}),
    [](const ::testing::TestParamInfo<Bad>& i) { return std::string(i.param.name); });

TEST(RlcCsv, AnErrorOnTheLastLineReturnsNothingOfTheGoodLinesBefore) {
    std::string csv = "bucket,start,offered_mean\n";
    for (int i = 0; i < 100; ++i) csv += "api," + std::to_string(i * 60) + ",5\n";
    csv += "api,6000,x\n";
    Parsed<std::vector<Series>> p = parse_history_csv(csv, "big.csv");
    EXPECT_FALSE(p);
    EXPECT_TRUE(p.value.empty());
    EXPECT_EQ(p.error, "big.csv:102: field \"offered_mean\": \"x\" is not a number");
}

}  // namespace
}  // namespace grl::rlc
