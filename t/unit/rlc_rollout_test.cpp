// The shadow-first rollout state machine, driven by a fake clock (explicit times).
#include <gtest/gtest.h>

#include "rlc_fixtures.h"
#include "rollout.h"

using namespace grl;
using namespace grl::rlc;
using namespace grl::rlc::fixtures;

namespace {

constexpr std::int64_t kT0 = kEpoch + 5 * kWeek;

RolloutOptions opts(bool raise_directly = true) {
    RolloutOptions o;
    o.soak_s = kHour;
    o.threshold = 0.001;
    o.raise_directly = raise_directly;
    return o;
}

Proposal proposal(const std::string& bucket, std::optional<double> old_rps,
                  std::optional<double> new_rps, Mode old_mode = Mode::Deny) {
    Proposal p;
    p.bucket = bucket;
    p.policy = "peak";
    if (old_rps) p.old.limit_mrps = static_cast<std::uint64_t>(*old_rps * 1000);
    p.old.mode = old_mode;
    if (new_rps)
        p.new_mrps = static_cast<std::uint64_t>(*new_rps * 1000);
    else
        p.declined = "too little history";
    return p;
}

BucketState state(Stage st, double rps, std::int64_t since) {
    BucketState s;
    s.bucket = "api";
    s.stage = st;
    s.limit_mrps = static_cast<std::uint64_t>(rps * 1000);
    s.since_s = since;
    return s;
}

ShadowMeasure measured(double f) {
    return ShadowMeasure{f, 60};
}

TEST(Rollout, NewAndLoweredLimitsGoOutInShadowFirst) {
    auto p = proposal("api", std::nullopt, 120);
    Step s = advance(std::nullopt, &p, {}, kT0, opts(), false);
    EXPECT_EQ(s.action, Action::Shadow);
    ASSERT_TRUE(s.next);
    EXPECT_EQ(s.next->stage, Stage::Shadow);
    EXPECT_EQ(s.next->mode(), Mode::Shadow);
    EXPECT_EQ(s.next->limit_mrps, 120000u);
    EXPECT_EQ(s.next->since_s, kT0);
    EXPECT_EQ(s.why, "new limit: shadow first");

    // A bucket that nginx.conf runs in shadow, lowered: it was not enforcing, so shadow mode.
    auto lower_shadow = proposal("api", 300, 120, Mode::Shadow);
    s = advance(std::nullopt, &lower_shadow, {}, kT0, opts(), false);
    EXPECT_EQ(s.action, Action::Shadow);
    EXPECT_FALSE(s.next->beside);
    EXPECT_EQ(s.next->mode(), Mode::Shadow);
    EXPECT_EQ(s.next->published_mrps(), 120000u);
}

TEST(Rollout, ALoweredEnforcingBucketSoaksItsCandidateBesideTheEnforcedLimit) {
    // Enforcing at 300 (unmanaged, or managed and enforced): 120 soaks as a candidate while
    // 300 stays published in deny.
    auto lower = proposal("api", 300, 120);
    for (const std::optional<BucketState>& from :
         {std::optional<BucketState>(),
          std::optional<BucketState>(state(Stage::Enforced, 300, kT0 - kWeek))}) {
        Step s = advance(from, &lower, {}, kT0, opts(), false);
        EXPECT_EQ(s.action, Action::Shadow);
        ASSERT_TRUE(s.next);
        EXPECT_EQ(s.next->stage, Stage::Shadow);
        EXPECT_TRUE(s.next->beside);
        EXPECT_EQ(s.next->mode(), Mode::Deny);
        EXPECT_EQ(s.next->limit_mrps, 120000u);        // the candidate
        EXPECT_EQ(s.next->published_mrps(), 300000u);  // still enforced
        EXPECT_EQ(s.next->previous_mrps, 300000u);
        EXPECT_EQ(s.why, "lowered from 300r/s: candidate beside the enforced limit");
    }
}

TEST(Rollout, ACandidateBesideIsPromotedOrHeldOnItsWouldDrops) {
    auto lower = proposal("api", 300, 120);
    auto cand = [](double f) {
        ShadowMeasure m{f, 60};
        m.candidate = true;
        return m;
    };
    // A fake clock, cycles every 20 minutes: soak, then promotion under the threshold.
    std::optional<BucketState> st;
    std::vector<Action> actions;
    for (std::int64_t t = kT0; t <= kT0 + kHour; t += 20 * kMin) {
        Step s = advance(st, &lower, cand(0.0005), t, opts(), false);
        actions.push_back(s.action);
        if (s.action == Action::Soaking) {
            EXPECT_EQ(s.next->mode(), Mode::Deny);  // enforcing all along
            EXPECT_EQ(s.next->published_mrps(), 300000u);
        }
        st = s.next;
    }
    EXPECT_EQ(actions, (std::vector<Action>{Action::Shadow, Action::Soaking, Action::Soaking,
                                            Action::Promote}));
    EXPECT_EQ(st->stage, Stage::Enforced);
    EXPECT_FALSE(st->beside);
    EXPECT_EQ(st->published_mrps(), 120000u);
    EXPECT_EQ(st->mode(), Mode::Deny);

    // Over the threshold: held beside; 300 stays enforced and the hold is reported.
    Step first = advance(std::nullopt, &lower, {}, kT0, opts(), false);
    Step held = advance(first.next, &lower, cand(0.02), kT0 + kHour, opts(), false);
    EXPECT_EQ(held.action, Action::Hold);
    EXPECT_EQ(held.next->stage, Stage::Held);
    EXPECT_TRUE(held.next->beside);
    EXPECT_EQ(held.next->mode(), Mode::Deny);
    EXPECT_EQ(held.next->published_mrps(), 300000u);
    EXPECT_EQ(held.why, "candidate would-drops 2.000% over 60 samples, threshold 0.100%");
    Step still = advance(held.next, &lower, cand(0.02), kT0 + kDay, opts(), false);
    EXPECT_EQ(still.action, Action::Still);
    EXPECT_EQ(still.next->published_mrps(), 300000u);
    // Nothing measured: held, never promoted blind.
    ShadowMeasure none;  // no sample carried this candidate
    none.candidate = true;
    Step blind = advance(first.next, &lower, none, kT0 + kHour, opts(), false);
    EXPECT_EQ(blind.action, Action::Hold);
    EXPECT_EQ(blind.why, "no samples of the candidate's would-drops");

    // Held, then traffic grows: a proposal at the enforced limit drops the candidate...
    auto back = proposal("api", 300, 300);
    Step dropped = advance(held.next, &back, cand(0.02), kT0 + kDay, opts(), false);
    EXPECT_EQ(dropped.action, Action::None);
    EXPECT_EQ(dropped.next->stage, Stage::Enforced);
    EXPECT_FALSE(dropped.next->beside);
    EXPECT_EQ(dropped.next->published_mrps(), 300000u);
    EXPECT_EQ(dropped.why, "candidate 120r/s dropped: the proposal is the enforced 300r/s");
    // ...and one above it is a raise from the enforced limit.
    auto up = proposal("api", 300, 330);
    Step raised = advance(held.next, &up, cand(0.02), kT0 + kDay, opts(), false);
    EXPECT_EQ(raised.action, Action::Raise);
    EXPECT_EQ(raised.next->published_mrps(), 330000u);
    EXPECT_FALSE(raised.next->beside);
    // A lower one replaces the held candidate, still beside 300.
    auto lower2 = proposal("api", 300, 200);
    Step again = advance(held.next, &lower2, cand(0.02), kT0 + kDay, opts(), false);
    EXPECT_EQ(again.action, Action::Shadow);
    EXPECT_TRUE(again.next->beside);
    EXPECT_EQ(again.next->limit_mrps, 200000u);
    EXPECT_EQ(again.next->published_mrps(), 300000u);
}

TEST(Rollout, MeasureCandidateCountsOnlySamplesOfThatCandidate) {
    Series s = make_series(global("api"), kT0, kT0 + kHour, flat(100));
    for (std::size_t i = 0; i < s.samples.size(); ++i) {
        auto& smp = s.samples[i];
        smp.mode = Mode::Deny;  // enforcing all along
        smp.limit_rps = 300;
        smp.candidate_limit_rps = 95;
        smp.candidate_would_drop = {5, 8};  // 5% of 100 r/s over 95
        if (i < 10) {                       // the controllers had not loaded the candidate yet
            smp.candidate_limit_rps = -1;
            smp.candidate_would_drop = {0, 0};
        } else if (i < 20) {  // another candidate
            smp.candidate_limit_rps = 50;
            smp.candidate_would_drop = {50, 50};
        }
    }
    auto m = measure_candidate({&s}, 95000, kT0, kT0 + kHour);
    ASSERT_TRUE(m.fraction);
    EXPECT_TRUE(m.candidate);
    EXPECT_EQ(m.samples, 40u);
    EXPECT_DOUBLE_EQ(*m.fraction, 0.05);
    EXPECT_FALSE(measure_candidate({&s}, 120000, kT0, kT0 + kHour).fraction);
    // Shadow-mode measuring ignores these deny samples.
    EXPECT_FALSE(measure_shadow({&s}, 95000, kT0, kT0 + kHour).fraction);
}

TEST(Rollout, RaisesGoStraightOutOnlyWhenAllowed) {
    auto p = proposal("api", 100, 150);
    Step s = advance(std::nullopt, &p, {}, kT0, opts(true), false);
    EXPECT_EQ(s.action, Action::Raise);
    EXPECT_EQ(s.next->stage, Stage::Enforced);
    EXPECT_EQ(s.next->limit_mrps, 150000u);
    s = advance(std::nullopt, &p, {}, kT0, opts(false), false);
    EXPECT_EQ(s.action, Action::Shadow);
    // ...and then it soaks beside the enforced limit, which stays in deny.
    EXPECT_TRUE(s.next->beside);
    EXPECT_EQ(s.next->mode(), Mode::Deny);
    EXPECT_EQ(s.next->published_mrps(), 100000u);
    EXPECT_EQ(s.why, "raise from 100r/s soaks beside the enforced limit (raise_directly: false)");
    // A raise of a bucket that nginx.conf runs in shadow is not a raise of an enforced limit.
    auto shadow = proposal("api", 100, 150, Mode::Shadow);
    s = advance(std::nullopt, &shadow, {}, kT0, opts(true), false);
    EXPECT_EQ(s.action, Action::Shadow);
}

TEST(Rollout, SameLimitOrNoProposalChangesNothing) {
    auto same = proposal("api", 100, 100);
    Step s = advance(std::nullopt, &same, {}, kT0, opts(), false);
    EXPECT_EQ(s.action, Action::None);
    EXPECT_FALSE(s.next);
    auto declined = proposal("api", 100, std::nullopt);
    s = advance(state(Stage::Enforced, 100, kT0 - kDay), &declined, {}, kT0, opts(), false);
    EXPECT_EQ(s.action, Action::None);
    ASSERT_TRUE(s.next);
    EXPECT_EQ(s.next->limit_mrps, 100000u);
}

TEST(Rollout, SoakRunsItsCourseThenPromotesUnderTheThreshold) {
    auto p = proposal("api", 300, 120, Mode::Shadow);
    std::optional<BucketState> st;
    // A fake clock: cycles every 20 minutes.
    std::vector<Action> actions;
    for (std::int64_t t = kT0; t <= kT0 + kHour; t += 20 * kMin) {
        Step s = advance(st, &p, measured(0.0002), t, opts(), false);
        actions.push_back(s.action);
        st = s.next;
    }
    EXPECT_EQ(actions, (std::vector<Action>{Action::Shadow, Action::Soaking, Action::Soaking,
                                            Action::Promote}));
    EXPECT_EQ(st->stage, Stage::Enforced);
    EXPECT_EQ(st->limit_mrps, 120000u);
    EXPECT_DOUBLE_EQ(st->fraction, 0.0002);
}

TEST(Rollout, SoakOverTheThresholdHoldsAndSaysWhy) {
    auto st = state(Stage::Shadow, 120, kT0);
    auto p = proposal("api", 120, 120, Mode::Shadow);
    Step s = advance(st, &p, measured(0.02), kT0 + kHour, opts(), false);
    EXPECT_EQ(s.action, Action::Hold);
    EXPECT_EQ(s.next->stage, Stage::Held);
    EXPECT_EQ(s.next->mode(), Mode::Shadow);
    EXPECT_EQ(s.why, "shadow drops 2.000% over 60 samples, threshold 0.100%");
    // Exactly at the threshold is not under it.
    s = advance(st, &p, measured(0.001), kT0 + kHour, opts(), false);
    EXPECT_EQ(s.action, Action::Hold);
    // Nothing measured (the recorder saw no shadow samples at the candidate): held, not promoted.
    s = advance(st, &p, ShadowMeasure{}, kT0 + kHour, opts(), false);
    EXPECT_EQ(s.action, Action::Hold);
    EXPECT_EQ(s.why, "no shadow samples at the candidate limit");
}

TEST(Rollout, ANewProposalWaitsForTheSoakUnlessForced) {
    auto st = state(Stage::Shadow, 120, kT0);
    auto p = proposal("api", 120, 200, Mode::Shadow);
    Step s = advance(st, &p, measured(0), kT0 + 10 * kMin, opts(), false);
    EXPECT_EQ(s.action, Action::Soaking);
    EXPECT_EQ(s.next->limit_mrps, 120000u);
    EXPECT_EQ(s.why, "soaking 10 of 60 min; proposal 200r/s waits for the soak (or --force)");
    s = advance(st, &p, measured(0), kT0 + 10 * kMin, opts(), true);
    EXPECT_EQ(s.action, Action::Shadow);
    EXPECT_EQ(s.next->limit_mrps, 200000u);
    EXPECT_EQ(s.next->since_s, kT0 + 10 * kMin);
}

TEST(Rollout, HeldBucketsRecoverOrTakeANewCandidate) {
    auto held = state(Stage::Held, 120, kT0);
    auto same = proposal("api", 120, 120, Mode::Shadow);
    Step s = advance(held, &same, measured(0.05), kT0 + kDay, opts(), false);
    EXPECT_EQ(s.action, Action::Still);
    EXPECT_EQ(s.next->stage, Stage::Held);
    s = advance(held, &same, measured(0.0), kT0 + kDay, opts(), false);
    EXPECT_EQ(s.action, Action::Promote);
    EXPECT_EQ(s.next->stage, Stage::Enforced);
    auto higher = proposal("api", 120, 180, Mode::Shadow);
    s = advance(held, &higher, measured(0.05), kT0 + kDay, opts(), false);
    EXPECT_EQ(s.action, Action::Shadow);
    EXPECT_EQ(s.next->limit_mrps, 180000u);
    EXPECT_EQ(s.next->since_s, kT0 + kDay);
    // The window measured: the soak for a bucket in shadow, the last soak for a held one.
    EXPECT_EQ(measure_since(state(Stage::Shadow, 1, kT0), kT0 + kDay, opts()), kT0);
    EXPECT_EQ(measure_since(held, kT0 + kDay, opts()), kT0 + kDay - kHour);
}

TEST(Rollout, MeasureCountsOnlySamplesThatRanTheCandidateInShadow) {
    Series s = make_series(global("api"), kT0, kT0 + kHour, flat(100));
    for (std::size_t i = 0; i < s.samples.size(); ++i) {
        auto& smp = s.samples[i];
        smp.mode = Mode::Shadow;
        smp.limit_rps = 90;
        smp.shadow_dropped = {10, 10};  // 10% over the candidate
        if (i < 10) {                   // the controller still published the old limit in deny
            smp.mode = Mode::Deny;
            smp.limit_rps = 300;
            smp.shadow_dropped = {0, 0};
        } else if (i < 15) {  // shadow, but another limit
            smp.limit_rps = 300;
            smp.shadow_dropped = {0, 0};
        }
    }
    auto m = measure_shadow({&s}, 90000, kT0, kT0 + kHour);
    ASSERT_TRUE(m.fraction);
    EXPECT_EQ(m.samples, 45u);
    EXPECT_DOUBLE_EQ(*m.fraction, 0.1);
    EXPECT_FALSE(measure_shadow({&s}, 50000, kT0, kT0 + kHour).fraction);
    EXPECT_FALSE(measure_shadow({&s}, 90000, kT0 + kHour, kT0 + 2 * kHour).fraction);
}

}  // namespace
