// Unit tests of usage in parts (grl/usage_parts.h, docs/protocol.md "Usage in parts"): the
// sender's split, the receiver's assembly, and every way a set can fail to assemble. The
// receiver's clock is a plain number.
#include "grl/wire/usage_parts.h"

#include "grl/wire/usage_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "allocations.h"
#include "usage_equal.h"

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

// Sets are held per zone and source: a sender for zone "b" using zone "a"'s collector's name
// and a huge seq cannot make a's parts stale, and invented sources fill only their own zone.
TEST(UsageParts, AZoneCannotTouchAnotherZonesSets) {
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(zone_usage(10000), out));
    PartAssembler<ZoneUsage> a(16, 250);
    std::vector<ZoneUsage> parts = decode_all<ZoneUsage>(out);
    EXPECT_EQ(a.add(parts[0], 0), PartResult::Pending);
    std::vector<ZoneUsage> evil = decode_all<ZoneUsage>(out);
    evil[0].zone = "b";
    evil[0].seq = 1ULL << 62;
    EXPECT_EQ(a.add(evil[0], 0), PartResult::Pending);  // a set of its own
    std::string why;
    for (std::size_t i = 1; i < kMaxSourcesPerZone; ++i) {
        std::vector<ZoneUsage> more = decode_all<ZoneUsage>(out);
        more[0].zone = "b";
        more[0].source = "invented-" + std::to_string(i);
        EXPECT_EQ(a.add(more[0], 0), PartResult::Pending);
    }
    std::vector<ZoneUsage> full = decode_all<ZoneUsage>(out);
    full[0].zone = "b";
    full[0].source = "invented-x";
    EXPECT_EQ(a.add(full[0], 0, &why), PartResult::Full);
    EXPECT_NE(why.find("sources of zone b"), std::string::npos) << why;
    EXPECT_EQ(a.add(parts[1], 0), PartResult::Pending);
    EXPECT_EQ(a.add(parts[2], 0), PartResult::Complete);
    // Zone "a" still takes a source of its own.
    std::vector<ZoneUsage> other = decode_all<ZoneUsage>(out);
    other[0].source = "collector-b";
    EXPECT_EQ(a.add(other[0], 0), PartResult::Pending);
}

// A set whose parts hold more bytes than the bound is dropped whole, its other parts ignored,
// its memory returned; the source's next set assembles.
TEST(UsageParts, ASetHoldingTooManyBytesIsDropped) {
    std::vector<std::string> out;
    ASSERT_TRUE(encode_parts(zone_usage(10000), out));
    std::vector<ZoneUsage> parts = decode_all<ZoneUsage>(out);
    std::size_t part_bytes = 0;
    for (const UsageBucket& b : parts[0].buckets) part_bytes += held_bytes(b);
    PartAssembler<ZoneUsage> a(4, 250, part_bytes * 3 / 2);
    std::string why;
    EXPECT_EQ(a.add(parts[0], 0), PartResult::Pending);
    EXPECT_EQ(a.add(parts[1], 0, &why), PartResult::TooLarge);
    EXPECT_NE(why.find("bytes in memory"), std::string::npos) << why;
    EXPECT_EQ(a.pending(), 0u);
    EXPECT_EQ(a.add(parts[2], 0), PartResult::TooLarge);
    ASSERT_TRUE(encode_parts(zone_usage(4500, 8), out));
    std::vector<ZoneUsage> next = decode_all<ZoneUsage>(out);
    ASSERT_EQ(next.size(), 2u);
    EXPECT_EQ(a.add(next[0], 0), PartResult::Pending);
    EXPECT_EQ(a.add(next[1], 0), PartResult::Complete);
    EXPECT_EQ(next[1].buckets.size(), 4500u);
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

// The controller's intake: every part read (in place by PartAssembler::read, or into one buffer
// by read_usage), assembled, the whole swapped with the usage held, the replaced one handed back
// (recycle). Entries are reused from set to set, so each read must overwrite all of an entry:
// usages whose entries differ in names, counts, definitions and host names follow one another,
// and each assembles exactly.
void entries_reused_across_sets_give_exact_usage(bool in_place) {
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
            ASSERT_TRUE(in_place ? a.read(bytes[p], read, error)
                                 : read_usage(bytes[p], read, error))
                << error;
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
        a.recycle(read);
    }
    EXPECT_LE(a.spares(), 8u);
}

TEST(UsageParts, EntriesReusedAcrossSetsGiveExactUsageReadInPlace) {
    entries_reused_across_sets_give_exact_usage(true);
}

TEST(UsageParts, EntriesReusedAcrossSetsGiveExactUsageReadElsewhere) {
    entries_reused_across_sets_give_exact_usage(false);
}

// The controller's intake since the parts are read in place: PartAssembler::read(), add(), the
// whole swapped with the usage held for its source, the replaced one handed back (recycle()).
template <class Usage>
struct Intake {
    explicit Intake(std::size_t max_sources = 4) : a(max_sources, 250) {}
    PartAssembler<Usage> a;
    Usage read;
    std::map<std::string, Usage> held;  // by source
    std::uint64_t now = 1000;

    // Reads and adds one message; on Complete or Whole checks it is `want` and holds it.
    PartResult take(const std::string& bytes, const Usage* want = nullptr, UsageRead* how = nullptr,
                    std::string* why = nullptr) {
        std::string error;
        UsageRead h = UsageRead::Decoded;
        EXPECT_TRUE(a.read(bytes, read, error, &h)) << error;
        if (how) *how = h;
        const PartResult r = a.add(read, ++now, why);
        if (r != PartResult::Complete && r != PartResult::Whole) return r;
        if (want) {
            EXPECT_TRUE(usage_equal::same(read, *want)) << read.source << " seq " << read.seq;
        }
        std::swap(read, held[read.source]);
        a.recycle(read);
        return r;
    }
};

std::vector<std::string> parts_of(const ZoneUsage& u) {
    std::vector<std::string> out;
    EXPECT_TRUE(encode_parts(u, out));
    return out;
}

// The usage of `round`: the same names, other counts (what a collector sends tick after tick).
ZoneUsage round_usage(std::size_t buckets, std::uint64_t round, const std::string& source) {
    ZoneUsage u = zone_usage(buckets, 10 + round);
    u.source = source;
    for (UsageBucket& b : u.buckets) b.offered_mrps += round;
    if (round % 2 == 1) u.buckets[7].definitions.push_back({{Scope::Zone, Mode::Shadow, 7000}, 0});
    return u;
}

TEST(UsageParts, PartsReadInPlaceInOrderGiveTheWholeUsage) {
    Intake<ZoneUsage> in;
    for (std::uint64_t round = 0; round < 4; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        const ZoneUsage u = round_usage(10000, round, "collector-a");
        const std::vector<std::string> parts = parts_of(u);
        ASSERT_EQ(parts.size(), 3u);
        for (std::size_t p = 0; p < parts.size(); ++p) {
            UsageRead how = UsageRead::Decoded;
            EXPECT_EQ(in.take(parts[p], &u, &how),
                      p + 1 < parts.size() ? PartResult::Pending : PartResult::Complete);
            EXPECT_EQ(how, UsageRead::Fast);
        }
    }
    EXPECT_EQ(in.a.pending(), 0u);
    EXPECT_EQ(in.a.incomplete(), 0u);
}

TEST(UsageParts, PartsReadInPlaceOutOfOrderGiveTheWholeUsage) {
    Intake<ZoneUsage> in;
    for (std::uint64_t round = 0; round < 3; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        const ZoneUsage u = round_usage(10000, round, "collector-a");
        const std::vector<std::string> parts = parts_of(u);
        // Round 1 in order, after a set out of order: the set's vector was put in order.
        const std::vector<std::size_t> order =
            round == 1 ? std::vector<std::size_t>{0, 1, 2} : std::vector<std::size_t>{2, 0, 1};
        EXPECT_EQ(in.take(parts[order[0]], &u), PartResult::Pending);
        EXPECT_EQ(in.take(parts[order[1]], &u), PartResult::Pending);
        EXPECT_EQ(in.take(parts[order[2]], &u), PartResult::Complete);
    }
}

TEST(UsageParts, APartMissingThenANewerSetGivesTheNewerUsage) {
    Intake<ZoneUsage> in;
    const ZoneUsage u0 = round_usage(10000, 0, "collector-a");
    const std::vector<std::string> p0 = parts_of(u0);
    for (const std::string& p : p0) in.take(p, &u0);
    // Seq 11 loses its last part; seq 12's parts are read after seq 11's two, and taken to the
    // front of the set's vector when seq 12 supersedes seq 11.
    const ZoneUsage u1 = round_usage(10000, 1, "collector-a");
    const ZoneUsage u2 = round_usage(10000, 2, "collector-a");
    const std::vector<std::string> p1 = parts_of(u1), p2 = parts_of(u2);
    EXPECT_EQ(in.take(p1[0]), PartResult::Pending);
    EXPECT_EQ(in.take(p1[1]), PartResult::Pending);
    EXPECT_EQ(in.take(p2[0], &u2), PartResult::Pending);
    EXPECT_EQ(in.a.incomplete(), 1u);
    std::string why;
    EXPECT_EQ(in.take(p1[2], nullptr, nullptr, &why), PartResult::Stale);  // seq 11's, late
    EXPECT_NE(why.find("older"), std::string::npos) << why;
    EXPECT_EQ(in.take(p2[1], &u2), PartResult::Pending);
    EXPECT_EQ(in.take(p2[2], &u2), PartResult::Complete);
    // And the next set, in order, into the vector the controller hands back.
    const ZoneUsage u3 = round_usage(10000, 3, "collector-a");
    const std::vector<std::string> p3 = parts_of(u3);
    for (std::size_t p = 0; p < p3.size(); ++p) {
        EXPECT_EQ(in.take(p3[p], &u3),
                  p + 1 < p3.size() ? PartResult::Pending : PartResult::Complete);
    }
    EXPECT_EQ(in.a.incomplete(), 1u);
}

TEST(UsageParts, ABucketOnBothSidesOfAPartBoundaryIsRefused) {
    Intake<ZoneUsage> in;
    for (int round = 0; round < 2; ++round) {  // into a new set's vector, then a used one
        ZoneUsage u = round_usage(10000, static_cast<std::uint64_t>(round), "collector-a");
        // encode_parts cuts 10,000 buckets at 3,333 and 6,666: part 0 ends with the name part 1
        // starts with. Each part's names ascend, so each is read in place.
        u.buckets[3333].name = u.buckets[3332].name;
        const std::vector<std::string> parts = parts_of(u);
        ASSERT_EQ(parts.size(), 3u);
        std::string why;
        UsageRead how = UsageRead::Decoded;
        EXPECT_EQ(in.take(parts[0], nullptr, &how), PartResult::Pending);
        EXPECT_EQ(how, UsageRead::Fast);
        EXPECT_EQ(in.take(parts[1], nullptr, &how), PartResult::Pending);
        EXPECT_EQ(how, UsageRead::Fast);
        EXPECT_EQ(in.take(parts[2], nullptr, nullptr, &why), PartResult::Inconsistent);
        EXPECT_EQ(why, "bucket \"bucket-03332\" in two parts of collector-a's usage seq " +
                           std::to_string(u.seq));
        EXPECT_EQ(in.a.pending(), 0u);
        // The source's next set is whole again.
        const ZoneUsage next = round_usage(10000, 5 + round, "collector-a");
        for (const std::string& p : parts_of(next)) in.take(p, &next);
    }
}

TEST(UsageParts, SetsOfSourcesInterleavedEachGiveTheirUsage) {
    Intake<ZoneUsage> in;
    for (std::uint64_t round = 0; round < 4; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        const ZoneUsage a = round_usage(10000, round, "collector-a");
        const ZoneUsage b = round_usage(9000, round, "collector-b");
        const ZoneUsage c = round_usage(5000, round, "collector-c");
        const ZoneUsage d = round_usage(10, round, "collector-d");  // one message
        const std::vector<std::string> pa = parts_of(a), pb = parts_of(b), pc = parts_of(c);
        const std::vector<std::string> pd = parts_of(d);
        ASSERT_EQ(pb.size(), 3u);
        ASSERT_EQ(pc.size(), 2u);
        ASSERT_EQ(pd.size(), 1u);
        EXPECT_EQ(in.take(pa[0], &a), PartResult::Pending);
        EXPECT_EQ(in.take(pb[0], &b), PartResult::Pending);
        EXPECT_EQ(in.take(pd[0], &d), PartResult::Whole);
        EXPECT_EQ(in.take(pa[1], &a), PartResult::Pending);
        EXPECT_EQ(in.take(pc[0], &c), PartResult::Pending);
        EXPECT_EQ(in.take(pb[1], &b), PartResult::Pending);
        EXPECT_EQ(in.a.pending(), 3u);
        EXPECT_EQ(in.take(pa[2], &a), PartResult::Complete);
        EXPECT_EQ(in.take(pc[1], &c), PartResult::Complete);
        EXPECT_EQ(in.take(pb[2], &b), PartResult::Complete);
        EXPECT_EQ(in.a.pending(), 0u);
    }
    EXPECT_EQ(in.a.incomplete(), 0u);
}

TEST(UsageParts, PartsTheDecoderReadsAssembleWithTheOnesReadInPlace) {
    Intake<ZoneUsage> in;
    for (std::uint64_t round = 0; round < 3; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        ZoneUsage u = round_usage(10000, round, "collector-a");
        // Two names of part 1 swapped: unique but not ascending, which the one-pass reader
        // leaves to wire::decode (and assembly to the check by sorting).
        if (round != 1) std::swap(u.buckets[4000], u.buckets[4001]);
        const std::vector<std::string> parts = parts_of(u);
        for (std::size_t p = 0; p < parts.size(); ++p) {
            UsageRead how = UsageRead::Fast;
            EXPECT_EQ(in.take(parts[p], &u, &how),
                      p + 1 < parts.size() ? PartResult::Pending : PartResult::Complete);
            EXPECT_EQ(how, p == 1 && round != 1 ? UsageRead::Decoded : UsageRead::Fast) << p;
        }
    }
    // Region usage with overrides: part 0 goes to wire::decode, part 1 is read in place.
    Intake<RegionUsage> rin;
    const RegionUsage r = region_usage(5000);
    std::vector<std::string> parts;
    ASSERT_TRUE(encode_parts(r, parts));
    ASSERT_EQ(parts.size(), 2u);
    for (int round = 0; round < 2; ++round) {
        UsageRead how = UsageRead::Fast;
        EXPECT_EQ(rin.take(parts[0], &r, &how), PartResult::Pending);
        EXPECT_EQ(how, UsageRead::Decoded);
        EXPECT_EQ(rin.take(parts[1], &r, &how), PartResult::Complete);
        EXPECT_EQ(how, UsageRead::Fast);
    }
}

// A set is kept for its vector only while there is room: with 2 sources at most and 3 taking
// turns, each new source's set takes the place of the one kept longest, and every set still
// gives its usage.
TEST(UsageParts, SetsKeptForTheirVectorMakeRoomForNewSources) {
    Intake<ZoneUsage> in(2);
    for (std::uint64_t round = 0; round < 3; ++round) {
        for (const char* source : {"collector-a", "collector-b", "collector-c"}) {
            SCOPED_TRACE(std::string(source) + " round " + std::to_string(round));
            const ZoneUsage u = round_usage(10000, round, source);
            const std::vector<std::string> parts = parts_of(u);
            EXPECT_EQ(in.take(parts[0], &u), PartResult::Pending);
            EXPECT_EQ(in.take(parts[1], &u), PartResult::Pending);
            EXPECT_EQ(in.take(parts[2], &u), PartResult::Complete);
        }
    }
    // Two pending sets fill it: a third source is refused until one completes.
    const ZoneUsage a = round_usage(10000, 5, "collector-a");
    const ZoneUsage b = round_usage(10000, 5, "collector-b");
    const ZoneUsage c = round_usage(10000, 5, "collector-c");
    const std::vector<std::string> pa = parts_of(a), pb = parts_of(b), pc = parts_of(c);
    EXPECT_EQ(in.take(pa[0], &a), PartResult::Pending);
    EXPECT_EQ(in.take(pb[0], &b), PartResult::Pending);
    EXPECT_EQ(in.take(pc[0], &c), PartResult::Full);
    EXPECT_EQ(in.take(pa[1], &a), PartResult::Pending);
    EXPECT_EQ(in.take(pa[2], &a), PartResult::Complete);
    for (const std::string& p : pc) in.take(p, &c);
    EXPECT_TRUE(usage_equal::same(in.held["collector-c"], c));
    EXPECT_EQ(in.take(pb[1], &b), PartResult::Pending);
    EXPECT_EQ(in.take(pb[2], &b), PartResult::Complete);
}

// "part": 0 and "parts": 1 written out make a whole message (wire::decode takes it), also from
// a source with a set of parts: its buckets are the message's, not put in the set.
TEST(UsageParts, AWholeMessageWithPartKeysIsReadWhole) {
    Intake<ZoneUsage> in;
    const ZoneUsage u = round_usage(10000, 0, "collector-a");
    for (const std::string& p : parts_of(u)) in.take(p, &u);
    ZoneUsage whole = round_usage(100, 1, "collector-a");
    whole.part = 0;
    whole.parts = 2;
    std::string bytes;
    encode(whole, bytes);
    ASSERT_EQ(bytes.back(), '\x02');  // "parts" is the last key, its value a fixint
    bytes.back() = '\x01';
    whole.parts = 1;
    UsageRead how = UsageRead::Decoded;
    EXPECT_EQ(in.take(bytes, &whole, &how), PartResult::Whole);
    EXPECT_EQ(how, UsageRead::Fast);
    // The source's next set in parts is whole too.
    const ZoneUsage next = round_usage(10000, 2, "collector-a");
    for (const std::string& p : parts_of(next)) in.take(p, &next);
    EXPECT_TRUE(usage_equal::same(in.held["collector-a"], next));
}

// Reading and assembling the sets of two sources, interleaved, the wholes swapped with the
// usage held and the replaced ones handed back: once each source has had a set assembled into a
// vector it had before, nothing is allocated (every entry read into one of the same name, its
// definitions into their own capacity).
TEST(UsageParts, SteadyStateReadsAndAssemblesWithoutAllocating) {
    Intake<ZoneUsage> in;
    std::vector<std::vector<std::string>> pa, pb;
    std::vector<ZoneUsage> ua, ub;
    for (std::uint64_t round = 0; round < 6; ++round) {
        ua.push_back(round_usage(10000, round, "collector-a"));
        ub.push_back(round_usage(10000, round, "collector-b"));
        pa.push_back(parts_of(ua.back()));
        pb.push_back(parts_of(ub.back()));
    }
    std::uint64_t allocated = 0;
    for (std::size_t round = 0; round < 6; ++round) {
        const std::uint64_t before = test::allocations();
        for (std::size_t p = 0; p < 3; ++p) {
            in.take(pa[round][p]);
            in.take(pb[round][p]);
        }
        if (round >= 3) allocated += test::allocations() - before;
        EXPECT_TRUE(usage_equal::same(in.held["collector-a"], ua[round])) << round;
        EXPECT_TRUE(usage_equal::same(in.held["collector-b"], ub[round])) << round;
    }
    EXPECT_EQ(allocated, 0u);
}

}  // namespace
}  // namespace grl::wire
