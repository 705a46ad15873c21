// Unit tests of `grlctl top`'s screen (controller/grlctl_top.h).
#include "controller/grlctl_top.h"

#include <gtest/gtest.h>

namespace grl::grlctl {
namespace {

wire::BucketStatus bucket(const std::string& name, std::uint64_t offered_mrps,
                          std::uint64_t limit_mrps) {
    wire::BucketStatus b;
    b.name = name;
    b.offered_mrps = offered_mrps;
    b.admitted_mrps = std::min(offered_mrps, limit_mrps);
    b.limit_mrps = limit_mrps;
    b.hosts = 2;
    return b;
}

wire::AdminReply buckets() {
    wire::AdminReply r;
    r.source = "ctl-1";
    r.region = "eu";
    r.buckets = {bucket("low", 1000, 100000), bucket("busy", 450000, 300000),
                 bucket("mid", 50000, 100000)};
    wire::BucketStatus z = bucket("busy", 300000, 150000);
    z.scope = Scope::Zone;
    z.zone = "z1";
    z.mode = Mode::Shadow;
    z.shadow_dropped_mrps = 150000;
    r.buckets.push_back(z);
    return r;
}

TEST(GrlctlTop, BusiestFirstWithAStableOrderAtEqualRates) {
    wire::AdminReply r = buckets();
    r.buckets.push_back(bucket("alpha", 50000, 100000));  // as busy as "mid"
    auto top = busiest(r);
    ASSERT_EQ(top.size(), 5u);
    EXPECT_EQ(top[0]->name, "busy");
    EXPECT_EQ(top[0]->scope, Scope::Global);
    EXPECT_EQ(top[1]->zone, "z1");
    EXPECT_EQ(top[2]->name, "alpha");
    EXPECT_EQ(top[3]->name, "mid");
    EXPECT_EQ(top[4]->name, "low");
}

TEST(GrlctlTop, ScreenHasHeaderTableAndFitsTheTerminal) {
    wire::AdminReply b = buckets();
    wire::AdminReply s;
    s.source = "ctl-1";
    s.region = "eu";
    wire::ZoneStatus z;
    z.zone = "z1";
    z.hosts = 3;
    z.fresh = true;
    s.zones = {z, z};
    s.zones[1].fresh = false;
    s.limits.file = "/etc/grl/limits.yaml";
    s.limits.version = "v7";
    s.limits.ok = false;
    TopView v;
    v.controller_endpoint = "tcp://127.0.0.1:7203";
    v.now_ms = 1'796'086'927'000;
    v.interval_ms = 1000;
    std::string screen = render_top(&b, &s, v);
    EXPECT_EQ(screen.substr(0, screen.find('\n')),
              "grlctl top: controller ctl-1 (region eu) at tcp://127.0.0.1:7203, "
              "2026-12-01T01:02:07Z, every 1.0 s");
    EXPECT_NE(screen.find("zones 1/2 fresh, hosts 6, limits version v7 (LAST LOAD REJECTED)"),
              std::string::npos)
        << screen;
    EXPECT_NE(screen.find("busy    global  -        450.0     300.0  300.0  150%  0.0000  deny"),
              std::string::npos)
        << screen;
    EXPECT_NE(screen.find("busy    zone    z1       300.0     150.0  150.0  200%  0.0000  shadow"
                          "       150.0"),
              std::string::npos)
        << screen;

    // 6 lines: header (2), blank, table head, 1 row, "more".
    v.height = 6;
    v.width = 30;
    screen = render_top(&b, &s, v);
    EXPECT_NE(screen.find("... 3 more"), std::string::npos) << screen;
    EXPECT_EQ(screen.find("mid"), std::string::npos) << screen;
    for (std::size_t p = 0, q; (q = screen.find('\n', p)) != std::string::npos; p = q + 1)
        EXPECT_LE(q - p, 30u);
}

TEST(GrlctlTop, NoAnswerIsShownAndRetried) {
    TopView v;
    v.error = "no answer from tcp://127.0.0.1:1 within 3s";
    std::string screen = render_top(nullptr, nullptr, v);
    EXPECT_NE(screen.find("NO ANSWER: no answer from tcp://127.0.0.1:1 within 3s (retrying)"),
              std::string::npos)
        << screen;
}

}  // namespace
}  // namespace grl::grlctl
