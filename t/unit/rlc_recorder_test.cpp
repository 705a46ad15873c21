// The recorder, driven by a fake clock (the poll times passed in), and the reading of a
// controller's /metrics text into its observations.
#include "recorder.h"

#include <gtest/gtest.h>

#include "controller_metrics.h"

namespace grl::rlc {
namespace {

const InstanceKey kApi{"api", Scope::Global, "", ""};
const InstanceKey kZone{"api-zone", Scope::Zone, "eu", "az1"};

Observation obs(const InstanceKey& k, double offered, double admitted = -1) {
    Observation o;
    o.key = k;
    o.offered = offered;
    o.admitted = admitted < 0 ? offered : admitted;
    o.dropped = o.offered - o.admitted;
    o.limit_rps = 300;
    o.ratio = offered > 300 ? (offered - 300) / offered : 0;
    return o;
}

ControllerReport report(const std::string& source, std::vector<Observation> o, double marker = -1) {
    ControllerReport r;
    r.source = source;
    r.observations = std::move(o);
    if (marker >= 0) {
        r.has_tick_marker = true;
        r.tick_marker = marker;
    }
    return r;
}

// A fake clock: polls at fixed wall times.
struct FakeClock {
    std::int64_t now_ms;
    void advance(std::int64_t ms) { now_ms += ms; }
};

TEST(RlcRecorder, TicksFoldIntoOneRowPerIntervalWithMeanPeakAndTicks) {
    Recorder rec(60);
    FakeClock clock{1796040000000};  // a multiple of 60 s
    double sum = 0;
    for (int i = 0; i < 60; ++i) {
        double offered = i == 30 ? 900 : 100 + i % 2 * 20;  // 100/120 and one burst
        sum += offered;
        rec.poll(clock.now_ms, {report("c1", {obs(kApi, offered, std::min(offered, 300.0))})});
        clock.advance(1000);
    }
    EXPECT_TRUE(rec.take_closed(clock.now_ms - 1).empty());  // the interval is not over yet
    std::vector<Series> rows = rec.take_closed(clock.now_ms);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].key, kApi);
    ASSERT_EQ(rows[0].samples.size(), 1u);
    const Sample& s = rows[0].samples[0];
    EXPECT_EQ(s.start_s, 1796040000);
    EXPECT_EQ(s.length_s, 60);
    EXPECT_EQ(s.ticks, 60);
    EXPECT_NEAR(s.offered.mean, sum / 60, 1e-9);
    EXPECT_NEAR(sum / 60, 123.33, 0.01);
    EXPECT_EQ(s.offered.peak, 900);  // averages hide it; the peak keeps it
    EXPECT_EQ(s.admitted.peak, 300);
    EXPECT_EQ(s.dropped.peak, 600);
    EXPECT_NEAR(s.ratio, (600.0 / 900) / 60, 1e-9);
    EXPECT_EQ(s.limit_rps, 300);
    EXPECT_TRUE(rec.take_closed(clock.now_ms + 600000).empty());  // taken once
}

TEST(RlcRecorder, IntervalsStartAtMultiplesOfTheIntervalInUnixTime) {
    Recorder rec(60);
    rec.poll(125 * 1000, {report("c1", {obs(kApi, 10)})});
    std::vector<Series> rows = rec.take_closed(180 * 1000);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].samples[0].start_s, 120);
    EXPECT_EQ(rows[0].samples[0].ticks, 1);
}

TEST(RlcRecorder, AnInstanceAbsentForAWholeIntervalHasNoRowThere) {
    Recorder rec(10);
    FakeClock clock{0};
    for (int i = 0; i < 30; ++i) {
        std::vector<Observation> o = {obs(kZone, 50)};
        if (i < 10 || i >= 20) o.push_back(obs(kApi, 100));  // api gone in [10 s, 20 s)
        rec.poll(clock.now_ms, {report("c1", o)});
        clock.advance(1000);
    }
    std::vector<Series> rows = rec.take_closed(clock.now_ms);
    ASSERT_EQ(rows.size(), 2u);
    const Series& api = rows[0].key == kApi ? rows[0] : rows[1];
    const Series& zone = rows[0].key == kApi ? rows[1] : rows[0];
    ASSERT_EQ(api.samples.size(), 2u);
    EXPECT_EQ(api.samples[0].start_s, 0);
    EXPECT_EQ(api.samples[1].start_s, 20);  // no row at 10, and no zeros
    EXPECT_EQ(zone.samples.size(), 3u);
}

TEST(RlcRecorder, ActiveActiveControllersAndRegionsAreNotDoubleCounted) {
    Recorder rec(10);
    for (int i = 0; i < 10; ++i) {
        // Both controllers of a region show the same instances; a controller of another
        // region shows the same global instance.
        rec.poll(i * 1000, {report("ctl-eu-1", {obs(kApi, 100), obs(kZone, 40)}),
                            report("ctl-eu-2", {obs(kApi, 100), obs(kZone, 40)}),
                            report("ctl-us-1", {obs(kApi, 100)})});
    }
    std::vector<Series> rows = rec.take_closed(10000);
    ASSERT_EQ(rows.size(), 2u);
    for (const Series& s : rows) {
        EXPECT_EQ(s.samples.at(0).ticks, 10) << s.key.bucket;
        EXPECT_EQ(s.samples[0].offered.mean, s.key == kApi ? 100 : 40);
    }
}

TEST(RlcRecorder, APollThatShowsTheSameControllerTickAgainIsNotCounted) {
    Recorder rec(10);
    // Polls at 4 Hz, the controller ticks at 1 Hz: its tick marker changes every 4th poll.
    for (int i = 0; i < 40; ++i)
        rec.poll(i * 250, {report("c1", {obs(kApi, 100 + i / 4)}, /*marker=*/i / 4)});
    std::vector<Series> rows = rec.take_closed(10000);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].samples[0].ticks, 10);
    EXPECT_NEAR(rows[0].samples[0].offered.mean, 104.5, 1e-9);
    // Markers are per controller: another one's tick still counts.
    Recorder two(10);
    two.poll(0, {report("a", {obs(kApi, 1)}, 7)});
    two.poll(1000, {report("a", {obs(kApi, 1)}, 7), report("b", {obs(kApi, 3)}, 7)});
    EXPECT_EQ(two.take_all().at(0).samples[0].ticks, 2);
}

TEST(RlcRecorder, LimitAndModeAreThoseAtTheEndOfTheInterval) {
    Recorder rec(10);
    Observation a = obs(kApi, 100), b = obs(kApi, 100);
    b.limit_rps = 80;
    b.mode = Mode::Shadow;
    rec.poll(1000, {report("c", {a})});
    rec.poll(2000, {report("c", {b})});
    const Sample s =
        rec.take_closed(10000).at(0).samples.at(0);  // a copy: the rows are a temporary
    EXPECT_EQ(s.limit_rps, 80);
    EXPECT_EQ(s.mode, Mode::Shadow);
}

TEST(RlcRecorder, CandidateWouldDropsFoldIntoMeanAndPeakAndItsLimitIsTheNewest) {
    Recorder rec(10);
    Observation a = obs(kApi, 100), b = obs(kApi, 100), c = obs(kApi, 100);
    a.candidate_limit_rps = b.candidate_limit_rps = 90;
    a.candidate_would_drop = 10;
    b.candidate_would_drop = 30;
    c.candidate_limit_rps = 80;  // the candidate changed in the interval
    c.candidate_would_drop = 20;
    rec.poll(1000, {report("c", {a})});
    rec.poll(2000, {report("c", {b})});
    rec.poll(3000, {report("c", {c})});
    const Sample s =
        rec.take_closed(10000).at(0).samples.at(0);  // a copy: the rows are a temporary
    EXPECT_EQ(s.candidate_limit_rps, 80);
    EXPECT_DOUBLE_EQ(s.candidate_would_drop.mean, 20);
    EXPECT_DOUBLE_EQ(s.candidate_would_drop.peak, 30);
    // Without a candidate: -1 and zeros.
    rec.poll(11000, {report("c", {obs(kApi, 100)})});
    const Sample none = rec.take_closed(20000).at(0).samples.at(0);
    EXPECT_EQ(none.candidate_limit_rps, -1);
    EXPECT_DOUBLE_EQ(none.candidate_would_drop.peak, 0);
}

TEST(RlcRecorder, TakeAllFlushesTheOpenIntervalAsAPartialRow) {
    Recorder rec(60);
    for (int i = 0; i < 70; ++i) rec.poll(i * 1000, {report("c", {obs(kApi, 10)})});
    std::vector<Series> closed = rec.take_closed(70000);
    ASSERT_EQ(closed.at(0).samples.size(), 1u);
    std::vector<Series> rest = rec.take_all();
    ASSERT_EQ(rest.size(), 1u);
    EXPECT_EQ(rest[0].samples.at(0).start_s, 60);
    EXPECT_EQ(rest[0].samples[0].ticks, 10);
    EXPECT_TRUE(rec.take_all().empty());
}

const char* kMetrics = R"(# HELP grl_bucket_offered_rps Requests per second offered
# TYPE grl_bucket_offered_rps gauge
grl_bucket_offered_rps{bucket="api",scope="global",zone=""} 450.5
grl_bucket_offered_rps{bucket="api-zone",scope="zone",zone="az1"} 315
grl_bucket_offered_rps{bucket="reg",scope="region",zone=""} 20
grl_bucket_admitted_rps{bucket="api",scope="global",zone=""} 300.25
grl_bucket_admitted_rps{bucket="api-zone",scope="zone",zone="az1"} 315
grl_bucket_admitted_rps{bucket="reg",scope="region",zone=""} 20
grl_bucket_shadow_dropped_rps{bucket="api",scope="global",zone=""} 0
grl_bucket_shadow_dropped_rps{bucket="api-zone",scope="zone",zone="az1"} 165
grl_bucket_limit_rps{bucket="api",scope="global",zone=""} 300
grl_bucket_limit_rps{bucket="api-zone",scope="zone",zone="az1"} 150
grl_bucket_ratio{bucket="api",scope="global",zone=""} 0.333
grl_bucket_ratio{bucket="api-zone",scope="zone",zone="az1"} 0.5238
grl_bucket_shadow{bucket="api",scope="global",zone=""} 0
grl_bucket_shadow{bucket="api-zone",scope="zone",zone="az1"} 1
grl_bucket_limit_source{bucket="api",scope="global",zone="",source="conf"} 1
grl_bucket_candidate_limit_rps{bucket="api",scope="global",zone=""} 250
grl_bucket_candidate_would_drop_rps{bucket="api",scope="global",zone=""} 200.5
grl_controller_instructions_published_total 1234
grl_controller_last_instruction_age_seconds NaN
)";

TEST(RlcControllerMetrics, EveryInstanceWithItsRegionRatesLimitModeAndTickMarker) {
    std::string text =
        std::string(kMetrics) + "grl_controller_info{region=\"eu-west\",name=\"ctl-eu-1\"} 1\n";
    Parsed<ControllerScrape> p = parse_controller_metrics(text, "127.0.0.1:9100");
    ASSERT_TRUE(p) << p.error;
    const ControllerScrape& s = p.value;
    EXPECT_EQ(s.region, "eu-west");
    EXPECT_EQ(s.name, "ctl-eu-1");
    EXPECT_EQ(s.report.source, "127.0.0.1:9100");
    EXPECT_TRUE(s.report.has_tick_marker);
    EXPECT_EQ(s.report.tick_marker, 1234);
    ASSERT_EQ(s.report.observations.size(), 3u);
    std::map<std::string, Observation> by;
    for (const Observation& o : s.report.observations) by[o.key.bucket] = o;
    const Observation& g = by.at("api");
    EXPECT_EQ(g.key, kApi);  // a global instance has no region: it is the whole fleet's
    EXPECT_EQ(g.offered, 450.5);
    EXPECT_EQ(g.admitted, 300.25);
    EXPECT_EQ(g.dropped, 450.5 - 300.25);
    EXPECT_EQ(g.limit_rps, 300);
    EXPECT_EQ(g.ratio, 0.333);
    EXPECT_EQ(g.mode, Mode::Deny);
    EXPECT_EQ(g.candidate_limit_rps, 250);
    EXPECT_EQ(g.candidate_would_drop, 200.5);
    const Observation& z = by.at("api-zone");
    EXPECT_EQ(z.candidate_limit_rps, -1);  // no candidate
    EXPECT_EQ(z.candidate_would_drop, 0);
    EXPECT_EQ(z.key, (InstanceKey{"api-zone", Scope::Zone, "eu-west", "az1"}));
    EXPECT_EQ(z.mode, Mode::Shadow);
    EXPECT_EQ(z.shadow_dropped, 165);
    EXPECT_EQ(z.dropped, 0);
    const Observation& r = by.at("reg");
    EXPECT_EQ(r.key, (InstanceKey{"reg", Scope::Region, "eu-west", ""}));
    EXPECT_EQ(r.limit_rps, -1);  // not exported: unknown
}

TEST(RlcControllerMetrics, WithoutTheControllerInfoOnlyGlobalInstancesAreKept) {
    Parsed<ControllerScrape> p = parse_controller_metrics(kMetrics, "c");
    ASSERT_TRUE(p) << p.error;
    ASSERT_EQ(p.value.report.observations.size(), 1u);
    EXPECT_EQ(p.value.report.observations[0].key, kApi);
    EXPECT_EQ(p.value.skipped_no_region, 2u);
}

TEST(RlcControllerMetrics, TextThatIsNotPrometheusIsAnErrorNamingTheSourceAndLine) {
    Parsed<ControllerScrape> p =
        parse_controller_metrics("# ok\ngrl_bucket_ratio 1\n<html>nope</html>\n", "ctl:9");
    EXPECT_FALSE(p);
    EXPECT_EQ(p.error, "ctl:9 /metrics line 3: not Prometheus text: \"<html>nope</html>\"");
}

}  // namespace
}  // namespace grl::rlc
