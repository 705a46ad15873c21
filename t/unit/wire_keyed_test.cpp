// Unit tests of the keyed-bucket fields of every codec (docs/protocol.md "Keyed buckets"):
// report and instructions (grl/wire.h), zone_usage, region_usage and admin (grl/wire_control.h),
// usage in parts with keys. Round trips, then one rejection per rule, each error naming the key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grl/wire/report_reader.h"
#include "grl/wire/usage_parts.h"
#include "grl/wire/wire.h"
#include "grl/wire/wire_control.h"

namespace grl::wire {
namespace {

template <typename M>
std::string enc(const M& m) {
    std::string out;
    encode(m, out);
    return out;
}

template <typename M>
std::string error_of(const std::string& bytes) {
    M m;
    std::string err;
    if (decode(bytes, m, err)) return "";
    EXPECT_FALSE(err.empty());
    return err;
}

// Replaces the first `from` in `s` with `to` (same length: the msgpack stays well formed).
std::string patched(std::string s, const std::string& from, const std::string& to) {
    std::size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << "no " << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
}
const std::string kKeyedTrue = std::string("\xa5keyed\xc3");
const std::string kKeyedFalse = std::string("\xa5keyed\xc2");

KeyRate key(std::uint64_t h, std::string text, std::uint64_t offered, std::uint64_t dropped,
            std::uint64_t hosts = 1) {
    KeyRate k;
    k.hash = h;
    k.text = std::move(text);
    k.offered_mrps = offered;
    k.dropped_mrps = dropped;
    k.hosts = hosts;
    return k;
}

Report keyed_report() {
    Report r;
    r.host = "web-1";
    r.zone = "z1";
    r.region = "r1";
    r.epoch = 3;
    r.seq = 9;
    r.ts_ms = 1700000000000;
    r.interval_ms = 250;
    ReportBucket plain;
    plain.name = "api";
    plain.limit_mrps = 100000;
    plain.offered = 50;
    plain.admitted = 50;
    ReportBucket k;
    k.name = "per-client";
    k.limit_mrps = 100000;
    k.offered = 1000;
    k.admitted = 900;
    k.dropped = 100;
    k.keyed = true;
    k.keys = {key(0xfeedfacecafebeefULL, "api-key-1", 150000, 50000),
              key(2, std::string(kMaxKeyTextLen, 'x'), 20000, 0), key(~0ULL, "", 7, 7)};
    k.keys[1].used = 37;  // a quota bucket's use (docs/design/009-per-key-quotas.md)
    ReportBucket quiet;   // keyed, no heavy hitter this interval
    quiet.name = "per-ip";
    quiet.keyed = true;
    r.buckets = {plain, k, quiet};
    return r;
}

TEST(WireKeyed, ReportRoundTrip) {
    const Report r = keyed_report();
    Report d;
    std::string err;
    ASSERT_TRUE(decode(enc(r), d, err)) << err;
    ASSERT_EQ(d.buckets.size(), 3u);
    EXPECT_FALSE(d.buckets[0].keyed);
    EXPECT_TRUE(d.buckets[0].keys.empty());
    EXPECT_TRUE(d.buckets[1].keyed);
    EXPECT_EQ(d.buckets[1].keys, r.buckets[1].keys);
    EXPECT_TRUE(d.buckets[2].keyed);
    EXPECT_TRUE(d.buckets[2].keys.empty());
    // An unkeyed bucket's bytes are those of a sender that predates keys.
    Report old = r;
    old.buckets = {r.buckets[0]};
    EXPECT_EQ(enc(old).find("keyed"), std::string::npos);
}

TEST(WireKeyed, ReportReaderSeesTheKeys) {
    const Report r = keyed_report();
    const std::string b = enc(r);
    ReportView v;
    std::string err;
    ASSERT_TRUE(read_report(b, v, err)) << err;
    ASSERT_EQ(v.buckets.size(), 3u);
    EXPECT_FALSE(v.buckets[0].keyed);
    EXPECT_EQ(keys_of(v, v.buckets[0]).size(), 0u);
    EXPECT_TRUE(v.buckets[1].keyed);
    KeyRange k = keys_of(v, v.buckets[1]);
    ASSERT_EQ(k.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(k.first[i].hash, r.buckets[1].keys[i].hash);
        EXPECT_EQ(k.first[i].text, r.buckets[1].keys[i].text);
        EXPECT_EQ(k.first[i].offered_mrps, r.buckets[1].keys[i].offered_mrps);
        EXPECT_EQ(k.first[i].dropped_mrps, r.buckets[1].keys[i].dropped_mrps);
        EXPECT_EQ(k.first[i].used, r.buckets[1].keys[i].used);
    }
    EXPECT_TRUE(v.buckets[2].keyed);
    EXPECT_EQ(keys_of(v, v.buckets[2]).size(), 0u);
    // A reused view forgets the previous report's keys.
    Report plain = r;
    plain.buckets = {r.buckets[0], r.buckets[0]};
    plain.buckets[1].name = "b";
    ASSERT_TRUE(read_report(enc(plain), v, err)) << err;
    EXPECT_FALSE(v.buckets[1].keyed);
    EXPECT_EQ(keys_of(v, v.buckets[1]).size(), 0u);
    EXPECT_TRUE(v.keys.empty());
    // view_of keeps them too.
    view_of(r, v);
    EXPECT_EQ(keys_of(v, v.buckets[1]).size(), 3u);
    EXPECT_EQ(keys_of(v, v.buckets[1]).first[0].text, "api-key-1");
}

// Both decoders refuse `r`; decode's error contains `needle`.
void both_refuse(const std::string& b, const std::string& needle) {
    std::string e1 = error_of<Report>(b);
    EXPECT_NE(e1.find(needle), std::string::npos) << e1;
    ReportView v;
    std::string e2;
    EXPECT_FALSE(read_report(b, v, e2)) << "read_report accepted what decode refused: " << e1;
}

TEST(WireKeyed, ReportRejections) {
    Report r = keyed_report();
    r.buckets[1].keys[0].hash = 1;
    both_refuse(enc(r), "bad \"h\" 1 (a key hash is > 1) in buckets[1].keys[0]");
    r.buckets[1].keys[0].hash = 0;
    both_refuse(enc(r), "bad \"h\" 0");
    r = keyed_report();
    r.buckets[1].keys[2].hash = r.buckets[1].keys[0].hash;
    both_refuse(enc(r), "duplicate key 0xfeedfacecafebeef in buckets[1].keys");
    r = keyed_report();
    r.buckets[1].keys[1].text += "y";  // 48 bytes
    both_refuse(enc(r), "\"k\" of key 0x0000000000000002 longer than 47 bytes");
    r = keyed_report();
    r.buckets[1].keys[1].dropped_mrps = 20001;
    both_refuse(enc(r),
                "\"dropped_mrps\" 20001 greater than \"offered_mrps\" 20000 of key "
                "0x0000000000000002");
    r = keyed_report();
    r.buckets[1].keys.clear();
    for (std::uint64_t i = 0; i <= kMaxReportKeys; ++i)
        r.buckets[1].keys.push_back(key(2 + i, "", 1, 0));
    both_refuse(enc(r), "too many keys (257, max 256)");
    r.buckets[1].keys.pop_back();
    std::string err;
    Report d;
    EXPECT_TRUE(decode(enc(r), d, err)) << err;  // kMaxReportKeys exactly
    // "keys" only with "keyed" true.
    both_refuse(patched(enc(keyed_report()), kKeyedTrue, kKeyedFalse),
                "\"keys\" without \"keyed\"");
    std::string keyed_as_uint =
        patched(enc(keyed_report()), kKeyedTrue, std::string("\xa5keyed\x01"));
    both_refuse(keyed_as_uint, "bad \"keyed\" type");
    // A key's "used" is a uint.
    both_refuse(
        patched(enc(keyed_report()), std::string("\xa4used\x25"), std::string("\xa4used\xa1x")),
        "bad \"used\" type");
}

Instructions keyed_instructions() {
    Instructions m;
    m.source = "ctl-1";
    m.seq = 5;
    m.ts_ms = 1700000000000;
    m.ttl_ms = 3000;
    m.scope = Scope::Global;
    Instruction plain;
    plain.name = "api";
    plain.ratio_ppm = 250000;
    plain.limit_mrps = 100000;
    Instruction k;
    k.name = "per-client";
    k.limit_mrps = 100000;
    k.keyed = true;
    k.keys = {{0xfeedfacecafebeefULL, 333333}, {2, 0}, {~0ULL, 1000000}};
    m.buckets = {plain, k};
    return m;
}

TEST(WireKeyed, InstructionsRoundTrip) {
    const Instructions m = keyed_instructions();
    Instructions d;
    std::string err;
    ASSERT_TRUE(decode(enc(m), d, err)) << err;
    ASSERT_EQ(d.buckets.size(), 2u);
    EXPECT_FALSE(d.buckets[0].keyed);
    EXPECT_TRUE(d.buckets[1].keyed);
    EXPECT_EQ(d.buckets[1].ratio_ppm, 0u);
    EXPECT_EQ(d.buckets[1].keys, m.buckets[1].keys);
    Instructions empty = m;
    empty.buckets[1].keys.clear();  // keyed, no key over its limit
    ASSERT_TRUE(decode(enc(empty), d, err)) << err;
    EXPECT_TRUE(d.buckets[1].keyed);
    EXPECT_TRUE(d.buckets[1].keys.empty());
    Instructions old = m;
    old.buckets.pop_back();
    EXPECT_EQ(enc(old).find("keyed"), std::string::npos);
}

TEST(WireKeyed, InstructionsRejections) {
    auto refuse = [](const Instructions& m, const std::string& needle) {
        std::string e = error_of<Instructions>(enc(m));
        EXPECT_NE(e.find(needle), std::string::npos) << e;
    };
    Instructions m = keyed_instructions();
    m.buckets[1].keys[1].hash = 1;
    refuse(m, "bad hash 1 in \"keys[1]\" (a key hash is > 1) for bucket \"per-client\"");
    m = keyed_instructions();
    m.buckets[1].keys[2].hash = 2;
    refuse(m, "duplicate key 0x0000000000000002 in \"keys\" for bucket \"per-client\"");
    m = keyed_instructions();
    m.buckets[1].keys[0].ratio_ppm = 1000001;
    refuse(m, "\"ratio_ppm\" 1000001 of key 0xfeedfacecafebeef out of range");
    m = keyed_instructions();
    m.buckets[1].ratio_ppm = 5;
    refuse(m, "\"ratio_ppm\" 5 of a keyed bucket (want 0)");
    m = keyed_instructions();
    m.buckets[1].has_basis = true;
    m.buckets[1].basis_ms = 1;
    refuse(m, "surge basis of a keyed bucket");
    m = keyed_instructions();
    m.buckets[1].keys.clear();
    for (std::uint64_t i = 0; i <= kMaxInstructionKeys; ++i)
        m.buckets[1].keys.push_back({2 + i, 1});
    refuse(m, "too many keys (1025, max 1024)");
    m.buckets[1].keys.pop_back();
    Instructions d;
    std::string err;
    EXPECT_TRUE(decode(enc(m), d, err)) << err;
    std::string e =
        error_of<Instructions>(patched(enc(keyed_instructions()), kKeyedTrue, kKeyedFalse));
    EXPECT_NE(e.find("\"keys\" without \"keyed\""), std::string::npos) << e;
    // An entry that is not [h, ratio_ppm].
    std::string b = enc(keyed_instructions());
    e = error_of<Instructions>(
        patched(b, std::string("\x92\x02\x00", 3), std::string("\x92\x02\xc0", 3)));
    EXPECT_NE(e.find("bad \"keys[1]\" (want [h, ratio_ppm])"), std::string::npos) << e;
}

UsageBucket keyed_usage(std::uint64_t hosts) {
    UsageBucket b;
    b.name = "per-client";
    b.offered_mrps = 170000;
    b.admitted_mrps = 120000;
    b.dropped_mrps = 50000;
    b.hosts = hosts;
    b.rated_hosts = hosts;
    b.definitions.push_back({{Scope::Global, Mode::Deny, 100000, true}, hosts});
    b.keys = {key(0xfeedfacecafebeefULL, "api-key-1", 150000, 50000, hosts),
              key(3, "", 20000, 0, 1)};
    return b;
}

ZoneUsage keyed_zone_usage() {
    ZoneUsage m;
    m.source = "col-z1";
    m.region = "r1";
    m.zone = "z1";
    m.seq = 4;
    m.ts_ms = 1700000000000;
    m.interval_ms = 250;
    m.hosts = 2;
    m.host_names = {"h1", "h2"};
    UsageBucket plain;
    plain.name = "api";
    plain.hosts = 2;
    plain.definitions.push_back({{Scope::Global, Mode::Deny, 100000}, 2});
    m.buckets = {plain, keyed_usage(2)};
    return m;
}

TEST(WireKeyed, UsageRoundTrip) {
    ZoneUsage m = keyed_zone_usage(), d;
    std::string err;
    ASSERT_TRUE(decode(enc(m), d, err)) << err;
    ASSERT_EQ(d.buckets.size(), 2u);
    EXPECT_FALSE(d.buckets[0].definitions[0].def.keyed);
    EXPECT_TRUE(d.buckets[0].keys.empty());
    EXPECT_TRUE(d.buckets[1].definitions[0].def.keyed);
    EXPECT_EQ(d.buckets[1].definitions, m.buckets[1].definitions);
    EXPECT_EQ(d.buckets[1].keys, m.buckets[1].keys);
    RegionUsage r, dr;
    r.source = "ctl-r1";
    r.region = "r1";
    r.zones = 1;
    r.hosts = 2;
    r.buckets = {keyed_usage(2)};
    ASSERT_TRUE(decode(enc(r), dr, err)) << err;
    EXPECT_EQ(dr.buckets[0].keys, r.buckets[0].keys);
    // Two definitions that differ only in `keyed` are different definitions.
    Definition a{Scope::Global, Mode::Deny, 100000, false},
        b{Scope::Global, Mode::Deny, 100000, true};
    EXPECT_NE(a, b);
    m.buckets[1].definitions.push_back({a, 0});
    ASSERT_TRUE(decode(enc(m), d, err)) << err;
    EXPECT_EQ(d.buckets[1].definitions.size(), 2u);
}

TEST(WireKeyed, UsageRejections) {
    auto refuse = [](const ZoneUsage& m, const std::string& needle) {
        std::string e = error_of<ZoneUsage>(enc(m));
        EXPECT_NE(e.find(needle), std::string::npos) << e;
    };
    ZoneUsage m = keyed_zone_usage();
    m.buckets[1].definitions[0].def.keyed = false;
    refuse(m, "\"keys\" without a \"keyed\" definition in buckets[1]");
    m = keyed_zone_usage();
    m.buckets[1].keys[0].hosts = 3;
    refuse(m, "\"hosts\" 3 of key 0xfeedfacecafebeef greater than the entry's \"hosts\" 2");
    m = keyed_zone_usage();
    m.buckets[1].keys[1].hash = 1;
    refuse(m, "bad \"h\" 1 (a key hash is > 1) in buckets[1].keys[1]");
    m = keyed_zone_usage();
    m.buckets[1].keys[1].hash = m.buckets[1].keys[0].hash;
    refuse(m, "duplicate key 0xfeedfacecafebeef in buckets[1].keys");
    m = keyed_zone_usage();
    m.buckets[1].keys[0].text = std::string(48, 'k');
    refuse(m, "longer than 47 bytes");
    m = keyed_zone_usage();
    m.buckets[1].keys[1].dropped_mrps = 20001;
    refuse(m, "greater than \"offered_mrps\" 20000 of key 0x0000000000000003");
    m = keyed_zone_usage();
    m.buckets[1].keys.clear();
    for (std::uint64_t i = 0; i <= kMaxUsageKeys; ++i)
        m.buckets[1].keys.push_back(key(2 + i, "", 1, 0));
    refuse(m, "too many keys (1025, max 1024)");
    m.buckets[1].keys.pop_back();
    ZoneUsage d;
    std::string err;
    EXPECT_TRUE(decode(enc(m), d, err)) << err;
    // A key entry of a usage needs "hosts".
    std::string b = enc(keyed_zone_usage());
    std::string e = error_of<ZoneUsage>(
        patched(b, std::string("\xa5hosts\x01", 7), std::string("\xa5hostz\x01", 7)));
    EXPECT_NE(e.find("missing \"hosts\" in buckets[1].keys[1]"), std::string::npos) << e;
}

TEST(WireKeyed, UsageInPartsWithKeysStaysUnderTheSize) {
    // 40 keyed buckets of 1024 keys with 47-byte texts: about 4 MiB, so at least 4 parts.
    ZoneUsage m = keyed_zone_usage();
    m.buckets.clear();
    for (int i = 0; i < 40; ++i) {
        UsageBucket b = keyed_usage(2);
        b.name = "k" + std::to_string(100 + i);
        b.keys.clear();
        for (std::uint64_t h = 0; h < kMaxUsageKeys; ++h) {
            b.keys.push_back(
                key(2 + h, std::string(kMaxKeyTextLen, 'a' + i % 26), 1000000 + h, h, 2));
        }
        m.buckets.push_back(b);
    }
    std::vector<std::string> parts;
    ASSERT_TRUE(encode_parts(m, parts, kMaxMessageBytes));
    EXPECT_GE(parts.size(), 4u);
    std::size_t buckets = 0;
    for (const std::string& p : parts) {
        EXPECT_LE(p.size(), kMaxMessageBytes);
        ZoneUsage d;
        std::string err;
        ASSERT_TRUE(decode(p, d, err)) << err;
        for (const UsageBucket& b : d.buckets) EXPECT_EQ(b.keys.size(), kMaxUsageKeys);
        buckets += d.buckets.size();
    }
    EXPECT_EQ(buckets, 40u);
}

TEST(WireKeyed, AdminKeysRoundTrip) {
    AdminRequest q, dq;
    q.op = AdminOp::Keys;
    q.bucket = "per-client";
    q.top = 5;
    std::string err;
    ASSERT_TRUE(decode(enc(q), dq, err)) << err;
    EXPECT_EQ(dq.op, AdminOp::Keys);
    EXPECT_EQ(dq.bucket, "per-client");
    EXPECT_EQ(dq.top, 5u);
    q.top = 0;  // absent: the default
    ASSERT_TRUE(decode(enc(q), dq, err)) << err;
    EXPECT_EQ(dq.top, 0u);
    EXPECT_EQ(parse_admin_op("keys"), AdminOp::Keys);
    EXPECT_EQ(to_string(AdminOp::Keys), "keys");

    AdminReply r, dr;
    r.source = "ctl-1";
    r.region = "r1";
    KeyStatus k;
    k.name = "per-client";
    k.scope = Scope::Zone;
    k.region = "r1";
    k.zone = "z1";
    k.limit_mrps = 100000;
    k.ratio_ppm = 333333;
    k.key = key(0xfeedfacecafebeefULL, "api-key-1", 150000, 50000, 2);
    KeyStatus hashed = k;
    hashed.key = key(5, "", 20000, 0, 1);
    hashed.ratio_ppm = 0;
    r.keys = {k, hashed};
    ASSERT_TRUE(decode(enc(r), dr, err)) << err;
    ASSERT_EQ(dr.keys.size(), 2u);
    EXPECT_TRUE(dr.keys[0] == k);
    EXPECT_TRUE(dr.keys[1] == hashed);
    r.keys.clear();  // not a keys reply: no "keys"
    EXPECT_EQ(enc(r).find("\xa4keys"), std::string::npos);
}

TEST(WireKeyed, AdminRejections) {
    AdminRequest q;
    q.op = AdminOp::Keys;
    std::string e = error_of<AdminRequest>(enc(q));
    EXPECT_NE(e.find("missing \"bucket\" for op keys"), std::string::npos) << e;
    q.bucket = "per-client";
    q.top = kMaxAdminTopKeys + 1;
    e = error_of<AdminRequest>(enc(q));
    EXPECT_NE(e.find("\"top\" 1025 out of 1..1024"), std::string::npos) << e;
    AdminReply r;
    r.source = "ctl-1";
    r.region = "r1";
    KeyStatus k;
    k.name = "per-client";
    k.key = key(1, "", 1, 0);
    r.keys = {k};
    e = error_of<AdminReply>(enc(r));
    EXPECT_NE(e.find("bad \"h\" 1 (a key hash is > 1) in keys[0]"), std::string::npos) << e;
    r.keys[0].key.hash = 7;
    r.keys[0].ratio_ppm = 1000001;
    e = error_of<AdminReply>(enc(r));
    EXPECT_NE(e.find("of key 0x0000000000000007 out of range"), std::string::npos) << e;
}

}  // namespace
}  // namespace grl::wire
