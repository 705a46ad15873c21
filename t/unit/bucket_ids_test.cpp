// Unit tests of grl::control::BucketIds: the controller's table of bucket names by dense id.
#include "grl/control/bucket_ids.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace grl::control {
namespace {

std::vector<std::string> names_by_name(BucketIds& t) {
    std::vector<std::string> out;
    for (std::uint32_t id : t.by_name()) out.emplace_back(t.name(id));
    return out;
}

TEST(BucketIds, OneIdPerNameAndDense) {
    BucketIds t(10);
    const std::uint32_t web = t.acquire("web");
    const std::uint32_t api = t.acquire("api");
    EXPECT_EQ(web, 0u);
    EXPECT_EQ(api, 1u);
    EXPECT_EQ(t.acquire("web"), web);  // the same name, the same id
    EXPECT_EQ(t.name(web), "web");
    EXPECT_EQ(t.find("api"), api);
    EXPECT_EQ(t.find("nope"), BucketIds::kNone);
    EXPECT_EQ(t.size(), 2u);
    EXPECT_EQ(t.span(), 2u);
}

TEST(BucketIds, AnIdIsFreedWithItsLastHolderAndReused) {
    BucketIds t(10);
    const std::uint32_t a = t.acquire("a");
    const std::uint32_t b = t.acquire("b");
    t.retain(a);  // two holders of "a"
    t.release(a);
    EXPECT_EQ(t.find("a"), a);  // one holder left
    t.release(a);
    EXPECT_EQ(t.find("a"), BucketIds::kNone);
    EXPECT_EQ(t.size(), 1u);
    // A new name takes the freed id: the ids stay as many as the names held.
    const std::uint32_t c = t.acquire("a-much-longer-name-than-fits-in-a-short-string");
    EXPECT_EQ(c, a);
    EXPECT_EQ(t.name(c), "a-much-longer-name-than-fits-in-a-short-string");
    EXPECT_EQ(t.span(), 2u);
    EXPECT_EQ(t.find("b"), b);
    // The name that came back gets an id of its own again.
    EXPECT_EQ(t.acquire("a"), 2u);
}

TEST(BucketIds, ListedInNameOrderAsNamesComeAndGo) {
    BucketIds t(10);
    for (const char* n : {"web", "api", "img"}) t.acquire(n);
    EXPECT_EQ(names_by_name(t), (std::vector<std::string>{"api", "img", "web"}));
    t.release(t.find("img"));
    EXPECT_EQ(names_by_name(t), (std::vector<std::string>{"api", "web"}));
    t.acquire("b");  // takes img's id
    EXPECT_EQ(names_by_name(t), (std::vector<std::string>{"api", "b", "web"}));
}

TEST(BucketIds, ANewNameBeyondTheBoundIsRefused) {
    BucketIds t(2);
    const std::uint32_t a = t.acquire("a");
    t.acquire("b");
    EXPECT_EQ(t.acquire("c"), BucketIds::kNone);
    EXPECT_EQ(t.refused(), 1u);
    EXPECT_EQ(t.acquire("a"), a);  // names held are still given
    EXPECT_EQ(t.refused(), 1u);
    t.release(a);
    t.release(a);
    EXPECT_NE(t.acquire("c"), BucketIds::kNone);  // a freed place is taken
    EXPECT_EQ(t.size(), 2u);
}

TEST(BucketIds, NamesStayValidWhileTheTableGrows) {
    BucketIds t(100000);
    const std::uint32_t first = t.acquire("svc-00000");
    const std::string_view before = t.name(first);
    for (int i = 1; i < 20000; ++i) t.acquire("svc-" + std::to_string(100000 + i));
    EXPECT_EQ(t.name(first).data(), before.data());  // not moved
    EXPECT_EQ(t.find("svc-00000"), first);
    EXPECT_EQ(t.find("svc-119999"), 19999u);
}

}  // namespace
}  // namespace grl::control
