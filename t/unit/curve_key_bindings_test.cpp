// Unit tests of grl::CurveKeyBindings: CURVE keys bound one to one to the names they speak for.
#include "grl/control/curve_key_bindings.h"

#include <gtest/gtest.h>

namespace grl {
namespace {

using R = CurveKeyBindings::Result;

TEST(CurveKeyBindings, FirstComeOneToOne) {
    CurveKeyBindings b(100, 10000);
    EXPECT_EQ(b.check("K1", "h1", 0), R::Ok);
    EXPECT_EQ(b.check("K1", "h1", 100), R::Ok);
    EXPECT_EQ(b.check("K1", "h2", 200), R::KeyTaken);   // K1 speaks for h1 only
    EXPECT_EQ(b.check("K2", "h1", 300), R::NameTaken);  // h1 is K1's
    EXPECT_EQ(b.check("K2", "h2", 400), R::Ok);
    EXPECT_EQ(b.name_of("K1"), "h1");
    EXPECT_EQ(b.size(), 2u);
}

TEST(CurveKeyBindings, UnusedBindingsLapse) {
    CurveKeyBindings b(100, 10000);
    EXPECT_EQ(b.check("K1", "h1", 0), R::Ok);
    EXPECT_EQ(b.check("K1", "h1", 9000), R::Ok);  // use keeps it
    EXPECT_EQ(b.check("K2", "h1", 18999), R::NameTaken);
    EXPECT_EQ(b.check("K2", "h1", 19000), R::Ok);         // a new key pair for h1
    EXPECT_EQ(b.check("K1", "h1", 19001), R::NameTaken);  // the old key lost it
    EXPECT_EQ(b.check("K1", "h9", 19002), R::Ok);         // K1's binding lapsed with it
}

TEST(CurveKeyBindings, BoundedWithLapsedEntriesMakingRoom) {
    CurveKeyBindings b(2, 1000);
    EXPECT_EQ(b.check("K1", "h1", 0), R::Ok);
    EXPECT_EQ(b.check("K2", "h2", 500), R::Ok);
    EXPECT_EQ(b.check("K3", "h3", 600), R::Full);
    EXPECT_EQ(b.check("K3", "h3", 1000), R::Ok);  // K1 lapsed: room
    EXPECT_EQ(b.size(), 2u);
}

}  // namespace
}  // namespace grl

namespace grl {
namespace {

using R = CurveKeyBindings::Result;

TEST(CurveKeyBindings, AKeyListedWithNamesSpeaksForThoseOnly) {
    CurveKeyBindings b(100, 10000);
    b.pin({{"K1", {"h1", "h2"}}, {"K2", {"web-*"}}, {"K3", {}}});
    // Today's first come would bind K1 to h9; the list says h1 and h2 only.
    EXPECT_EQ(b.check("K1", "h9", 0), R::KeyTaken);
    EXPECT_EQ(b.check("K1", "h1", 1), R::Ok);
    EXPECT_EQ(b.check("K1", "h2", 2), R::Ok);  // several hosts, one key
    EXPECT_EQ(b.check("K2", "web-17", 3), R::Ok);
    EXPECT_EQ(b.check("K2", "h1", 4), R::KeyTaken);
    EXPECT_EQ(b.name_of("K1"), "h1,h2");
    // A key listed without names binds first come, but never to a name the list gives others.
    EXPECT_EQ(b.check("K3", "h2", 5), R::NameTaken);
    EXPECT_EQ(b.check("K3", "web-3", 6), R::NameTaken);
    EXPECT_EQ(b.check("K3", "h7", 7), R::Ok);
    EXPECT_EQ(b.check("K3", "h8", 8), R::KeyTaken);
    // Listed keys take no binding slots and do not lapse.
    EXPECT_EQ(b.size(), 1u);
    EXPECT_EQ(b.check("K1", "h1", 1000000), R::Ok);
}

TEST(CurveKeyBindings, SweepDropsAndCountsLapsedBindings) {
    CurveKeyBindings b(100, 10000);
    EXPECT_EQ(b.check("K1", "h1", 0), R::Ok);
    EXPECT_EQ(b.check("K2", "h2", 5000), R::Ok);
    EXPECT_EQ(b.sweep(9999), 0u);
    EXPECT_EQ(b.sweep(10000), 1u);  // K1 unused for 10 s
    EXPECT_EQ(b.size(), 1u);
    EXPECT_EQ(b.lapsed(), 1u);
    EXPECT_EQ(b.name_of("K1"), "");
    EXPECT_EQ(b.check("K3", "h1", 10001), R::Ok);  // h1 is free for a new key pair
    // A binding taken over when its key moves on counts as lapsed too.
    EXPECT_EQ(b.check("K2", "h9", 15000), R::Ok);
    EXPECT_EQ(b.lapsed(), 2u);
}

TEST(CurveKeyBindings, AReloadedListRefusesRemovedKeysAndDropsWhatItContradicts) {
    CurveKeyBindings b(100, 60000);
    b.pin({{"K1", {}}, {"K2", {}}, {"K3", {}}});
    EXPECT_EQ(b.check("K1", "h1", 0), R::Ok);
    EXPECT_EQ(b.check("K2", "h2", 0), R::Ok);
    EXPECT_EQ(b.check("K3", "h3", 0), R::Ok);
    EXPECT_EQ(b.check("K9", "h9", 0), R::NotListed);  // never listed (ZAP refuses it anyway)
    // The new list: K1 removed, K2 now named web-*, h3 given to K4; K5 new.
    EXPECT_EQ(b.pin({{"K2", {"web-*"}}, {"K3", {}}, {"K4", {"h3"}}, {"K5", {}}}), 3u);
    EXPECT_EQ(b.check("K1", "h1", 1), R::NotListed);  // its live connection speaks no more
    EXPECT_EQ(b.check("K2", "h2", 2), R::KeyTaken);   // named now: web-* only
    EXPECT_EQ(b.check("K2", "web-1", 3), R::Ok);
    EXPECT_EQ(b.check("K3", "h3", 4), R::NameTaken);  // the list gives h3 to K4
    EXPECT_EQ(b.check("K4", "h3", 5), R::Ok);
    EXPECT_EQ(b.check("K5", "h1", 6), R::Ok);  // K1's name is free at once
    EXPECT_EQ(b.check("K3", "h7", 7), R::Ok);
    EXPECT_EQ(b.lapsed(), 0u);  // dropped by the list, not lapsed
}

TEST(CurveKeyBindings, WithoutAListEveryKeyIsTaken) {
    // Peer connections are bound by endpoint, with no list.
    CurveKeyBindings b(2, 1000);
    EXPECT_EQ(b.check("tcp://a:1", "ctl-a", 0), R::Ok);
}

}  // namespace
}  // namespace grl
