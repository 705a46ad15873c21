// Per-key state of keyed buckets (core/plane/src/keyed.cpp): bounded memory under a flood of keys,
// LRU eviction within a set, the local cap, the control plane's ratio per key, heavy hitters.
#include "grl/plane/keyed.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "grl/common/prng.h"

namespace grl::keyed {
namespace {

struct TableFixture {
    explicit TableFixture(std::uint32_t keys) : mem(new std::uint64_t[bytes_for(keys) / 8 + 1]) {
        t = Table(mem.get());
        t.format(keys);
    }
    std::unique_ptr<std::uint64_t[]> mem;
    Table t;
};

TEST(Keyed, HashesAreFixedAcrossBuildsAndVersions) {
    // Hosts, collectors and controllers compare key hashes, across builds and versions: these
    // values come from an independent implementation (FNV-1a 64, then MurmurHash3's fmix64
    // constants as in keyed.cpp, written in Python), not from hash_key itself.
    EXPECT_EQ(hash_key(""), 0xefd01f60ba992926ULL);
    EXPECT_EQ(hash_key("a"), 0x82a2a958a9bece5bULL);
    EXPECT_EQ(hash_key("alice"), 0x3507d047a67c08f4ULL);
    EXPECT_EQ(hash_key("api-key-1"), 0x99bea4a172b7ed24ULL);
    EXPECT_EQ(hash_key("192.0.2.1"), 0x8fc433616f773343ULL);
    EXPECT_EQ(hash_key(std::string(200, 'a')), 0xbebd11d5f5610d0dULL);
    EXPECT_EQ(hash_key(std::string("\x00\xff", 2)), 0xacb64f88d28b68b8ULL);
}

TEST(Keyed, HashesAreStableAndNeverMarkers) {
    EXPECT_NE(hash_key("api-key-1"), hash_key("api-key-2"));
    std::set<std::uint64_t> seen;
    for (int i = 0; i < 100000; ++i) {
        std::uint64_t h = hash_key("k" + std::to_string(i));
        EXPECT_GE(h, 2u);
        seen.insert(h);
    }
    EXPECT_EQ(seen.size(), 100000u);
    EXPECT_GE(hash_key(""), 2u);
}

TEST(Keyed, SizesRoundToWholeSets) {
    EXPECT_EQ(capacity_for(bytes_for(1000)), 1000u);
    EXPECT_EQ(capacity_for(bytes_for(1001)), 1008u);
    EXPECT_EQ(capacity_for(10), 0u);
    // 128 bytes a key: 1 MiB holds 8,184 keys (docs/per-key.md).
    EXPECT_EQ(capacity_for(1 << 20), 8184u);
}

TEST(Keyed, AKeyKeepsItsEntryAndItsText) {
    TableFixture f(64);
    Entry& a = f.t.touch(hash_key("alice"), "alice", 10);
    a.offered = 5;
    Entry& again = f.t.touch(hash_key("alice"), "alice", 20);
    EXPECT_EQ(&a, &again);
    EXPECT_EQ(again.offered.load(), 5u);
    EXPECT_EQ(again.last_ms.load(), 20u);
    EXPECT_EQ(f.t.find(hash_key("alice")), &a);
    EXPECT_EQ(f.t.find(hash_key("bob")), nullptr);
    EXPECT_EQ(f.t.header().claims.load(), 1u);
    // Long keys are kept truncated for display.
    std::string longkey(100, 'x');
    f.t.touch(hash_key(longkey), longkey, 30);
    int seen = 0;
    for (std::uint32_t i = 0; i < f.t.capacity(); ++i) {
        if (f.t.entry(i).hash == hash_key(longkey)) {
            EXPECT_EQ(f.t.text_of(i), longkey.substr(0, 47));
            ++seen;
        } else if (f.t.entry(i).hash == hash_key("alice")) {
            EXPECT_EQ(f.t.text_of(i), "alice");
            ++seen;
        } else {
            EXPECT_EQ(f.t.text_of(i), "");  // free
        }
    }
    EXPECT_EQ(seen, 2);
}

TEST(Keyed, AFullSetEvictsItsLeastRecentlyUsedKey) {
    TableFixture f(kWays);  // one set
    for (std::uint32_t i = 0; i < kWays; ++i)
        f.t.touch(hash_key("k" + std::to_string(i)), "k", 100 + i);
    f.t.touch(hash_key("k0"), "k0", 200);  // k0 used again: k1 is now the oldest
    EXPECT_EQ(f.t.header().evictions.load(), 0u);
    Entry& n = f.t.touch(hash_key("new"), "new", 201);
    EXPECT_EQ(f.t.header().evictions.load(), 1u);
    EXPECT_EQ(f.t.find(hash_key("k1")), nullptr);
    EXPECT_NE(f.t.find(hash_key("k0")), nullptr);
    // The newcomer starts afresh: nothing of the evicted key's state.
    EXPECT_EQ(n.offered.load(), 0u);
    EXPECT_EQ(n.expires_ms.load(), 0u);
}

TEST(Keyed, AFullSetEvictsAnIdleKeyThenAOneRequestKeyBeforeABusyOne) {
    TableFixture f(kWays);  // one set
    auto offer = [&](const std::string& k, int n, std::uint64_t now) {
        Entry& e = f.t.touch(hash_key(k), k, now);
        for (int i = 0; i < n; ++i) f.t.admit(e, now, 1000000, 100, 0);
    };
    offer("busy", 5, 5000);
    for (std::uint32_t i = 1; i < kWays; ++i) offer("once" + std::to_string(i), 1, 5000 + i);
    // busy is the least recently used, but the once-seen keys go first, oldest first.
    offer("new1", 1, 5100);
    EXPECT_NE(f.t.find(hash_key("busy")), nullptr);
    EXPECT_EQ(f.t.find(hash_key("once1")), nullptr);
    // A key idle for more than a second goes before all of them.
    offer("idle-busy", 0, 5100);  // evicts once2
    f.t.find(hash_key("busy"))->last_ms = 3000;
    offer("new2", 1, 5200);
    EXPECT_EQ(f.t.find(hash_key("busy")), nullptr);
    EXPECT_NE(f.t.find(hash_key("once3")), nullptr);
}

TEST(Keyed, ABusyKeyStampedByALaggingClockSurvivesAFlood) {
    // Workers stamp entries with their own cached clocks; here A's stamps lag the flood's by
    // 5 ms. A at one request per 50 flood keys through 64 entries (8 sets): kept, capped.
    TableFixture f(64);
    const std::uint64_t a = hash_key("A");
    int admitted = 0, offered = 0;
    std::uint64_t now = 10000;
    for (int i = 0; i < 200000; ++i) {
        if (i % 50 == 0) {
            now += 1;  // 1 ms per 50 flood keys: A at 1000 r/s
            Entry& e = f.t.touch(a, "A", now - 5);
            ++offered;
            admitted += f.t.admit(e, now - 5, 100000, 100, 0) == Verdict::Pass;
        }
        std::string k = "flood-" + std::to_string(i);
        Entry& e = f.t.touch(hash_key(k), k, now);
        f.t.admit(e, now, 100000, 100, 0);
    }
    // 4 s at 100 r/s and the burst: 400 + 10, whatever the flood.
    EXPECT_EQ(offered, 4000);
    EXPECT_LE(admitted, 411);
    EXPECT_GE(admitted, 390);
}

TEST(Keyed, AFloodOfOneRequestKeysStaysInItsMemoryAndSparesTheBusyKey) {
    TableFixture f(1024);
    const std::size_t bytes = bytes_for(1024);
    Prng rng(7);
    std::uint64_t now = 1000;
    const std::uint64_t a = hash_key("A");
    for (int i = 0; i < 1000000; ++i) {
        if (i % 100 == 0) {
            ++now;
            Entry& e = f.t.touch(a, "A", now);
            f.t.admit(e, now, 50000, 100, rng.next32());
        }
        std::string k = "flood-" + std::to_string(i);
        Entry& e = f.t.touch(hash_key(k), k, now);
        f.t.admit(e, now, 50000, 100, rng.next32());
    }
    EXPECT_EQ(bytes_for(1024), bytes);  // fixed: nothing grows
    EXPECT_EQ(f.t.header().claims.load(), 1000001u);
    EXPECT_EQ(f.t.header().evictions.load(), 1000001u - 1024u);
    Entry* e = f.t.find(a);
    ASSERT_NE(e, nullptr) << "the busy key was evicted by one-request keys";
    EXPECT_EQ(e->offered.load(), 10000u);
    // 10,000 requests over 10 s at a 50 r/s local cap: about 50 a second (and the burst).
    EXPECT_LE(e->offered.load() - e->dropped.load(), 10u * 50 + 6);
    EXPECT_GE(e->offered.load() - e->dropped.load(), 10u * 50 - 1);
}

TEST(Keyed, TheLocalCapAdmitsTheRateAndABurst) {
    TableFixture f(64);
    Entry& e = f.t.touch(hash_key("k"), "k", 0);
    // 1,000 requests a second for 3 s (one a millisecond) against 50 r/s, burst 100 ms.
    std::uint32_t admitted[3] = {0, 0, 0};
    for (std::uint64_t ms = 0; ms < 3000; ++ms)
        if (f.t.admit(e, 10000 + ms, 50000, 100, 0xffffffffU) == Verdict::Pass)
            ++admitted[ms / 1000];
    EXPECT_LE(admitted[0], 50u + 6);  // the rate, plus the burst of 100 ms worth (5 + 1)
    EXPECT_GE(admitted[0], 50u);
    EXPECT_GE(admitted[1], 49u);
    EXPECT_LE(admitted[1], 51u);
    EXPECT_EQ(e.offered.load(), 3000u);
    EXPECT_EQ(e.dropped.load(), 3000u - admitted[0] - admitted[1] - admitted[2]);
    // Traffic under the rate is never capped.
    Entry& slow = f.t.touch(hash_key("slow"), "slow", 0);
    for (std::uint64_t ms = 0; ms < 3000; ms += 40)
        EXPECT_EQ(f.t.admit(slow, 10000 + ms, 50000, 100, 0), Verdict::Pass) << ms;
    // A rate of 0 admits nothing.
    EXPECT_EQ(f.t.admit(slow, 20000, 0, 100, 0), Verdict::LocalCap);
}

TEST(Keyed, TheControlPlanesRatioAppliesUntilItExpires) {
    TableFixture f(64);
    const std::uint64_t h = hash_key("k");
    EXPECT_FALSE(f.t.set_ratio(h, kThresholdOne / 2, 5000)) << "not here: nothing to set";
    Entry& e = f.t.touch(h, "k", 1000);
    ASSERT_TRUE(f.t.set_ratio(h, kThresholdOne / 2, 5000));
    Prng rng(1);
    int ratio_drops = 0;
    for (int i = 0; i < 4000; ++i) {
        // A high local rate so that only the ratio drops.
        if (f.t.admit(e, 1000 + i, 1000000000, 1000, rng.next32()) == Verdict::Ratio) ++ratio_drops;
    }
    EXPECT_NEAR(ratio_drops, 2000, 150);
    // Expired: the ratio no longer applies.
    for (int i = 0; i < 100; ++i)
        EXPECT_EQ(f.t.admit(e, 5000 + i, 1000000000, 1000, 0), Verdict::Pass);
}

TEST(Keyed, HeavyHittersAreTheBusiestSinceTheLastReport) {
    TableFixture f(256);
    auto hit = [&](const std::string& k, int n) {
        Entry& e = f.t.touch(hash_key(k), k, 1);
        for (int i = 0; i < n; ++i) f.t.admit(e, 1, 1000000000, 1000, 0);
    };
    for (int i = 0; i < 100; ++i) hit("quiet" + std::to_string(i), 1);
    hit("big", 500);
    hit("mid", 200);
    hit("small", 20);
    std::vector<Hitter> top = f.t.take_hitters(10, 2);
    ASSERT_EQ(top.size(), 2u);
    EXPECT_EQ(top[0].text, "big");
    EXPECT_EQ(top[0].offered, 500u);
    EXPECT_EQ(top[0].hash, hash_key("big"));
    EXPECT_EQ(top[1].text, "mid");
    // Deltas: only what came since the last report counts.
    hit("small", 30);
    top = f.t.take_hitters(10, 10);
    ASSERT_EQ(top.size(), 1u);
    EXPECT_EQ(top[0].text, "small");
    EXPECT_EQ(top[0].offered, 30u);
    EXPECT_TRUE(f.t.take_hitters(1, 10).empty());
}

TEST(Keyed, HeavyHittersCarryTheirDropsSinceTheLastReport) {
    TableFixture f(64);
    Entry& e = f.t.touch(hash_key("k"), "k", 1);
    // 10 r/s with a 100 ms burst, 30 requests in one millisecond: 1 + 1 admitted, the rest
    // over the local cap.
    int dropped = 0;
    for (int i = 0; i < 30; ++i) dropped += f.t.admit(e, 1, 10000, 100, 0) != Verdict::Pass;
    std::vector<Hitter> top = f.t.take_hitters(1, 4);
    ASSERT_EQ(top.size(), 1u);
    EXPECT_EQ(top[0].offered, 30u);
    EXPECT_EQ(top[0].dropped, static_cast<std::uint64_t>(dropped));
    EXPECT_GT(dropped, 20);
    // Later: 5 requests a second apart, all admitted; only they count.
    for (int i = 0; i < 5; ++i) f.t.admit(e, 2000 + 1000 * i, 10000, 100, 0);
    top = f.t.take_hitters(1, 4);
    ASSERT_EQ(top.size(), 1u);
    EXPECT_EQ(top[0].offered, 5u);
    EXPECT_EQ(top[0].dropped, 0u);
}

// A quota bucket's report lists every key's use (docs/design/009-per-key-quotas.md): more keys
// with use than a report holds are listed over several reports, the most use first, and every
// admitted unit is listed exactly once; a key listed before is listed again with its new units
// only.
TEST(Keyed, AQuotaBucketListsEveryKeysUseLateButNeverTwice) {
    TableFixture f(256);
    std::uint64_t admitted = 0;
    auto hit = [&](const std::string& k, int n, std::uint32_t cost = 1) {
        Entry& e = f.t.touch(hash_key(k), k, 1);
        for (int i = 0; i < n; ++i) {
            admitted += f.t.admit(e, 1, 1000000000, 1000, 0, cost) == Verdict::Pass ? cost : 0;
        }
    };
    for (int i = 0; i < 10; ++i) hit("key" + std::to_string(i), i + 1);
    const std::uint64_t kNoHitter = ~0ULL;  // a quota bucket without rate=: no heavy hitter
    // Three a call: an eighth of the room (one key) for the oldest unlisted use (all as old
    // here), the others the most used.
    std::vector<Hitter> first = f.t.take_quota_keys(kNoHitter, 3);
    ASSERT_EQ(first.size(), 3u);
    std::uint64_t listed = 0;
    std::set<std::string> names;
    std::map<std::string, std::uint64_t> used;
    for (const Hitter& h : first) {
        listed += h.used;
        names.insert(std::string(h.text));
        used[std::string(h.text)] = h.used;
    }
    EXPECT_EQ(used["key9"], 10u);
    EXPECT_EQ(used["key8"], 9u);
    for (int call = 0; call < 3; ++call) {
        for (const Hitter& h : f.t.take_quota_keys(kNoHitter, 3)) {
            EXPECT_TRUE(names.insert(std::string(h.text)).second) << h.text << " listed twice";
            listed += h.used;
        }
    }
    EXPECT_EQ(names.size(), 10u);
    EXPECT_EQ(listed, admitted);
    EXPECT_TRUE(f.t.take_quota_keys(kNoHitter, 3).empty());
    // New units of a key listed before, costs counted as units.
    hit("key9", 2, 5);
    std::vector<Hitter> again = f.t.take_quota_keys(kNoHitter, 3);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].used, 10u);
}

// With rate= too, at most half a report's keys are the heavy hitters, busiest first (their
// rates hold the keys' ratios), even a key whose requests were mostly dropped; the rest are the
// keys of the most unlisted use, hitters left out among them. Dropped units are no use.
TEST(Keyed, AQuotaBucketListsHalfItsHeavyHittersThenTheMostUse) {
    TableFixture f(64);
    Entry& busy = f.t.touch(hash_key("busy"), "busy", 1);
    f.t.set_ratio(hash_key("busy"), kThresholdOne, 1000);  // everything dropped
    for (int i = 0; i < 100; ++i) f.t.admit(busy, 1, 1000000000, 1000, 0);
    Entry& busy2 = f.t.touch(hash_key("busy2"), "busy2", 1);
    for (int i = 0; i < 80; ++i) f.t.admit(busy2, 1, 1000000000, 1000, 0);
    Entry& used = f.t.touch(hash_key("used"), "used", 1);
    for (int i = 0; i < 50; ++i) f.t.admit(used, 1, 1000000000, 1000, 0);
    std::vector<Hitter> top = f.t.take_quota_keys(60, 2);
    ASSERT_EQ(top.size(), 2u);
    EXPECT_EQ(top[0].text, "busy");
    EXPECT_EQ(top[0].offered, 100u);
    EXPECT_EQ(top[0].used, 0u);
    EXPECT_EQ(top[1].text, "busy2");  // a hitter left out, but the most use
    EXPECT_EQ(top[1].used, 80u);
    top = f.t.take_quota_keys(60, 2);
    ASSERT_EQ(top.size(), 1u);
    EXPECT_EQ(top[0].text, "used");
    EXPECT_EQ(top[0].offered, 0u);  // its rate was taken with the first call
    EXPECT_EQ(top[0].used, 50u);
}

// Hundreds of busy keys every report cannot keep a quiet key's use from being listed: a key's
// unlisted use grows until it is among the most, and every admitted unit is listed once.
TEST(Keyed, ALongTailIsListedWhateverTheBusyKeysDo) {
    TableFixture f(2048);
    std::uint64_t admitted = 0, listed = 0, quiet_admitted = 0, quiet_listed = 0;
    auto hit = [&](const std::string& k, int n) {
        Entry& e = f.t.touch(hash_key(k), k, 1);
        for (int i = 0; i < n; ++i)
            admitted += f.t.admit(e, 1, 1000000000, 1000, 0) == Verdict::Pass;
    };
    auto take = [&]() {
        const std::vector<Hitter> got = f.t.take_quota_keys(1, 256);
        for (const Hitter& h : got) {
            listed += h.used;
            if (h.text == "quiet") quiet_listed += h.used;
        }
        return got.size();
    };
    for (int round = 0; round < 20; ++round) {
        for (int i = 0; i < 300; ++i) hit("busy" + std::to_string(i), 2);
        hit("quiet", 1);
        ++quiet_admitted;
        take();
    }
    EXPECT_GT(quiet_listed, 0u);  // listed while the busy keys kept coming
    while (take() > 0) {
    }
    EXPECT_EQ(quiet_listed, quiet_admitted);
    EXPECT_EQ(listed, admitted);
}

// A report that was not sent gives its keys' use back: listed again by the next.
TEST(Keyed, UseOfAReportNotSentIsListedAgain) {
    TableFixture f(64);
    Entry& e = f.t.touch(hash_key("k"), "k", 1);
    for (int i = 0; i < 7; ++i) f.t.admit(e, 1, 1000000000, 1000, 0);
    std::vector<Hitter> lost = f.t.take_quota_keys(~0ULL, 4);
    ASSERT_EQ(lost.size(), 1u);
    f.t.unlist(lost[0].hash, lost[0].used);
    f.t.admit(e, 2, 1000000000, 1000, 0);
    std::vector<Hitter> again = f.t.take_quota_keys(~0ULL, 4);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].used, 8u);
}

// A key evicted before its use was listed loses it on this host: counted in the table header.
TEST(Keyed, UseNotListedWhenItsKeyIsEvictedIsCounted) {
    TableFixture f(8);  // one set
    for (int i = 0; i < 8; ++i) {
        const std::string k = "k" + std::to_string(i);
        Entry& e = f.t.touch(hash_key(k), k, 1);
        for (int n = 0; n < 3; ++n) f.t.admit(e, 1, 1000000000, 1000, 0);
    }
    ASSERT_EQ(f.t.take_quota_keys(~0ULL, 4).size(), 4u);  // 4 keys' 12 units listed
    // 8 newcomers, 10 s later: every old key is evicted, 4 of them with 3 unlisted units.
    for (int i = 0; i < 8; ++i) {
        const std::string k = "new" + std::to_string(i);
        f.t.admit(f.t.touch(hash_key(k), k, 10000), 10000, 1000000000, 1000, 0);
    }
    EXPECT_EQ(f.t.header().evictions.load(), 8u);
    EXPECT_EQ(f.t.header().quota_units_lost.load(), 12u);
    // The newcomers start with nothing listed: their own request each.
    std::vector<Hitter> fresh = f.t.take_quota_keys(~0ULL, 8);
    ASSERT_EQ(fresh.size(), 8u);
    for (const Hitter& h : fresh) EXPECT_EQ(h.used, 1u) << h.text;
}

}  // namespace
}  // namespace grl::keyed

namespace grl::keyed {
namespace {

std::string logged(std::string_view key, bool hashed) {
    char out[kLogKeyBytes];
    return {out, key_for_log(key, hashed, out)};
}

// The error log's drop line: a binary key escaped, quotes and backslashes too, a long key cut,
// and with hash_keys=on only the hash the status page shows.
TEST(KeyForLog, EscapesBinaryCutsLongAndHashesHidden) {
    EXPECT_EQ(logged(std::string_view("\x7f\0\0\x01", 4), false), "\\x7f\\x00\\x00\\x01");
    EXPECT_EQ(logged("api-key-1", false), "api-key-1");
    EXPECT_EQ(logged("a\"b\\c\xff", false), "a\\x22b\\x5cc\\xff");
    const std::string long_key(100, 'k');
    EXPECT_EQ(logged(long_key, false), std::string(kMaxKeyText, 'k') + "...");
    const std::string all_binary(100, '\x01');
    EXPECT_EQ(logged(all_binary, false).size(), 4 * kMaxKeyText + 3);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash_key("secret")));
    EXPECT_EQ(logged("secret", true), std::string("hash ") + hex);
}

// A request's cost in units (grl_bucket cost=) counts in the key's offered and dropped sums and
// in its local cap: at 10 units/s with a 100 ms burst, a request of 10 units passes alone, the
// next one within the second is over; cost_after= (charge) takes from the same account.
TEST(Keyed, CostsCountAsUnitsInTheLocalCap) {
    TableFixture f(64);
    const std::uint64_t now = 10000;
    Entry& e = f.t.touch(hash_key("A"), "A", now);
    EXPECT_EQ(f.t.admit(e, now, 10000, 100, 0, 10), Verdict::Pass);
    EXPECT_EQ(f.t.admit(e, now + 500, 10000, 100, 0, 10), Verdict::LocalCap);
    EXPECT_EQ(f.t.admit(e, now + 950, 10000, 100, 0, 1), Verdict::Pass);  // 1 s later - burst
    EXPECT_EQ(e.offered.load(), 21u);
    EXPECT_EQ(e.dropped.load(), 10u);
    // Cost 1 at the same rate: 1 + 100 ms of burst worth, then capped.
    Entry& b = f.t.touch(hash_key("B"), "B", now);
    int passed = 0;
    for (int i = 0; i < 5; ++i) passed += f.t.admit(b, now, 10000, 100, 0, 1) == Verdict::Pass;
    EXPECT_EQ(passed, 2);
    // After-response units: counted as offered and pushing the account 2 s ahead.
    Entry& c = f.t.touch(hash_key("C"), "C", now);
    EXPECT_EQ(f.t.admit(c, now, 10000, 100, 0, 1), Verdict::Pass);
    f.t.charge(c, now, 10000, 20);
    EXPECT_EQ(c.offered.load(), 21u);
    EXPECT_EQ(f.t.admit(c, now + 1500, 10000, 100, 0, 1), Verdict::LocalCap);
    EXPECT_EQ(f.t.admit(c, now + 2050, 10000, 100, 0, 1), Verdict::Pass);
}

}  // namespace
}  // namespace grl::keyed
