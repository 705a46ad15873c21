// Unit tests of usage in parts (grl/usage_parts.h, docs/protocol.md "Usage in parts"): the
// sender's split, the receiver's assembly, and every way a set can fail to assemble. The
// receiver's clock is a plain number.
#include "grl/usage_parts.h"

#include "grl/usage_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace grl::wire {
namespace {

UsageBucket bucket(std::size_t i) {
    UsageBucket b;
    char name[32];
    std::snprintf(name, sizeof(name), "bucket-%05zu", i);
    b.name = name;
    b.offered_mrps = 1000 * i;
    b.admitted_mrps = 900 * i;
    b.dropped_mrps = 100 * i;
    b.hosts = 3;
    b.rated_hosts = 3;
    b.definitions.push_back({{Scope::Global, Mode::Deny, 5000}, 3});
    return b;
}

ZoneUsage zone_usage(std::size_t buckets, std::uint64_t seq = 7) {
    ZoneUsage u;
    u.source = "collector-a";
    u.region = "eu";
    u.zone = "a";
    u.seq = seq;
    u.ts_ms = 1700000000000;
    u.interval_ms = 250;
    u.hosts = 3;
    u.host_names = {"h1", "h2", "h3"};
    for (std::size_t i = 0; i < buckets; ++i) u.buckets.push_back(bucket(i));
    return u;
}

RegionUsage region_usage(std::size_t buckets) {
    RegionUsage u;
    u.source = "ctl-us";
    u.region = "us";
    u.seq = 3;
    u.ts_ms = 1700000000000;
    u.interval_ms = 250;
    u.zones = 2;
    u.hosts = 3;
    u.limits_digest = "0123456789abcdef";
    Override o;
    o.name = "bucket-00001";
    o.limit_mrps = 1000;
    o.set_ms = 5;
    o.origin = "ctl-us";
    u.overrides.push_back(o);
    for (std::size_t i = 0; i < buckets; ++i) u.buckets.push_back(bucket(i));
    return u;
}

template <class Usage>
std::vector<Usage> decode_all(const std::vector<std::string>& bytes) {
    std::vector<Usage> out;
    for (const std::string& b : bytes) {
        Usage m;
        std::string error;
        EXPECT_TRUE(decode(b, m, error)) << error;
        out.push_back(std::move(m));
    }
    return out;
}

std::vector<std::string> names(const std::vector<UsageBucket>& v) {
    std::vector<std::string> n;
    n.reserve(v.size());
    for (const auto& b : v) n.push_back(b.name);
    return n;
}

TEST(UsageParts, SmallUsageIsOneMessageWithoutPartKeys) {
    ZoneUsage u = zone_usage(10);
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(u, out));
    ASSERT_EQ(out.size(), 1u);
    std::string whole;
    encode(u, whole);
    EXPECT_EQ(out[0], whole);  // what a sender that predates parts sends
    EXPECT_EQ(whole.find("parts"), std::string::npos);
}

TEST(UsageParts, TenThousandBucketsSplitIntoThreeContiguousParts) {
    ZoneUsage u = zone_usage(10000);
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(u, out));
    ASSERT_EQ(out.size(), 3u);
    std::vector<ZoneUsage> parts = decode_all<ZoneUsage>(out);
    std::vector<std::string> all;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        EXPECT_EQ(parts[i].part, i);
        EXPECT_EQ(parts[i].parts, 3u);
        EXPECT_EQ(parts[i].seq, 7u);
        EXPECT_LE(parts[i].buckets.size(), kMaxBucketsPerMessage);
        EXPECT_LE(out[i].size(), kMaxMessageBytes);
        EXPECT_EQ(parts[i].host_names.empty(), i != 0);  // host names in part 0 only
        for (auto& n : names(parts[i].buckets)) all.push_back(n);
    }
    EXPECT_EQ(all, names(u.buckets));
}

TEST(UsageParts, ByteBoundSplitsFurther) {
    ZoneUsage u = zone_usage(1000);
    std::string whole;
    encode(u, whole);
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(u, out, whole.size() / 3));
    EXPECT_EQ(out.size(), 4u);  // 2 by count would not fit a third of the bytes; 4 do
    for (const std::string& b : out) EXPECT_LE(b.size(), whole.size() / 3);
}

TEST(UsageParts, RefusesWhatSixteenPartsCannotHold) {
    std::vector<std::string> out;
    EXPECT_FALSE(encode_parts(zone_usage(kMaxUsageBuckets + 1), out));
    EXPECT_TRUE(out.empty());
    EXPECT_FALSE(encode_parts(zone_usage(1000), out, 200));  // ~5 buckets per part needed
    EXPECT_TRUE(out.empty());
}

TEST(UsageParts, AssemblesPartsInAnyOrder) {
    ZoneUsage u = zone_usage(10000);
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(u, out));
    std::vector<ZoneUsage> parts = decode_all<ZoneUsage>(out);
    PartAssembler<ZoneUsage> a(4, 250);
    EXPECT_EQ(a.add(parts[2], 1000), PartResult::Pending);
    EXPECT_EQ(a.add(parts[0], 1001), PartResult::Pending);
    EXPECT_EQ(a.pending(), 1u);
    ASSERT_EQ(a.add(parts[1], 1002), PartResult::Complete);
    const ZoneUsage& m = parts[1];
    EXPECT_EQ(m.parts, 1u);
    EXPECT_EQ(m.part, 0u);
    EXPECT_EQ(m.host_names, u.host_names);
    EXPECT_EQ(m.hosts, 3u);
    EXPECT_EQ(m.seq, 7u);
    EXPECT_EQ(names(m.buckets), names(u.buckets));
    EXPECT_EQ(m.buckets[9999].offered_mrps, u.buckets[9999].offered_mrps);
    EXPECT_EQ(a.pending(), 0u);
    EXPECT_EQ(a.incomplete(), 0u);
}

TEST(UsageParts, RegionUsageKeepsOverridesOfPartZero) {
    RegionUsage u = region_usage(5000);
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(u, out));
    ASSERT_EQ(out.size(), 2u);
    std::vector<RegionUsage> parts = decode_all<RegionUsage>(out);
    EXPECT_TRUE(parts[1].overrides.empty());
    PartAssembler<RegionUsage> a(4, 250);
    EXPECT_EQ(a.add(parts[0], 0), PartResult::Pending);
    ASSERT_EQ(a.add(parts[1], 0), PartResult::Complete);
    EXPECT_EQ(parts[1].buckets.size(), 5000u);
    ASSERT_EQ(parts[1].overrides.size(), 1u);
    EXPECT_EQ(parts[1].overrides[0], u.overrides[0]);
    EXPECT_EQ(parts[1].limits_digest, u.limits_digest);
}

TEST(UsageParts, WholeMessagePassesThrough) {
    PartAssembler<ZoneUsage> a(4, 250);
    ZoneUsage u = zone_usage(3);
    EXPECT_EQ(a.add(u, 0), PartResult::Whole);
    EXPECT_EQ(u.buckets.size(), 3u);
    EXPECT_EQ(a.pending(), 0u);
}

TEST(UsageParts, IncompleteSetExpiresAfterTheTimeout) {
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(zone_usage(10000), out));
    std::vector<ZoneUsage> parts = decode_all<ZoneUsage>(out);
    PartAssembler<ZoneUsage> a(4, 250);
    EXPECT_EQ(a.add(parts[0], 1000), PartResult::Pending);
    EXPECT_EQ(a.add(parts[1], 1100), PartResult::Pending);
    EXPECT_EQ(a.expire(1250), 0u);  // the timeout counts from the first part
    EXPECT_EQ(a.expire(1251), 1u);
    EXPECT_EQ(a.pending(), 0u);
    EXPECT_EQ(a.incomplete(), 1u);
    // The last part alone now starts a set of its own, which never completes.
    EXPECT_EQ(a.add(parts[2], 1300), PartResult::Pending);
}

TEST(UsageParts, NewerSetSupersedesAnIncompleteOne) {
    std::vector<std::string> a_out, b_out;
    ASSERT_TRUE(encode_parts(zone_usage(10000, 7), a_out));
    ASSERT_TRUE(encode_parts(zone_usage(10000, 8), b_out));
    std::vector<ZoneUsage> old_parts = decode_all<ZoneUsage>(a_out);
    std::vector<ZoneUsage> new_parts = decode_all<ZoneUsage>(b_out);
    PartAssembler<ZoneUsage> a(4, 250);
    EXPECT_EQ(a.add(old_parts[0], 0), PartResult::Pending);
    EXPECT_EQ(a.add(new_parts[0], 1), PartResult::Pending);
    EXPECT_EQ(a.incomplete(), 1u);
    std::string why;
    EXPECT_EQ(a.add(old_parts[1], 2, &why), PartResult::Stale);  // late part of seq 7
    EXPECT_NE(why.find("older"), std::string::npos) << why;
    EXPECT_EQ(a.add(new_parts[1], 3), PartResult::Pending);
    ASSERT_EQ(a.add(new_parts[2], 4), PartResult::Complete);
    EXPECT_EQ(new_parts[2].seq, 8u);
    EXPECT_EQ(new_parts[2].buckets.size(), 10000u);
}

TEST(UsageParts, PartsThatDisagreeDropTheSet) {
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(zone_usage(10000), out));
    std::vector<ZoneUsage> parts = decode_all<ZoneUsage>(out);
    PartAssembler<ZoneUsage> a(4, 250);
    EXPECT_EQ(a.add(parts[0], 0), PartResult::Pending);
    parts[1].hosts = 4;  // a part of another count of hosts cannot be summed with the others
    std::string why;
    EXPECT_EQ(a.add(parts[1], 0, &why), PartResult::Inconsistent);
    EXPECT_NE(why.find("collector-a"), std::string::npos) << why;
    EXPECT_EQ(a.pending(), 0u);
}

TEST(UsageParts, DuplicatePartOrBucketDropsTheSet) {
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(zone_usage(10000), out));
    std::vector<ZoneUsage> parts = decode_all<ZoneUsage>(out);
    PartAssembler<ZoneUsage> a(4, 250);
    ZoneUsage copy = parts[0];
    EXPECT_EQ(a.add(parts[0], 0), PartResult::Pending);
    EXPECT_EQ(a.add(copy, 0), PartResult::Inconsistent);

    parts = decode_all<ZoneUsage>(out);
    parts[2].buckets[0].name = parts[0].buckets[5].name;  // one bucket in two parts
    EXPECT_EQ(a.add(parts[0], 0), PartResult::Pending);
    EXPECT_EQ(a.add(parts[1], 0), PartResult::Pending);
    std::string why;
    EXPECT_EQ(a.add(parts[2], 0, &why), PartResult::Inconsistent);
    EXPECT_NE(why.find("two parts"), std::string::npos) << why;
    EXPECT_EQ(a.pending(), 0u);
}

TEST(UsageParts, BoundedPendingSources) {
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(zone_usage(10000), out));
    PartAssembler<ZoneUsage> a(1, 250);
    std::vector<ZoneUsage> parts = decode_all<ZoneUsage>(out);
    EXPECT_EQ(a.add(parts[0], 0), PartResult::Pending);
    std::vector<ZoneUsage> other = decode_all<ZoneUsage>(out);
    other[0].source = "collector-b";
    EXPECT_EQ(a.add(other[0], 0), PartResult::Full);
    EXPECT_EQ(a.add(parts[1], 0), PartResult::Pending);  // the held source goes on
    EXPECT_EQ(a.add(parts[2], 0), PartResult::Complete);
    EXPECT_EQ(a.add(other[0], 0), PartResult::Pending);  // room again
}

TEST(UsageParts, DecoderRefusesBadPartKeys) {
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(zone_usage(10000), out));
    ZoneUsage m;
    std::string error;
    // Part 1 carrying host names: only part 0 may.
    ZoneUsage p1;
    ASSERT_TRUE(decode(out[1], p1, error)) << error;
    p1.host_names = {"h1"};
    std::string bytes;
    encode(p1, bytes);
    EXPECT_FALSE(decode(bytes, m, error));
    EXPECT_NE(error.find("host_names"), std::string::npos) << error;
    // part >= parts, parts beyond kMaxParts.
    p1.host_names.clear();
    p1.part = 3;
    bytes.clear();
    encode(p1, bytes);
    EXPECT_FALSE(decode(bytes, m, error));
    EXPECT_NE(error.find("\"part\" 3"), std::string::npos) << error;
    p1.part = 1;
    p1.parts = kMaxParts + 1;
    bytes.clear();
    encode(p1, bytes);
    EXPECT_FALSE(decode(bytes, m, error));
    EXPECT_NE(error.find("\"parts\" 17"), std::string::npos) << error;
}

// The controller's intake: every part read into one buffer, assembled, the whole swapped with
// the usage held, the replaced buckets handed back (recycle). Entries are reused from set to
// set, so each read must overwrite all of an entry: usages whose entries differ in names,
// counts, definitions and host names follow one another, and each assembles exactly.
TEST(UsageParts, SparesReusedAcrossSetsGiveExactUsage) {
    auto variant = [](int round) {
        ZoneUsage u = zone_usage(round % 2 == 0 ? 10000 : 9000, 10 + round);
        for (std::size_t i = 0; i < u.buckets.size(); ++i) {
            UsageBucket& b = u.buckets[i];
            if (round == 1) {
                b.definitions.push_back({{Scope::Zone, Mode::Shadow, 7000}, 0});
                b.offered_mrps += 5;
            }
            if (round == 2 && i % 3 == 0) {
                b.name = "other-" + b.name;  // names move: not where the last set had them
                b.hosts = 2;
                b.rated_hosts = 1;
                b.definitions[0].hosts = 2;
                b.host_names = {"h1", "h3"};
            }
        }
        if (round == 2) {
            std::sort(u.buckets.begin(), u.buckets.end(),
                      [](const UsageBucket& a, const UsageBucket& b) { return a.name < b.name; });
        }
        return u;
    };
    PartAssembler<ZoneUsage> a(4, 250);
    ZoneUsage read, held;
    for (int round = 0; round < 5; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        const ZoneUsage u = variant(round % 4);
        std::vector<std::string> bytes;
        ASSERT_TRUE(encode_parts(u, bytes));
        ASSERT_EQ(bytes.size(), 3u);
        for (std::size_t p = 0; p < bytes.size(); ++p) {
            std::string error;
            ASSERT_TRUE(read_usage(bytes[p], read, error)) << error;
            ASSERT_EQ(a.add(read, 1000 + round),
                      p + 1 < bytes.size() ? PartResult::Pending : PartResult::Complete);
        }
        ASSERT_EQ(read.buckets.size(), u.buckets.size());
        EXPECT_EQ(read.seq, u.seq);
        EXPECT_EQ(read.host_names, u.host_names);
        for (std::size_t i = 0; i < u.buckets.size(); ++i) {
            const UsageBucket &got = read.buckets[i], &want = u.buckets[i];
            ASSERT_EQ(got.name, want.name) << i;
            ASSERT_EQ(got.offered_mrps, want.offered_mrps) << i;
            ASSERT_EQ(got.admitted_mrps, want.admitted_mrps) << i;
            ASSERT_EQ(got.dropped_mrps, want.dropped_mrps) << i;
            ASSERT_EQ(got.hosts, want.hosts) << i;
            ASSERT_EQ(got.rated_hosts, want.rated_hosts) << i;
            ASSERT_EQ(got.definitions, want.definitions) << i;
            ASSERT_EQ(got.host_names, want.host_names) << i;
            ASSERT_TRUE(got.keys.empty()) << i;
        }
        std::swap(read, held);
        a.recycle(read.buckets);
        if (round >= 3) {
            // Once warm (the first whole is new, its empty entries go round through the parts
            // once), the read buffer is handed a used vector whose entries keep their
            // definitions' capacity, and spares wait for the next set.
            ASSERT_FALSE(read.buckets.empty());
            EXPECT_GT(read.buckets[0].definitions.capacity(), 0u);
            EXPECT_GT(a.spares(), 0u);
        }
    }
    EXPECT_LE(a.spares(), 8u);
}

}  // namespace
}  // namespace grl::wire
