// read_usage() (grl/usage_reader.h) against wire::decode: the same answer, the same message,
// the same error, on valid, invalid, truncated and randomly mutated usage messages; and the
// fast path is the one taken for what grl senders write.
#include "grl/wire/usage_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "grl/wire/usage_parts.h"
#include "usage_equal.h"
#include "grl/wire/wire_control.h"

namespace grl::wire {
namespace {

using usage_equal::same;

UsageBucket bucket(std::string name, std::uint64_t hosts = 3) {
    UsageBucket b;
    b.name = std::move(name);
    b.offered_mrps = 1234567;
    b.admitted_mrps = 1000000;
    b.dropped_mrps = 234567;
    b.shadow_dropped_mrps = 7;
    b.hosts = hosts;
    b.rated_hosts = hosts > 0 ? hosts - 1 : 0;
    b.definitions.push_back({{Scope::Global, Mode::Deny, 100000, false}, hosts > 0 ? 1u : 0u});
    if (hosts > 1) b.definitions.push_back({{Scope::Zone, Mode::Shadow, 300000000000, false}, 1});
    return b;
}

ZoneUsage zone_usage(std::size_t n) {
    ZoneUsage u;
    u.source = "col-z1";
    u.region = "r1";
    u.zone = "z1";
    u.seq = 77;
    u.ts_ms = 1700000000123;
    u.interval_ms = 250;
    u.hosts = 20;
    u.stale_hosts = 2;
    u.host_names = {"h1", "h2", "h3"};
    for (std::size_t i = 0; i < n; ++i) {
        char name[32];
        std::snprintf(name, sizeof(name), "svc-%05zu.route", i);
        u.buckets.push_back(bucket(name, i % 4));
    }
    if (n > 1) u.buckets[1].host_names = {"h2"};
    return u;
}

RegionUsage region_usage(std::size_t n) {
    RegionUsage u;
    u.source = "ctl-r2";
    u.region = "r2";
    u.seq = 5;
    u.ts_ms = 1700000000000;
    u.interval_ms = 250;
    u.zones = 3;
    u.hosts = 60;
    u.limits_digest = "0123456789abcdef";
    for (std::size_t i = 0; i < n; ++i) u.buckets.push_back(bucket("b" + std::to_string(i), 5));
    std::sort(u.buckets.begin(), u.buckets.end(),
              [](const UsageBucket& a, const UsageBucket& b) { return a.name < b.name; });
    return u;
}

// A region usage with an override (which the one-pass reader leaves to wire::decode).
RegionUsage region_usage_with_override(std::size_t n) {
    RegionUsage u = region_usage(n);
    Override o;
    o.name = "b1";
    o.mode = Mode::Shadow;
    o.set_ms = 1;
    o.origin = "ctl-r2";
    u.overrides.push_back(o);
    return u;
}

// The same usage at protocol version 1 (map entries, docs/protocol.md "Versions").
template <class Usage>
Usage v1(Usage u) {
    u.v = 1;
    return u;
}

template <class Usage>
std::string bytes_of(const Usage& u) {
    std::string out;
    encode(u, out);
    return out;
}

template <class Usage>
bool valid(const std::string& b) {
    Usage m;
    std::string error;
    return decode(b, m, error);
}

// read_usage and wire::decode agree on `b`; returns how read_usage read it.
template <class Usage>
UsageRead agree(const std::string& b, const std::string& what) {
    Usage want, got;
    std::string e1, e2;
    UsageRead how = UsageRead::Fast;
    const bool a = decode(b, want, e1);
    const bool r = read_usage(b, got, e2, &how);
    EXPECT_EQ(a, r) << what << ": decode says " << (a ? "ok" : e1);
    if (a && r) {
        EXPECT_TRUE(same(want, got)) << what;
    } else {
        EXPECT_EQ(e1, e2) << what;
    }
    return how;
}

TEST(UsageReader, WhatSendersWriteTakesTheFastPath) {
    EXPECT_EQ(agree<ZoneUsage>(bytes_of(zone_usage(0)), "empty zone"), UsageRead::Fast);
    EXPECT_EQ(agree<ZoneUsage>(bytes_of(zone_usage(300)), "zone of 300"), UsageRead::Fast);
    EXPECT_EQ(agree<RegionUsage>(bytes_of(region_usage(0)), "empty region"), UsageRead::Fast);
    EXPECT_EQ(agree<RegionUsage>(bytes_of(region_usage(300)), "region of 300"), UsageRead::Fast);
    // The parts of a usage too large for one message (5000 buckets: two parts).
    std::vector<std::string> parts;
    ASSERT_TRUE(encode_parts(zone_usage(5000), parts));
    ASSERT_EQ(parts.size(), 2u);
    for (const std::string& p : parts) EXPECT_EQ(agree<ZoneUsage>(p, "zone part"), UsageRead::Fast);
    ASSERT_TRUE(encode_parts(region_usage(5000), parts));
    ASSERT_EQ(parts.size(), 2u);
    for (const std::string& p : parts) {
        EXPECT_EQ(agree<RegionUsage>(p, "region part"), UsageRead::Fast);
    }
    // Large values take the wide integer and string encodings.
    ZoneUsage big = zone_usage(2);
    big.ts_ms = UINT64_MAX;
    big.buckets[0].offered_mrps = 1ULL << 40;
    big.buckets[0].name = std::string(63, 'n');
    EXPECT_EQ(agree<ZoneUsage>(bytes_of(big), "wide values"), UsageRead::Fast);
    // What a sender of version 1 writes (--usage-version 1, or the release before) too.
    EXPECT_EQ(agree<ZoneUsage>(bytes_of(v1(zone_usage(300))), "v 1 zone"), UsageRead::Fast);
    EXPECT_EQ(agree<ZoneUsage>(bytes_of(v1(big)), "v 1 wide values"), UsageRead::Fast);
    EXPECT_EQ(agree<RegionUsage>(bytes_of(v1(region_usage(300))), "v 1 region"), UsageRead::Fast);
    ASSERT_TRUE(encode_parts(v1(zone_usage(5000)), parts));
    ASSERT_GE(parts.size(), 2u);
    for (const std::string& p : parts) {
        EXPECT_EQ(agree<ZoneUsage>(p, "v 1 zone part"), UsageRead::Fast);
    }
    ZoneUsage read;
    std::string error;
    ASSERT_TRUE(read_usage(bytes_of(v1(zone_usage(3))), read, error));
    EXPECT_EQ(read.v, 1u);
    ASSERT_TRUE(read_usage(bytes_of(zone_usage(3)), read, error));
    EXPECT_EQ(read.v, 2u);
}

TEST(UsageReader, KeyedBucketsAndOverridesAreDecoded) {
    ZoneUsage z = zone_usage(3);
    z.buckets[2].definitions = {{{Scope::Global, Mode::Deny, 1000, true}, 1}};
    z.buckets[2].keys.push_back({42, "", 5000, 10, 1});
    ASSERT_TRUE(valid<ZoneUsage>(bytes_of(z)));
    EXPECT_EQ(agree<ZoneUsage>(bytes_of(z), "keyed"), UsageRead::Decoded);
    RegionUsage r = region_usage(3);
    Override o;
    o.name = "b1";
    o.limit_mrps = 5000;
    o.set_ms = 1700000000000;
    o.origin = "ctl-r2";
    r.overrides.push_back(o);
    ASSERT_TRUE(valid<RegionUsage>(bytes_of(r)));
    EXPECT_EQ(agree<RegionUsage>(bytes_of(r), "overrides"), UsageRead::Decoded);
    // Unique names out of order: valid, left to wire::decode.
    ZoneUsage u = zone_usage(3);
    std::swap(u.buckets[0], u.buckets[2]);
    ASSERT_TRUE(valid<ZoneUsage>(bytes_of(u)));
    EXPECT_EQ(agree<ZoneUsage>(bytes_of(u), "unsorted"), UsageRead::Decoded);
}

// Messages the encoder writes but the protocol forbids: refused with wire::decode's reason.
TEST(UsageReader, InvalidMessagesAreRefusedWithTheDecodersReason) {
    std::vector<std::pair<std::string, ZoneUsage>> cases;
    auto add = [&](const char* what, auto edit) {
        ZoneUsage u = zone_usage(4);
        edit(u);
        cases.emplace_back(what, u);
    };
    add("rated above hosts", [](ZoneUsage& u) { u.buckets[1].rated_hosts = 9; });
    add("entry hosts above message", [](ZoneUsage& u) {
        u.buckets[1].hosts = 21;
        u.buckets[1].rated_hosts = 21;
    });
    add("definitions above hosts", [](ZoneUsage& u) { u.buckets[2].definitions[0].hosts = 50; });
    add("duplicate definition",
        [](ZoneUsage& u) { u.buckets[3].definitions[1] = u.buckets[3].definitions[0]; });
    add("entry host names above hosts", [](ZoneUsage& u) {
        u.buckets[1].host_names = {"a", "b", "c"};
    });
    add("message host names above hosts", [](ZoneUsage& u) { u.hosts = 2; });
    add("duplicate bucket", [](ZoneUsage& u) { u.buckets[2].name = u.buckets[1].name; });
    add("invalid bucket name", [](ZoneUsage& u) { u.buckets[0].name = "a b"; });
    add("empty zone name", [](ZoneUsage& u) { u.zone.clear(); });
    add("invalid host name", [](ZoneUsage& u) { u.host_names[0] = "h/1"; });
    add("part not below parts", [](ZoneUsage& u) {
        u.part = 3;
        u.parts = 3;
    });
    add("too many parts", [](ZoneUsage& u) { u.parts = 17; });
    add("host names beyond part 0", [](ZoneUsage& u) {
        u.part = 1;
        u.parts = 2;
    });
    for (const auto& [what, u] : cases) {
        ZoneUsage out;
        std::string error;
        EXPECT_FALSE(decode(bytes_of(u), out, error)) << what;
        agree<ZoneUsage>(bytes_of(u), what);
    }
    RegionUsage r = region_usage(2);
    r.limits_digest = std::string(65, 'f');
    agree<RegionUsage>(bytes_of(r), "long digest");
}

// A usage of another "v" than 1 or 2, and an entry of the other version's shape, go to
// wire::decode, whose reason the caller gets.
TEST(UsageReader, OtherVersionsAndShapesAreDecodersToRefuse) {
    std::string b = bytes_of(zone_usage(3));
    ASSERT_EQ(b.substr(1, 3), std::string("\xa1v\x02"));  // map header, then "v": 2
    ZoneUsage out;
    std::string error;
    for (char v : {'\x00', '\x03'}) {
        b[3] = v;
        EXPECT_EQ(agree<ZoneUsage>(b, "v " + std::to_string(v)), UsageRead::Decoded);
        EXPECT_FALSE(read_usage(b, out, error));
        EXPECT_EQ(error, "bad \"v\" " + std::to_string(v) + " (want 1 or 2)");
    }
    b[3] = '\x01';  // positional entries under "v" 1
    EXPECT_EQ(agree<ZoneUsage>(b, "v 1 of positional entries"), UsageRead::Decoded);
    EXPECT_FALSE(read_usage(b, out, error));
    EXPECT_EQ(error, "bad entry type array (want map) in buckets[0]");
    std::string m = bytes_of(v1(zone_usage(3)));
    m[3] = '\x02';  // map entries under "v" 2
    EXPECT_EQ(agree<ZoneUsage>(m, "v 2 of map entries"), UsageRead::Decoded);
    EXPECT_FALSE(read_usage(m, out, error));
    EXPECT_EQ(error, "bad entry type map (want array) in buckets[0]");
    // A definition with "keyed" false is valid (written only when true): decoded, not refused.
    ZoneUsage u = zone_usage(2);
    std::string k = bytes_of(u);
    const std::string def = std::string(
        "\x94\xa6"
        "global"
        "\xa4"
        "deny");
    const std::size_t at = k.find(def);
    ASSERT_NE(at, std::string::npos);
    k[at] = '\x95';
    // limit_mrps 100000 (0xce + 4 bytes) and hosts (a fixint) follow; then false.
    k.insert(at + def.size() + 5 + 1, 1, '\xc2');
    EXPECT_EQ(agree<ZoneUsage>(k, "keyed false"), UsageRead::Decoded);
    EXPECT_TRUE(read_usage(k, out, error)) << error;
}

TEST(UsageReader, EveryTruncationAndTrailingByteAgree) {
    const std::string z = bytes_of(zone_usage(3));
    for (std::size_t n = 0; n < z.size(); ++n) agree<ZoneUsage>(z.substr(0, n), "truncated");
    agree<ZoneUsage>(z + '\0', "trailing byte");
    const std::string r = bytes_of(region_usage(3));
    for (std::size_t n = 0; n < r.size(); ++n) agree<RegionUsage>(r.substr(0, n), "truncated");
    agree<RegionUsage>(r + '\xc0', "trailing byte");
    // One type for the other.
    agree<RegionUsage>(z, "zone usage read as region usage");
    agree<ZoneUsage>(r, "region usage read as zone usage");
    const std::string z1 = bytes_of(v1(zone_usage(3)));
    for (std::size_t n = 0; n < z1.size(); ++n) agree<ZoneUsage>(z1.substr(0, n), "v 1 truncated");
    const std::string r1 = bytes_of(v1(region_usage(3)));
    for (std::size_t n = 0; n < r1.size(); ++n) {
        agree<RegionUsage>(r1.substr(0, n), "v 1 truncated");
    }
}

template <class Usage>
void mutate_and_agree(const std::vector<std::string>& bases, std::uint64_t seed, int rounds) {
    std::mt19937_64 rng(seed);
    for (int round = 0; round < rounds; ++round) {
        std::string b = bases[rng() % bases.size()];
        const int edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < edits; ++e) {
            const std::size_t pos = rng() % b.size();
            switch (rng() % 4) {
                case 0: b[pos] = static_cast<char>(rng()); break;
                case 1: b[pos] = static_cast<char>(b[pos] ^ (1 << (rng() % 8))); break;
                case 2: b.erase(pos, 1 + rng() % 3); break;
                case 3: b.insert(pos, 1, static_cast<char>(rng())); break;
            }
            if (b.empty()) b = "x";
        }
        agree<Usage>(b, "mutation " + std::to_string(round));
        if (testing::Test::HasFailure()) return;
    }
}

TEST(UsageReader, RandomMutationsAgree) {
    ZoneUsage part = zone_usage(3);
    part.host_names.clear();
    part.part = 1;
    part.parts = 2;
    mutate_and_agree<ZoneUsage>({bytes_of(zone_usage(1)), bytes_of(zone_usage(4)), bytes_of(part),
                                 bytes_of(v1(zone_usage(4))), bytes_of(v1(part))},
                                2026, 30000);
    RegionUsage rpart = region_usage(3);
    rpart.part = 0;
    rpart.parts = 3;
    mutate_and_agree<RegionUsage>({bytes_of(region_usage(1)), bytes_of(region_usage(4)),
                                   bytes_of(rpart), bytes_of(v1(region_usage(4)))},
                                  2027, 30000);
}

// The shape senders write for nearly every entry (one definition of the unkeyed form, no host
// names), which the reader takes in one bounds check per entry when enough bytes follow it:
// values of every width, names of both string forms, and every byte of such a message broken
// in the ways that change an item's form or a length.
UsageBucket common_entry(std::size_t i) {
    static const std::uint64_t widths[] = {0, 127, 128, 65535, 65536, 5000000000, ~0ULL >> 1};
    UsageBucket b;
    char name[80];
    std::snprintf(name, sizeof(name),
                  i % 3 == 0 ? "c-%03zu-a-name-long-enough-for-a-str-8-header" : "c-%03zu", i);
    b.name = name;
    b.offered_mrps = widths[i % 7];
    b.admitted_mrps = widths[(i + 1) % 7];
    b.dropped_mrps = widths[(i + 2) % 7];
    b.shadow_dropped_mrps = widths[(i + 3) % 7];
    b.hosts = 1 + i % 300;
    b.rated_hosts = b.hosts - i % 2;
    const Scope scopes[] = {Scope::Global, Scope::Region, Scope::Zone};
    b.definitions.push_back(
        {{scopes[i % 3], i % 2 ? Mode::Shadow : Mode::Deny, widths[(i + 4) % 7], false}, b.hosts});
    return b;
}

TEST(UsageReader, TheCommonEntryShapeAgreesWithTheDecoderByteByByte) {
    ZoneUsage z = zone_usage(0);
    RegionUsage r = region_usage(0);
    z.hosts = r.hosts = 300;
    for (std::size_t i = 0; i < 24; ++i) {
        z.buckets.push_back(common_entry(i));
        r.buckets.push_back(common_entry(i));
    }
    for (auto* v : {&z.buckets, &r.buckets}) {
        std::sort(v->begin(), v->end(),
                  [](const UsageBucket& a, const UsageBucket& b) { return a.name < b.name; });
    }
    std::vector<std::string> bases = {bytes_of(z), bytes_of(r)};
    ZoneUsage zr;
    RegionUsage rr;
    std::string error;
    ASSERT_TRUE(read_usage(bases[0], zr, error)) << error;
    ASSERT_TRUE(read_usage(bases[1], rr, error)) << error;
    EXPECT_TRUE(same(zr, z));
    EXPECT_TRUE(same(rr, r));
    ASSERT_EQ(agree<ZoneUsage>(bases[0], "common zone"), UsageRead::Fast);
    ASSERT_EQ(agree<RegionUsage>(bases[1], "common region"), UsageRead::Fast);
    const unsigned char forms[] = {0x00, 0x7f, 0x80, 0x90, 0x91, 0x92, 0x94, 0x95,
                                   0x98, 0x99, 0x9a, 0xa0, 0xa6, 0xbf, 0xc0, 0xcc,
                                   0xcd, 0xce, 0xcf, 0xd0, 0xd9, 0xda, 0xdc, 0xff};
    for (std::size_t m = 0; m < bases.size(); ++m) {
        const std::string& base = bases[m];
        for (std::size_t pos = 0; pos < base.size(); ++pos) {
            std::string b = base;
            for (unsigned char f : forms) {
                b[pos] = static_cast<char>(f);
                const std::string what = "byte " + std::to_string(pos) + " = " + std::to_string(f);
                if (m == 0) agree<ZoneUsage>(b, what);
                if (m == 1) agree<RegionUsage>(b, what);
            }
            b[pos] = static_cast<char>(base[pos] ^ 1);
            if (m == 0) agree<ZoneUsage>(b, "byte " + std::to_string(pos) + " ^ 1");
            if (m == 1) agree<RegionUsage>(b, "byte " + std::to_string(pos) + " ^ 1");
            if (testing::Test::HasFailure()) return;
        }
        for (std::size_t n = 0; n < base.size(); n += 7) {
            if (m == 0) agree<ZoneUsage>(base.substr(0, n), "truncated");
            if (m == 1) agree<RegionUsage>(base.substr(0, n), "truncated");
        }
    }
    mutate_and_agree<ZoneUsage>({bases[0]}, 2028, 20000);
    mutate_and_agree<RegionUsage>({bases[1]}, 2029, 20000);
}

// The reader writes into the message it is given: nothing of a previous, larger one may stay.
TEST(UsageReader, AReusedMessageForgetsThePreviousOne) {
    ZoneUsage out;
    std::string error;
    ZoneUsage large = zone_usage(50);
    large.buckets[3].host_names = {"h1", "h3"};
    ASSERT_TRUE(read_usage(bytes_of(large), out, error));
    ZoneUsage small = zone_usage(5);
    small.host_names.clear();
    small.part = 1;
    small.parts = 2;
    UsageRead how = UsageRead::Decoded;
    ASSERT_TRUE(read_usage(bytes_of(small), out, error, &how));
    EXPECT_EQ(how, UsageRead::Fast);
    EXPECT_TRUE(same(out, small));
    // After a decoded (keyed) message, the fast path clears its keys.
    ZoneUsage keyed = zone_usage(3);
    keyed.buckets[2].definitions = {{{Scope::Global, Mode::Deny, 1000, true}, 1}};
    keyed.buckets[2].keys.push_back({42, "", 5000, 10, 1});
    ASSERT_TRUE(read_usage(bytes_of(keyed), out, error));
    ZoneUsage plain = zone_usage(3);
    ASSERT_TRUE(read_usage(bytes_of(plain), out, error, &how));
    EXPECT_EQ(how, UsageRead::Fast);
    EXPECT_TRUE(same(out, plain));
    RegionUsage rout;
    const RegionUsage with_overrides = region_usage_with_override(4);
    ASSERT_TRUE(read_usage(bytes_of(with_overrides), rout, error));
    ASSERT_TRUE(read_usage(bytes_of(region_usage(2)), rout, error, &how));
    EXPECT_EQ(how, UsageRead::Fast);
    EXPECT_TRUE(same(rout, region_usage(2)));
    // A version 1 usage after a version 2 one, and back: the version read each time.
    ASSERT_TRUE(read_usage(bytes_of(v1(region_usage(2))), rout, error, &how));
    EXPECT_EQ(how, UsageRead::Fast);
    EXPECT_TRUE(same(rout, v1(region_usage(2))));
    ASSERT_TRUE(read_usage(bytes_of(region_usage(2)), rout, error));
    EXPECT_TRUE(same(rout, region_usage(2)));
}

// The two steps (PartAssembler::read's): the buckets go to into[at, at + n), the entries outside
// keep theirs, and the message is the one wire::decode reads.
template <class Usage>
void two_steps_agree(Usage u) {
    const std::string b = bytes_of(u);
    Usage want, got;
    std::string error;
    ASSERT_TRUE(decode(b, want, error)) << error;
    for (std::size_t size : {std::size_t{0}, std::size_t{4}, u.buckets.size() + 9}) {
        SCOPED_TRACE("vector of " + std::to_string(size) + " entries");
        std::vector<UsageBucket> into(size, bucket("kept"));
        UsageRest rest;
        std::size_t n = 0;
        ASSERT_TRUE(read_usage_head(b, got, rest));
        EXPECT_EQ(rest.in_parts(), u.parts > 1);
        ASSERT_TRUE(read_usage_rest(rest, got, into, 2, n));
        ASSERT_EQ(n, u.buckets.size());
        EXPECT_EQ(into.size(), std::max(size, 2 + n));
        for (std::size_t i = 0; i < size; ++i) {
            if (i < 2 || i >= 2 + n) {
                EXPECT_EQ(into[i].name, "kept") << i;
            }
        }
        got.buckets.assign(into.begin() + 2, into.begin() + 2 + static_cast<std::ptrdiff_t>(n));
        EXPECT_TRUE(same(want, got));
    }
}

TEST(UsageReader, TwoStepsReadTheBucketsIntoPlace) {
    two_steps_agree(zone_usage(30));
    two_steps_agree(v1(zone_usage(30)));
    ZoneUsage part = zone_usage(30);
    part.host_names.clear();
    part.part = 2;
    part.parts = 3;
    two_steps_agree(part);
    two_steps_agree(region_usage(12));
    two_steps_agree(v1(region_usage(12)));
    // What the one-pass reader leaves to wire::decode, either step refuses.
    ZoneUsage unsorted = zone_usage(5);
    std::swap(unsorted.buckets[1], unsorted.buckets[3]);
    ZoneUsage m;
    UsageRest rest;
    std::vector<UsageBucket> into;
    std::size_t n = 0;
    const std::string unsorted_bytes = bytes_of(unsorted);  // `rest` points into the bytes
    ASSERT_TRUE(read_usage_head(unsorted_bytes, m, rest));
    EXPECT_FALSE(read_usage_rest(rest, m, into, 0, n));
    const RegionUsage with_overrides = region_usage_with_override(4);
    RegionUsage r;
    const std::string overrides_bytes = bytes_of(with_overrides);
    ASSERT_TRUE(read_usage_head(overrides_bytes, r, rest));
    EXPECT_FALSE(read_usage_rest(rest, r, into, 0, n));
    EXPECT_FALSE(read_usage_head(std::string(5, '\x01'), m, rest));
}

}  // namespace
}  // namespace grl::wire
