// The Prometheus source's pure half: the PromQL asked per field, and range-query answers
// folded into series (a real server is exercised by t/integration/test_rlc_prometheus.py).
#include "prometheus_source.h"

#include <gtest/gtest.h>

namespace grl::rlc {
namespace {

std::string matrix(const std::string& series) {
    return R"({"status":"success","data":{"resultType":"matrix","result":[)" + series + "]}}";
}

const char* kGlobalA =
    R"({"metric":{"bucket":"api","scope":"global","zone":"","instance":"c1:9","job":"grl","region":"eu"},)"
    R"("values":[[120,"100"],[180,"200"],[300,"50"]]})";
// The same global instance through a controller of another region.
const char* kGlobalB =
    R"({"metric":{"bucket":"api","scope":"global","zone":"","instance":"c2:9","job":"grl","region":"us"},)"
    R"("values":[[120,"999"],[240,"120"]]})";
const char* kZone =
    R"({"metric":{"bucket":"z","scope":"zone","zone":"az1","instance":"c1:9","job":"grl","region":"eu"},)"
    R"("values":[[120,"7"],[180,"NaN"]]})";

TEST(RlcPrometheus, QueriesAskMeanMaxLastAndJoinTheRegion) {
    EXPECT_EQ(prom_query(PromField::OfferedPeak, 60, 15),
              "max_over_time(grl_bucket_offered_rps[60s]) * on(instance, job) "
              "group_left(region) grl_controller_info");
    EXPECT_EQ(prom_query(PromField::OfferedMean, 300, 15).substr(0, 43),
              "avg_over_time(grl_bucket_offered_rps[300s])");
    EXPECT_NE(
        prom_query(PromField::DroppedPeak, 60, 15)
            .find("max_over_time((grl_bucket_offered_rps - grl_bucket_admitted_rps)[60s:15s])"),
        std::string::npos);
    EXPECT_EQ(prom_query(PromField::Limit, 60, 15).substr(0, 43),
              "last_over_time(grl_bucket_limit_rps[60s]) *");
}

TEST(RlcPrometheus, AnswersFoldIntoOneSeriesPerInstanceAtWindowStarts) {
    PromAssembler a(60);
    a.add(PromField::OfferedMean, matrix(std::string(kGlobalA) + "," + kGlobalB + "," + kZone),
          "q");
    a.add(PromField::OfferedPeak,
          matrix(R"({"metric":{"bucket":"api","scope":"global","zone":"","region":"eu"},)"
                 R"("values":[[120,"150"],[180,"260"]]})"),
          "q");
    a.add(PromField::AdmittedMean,
          matrix(R"({"metric":{"bucket":"api","scope":"global","zone":"","region":"eu"},)"
                 R"("values":[[120,"80"]]})"),
          "q");
    a.add(PromField::Limit,
          matrix(R"({"metric":{"bucket":"api","scope":"global","zone":"","region":"eu"},)"
                 R"("values":[[120,"90"]]})"),
          "q");
    a.add(PromField::Shadow,
          matrix(R"({"metric":{"bucket":"z","scope":"zone","zone":"az1","region":"eu"},)"
                 R"("values":[[120,"1"]]})"),
          "q");
    a.add(PromField::Ticks,
          matrix(R"({"metric":{"bucket":"api","scope":"global","zone":"","region":"eu"},)"
                 R"("values":[[120,"4"]]})"),
          "q");
    a.add(PromField::CandidateLimit,
          matrix(R"({"metric":{"bucket":"api","scope":"global","zone":"","region":"eu"},)"
                 R"("values":[[120,"70"]]})"),
          "q");
    a.add(PromField::CandidateMean,
          matrix(R"({"metric":{"bucket":"api","scope":"global","zone":"","region":"eu"},)"
                 R"("values":[[120,"30"]]})"),
          "q");
    a.add(PromField::CandidatePeak,
          matrix(R"({"metric":{"bucket":"api","scope":"global","zone":"","region":"eu"},)"
                 R"("values":[[120,"80"]]})"),
          "q");
    std::vector<Series> s = a.series();
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0].key, (InstanceKey{"api", Scope::Global, "", ""}));
    ASSERT_EQ(s[0].samples.size(), 4u);  // 120, 180, 240 (only from c2), 300
    const Sample& x = s[0].samples[0];
    EXPECT_EQ(x.start_s, 60);  // the window (60, 120] ends at 120
    EXPECT_EQ(x.length_s, 60);
    EXPECT_EQ(x.ticks, 4);
    EXPECT_EQ(x.offered.mean, 100);  // the first controller's, not 999
    EXPECT_EQ(x.offered.peak, 150);
    EXPECT_EQ(x.admitted.mean, 80);
    EXPECT_EQ(x.dropped.mean, 20);  // offered - admitted
    EXPECT_EQ(x.limit_rps, 90);
    EXPECT_EQ(x.candidate_limit_rps, 70);
    EXPECT_EQ(x.candidate_would_drop.mean, 30);
    EXPECT_EQ(x.candidate_would_drop.peak, 80);
    EXPECT_EQ(s[0].samples[1].candidate_limit_rps, -1);  // no candidate in that window
    EXPECT_EQ(s[0].samples[1].offered.peak, 260);
    EXPECT_EQ(s[0].samples[1].admitted.mean, 200);  // no admitted answer: all admitted
    EXPECT_EQ(s[0].samples[1].limit_rps, -1);       // unknown
    EXPECT_EQ(s[0].samples[2].start_s, 180);
    EXPECT_EQ(s[0].samples[2].offered.mean, 120);
    EXPECT_EQ(s[1].key, (InstanceKey{"z", Scope::Zone, "eu", "az1"}));
    ASSERT_EQ(s[1].samples.size(), 1u);  // NaN: no data in that window, a gap
    EXPECT_EQ(s[1].samples[0].mode, Mode::Shadow);
}

TEST(RlcPrometheus, ASliceIsALabelMatcherInEveryQuery) {
    EXPECT_EQ(prom_selector({}), "");
    // Prometheus anchors the regex; a dot is a literal dot (escaped once for the regex,
    // once more for the PromQL string).
    EXPECT_EQ(prom_selector({"api", "search.v2"}), R"({bucket=~"api|search\\.v2"})");
    std::string sel = prom_selector({"api"});
    EXPECT_EQ(prom_query(PromField::OfferedMean, 60, 15, sel).substr(0, 62),
              R"(avg_over_time(grl_bucket_offered_rps{bucket=~"api"}[60s]) * on)");
    std::string dropped = prom_query(PromField::DroppedPeak, 60, 15, sel);
    EXPECT_NE(dropped.find(R"(grl_bucket_offered_rps{bucket=~"api"} - )"
                           R"(grl_bucket_admitted_rps{bucket=~"api"})[60s:15s])"),
              std::string::npos)
        << dropped;
    for (int f = 0; f < kPromFields; ++f)
        EXPECT_NE(prom_query(static_cast<PromField>(f), 60, 15, sel).find(sel), std::string::npos)
            << f;
}

TEST(RlcPrometheus, LabelValuesAreTheBucketNamesInOrder) {
    EXPECT_EQ(prom_label_values(R"({"status":"success","data":["search","api","api"]})", "q"),
              (std::vector<std::string>{"api", "search"}));
    EXPECT_TRUE(prom_label_values(R"({"status":"success","data":[]})", "q").empty());
    try {
        prom_label_values(R"({"status":"error","errorType":"bad_data","error":"bad match[]"})",
                          "http://p:9090 label values of bucket");
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "http://p:9090 label values of bucket: bad_data: bad match[]");
    }
    EXPECT_THROW(prom_label_values("<html>", "q"), std::runtime_error);
    EXPECT_THROW(prom_label_values(R"({"status":"success","data":[1]})", "q"), std::runtime_error);
}

TEST(RlcPrometheus, AnErrorAnswerIsAnErrorNamingTheQuery) {
    PromAssembler a(60);
    try {
        a.add(PromField::OfferedMean,
              R"({"status":"error","errorType":"bad_data","error":"parse error at char 3"})",
              "http://p:9090 query_range avg_over_time(x)");
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(),
                     "http://p:9090 query_range avg_over_time(x): bad_data: parse error at char 3");
    }
    EXPECT_THROW(a.add(PromField::OfferedMean, "<html>", "q"), std::runtime_error);
    EXPECT_THROW(a.add(PromField::OfferedMean,
                       R"({"status":"success","data":{"resultType":"vector","result":[]}})", "q"),
                 std::runtime_error);
    EXPECT_THROW(PrometheusSource(PrometheusOptions{"https://p", 60, 15, 1000}),
                 std::runtime_error);
}

}  // namespace
}  // namespace grl::rlc
