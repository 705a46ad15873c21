// Unit tests of grl::wire (docs/protocol.md): encoding, strict decoding, peek_type and topics.
// Malformed bodies are built by hand with the msgpack-c C API from a small value tree.
#include "grl/wire/wire.h"

#include <gtest/gtest.h>
#include <msgpack.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace grl::wire {
namespace {

constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();

// ---------------------------------------------------------------------------------------------
// A msgpack value tree for building bodies by hand.

struct Val {
    enum class Kind { Nil, UInt, Int, Float, Str, Arr, Map, Raw };
    Kind kind = Kind::Nil;
    std::uint64_t u = 0;
    std::int64_t i = 0;
    double f = 0;
    std::string s;  // Str value, or Raw bytes written verbatim
    std::vector<Val> arr;
    std::vector<std::pair<std::string, Val>> map;

    Val* find(const std::string& key) {
        for (auto& kv : map) {
            if (kv.first == key) return &kv.second;
        }
        return nullptr;
    }
    Val& at(const std::string& key) {
        Val* v = find(key);
        if (v == nullptr) throw std::out_of_range(key);
        return *v;
    }
    void erase(const std::string& key) {
        for (auto it = map.begin(); it != map.end(); ++it) {
            if (it->first == key) {
                map.erase(it);
                return;
            }
        }
        throw std::out_of_range(key);
    }
};

Val U(std::uint64_t u) {
    Val v;
    v.kind = Val::Kind::UInt;
    v.u = u;
    return v;
}
Val I(std::int64_t i) {
    Val v;
    v.kind = Val::Kind::Int;
    v.i = i;
    return v;
}
Val F(double f) {
    Val v;
    v.kind = Val::Kind::Float;
    v.f = f;
    return v;
}
Val S(std::string s) {
    Val v;
    v.kind = Val::Kind::Str;
    v.s = std::move(s);
    return v;
}
Val Raw(std::string bytes) {
    Val v;
    v.kind = Val::Kind::Raw;
    v.s = std::move(bytes);
    return v;
}
Val A(std::vector<Val> items) {
    Val v;
    v.kind = Val::Kind::Arr;
    v.arr = std::move(items);
    return v;
}
Val M(std::vector<std::pair<std::string, Val>> items) {
    Val v;
    v.kind = Val::Kind::Map;
    v.map = std::move(items);
    return v;
}
Val Nil() {
    return Val{};
}

void pack_str(msgpack_packer* pk, const std::string& s) {
    msgpack_pack_str(pk, s.size());
    msgpack_pack_str_body(pk, s.data(), s.size());
}

void pack(msgpack_packer* pk, const Val& v) {
    switch (v.kind) {
        case Val::Kind::Nil: msgpack_pack_nil(pk); break;
        case Val::Kind::UInt: msgpack_pack_uint64(pk, v.u); break;
        case Val::Kind::Int: msgpack_pack_int64(pk, v.i); break;
        case Val::Kind::Float: msgpack_pack_double(pk, v.f); break;
        case Val::Kind::Str: pack_str(pk, v.s); break;
        case Val::Kind::Raw: msgpack_sbuffer_write(pk->data, v.s.data(), v.s.size()); break;
        case Val::Kind::Arr:
            msgpack_pack_array(pk, v.arr.size());
            for (const Val& e : v.arr) pack(pk, e);
            break;
        case Val::Kind::Map:
            msgpack_pack_map(pk, v.map.size());
            for (const auto& kv : v.map) {
                pack_str(pk, kv.first);
                pack(pk, kv.second);
            }
            break;
    }
}

std::string bytes(const Val& v) {
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    pack(&pk, v);
    std::string out(buf.data, buf.size);
    msgpack_sbuffer_destroy(&buf);
    return out;
}

Val report_bucket_tree(const std::string& name) {
    return M({{"name", S(name)},
              {"scope", S("region")},
              {"mode", S("shadow")},
              {"limit_mrps", U(5000)},
              {"offered", U(100)},
              {"admitted", U(90)},
              {"dropped", U(10)},
              {"shadow_dropped", U(3)}});
}

Val report_tree() {
    return M({{"v", U(1)},
              {"type", S("report")},
              {"ts_ms", U(1700000000000)},
              {"seq", U(42)},
              {"host", S("web-1")},
              {"zone", S("eu-west-1a")},
              {"region", S("eu-west-1")},
              {"epoch", U(0xdeadbeefcafef00d)},
              {"interval_ms", U(1000)},
              {"reports_dropped", U(0)},
              {"buckets", A({report_bucket_tree("api"), report_bucket_tree("login")})}});
}

Val instruction_tree(const std::string& name) {
    return M({{"name", S(name)},
              {"ratio_ppm", U(250000)},
              {"limit_mrps", U(100000)},
              {"mode", S("deny")}});
}

Val instructions_tree() {
    return M({{"v", U(1)},
              {"type", S("instructions")},
              {"ts_ms", U(1700000000000)},
              {"seq", U(7)},
              {"source", S("ctl-eu-1")},
              {"ttl_ms", U(5000)},
              {"scope", S("zone")},
              {"region", S("eu-west-1")},
              {"zone", S("eu-west-1a")},
              {"buckets", A({instruction_tree("api"), instruction_tree("login")})}});
}

const std::vector<std::string> kReportKeys = {
    "v",     "type",        "ts_ms",           "seq",    "host", "zone", "region",
    "epoch", "interval_ms", "reports_dropped", "buckets"};
const std::vector<std::string> kReportBucketKeys = {
    "name", "scope", "mode", "limit_mrps", "offered", "admitted", "dropped", "shadow_dropped"};
const std::vector<std::string> kInstructionsKeys = {"v",      "type",  "ts_ms",  "seq",  "source",
                                                    "ttl_ms", "scope", "region", "zone", "buckets"};
const std::vector<std::string> kInstructionKeys = {"name", "ratio_ppm", "limit_mrps", "mode"};

// ---------------------------------------------------------------------------------------------
// Sample messages and comparison

Report sample_report() {
    Report r;
    r.host = "host-01.example";
    r.zone = "eu-west-1a";
    r.region = "eu-west-1";
    r.epoch = kMax64;
    r.seq = kMax64;
    r.ts_ms = 1700000000123;
    r.interval_ms = 1000;
    r.reports_dropped = kMax64;
    ReportBucket a;
    a.name = "api";
    a.scope = Scope::Global;
    a.mode = Mode::Deny;
    a.limit_mrps = kMax64;
    a.offered = kMax64;
    a.admitted = kMax64 - 1;
    a.dropped = 1;
    a.shadow_dropped = 0;
    ReportBucket b;
    b.name = "login:post";
    b.scope = Scope::Region;
    b.mode = Mode::Shadow;
    b.limit_mrps = 1;
    b.offered = 127;
    b.admitted = 128;
    b.dropped = 65535;
    b.shadow_dropped = 65536;
    ReportBucket c;
    c.name = std::string(kMaxNameLen, 'z');
    c.scope = Scope::Zone;
    c.mode = Mode::Deny;
    c.limit_mrps = 0;
    c.offered = 0x100000000ull;
    c.admitted = 0xffffffffull;
    c.dropped = 0;
    c.shadow_dropped = kMax64;
    r.buckets = {a, b, c};
    return r;
}

Instructions sample_instructions() {
    Instructions m;
    m.source = "controller eu #1";
    m.seq = kMax64;
    m.ts_ms = kMax64;
    m.ttl_ms = 30000;
    m.scope = Scope::Zone;
    m.region = "eu-west-1";
    m.zone = "eu-west-1a";
    Instruction a;
    a.name = "api";
    a.ratio_ppm = 1000000;
    a.limit_mrps = kMax64;
    a.mode = Mode::Deny;
    Instruction b;
    b.name = "A-Z_a.z:0-9";
    b.ratio_ppm = 0;
    b.limit_mrps = 0;
    b.mode = Mode::Shadow;
    Instruction c;
    c.name = "search";
    c.ratio_ppm = 123456;
    c.limit_mrps = 1000;
    c.mode = Mode::Deny;
    m.buckets = {a, b, c};
    return m;
}

void expect_same(const Report& a, const Report& b) {
    EXPECT_EQ(a.host, b.host);
    EXPECT_EQ(a.zone, b.zone);
    EXPECT_EQ(a.region, b.region);
    EXPECT_EQ(a.epoch, b.epoch);
    EXPECT_EQ(a.seq, b.seq);
    EXPECT_EQ(a.ts_ms, b.ts_ms);
    EXPECT_EQ(a.interval_ms, b.interval_ms);
    EXPECT_EQ(a.reports_dropped, b.reports_dropped);
    ASSERT_EQ(a.buckets.size(), b.buckets.size());
    for (std::size_t i = 0; i < a.buckets.size(); ++i) {
        SCOPED_TRACE("bucket " + std::to_string(i));
        EXPECT_EQ(a.buckets[i].name, b.buckets[i].name);
        EXPECT_EQ(a.buckets[i].scope, b.buckets[i].scope);
        EXPECT_EQ(a.buckets[i].mode, b.buckets[i].mode);
        EXPECT_EQ(a.buckets[i].limit_mrps, b.buckets[i].limit_mrps);
        EXPECT_EQ(a.buckets[i].offered, b.buckets[i].offered);
        EXPECT_EQ(a.buckets[i].admitted, b.buckets[i].admitted);
        EXPECT_EQ(a.buckets[i].dropped, b.buckets[i].dropped);
        EXPECT_EQ(a.buckets[i].shadow_dropped, b.buckets[i].shadow_dropped);
        EXPECT_EQ(a.buckets[i].has_recent, b.buckets[i].has_recent);
        EXPECT_EQ(a.buckets[i].recent, b.buckets[i].recent);
    }
    EXPECT_EQ(a.recent_ms, b.recent_ms);
}

void expect_same(const Instructions& a, const Instructions& b) {
    EXPECT_EQ(a.source, b.source);
    EXPECT_EQ(a.seq, b.seq);
    EXPECT_EQ(a.ts_ms, b.ts_ms);
    EXPECT_EQ(a.ttl_ms, b.ttl_ms);
    EXPECT_EQ(a.scope, b.scope);
    EXPECT_EQ(a.region, b.region);
    EXPECT_EQ(a.zone, b.zone);
    ASSERT_EQ(a.buckets.size(), b.buckets.size());
    for (std::size_t i = 0; i < a.buckets.size(); ++i) {
        SCOPED_TRACE("bucket " + std::to_string(i));
        EXPECT_EQ(a.buckets[i].name, b.buckets[i].name);
        EXPECT_EQ(a.buckets[i].ratio_ppm, b.buckets[i].ratio_ppm);
        EXPECT_EQ(a.buckets[i].limit_mrps, b.buckets[i].limit_mrps);
        EXPECT_EQ(a.buckets[i].mode, b.buckets[i].mode);
        EXPECT_EQ(a.buckets[i].has_basis, b.buckets[i].has_basis);
        EXPECT_EQ(a.buckets[i].basis_offered_mrps, b.buckets[i].basis_offered_mrps);
        EXPECT_EQ(a.buckets[i].basis_ms, b.buckets[i].basis_ms);
    }
}

std::string encoded(const Report& r) {
    std::string out;
    encode(r, out);
    return out;
}

std::string encoded(const Instructions& m) {
    std::string out;
    encode(m, out);
    return out;
}

// decode() of both message types; returns the error (empty on success).
std::string report_error(const std::string& b) {
    Report r;
    std::string err;
    if (decode(b, r, err)) return "";
    EXPECT_FALSE(err.empty());
    return err;
}

std::string instructions_error(const std::string& b) {
    Instructions m;
    std::string err;
    if (decode(b, m, err)) return "";
    EXPECT_FALSE(err.empty());
    return err;
}

testing::AssertionResult contains(const std::string& haystack, const std::string& needle) {
    if (haystack.find(needle) != std::string::npos) return testing::AssertionSuccess();
    return testing::AssertionFailure()
           << '"' << haystack << "\" does not contain \"" << needle << '"';
}
#define EXPECT_CONTAINS(haystack, needle) EXPECT_TRUE(contains((haystack), (needle)))

// ---------------------------------------------------------------------------------------------
// Round trips and encoding

TEST(Wire, ReportRoundTrip) {
    const Report r = sample_report();
    Report d;
    std::string err;
    ASSERT_TRUE(decode(encoded(r), d, err)) << err;
    expect_same(r, d);
    EXPECT_EQ(peek_type(encoded(r)), "report");
}

// A reused buffer holds the new message alone: a buffer that kept the last message's bytes
// before the new ones made the collector's replay malformed (f7a93b0).
TEST(Wire, EncodeReplacesWhatTheBufferHeld) {
    const Report r = sample_report();
    Instructions in;
    in.source = "ctl";
    in.buckets.emplace_back();
    in.buckets.back().name = "a";
    std::string buf = "earlier bytes";
    encode(r, buf);
    EXPECT_EQ(buf, encoded(r));
    encode(in, buf);
    Instructions d;
    std::string err;
    ASSERT_TRUE(decode(buf, d, err)) << err;
    EXPECT_EQ(d.source, "ctl");
}

// Encoders pack into one buffer of the process, kept from message to message; a second
// encoder running meanwhile (another thread) packs into a buffer of its own. Each gets its own
// message's bytes, whatever the other does, and a big message then a small one in the same
// string leaves the small one alone.
TEST(Wire, EncodersOnSeveralThreadsEachGetTheirOwnBytes) {
    Instructions big;
    big.source = "ctl";
    for (int i = 0; i < 3000; ++i) {
        big.buckets.emplace_back();
        big.buckets.back().name = "bucket-" + std::to_string(i);
        big.buckets.back().ratio_ppm = static_cast<std::uint32_t>(i);
    }
    const Report small = sample_report();
    const std::string big_bytes = encoded(big), small_bytes = encoded(small);
    std::string out;
    encode(big, out);
    encode(small, out);
    EXPECT_EQ(out, small_bytes);
    std::atomic<int> wrong{0};
    auto run = [&](bool is_big) {
        std::string mine;
        for (int i = 0; i < 1500; ++i) {
            if (is_big) {
                encode(big, mine);
                wrong += mine != big_bytes;
            } else {
                encode(small, mine);
                wrong += mine != small_bytes;
            }
        }
    };
    std::thread a(run, true), b(run, false), c(run, true);
    a.join();
    b.join();
    c.join();
    EXPECT_EQ(wrong.load(), 0);
}

TEST(Wire, InstructionsRoundTrip) {
    const Instructions m = sample_instructions();
    const std::string b = encoded(m);
    Instructions d;
    std::string err;
    ASSERT_TRUE(decode(b, d, err)) << err;
    expect_same(m, d);
    EXPECT_EQ(peek_type(b), "instructions");
}

// The surge-damping basis is optional: both keys or neither; a message without it (an older
// controller) decodes as before, and an older nginx ignores the keys (unknown keys).
TEST(Wire, InstructionBasisRoundTripAndPairing) {
    Instructions m = sample_instructions();
    m.buckets[0].has_basis = true;
    m.buckets[0].basis_offered_mrps = 6'000'000;
    m.buckets[0].basis_ms = 1'764'000'000'123;
    Instructions d;
    std::string err;
    ASSERT_TRUE(decode(encoded(m), d, err)) << err;
    expect_same(m, d);
    EXPECT_TRUE(d.buckets[0].has_basis);
    if (d.buckets.size() > 1) {
        EXPECT_FALSE(d.buckets[1].has_basis);
    }
    // One key alone is malformed, with a reason naming both.
    std::string b = encoded(m);
    const std::string key = "basis_ms";
    auto at = b.find(key);
    ASSERT_NE(at, std::string::npos);
    b[at] = 'X';  // "Xasis_ms": an unknown key, so basis_offered_mrps is alone
    EXPECT_FALSE(decode(b, d, err));
    EXPECT_NE(err.find("\"basis_offered_mrps\" and \"basis_ms\" go together"), std::string::npos)
        << err;
}

TEST(Wire, InstructionsRoundTripEachScope) {
    Instructions m = sample_instructions();
    m.scope = Scope::Global;
    m.region.clear();
    m.zone.clear();
    Instructions d;
    std::string err;
    ASSERT_TRUE(decode(encoded(m), d, err)) << err;
    expect_same(m, d);

    m.scope = Scope::Region;
    m.region = "us-east-1";
    ASSERT_TRUE(decode(encoded(m), d, err)) << err;
    expect_same(m, d);
}

TEST(Wire, DecodeOverwritesPreviousContent) {
    Report d = sample_report();
    Report r = sample_report();
    r.buckets.resize(1);
    r.host = "other";
    std::string err;
    ASSERT_TRUE(decode(encoded(r), d, err)) << err;
    expect_same(r, d);
}

// Collects the string keys of a msgpack map object.
std::set<std::string> keys_of(const msgpack_object& o) {
    std::set<std::string> keys;
    EXPECT_EQ(o.type, MSGPACK_OBJECT_MAP);
    if (o.type != MSGPACK_OBJECT_MAP) return keys;
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
        const msgpack_object& k = o.via.map.ptr[i].key;
        EXPECT_EQ(k.type, MSGPACK_OBJECT_STR);
        keys.emplace(k.via.str.ptr, k.via.str.size);
    }
    EXPECT_EQ(keys.size(), o.via.map.size) << "duplicate keys";
    return keys;
}

const msgpack_object* value_of(const msgpack_object& map, const std::string& key) {
    for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
        const msgpack_object& k = map.via.map.ptr[i].key;
        if (std::string(k.via.str.ptr, k.via.str.size) == key) return &map.via.map.ptr[i].val;
    }
    return nullptr;
}

std::string str_value(const msgpack_object& map, const std::string& key) {
    const msgpack_object* v = value_of(map, key);
    if (v == nullptr || v->type != MSGPACK_OBJECT_STR) return "<not a str>";
    return std::string(v->via.str.ptr, v->via.str.size);
}

void check_keys(const std::string& b, const std::vector<std::string>& top,
                const std::vector<std::string>& entry, const std::string& type) {
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    std::size_t off = 0;
    ASSERT_EQ(msgpack_unpack_next(&u, b.data(), b.size(), &off), MSGPACK_UNPACK_SUCCESS);
    EXPECT_EQ(off, b.size());
    const msgpack_object& root = u.data;
    EXPECT_EQ(keys_of(root), std::set<std::string>(top.begin(), top.end()));
    const msgpack_object* v = value_of(root, "v");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    EXPECT_EQ(v->via.u64, 1u);
    EXPECT_EQ(str_value(root, "type"), type);
    const msgpack_object* buckets = value_of(root, "buckets");
    ASSERT_NE(buckets, nullptr);
    ASSERT_EQ(buckets->type, MSGPACK_OBJECT_ARRAY);
    ASSERT_GT(buckets->via.array.size, 0u);
    for (std::uint32_t i = 0; i < buckets->via.array.size; ++i) {
        const msgpack_object& e = buckets->via.array.ptr[i];
        EXPECT_EQ(keys_of(e), std::set<std::string>(entry.begin(), entry.end()));
        EXPECT_TRUE(str_value(e, "mode") == "deny" || str_value(e, "mode") == "shadow");
    }
    msgpack_unpacked_destroy(&u);
}

TEST(Wire, ReportHasExactlyTheDocumentedKeys) {
    check_keys(encoded(sample_report()), kReportKeys, kReportBucketKeys, "report");
}

TEST(Wire, ReportWithRecentCountsRoundTrip) {
    Report r = sample_report();
    ASSERT_GE(r.buckets.size(), 2u);
    r.recent_ms = 250;
    r.buckets[0].has_recent = true;
    r.buckets[0].recent = {40, 30, 10, 2};  // buckets[1] unknown: sent as []
    const std::string b = encoded(r);
    check_keys(
        b,
        [] {
            std::vector<std::string> k = kReportKeys;
            k.push_back("recent_ms");
            k.push_back("recent");
            return k;
        }(),
        kReportBucketKeys, "report");
    Report d;
    std::string err;
    ASSERT_TRUE(decode(b, d, err)) << err;
    expect_same(r, d);
    EXPECT_FALSE(d.buckets[1].has_recent);
    // Without recent_ms nothing extra is sent (the first report of a reporter).
    r.recent_ms = 0;
    check_keys(encoded(r), kReportKeys, kReportBucketKeys, "report");
}

TEST(Wire, InstructionsHaveExactlyTheDocumentedKeys) {
    const std::string b = encoded(sample_instructions());
    check_keys(b, kInstructionsKeys, kInstructionKeys, "instructions");
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    ASSERT_EQ(msgpack_unpack_next(&u, b.data(), b.size(), nullptr), MSGPACK_UNPACK_SUCCESS);
    EXPECT_EQ(str_value(u.data, "scope"), "zone");
    msgpack_unpacked_destroy(&u);
}

TEST(Wire, HandBuiltTreesAreValid) {
    // The baseline every negative test below mutates.
    EXPECT_EQ(report_error(bytes(report_tree())), "");
    EXPECT_EQ(instructions_error(bytes(instructions_tree())), "");
}

// ---------------------------------------------------------------------------------------------
// Framing

TEST(Wire, EveryTruncationIsRejected) {
    for (const std::string& full : {encoded(sample_report()), encoded(sample_instructions())}) {
        for (std::size_t len = 0; len < full.size(); ++len) {
            SCOPED_TRACE("length " + std::to_string(len));
            const std::string part = full.substr(0, len);
            const std::string want = len == 0 ? "empty message" : "truncated message";
            EXPECT_EQ(report_error(part), want);
            EXPECT_EQ(instructions_error(part), want);
            EXPECT_EQ(peek_type(part), "");
        }
    }
}

TEST(Wire, TrailingBytesRejected) {
    const std::string r = encoded(sample_report());
    EXPECT_EQ(report_error(r + std::string(1, '\0')), "trailing bytes after message");
    EXPECT_EQ(report_error(r + r), "trailing bytes after message");
    EXPECT_EQ(peek_type(r + "x"), "");
    const std::string i = encoded(sample_instructions());
    EXPECT_EQ(instructions_error(i + "\xc0"), "trailing bytes after message");
}

TEST(Wire, BodyMustBeAMap) {
    EXPECT_CONTAINS(report_error(bytes(A({U(1), S("report")}))), "not a map");
    EXPECT_CONTAINS(instructions_error(bytes(S("instructions"))), "not a map");
    EXPECT_CONTAINS(report_error(bytes(U(1))), "not a map");
    EXPECT_CONTAINS(report_error(bytes(M({}))), "missing \"v\"");
}

TEST(Wire, OversizedMessageRejected) {
    Val t = report_tree();
    t.map.emplace_back("padding", S(std::string(kMaxMessageBytes, 'x')));
    const std::string b = bytes(t);
    ASSERT_GT(b.size(), kMaxMessageBytes);
    EXPECT_CONTAINS(report_error(b), "too large");
    EXPECT_EQ(peek_type(b), "");

    // Just under the limit is fine.
    Val ok = report_tree();
    const std::size_t base = bytes(ok).size();
    ok.map.emplace_back("padding", S(std::string(kMaxMessageBytes - base - 20, 'x')));
    const std::string okb = bytes(ok);
    ASSERT_LE(okb.size(), kMaxMessageBytes);
    EXPECT_EQ(report_error(okb), "");
}

TEST(Wire, HostileHeadersRejectedCheaply) {
    const std::vector<std::string> cases = {
        std::string("\xdd\xff\xff\xff\xff", 5),           // array32 of 4G elements
        std::string("\xdf\xff\xff\xff\xff", 5),           // map32 of 4G pairs
        std::string("\x81\xa1v\xdd\x7f\xff\xff\xff", 8),  // nested huge array
        std::string("\xdb\xff\xff\xff\xff", 5),           // str32 of 4 GiB
        std::string("\xc6\xff\xff\xff\xff", 5),           // bin32
        std::string("\xc9\xff\xff\xff\xff\x01", 6),       // ext32 with length + 1 overflow
        std::string("\xc1", 1),                           // never-used tag
        std::string("\x81\xa1v\xc1", 4),
        std::string("\x80\xc1", 2),  // empty map then junk
    };
    for (const std::string& b : cases) {
        EXPECT_NE(report_error(b), "");
        EXPECT_NE(instructions_error(b), "");
        EXPECT_EQ(peek_type(b), "");
    }
    EXPECT_EQ(report_error(cases[0]), "truncated message");
    EXPECT_EQ(report_error(cases[6]), "malformed msgpack");
    EXPECT_EQ(report_error(cases[8]), "trailing bytes after message");
}

TEST(Wire, DeepNestingRejected) {
    for (std::size_t depth : {17u, 20u, 40u, 100000u}) {
        // {"v": 1, "type": "report", "extra": [[[...0...]]]}
        std::string b(
            "\x83\xa1v\x01\xa4type\xa6report\xa5"
            "extra",
            22);
        b.append(depth, '\x91');
        b += '\x00';
        EXPECT_EQ(report_error(b), "message nested too deeply");
        EXPECT_EQ(peek_type(b), "");
    }
    // Moderate nesting inside an unknown key is fine.
    Val t = report_tree();
    Val deep = U(1);
    for (int i = 0; i < 8; ++i) deep = A({deep});
    t.map.emplace_back("extra", deep);
    EXPECT_EQ(report_error(bytes(t)), "");
}

// ---------------------------------------------------------------------------------------------
// Header fields

TEST(Wire, WrongVersionRejected) {
    for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{2}, kMax64}) {
        Val t = report_tree();
        t.at("v") = U(v);
        const std::string err = report_error(bytes(t));
        EXPECT_EQ(err, "bad \"v\" " + std::to_string(v) + " (want 1)");
        EXPECT_EQ(peek_type(bytes(t)), "");

        Val i = instructions_tree();
        i.at("v") = U(v);
        EXPECT_CONTAINS(instructions_error(bytes(i)), std::to_string(v));
    }
    Val t = report_tree();
    t.at("v") = S("1");
    EXPECT_EQ(report_error(bytes(t)), "bad \"v\" type str (want uint)");
    t.at("v") = I(-1);
    EXPECT_EQ(report_error(bytes(t)), "bad \"v\" type int (want uint)");
}

TEST(Wire, WrongTypeRejected) {
    EXPECT_EQ(instructions_error(encoded(sample_report())),
              "bad \"type\" \"report\" (want \"instructions\")");
    EXPECT_EQ(report_error(encoded(sample_instructions())),
              "bad \"type\" \"instructions\" (want \"report\")");
    Val t = report_tree();
    t.at("type") = S("Report");
    EXPECT_CONTAINS(report_error(bytes(t)), "\"Report\"");
    t.at("type") = U(1);
    EXPECT_EQ(report_error(bytes(t)), "bad \"type\" type uint (want str)");
}

TEST(Wire, IntegerEncodingsOfUintAccepted) {
    // Another encoder may write non-negative values with signed or wider formats.
    Val t = report_tree();
    t.at("v") = Raw(std::string("\xd0\x01", 2));                    // int 8
    t.at("seq") = Raw(std::string("\xcf\0\0\0\0\0\0\0\x05", 9));    // uint 64
    t.at("epoch") = Raw(std::string("\xd3\0\0\0\0\0\0\x01\0", 9));  // int 64
    Report r;
    std::string err;
    ASSERT_TRUE(decode(bytes(t), r, err)) << err;
    EXPECT_EQ(r.seq, 5u);
    EXPECT_EQ(r.epoch, 256u);
}

// ---------------------------------------------------------------------------------------------
// Missing keys and wrong types

TEST(Wire, ReportMissingKeyRejected) {
    for (const std::string& key : kReportKeys) {
        SCOPED_TRACE(key);
        Val t = report_tree();
        t.erase(key);
        EXPECT_EQ(report_error(bytes(t)), "missing \"" + key + "\"");
    }
    for (const std::string& key : kReportBucketKeys) {
        SCOPED_TRACE(key);
        Val t = report_tree();
        t.at("buckets").arr[1].erase(key);
        const std::string err = report_error(bytes(t));
        EXPECT_CONTAINS(err, "missing \"" + key + "\"");
        if (key == "name") {
            EXPECT_EQ(err, "missing \"name\" in buckets[1]");
        } else {
            EXPECT_EQ(err, "missing \"" + key + "\" for bucket \"login\"");
        }
    }
}

TEST(Wire, InstructionsMissingKeyRejected) {
    for (const std::string& key : kInstructionsKeys) {
        SCOPED_TRACE(key);
        Val t = instructions_tree();
        t.erase(key);
        EXPECT_EQ(instructions_error(bytes(t)), "missing \"" + key + "\"");
    }
    for (const std::string& key : kInstructionKeys) {
        SCOPED_TRACE(key);
        Val t = instructions_tree();
        t.at("buckets").arr[0].erase(key);
        EXPECT_CONTAINS(instructions_error(bytes(t)), "missing \"" + key + "\"");
    }
}

// A value of the wrong msgpack type for a key whose right type is `want`.
std::vector<Val> wrong_values(const std::string& want) {
    std::vector<Val> v = {Nil(), F(1.5), M({})};
    if (want != "uint") v.push_back(U(1));
    if (want == "uint") v.push_back(I(-3));
    if (want != "str") v.push_back(S("1"));
    if (want != "array") v.push_back(A({}));
    return v;
}

std::string want_type(const std::string& key) {
    if (key == "buckets") return "array";
    static const std::set<std::string> strs = {"type", "host",  "zone", "region",
                                               "name", "scope", "mode", "source"};
    return strs.count(key) ? "str" : "uint";
}

TEST(Wire, ReportWrongKeyTypeRejected) {
    for (const std::string& key : kReportKeys) {
        for (const Val& bad : wrong_values(want_type(key))) {
            SCOPED_TRACE(key);
            Val t = report_tree();
            t.at(key) = bad;
            const std::string err = report_error(bytes(t));
            EXPECT_CONTAINS(err, "\"" + key + "\"");
            EXPECT_CONTAINS(err, "(want " + want_type(key) + ")");
        }
    }
    for (const std::string& key : kReportBucketKeys) {
        for (const Val& bad : wrong_values(want_type(key))) {
            SCOPED_TRACE(key);
            Val t = report_tree();
            t.at("buckets").arr[0].at(key) = bad;
            const std::string err = report_error(bytes(t));
            EXPECT_CONTAINS(err, "\"" + key + "\"");
            EXPECT_CONTAINS(err, "(want " + want_type(key) + ")");
        }
    }
    Val t = report_tree();
    t.at("buckets").arr[1] = U(3);
    EXPECT_EQ(report_error(bytes(t)), "bad \"buckets[1]\" type uint (want map)");
}

TEST(Wire, InstructionsWrongKeyTypeRejected) {
    for (const std::string& key : kInstructionsKeys) {
        for (const Val& bad : wrong_values(want_type(key))) {
            SCOPED_TRACE(key);
            Val t = instructions_tree();
            t.at(key) = bad;
            const std::string err = instructions_error(bytes(t));
            EXPECT_CONTAINS(err, "\"" + key + "\"");
            EXPECT_CONTAINS(err, "(want " + want_type(key) + ")");
        }
    }
    for (const std::string& key : kInstructionKeys) {
        for (const Val& bad : wrong_values(want_type(key))) {
            SCOPED_TRACE(key);
            Val t = instructions_tree();
            t.at("buckets").arr[1].at(key) = bad;
            const std::string err = instructions_error(bytes(t));
            EXPECT_CONTAINS(err, "\"" + key + "\"");
            EXPECT_CONTAINS(err, "(want " + want_type(key) + ")");
        }
    }
    Val t = instructions_tree();
    t.at("buckets").arr[0] = A({});
    EXPECT_EQ(instructions_error(bytes(t)), "bad \"buckets[0]\" type array (want map)");
}

TEST(Wire, NonStringKeyRejected) {
    Val t = report_tree();
    std::string b = bytes(t);
    // Bump the fixmap count and append a pair with an integer key.
    ASSERT_EQ(static_cast<unsigned char>(b[0]), 0x80u + t.map.size());
    b[0] = static_cast<char>(b[0] + 1);
    b += std::string("\x07\x07", 2);
    EXPECT_EQ(report_error(b), "uint key in map");
}

TEST(Wire, DuplicateKeyRejected) {
    Val t = report_tree();
    t.map.emplace_back("seq", U(43));
    EXPECT_EQ(report_error(bytes(t)), "duplicate key \"seq\"");
    Val i = instructions_tree();
    i.at("buckets").arr[0].map.emplace_back("ratio_ppm", U(0));
    EXPECT_EQ(instructions_error(bytes(i)), "duplicate key \"ratio_ppm\" in buckets[0]");
}

// ---------------------------------------------------------------------------------------------
// Values

TEST(Wire, RatioRange) {
    for (std::uint64_t ok : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1000000}}) {
        Val t = instructions_tree();
        t.at("buckets").arr[0].at("ratio_ppm") = U(ok);
        Instructions m;
        std::string err;
        ASSERT_TRUE(decode(bytes(t), m, err)) << err;
        EXPECT_EQ(m.buckets[0].ratio_ppm, ok);
    }
    for (std::uint64_t bad :
         {std::uint64_t{1000001}, std::uint64_t{1200000}, std::uint64_t{0x100000000}, kMax64}) {
        Val t = instructions_tree();
        t.at("buckets").arr[0].at("ratio_ppm") = U(bad);
        EXPECT_EQ(instructions_error(bytes(t)),
                  "\"ratio_ppm\" " + std::to_string(bad) + " out of range for bucket \"api\"");
    }
}

TEST(Wire, InvalidNamesRejected) {
    const std::vector<std::string> bad = {"",
                                          "a b",
                                          "a/b",
                                          std::string(kMaxNameLen + 1, 'a'),
                                          "caf\xc3\xa9",
                                          std::string("nul\0l", 5),
                                          "x\"y"};
    for (const std::string& name : bad) {
        for (const char* key : {"host", "zone", "region"}) {
            Val t = report_tree();
            t.at(key) = S(name);
            EXPECT_CONTAINS(report_error(bytes(t)), std::string("invalid \"") + key + "\"");
        }
        Val t = report_tree();
        t.at("buckets").arr[0].at("name") = S(name);
        EXPECT_CONTAINS(report_error(bytes(t)), "invalid bucket name");

        Val i = instructions_tree();
        i.at("buckets").arr[1].at("name") = S(name);
        EXPECT_CONTAINS(instructions_error(bytes(i)), "invalid bucket name");
    }
    Val t = report_tree();
    t.at("buckets").arr[0].at("name") = S("a b");
    EXPECT_EQ(report_error(bytes(t)), "invalid bucket name \"a b\"");
    t = report_tree();
    t.at("host") = S("a b");
    EXPECT_EQ(report_error(bytes(t)), "invalid \"host\" \"a b\"");
    // Network bytes are escaped and cut in error strings.
    t.at("host") = S(std::string("\x01\"\\", 3) + std::string(200, 'h'));
    const std::string err = report_error(bytes(t));
    EXPECT_CONTAINS(err, "\\x01\\\"\\\\hhh");
    EXPECT_CONTAINS(err, "...\"");
    EXPECT_LT(err.size(), 100u);
}

TEST(Wire, InstructionsLocalityPerScope) {
    struct Case {
        const char* scope;
        const char* region;
        const char* zone;
        bool ok;
    };
    const Case cases[] = {
        {"global", "", "", true},       {"global", "eu", "", true},
        {"global", "e u", "", false},   {"global", "", "a/b", false},
        {"region", "eu", "", true},     {"region", "eu", "eu-a", true},
        {"region", "", "", false},      {"region", "e/u", "", false},
        {"region", "eu", "a b", false}, {"zone", "eu", "eu-a", true},
        {"zone", "", "eu-a", false},    {"zone", "eu", "", false},
        {"zone", "eu", "eu a", false},  {"planet", "eu", "eu-a", false},
        {"Zone", "eu", "eu-a", false},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(std::string(c.scope) + "/" + c.region + "/" + c.zone);
        Val t = instructions_tree();
        t.at("scope") = S(c.scope);
        t.at("region") = S(c.region);
        t.at("zone") = S(c.zone);
        Instructions m;
        std::string err;
        EXPECT_EQ(decode(bytes(t), m, err), c.ok) << err;
    }
    Val t = instructions_tree();
    t.at("zone") = S("");
    EXPECT_EQ(instructions_error(bytes(t)), "invalid \"zone\" \"\" for scope \"zone\"");
    t.at("scope") = S("planet");
    EXPECT_EQ(instructions_error(bytes(t)), "bad \"scope\" \"planet\"");
}

TEST(Wire, ScopeAndModeValuesChecked) {
    Val t = report_tree();
    t.at("buckets").arr[0].at("scope") = S("world");
    EXPECT_EQ(report_error(bytes(t)), "bad \"scope\" \"world\" for bucket \"api\"");
    t = report_tree();
    t.at("buckets").arr[1].at("mode") = S("Deny");
    EXPECT_EQ(report_error(bytes(t)), "bad \"mode\" \"Deny\" for bucket \"login\"");
    Val i = instructions_tree();
    i.at("buckets").arr[0].at("mode") = S("block");
    EXPECT_EQ(instructions_error(bytes(i)), "bad \"mode\" \"block\" for bucket \"api\"");
}

TEST(Wire, DuplicateBucketNamesRejected) {
    Report r = sample_report();
    r.buckets.push_back(r.buckets[1]);
    r.buckets.back().offered = 1;
    EXPECT_EQ(report_error(encoded(r)), "duplicate bucket name \"login:post\"");

    Instructions m = sample_instructions();
    m.buckets.push_back(m.buckets[0]);
    EXPECT_EQ(instructions_error(encoded(m)), "duplicate bucket name \"api\"");
}

TEST(Wire, BucketCountLimit) {
    Report r = sample_report();
    r.buckets.clear();
    for (std::size_t i = 0; i < kMaxBucketsPerMessage; ++i) {
        ReportBucket b;
        b.name = "b" + std::to_string(i);
        b.offered = kMax64;
        r.buckets.push_back(b);
    }
    std::string b = encoded(r);
    ASSERT_LE(b.size(), kMaxMessageBytes);
    Report d;
    std::string err;
    ASSERT_TRUE(decode(b, d, err)) << err;
    EXPECT_EQ(d.buckets.size(), kMaxBucketsPerMessage);

    r.buckets.push_back(r.buckets[0]);
    r.buckets.back().name = "one-too-many";
    EXPECT_EQ(report_error(encoded(r)), "too many buckets (4097, max 4096)");

    Instructions m = sample_instructions();
    m.buckets.clear();
    for (std::size_t i = 0; i <= kMaxBucketsPerMessage; ++i) {
        Instruction e;
        e.name = "b" + std::to_string(i);
        m.buckets.push_back(e);
    }
    EXPECT_EQ(instructions_error(encoded(m)), "too many buckets (4097, max 4096)");
    m.buckets.pop_back();
    EXPECT_EQ(instructions_error(encoded(m)), "");
}

TEST(Wire, UnknownKeysIgnored) {
    Val t = report_tree();
    t.map.insert(t.map.begin(), {"future", M({{"nested", A({U(1), S("x"), Nil(), F(2.5)})}})});
    t.map.emplace_back("zzz", Raw(std::string("\xd4\x01\x02", 3)));  // fixext 1
    t.at("buckets").arr[0].map.emplace_back("p99_ms", F(12.5));
    t.at("buckets").arr[1].map.insert(t.at("buckets").arr[1].map.begin(), {"note", Nil()});
    Report r;
    std::string err;
    ASSERT_TRUE(decode(bytes(t), r, err)) << err;
    EXPECT_EQ(r.host, "web-1");
    EXPECT_EQ(r.seq, 42u);
    ASSERT_EQ(r.buckets.size(), 2u);
    EXPECT_EQ(r.buckets[1].name, "login");
    EXPECT_EQ(r.buckets[1].scope, Scope::Region);
    EXPECT_EQ(r.buckets[1].mode, Mode::Shadow);
    EXPECT_EQ(r.buckets[1].shadow_dropped, 3u);
    EXPECT_EQ(peek_type(bytes(t)), "report");

    Val i = instructions_tree();
    i.map.emplace_back("x-debug", S("hello"));
    i.at("buckets").arr[0].map.emplace_back("reason", S("over limit"));
    Instructions m;
    ASSERT_TRUE(decode(bytes(i), m, err)) << err;
    EXPECT_EQ(m.buckets[0].ratio_ppm, 250000u);
}

TEST(Wire, EmptyBucketsAccepted) {
    Instructions m = sample_instructions();
    m.buckets.clear();  // heartbeat
    Instructions d = sample_instructions();
    std::string err;
    ASSERT_TRUE(decode(encoded(m), d, err)) << err;
    EXPECT_TRUE(d.buckets.empty());
    EXPECT_EQ(d.seq, m.seq);

    Report r = sample_report();
    r.buckets.clear();
    Report rd;
    ASSERT_TRUE(decode(encoded(r), rd, err)) << err;
    EXPECT_TRUE(rd.buckets.empty());
}

// ---------------------------------------------------------------------------------------------
// Robustness

// Decodes `b` twice as each message type; the outcome must be stable, and anything accepted must
// survive a re-encode unchanged.
void check_stable(const std::string& b) {
    Report r1, r2;
    std::string e1, e2;
    const bool ok1 = decode(b, r1, e1);
    const bool ok2 = decode(b, r2, e2);
    ASSERT_EQ(ok1, ok2);
    if (ok1) {
        Report r3;
        std::string e3;
        ASSERT_TRUE(decode(encoded(r1), r3, e3)) << e3;
        expect_same(r1, r3);
    } else {
        EXPECT_EQ(e1, e2);
        EXPECT_FALSE(e1.empty());
    }

    Instructions i1, i2;
    const bool ok3 = decode(b, i1, e1);
    const bool ok4 = decode(b, i2, e2);
    ASSERT_EQ(ok3, ok4);
    if (ok3) {
        Instructions i3;
        std::string e3;
        ASSERT_TRUE(decode(encoded(i1), i3, e3)) << e3;
        expect_same(i1, i3);
    } else {
        EXPECT_EQ(e1, e2);
        EXPECT_FALSE(e1.empty());
    }
    EXPECT_FALSE(ok1 && ok3) << "one body cannot be both types";
    const std::string t = peek_type(b);
    if (ok1) {
        EXPECT_EQ(t, "report");
    }
    if (ok3) {
        EXPECT_EQ(t, "instructions");
    }
}

TEST(Wire, RandomBytesNeverCrash) {
    std::mt19937 rng(20240229);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_int_distribution<int> length(0, 96);
    for (int n = 0; n < 4000; ++n) {
        std::string b(static_cast<std::size_t>(length(rng)), '\0');
        for (char& c : b) c = static_cast<char>(byte(rng));
        // Half of them start like a v1 body so the decoders get past the first checks.
        if (n % 2 == 1) b.insert(0, "\x8b\xa1v\x01\xa4type", 9);
        check_stable(b);
    }
}

TEST(Wire, MutatedMessagesNeverCrash) {
    std::mt19937 rng(7);
    const std::vector<std::string> seeds = {encoded(sample_report()),
                                            encoded(sample_instructions()), bytes(report_tree()),
                                            bytes(instructions_tree())};
    std::size_t accepted = 0;
    for (int n = 0; n < 4000; ++n) {
        std::string b = seeds[static_cast<std::size_t>(n) % seeds.size()];
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits && !b.empty(); ++e) {
            const std::size_t pos = rng() % b.size();
            switch (rng() % 4) {
                case 0: b[pos] = static_cast<char>(rng()); break;
                case 1: b[pos] = static_cast<char>(b[pos] ^ (1u << (rng() % 8))); break;
                case 2: b.erase(pos, 1 + rng() % 3); break;
                case 3: b.insert(pos, 1, static_cast<char>(rng())); break;
            }
        }
        check_stable(b);
        Report r;
        Instructions m;
        std::string err;
        accepted += decode(b, r, err) || decode(b, m, err);
    }
    // Some edits (e.g. of a counter's value) keep the message valid: the accept path is exercised.
    EXPECT_GT(accepted, 0u);
}

// ---------------------------------------------------------------------------------------------
// peek_type and topics

TEST(Wire, PeekType) {
    EXPECT_EQ(peek_type(encoded(sample_report())), "report");
    EXPECT_EQ(peek_type(encoded(sample_instructions())), "instructions");
    EXPECT_EQ(peek_type(bytes(M({{"type", S("other")}, {"v", U(1)}}))), "other");
    EXPECT_EQ(peek_type(bytes(M({{"v", U(2)}, {"type", S("report")}}))), "");
    EXPECT_EQ(peek_type(bytes(M({{"v", S("1")}, {"type", S("report")}}))), "");
    EXPECT_EQ(peek_type(bytes(M({{"type", S("report")}}))), "");
    EXPECT_EQ(peek_type(bytes(M({{"v", U(1)}, {"type", U(3)}}))), "");
    EXPECT_EQ(peek_type(bytes(M({{"v", U(1)}}))), "");
    EXPECT_EQ(peek_type(bytes(A({U(1), S("report")}))), "");
    EXPECT_EQ(peek_type(bytes(S("report"))), "");
    EXPECT_EQ(peek_type(""), "");
    EXPECT_EQ(peek_type("garbage"), "");
    // A type peeked from an otherwise invalid body: the full decode still rejects it.
    Val t = report_tree();
    t.erase("host");
    EXPECT_EQ(peek_type(bytes(t)), "report");
    EXPECT_NE(report_error(bytes(t)), "");
}

TEST(Wire, Topics) {
    EXPECT_EQ(topic(Scope::Global, "", ""), "grl/g/");
    EXPECT_EQ(topic(Scope::Global, "eu", "eu-a"), "grl/g/");
    EXPECT_EQ(topic(Scope::Region, "eu-west-1", ""), "grl/r/eu-west-1/");
    EXPECT_EQ(topic(Scope::Region, "eu-west-1", "eu-west-1a"), "grl/r/eu-west-1/");
    EXPECT_EQ(topic(Scope::Zone, "eu-west-1", "eu-west-1a"), "grl/z/eu-west-1/eu-west-1a/");
    // Names cannot contain '/', so one topic is never a prefix of another host's topic.
    EXPECT_NE(topic(Scope::Zone, "eu", "ab").rfind(topic(Scope::Zone, "eu", "a"), 0), 0u);
}

}  // namespace
}  // namespace grl::wire

namespace grl::wire {
namespace {

TEST(WireRuntimeMatch, RoundTripAndValidation) {
    Instructions m;
    m.source = "c";
    m.seq = 1;
    m.ts_ms = 2;
    m.ttl_ms = 3;
    Instruction plain;
    plain.name = "configured";
    Instruction rt;
    rt.name = "emergency";
    rt.ratio_ppm = 500000;
    rt.has_match = true;
    rt.match.caller = "bot-";
    rt.match.caller_kind = MatchKind::Prefix;
    rt.match.procedure = "^/search";
    rt.match.procedure_kind = MatchKind::Regex;
    rt.match.scope = Scope::Zone;
    m.buckets = {plain, rt};
    std::string bytes;
    encode(m, bytes);
    Instructions d;
    std::string err;
    ASSERT_TRUE(decode(bytes, d, err)) << err;
    ASSERT_EQ(d.buckets.size(), 2u);
    EXPECT_FALSE(d.buckets[0].has_match);
    EXPECT_TRUE(d.buckets[1].has_match);
    EXPECT_TRUE(d.buckets[1].match == rt.match);

    // A bad regex in a run-time match is rejected as a whole message.
    m.buckets[1].match.procedure = "(unclosed";
    bytes.clear();
    encode(m, bytes);
    EXPECT_FALSE(decode(bytes, d, err));
    EXPECT_NE(err.find("invalid regex"), std::string::npos) << err;

    // Over-long match values are rejected.
    m.buckets[1].match.procedure = std::string(kMaxMatchValueLen + 1, 'a');
    m.buckets[1].match.procedure_kind = MatchKind::Prefix;
    bytes.clear();
    encode(m, bytes);
    EXPECT_FALSE(decode(bytes, d, err));
    EXPECT_NE(err.find("longer than"), std::string::npos) << err;
}

}  // namespace
}  // namespace grl::wire
