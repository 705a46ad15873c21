// Unit tests of grl::wire::read_report (the collector's zero-copy reader): it must accept
// exactly what grl::wire::decode(Report) accepts, with the same content, on valid, malformed
// and randomly mutated bodies.
#include "grl/wire/report_reader.h"

#include <gtest/gtest.h>
#include <msgpack.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

namespace grl::wire {
namespace {

// A msgpack tree to build bodies by hand (Raw: bytes written verbatim).
struct V {
    enum class K { Nil, U, I, F, S, B, A, M, Raw, Bool };
    K k = K::Nil;
    std::uint64_t u = 0;
    std::int64_t i = 0;
    std::string s;
    std::vector<V> a;
    std::vector<std::pair<V, V>> m;
};
V U(std::uint64_t u) {
    V v;
    v.k = V::K::U;
    v.u = u;
    return v;
}
V I(std::int64_t i) {
    V v;
    v.k = V::K::I;
    v.i = i;
    return v;
}
V S(std::string s) {
    V v;
    v.k = V::K::S;
    v.s = std::move(s);
    return v;
}
V Bin(std::string s) {
    V v;
    v.k = V::K::B;
    v.s = std::move(s);
    return v;
}
V F() {
    V v;
    v.k = V::K::F;
    return v;
}
V Raw(std::string s) {
    V v;
    v.k = V::K::Raw;
    v.s = std::move(s);
    return v;
}
V A(std::vector<V> a) {
    V v;
    v.k = V::K::A;
    v.a = std::move(a);
    return v;
}
V M(std::vector<std::pair<V, V>> m) {
    V v;
    v.k = V::K::M;
    v.m = std::move(m);
    return v;
}
V Bool(bool b = true) {
    V v;
    v.k = V::K::Bool;
    v.u = b;
    return v;
}

void pack(msgpack_packer& pk, msgpack_sbuffer& sb, const V& v) {
    switch (v.k) {
        case V::K::Nil: msgpack_pack_nil(&pk); break;
        case V::K::Bool: v.u ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk); break;
        case V::K::U: msgpack_pack_uint64(&pk, v.u); break;
        case V::K::I: msgpack_pack_int64(&pk, v.i); break;
        case V::K::F: msgpack_pack_double(&pk, 1.5); break;
        case V::K::S:
            msgpack_pack_str(&pk, v.s.size());
            msgpack_pack_str_body(&pk, v.s.data(), v.s.size());
            break;
        case V::K::B:
            msgpack_pack_bin(&pk, v.s.size());
            msgpack_pack_bin_body(&pk, v.s.data(), v.s.size());
            break;
        case V::K::Raw: msgpack_sbuffer_write(&sb, v.s.data(), v.s.size()); break;
        case V::K::A:
            msgpack_pack_array(&pk, v.a.size());
            for (const V& x : v.a) pack(pk, sb, x);
            break;
        case V::K::M:
            msgpack_pack_map(&pk, v.m.size());
            for (const auto& kv : v.m) {
                pack(pk, sb, kv.first);
                pack(pk, sb, kv.second);
            }
            break;
    }
}

std::string bytes(const V& v) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack(pk, sb, v);
    std::string out(sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    return out;
}

V bucket(const std::string& name, std::uint64_t offered = 10) {
    return M({{S("name"), S(name)},
              {S("scope"), S("zone")},
              {S("mode"), S("shadow")},
              {S("limit_mrps"), U(5000)},
              {S("offered"), U(offered)},
              {S("admitted"), U(offered / 2)},
              {S("dropped"), U(offered - offered / 2)},
              {S("shadow_dropped"), U(3)}});
}

V report(std::vector<V> buckets) {
    return M({{S("v"), U(1)},
              {S("type"), S("report")},
              {S("ts_ms"), U(1700000000123)},
              {S("seq"), U(42)},
              {S("host"), S("web-1")},
              {S("zone"), S("z1")},
              {S("region"), S("r1")},
              {S("epoch"), U(0xdeadbeefcafeULL)},
              {S("interval_ms"), U(250)},
              {S("reports_dropped"), U(7)},
              {S("buckets"), A(std::move(buckets))}});
}

V nested(int depth) {  // `depth` nested non-empty arrays
    V v = U(1);
    for (int i = 0; i < depth; ++i) v = A({v});
    return v;
}

// Both decoders on one body: same verdict, and the same content when accepted.
void agree(const std::string& b, const char* what, long idx = -1) {
    Report r;
    ReportView v;
    std::string e1, e2;
    bool a = decode(b, r, e1);
    bool c = read_report(b, v, e2);
    ASSERT_EQ(a, c) << what << " #" << idx << ": decode says " << (a ? "ok" : e1)
                    << ", read_report says " << (c ? "ok" : e2);
    if (!a) {
        EXPECT_FALSE(e2.empty());
        return;
    }
    EXPECT_EQ(v.host, r.host);
    EXPECT_EQ(v.zone, r.zone);
    EXPECT_EQ(v.region, r.region);
    EXPECT_EQ(v.epoch, r.epoch);
    EXPECT_EQ(v.seq, r.seq);
    EXPECT_EQ(v.ts_ms, r.ts_ms);
    EXPECT_EQ(v.interval_ms, r.interval_ms);
    EXPECT_EQ(v.reports_dropped, r.reports_dropped);
    ASSERT_EQ(v.buckets.size(), r.buckets.size());
    for (std::size_t i = 0; i < r.buckets.size(); ++i) {
        EXPECT_EQ(v.buckets[i].name, r.buckets[i].name);
        EXPECT_EQ(v.buckets[i].scope, r.buckets[i].scope);
        EXPECT_EQ(v.buckets[i].mode, r.buckets[i].mode);
        EXPECT_EQ(v.buckets[i].limit_mrps, r.buckets[i].limit_mrps);
        EXPECT_EQ(v.buckets[i].offered, r.buckets[i].offered);
        EXPECT_EQ(v.buckets[i].admitted, r.buckets[i].admitted);
        EXPECT_EQ(v.buckets[i].dropped, r.buckets[i].dropped);
        EXPECT_EQ(v.buckets[i].shadow_dropped, r.buckets[i].shadow_dropped);
        EXPECT_EQ(v.buckets[i].has_recent, r.buckets[i].has_recent);
        EXPECT_EQ(v.buckets[i].recent, r.buckets[i].recent);
        EXPECT_EQ(v.buckets[i].keyed, r.buckets[i].keyed);
        KeyRange keys = keys_of(v, v.buckets[i]);
        ASSERT_EQ(keys.size(), r.buckets[i].keys.size());
        for (std::size_t j = 0; j < keys.size(); ++j) {
            EXPECT_EQ(keys.first[j].hash, r.buckets[i].keys[j].hash);
            EXPECT_EQ(keys.first[j].text, r.buckets[i].keys[j].text);
            EXPECT_EQ(keys.first[j].offered_mrps, r.buckets[i].keys[j].offered_mrps);
            EXPECT_EQ(keys.first[j].dropped_mrps, r.buckets[i].keys[j].dropped_mrps);
        }
    }
    EXPECT_EQ(v.recent_ms, r.recent_ms);
}

// A keyed bucket entry: "keyed" true and `keys` (key entry maps).
V key_entry(std::uint64_t h, std::uint64_t offered, std::uint64_t dropped, const char* text) {
    V e = M({{S("h"), U(h)}, {S("offered_mrps"), U(offered)}, {S("dropped_mrps"), U(dropped)}});
    if (text) e.m.push_back({S("k"), S(text)});
    return e;
}
V keyed_bucket(const std::string& name, std::vector<V> keys) {
    V b = bucket(name);
    b.m.push_back({S("keyed"), Bool(true)});
    b.m.push_back({S("keys"), A(std::move(keys))});
    return b;
}

// A report with "recent_ms" and "recent" (one entry per bucket: [] or 4 counts).
V with_recent(V r, std::uint64_t ms, std::vector<V> entries) {
    r.m.push_back({S("recent_ms"), U(ms)});
    r.m.push_back({S("recent"), A(std::move(entries))});
    return r;
}
V counts(std::uint64_t o) {
    return A({U(o), U(o / 2), U(o - o / 2), U(1)});
}

std::vector<V> valid_samples() {
    std::vector<V> out;
    out.push_back(report({}));
    out.push_back(report({bucket("a"),
                          keyed_bucket("k", {key_entry(0xfeedfacecafeULL, 150000, 50000, "api-1"),
                                             key_entry(2, 7, 0, nullptr), key_entry(3, 9, 9, "")}),
                          keyed_bucket("q", {})}));
    out.push_back(with_recent(report({bucket("a"), bucket("b", 1000000), bucket("c.d:e-f_g")}), 250,
                              {counts(40), A({}), counts(1000000)}));
    out.push_back(report({bucket("a"), bucket("b", 1000000), bucket("c.d:e-f_g")}));
    V t = report({bucket("x")});
    t.m[0].second = Raw(std::string("\xd0\x01", 2));                            // v as int 8
    t.m[3].second = Raw(std::string("\xcf\0\0\0\0\0\0\0\x05", 9));              // seq as uint 64
    t.m[7].second = Raw(std::string("\xd3\0\0\0\0\0\0\x01\0", 9));              // epoch as int 64
    t.m.push_back({S("future"), M({{S("k"), nested(10)}, {U(1), Bin("x")}})});  // unknown key
    t.m.back().second.m[1].first = S("k2");
    t.m[10].second.a[0].m.push_back({S("extra"), nested(12)});
    out.push_back(t);
    std::vector<V> many;
    for (int i = 0; i < 300; ++i) many.push_back(bucket("bucket-" + std::to_string(i), 7 * i));
    out.push_back(report(many));
    return out;
}

TEST(ReportReader, ValidSamplesAgree) {
    for (const V& v : valid_samples()) {
        std::string b = bytes(v);
        ReportView view;
        std::string err;
        ASSERT_TRUE(read_report(b, view, err)) << err;
        agree(b, "valid");
    }
}

TEST(ReportReader, EveryTruncationAndTrailingByte) {
    for (const V& v : valid_samples()) {
        std::string b = bytes(v);
        for (std::size_t n = 0; n < b.size(); n += (b.size() > 2000 ? 7 : 1)) {
            agree(b.substr(0, n), "truncated", static_cast<long>(n));
        }
        agree(b + std::string(1, '\0'), "trailing");
        agree(b + b, "two bodies");
    }
}

TEST(ReportReader, StructuralEditsAgree) {
    const std::vector<V> types = {U(3),   I(-3), S("x"),    Bin("x"),           F(),
                                  Bool(), V(),   A({U(1)}), M({{S("a"), U(1)}})};
    V base = report({bucket("a"), bucket("b")});
    long n = 0;
    for (std::size_t k = 0; k < base.m.size(); ++k) {
        V t = base;  // key removed
        t.m.erase(t.m.begin() + static_cast<long>(k));
        agree(bytes(t), "missing key", n++);
        for (const V& x : types) {  // value of every other type
            V w = base;
            w.m[k].second = x;
            agree(bytes(w), "wrong type", n++);
        }
        V d = base;  // duplicate key
        d.m.push_back(base.m[k]);
        agree(bytes(d), "duplicate key", n++);
    }
    const V& b0 = base.m[10].second.a[0];
    for (std::size_t k = 0; k < b0.m.size(); ++k) {
        V t = base;
        t.m[10].second.a[0].m.erase(t.m[10].second.a[0].m.begin() + static_cast<long>(k));
        agree(bytes(t), "bucket missing key", n++);
        for (const V& x : types) {
            V w = base;
            w.m[10].second.a[0].m[k].second = x;
            agree(bytes(w), "bucket wrong type", n++);
        }
        V d = base;
        d.m[10].second.a[0].m.push_back(b0.m[k]);
        agree(bytes(d), "bucket duplicate key", n++);
    }
    for (const V& x : types) {  // non-string keys, bucket entries of other types
        V t = base;
        t.m.push_back({x, U(1)});
        agree(bytes(t), "non-string key", n++);
        V e = base;
        e.m[10].second.a.push_back(x);
        agree(bytes(e), "bucket entry type", n++);
        V bk = base;
        bk.m[10].second.a[0].m.push_back({x, U(1)});
        agree(bytes(bk), "bucket non-string key", n++);
    }
    for (const char* bad : {"", "a b", "x/y", "\xff",
                            "0123456789012345678901234567890123456789012345678901234567890123"}) {
        for (std::size_t k : {4u, 5u, 6u}) {
            V t = base;
            t.m[k].second = S(bad);
            agree(bytes(t), "bad name", n++);
        }
        V t = base;
        t.m[10].second.a[0].m[0].second = S(bad);
        agree(bytes(t), "bad bucket name", n++);
    }
    for (const char* v : {"global", "region", "zone", "planet", "GLOBAL"}) {
        V t = base;
        t.m[10].second.a[0].m[1].second = S(v);
        agree(bytes(t), "scope", n++);
    }
    for (const char* v : {"deny", "shadow", "block", ""}) {
        V t = base;
        t.m[10].second.a[0].m[2].second = S(v);
        agree(bytes(t), "mode", n++);
    }
    for (std::uint64_t v : {0u, 1u, 2u}) {
        V t = base;
        t.m[0].second = U(v);
        agree(bytes(t), "version", n++);
    }
    for (const char* ty : {"report", "instructions", "Report", ""}) {
        V t = base;
        t.m[1].second = S(ty);
        agree(bytes(t), "type", n++);
    }
    const V rb = with_recent(report({bucket("a"), bucket("b")}), 250, {counts(8), A({})});
    const std::size_t kMs = 11, kRecent = 12;
    agree(bytes(rb), "recent", n++);
    for (std::size_t k : {kMs, kRecent}) {  // one without the other
        V t = rb;
        t.m.erase(t.m.begin() + static_cast<long>(k));
        agree(bytes(t), "recent half", n++);
        for (const V& x : types) {
            V w = rb;
            w.m[k].second = x;
            agree(bytes(w), "recent wrong type", n++);
        }
    }
    for (const V& x : types) {  // entries of other types
        V t = rb;
        t.m[kRecent].second.a[1] = x;
        agree(bytes(t), "recent entry type", n++);
        V w = rb;
        w.m[kRecent].second.a[0].a[2] = x;
        agree(bytes(w), "recent count type", n++);
    }
    for (std::size_t len : {0u, 1u, 3u}) {  // entries for another number of buckets
        V t = rb;
        t.m[kRecent].second.a.resize(len, A({}));
        agree(bytes(t), "recent length", n++);
    }
    for (std::size_t len : {1u, 3u, 5u}) {  // entries of another length
        V t = rb;
        t.m[kRecent].second.a[0].a.resize(len, U(1));
        agree(bytes(t), "recent entry length", n++);
    }
    V dup = report({bucket("same"), bucket("other"), bucket("same")});
    agree(bytes(dup), "duplicate bucket names", n++);
    for (int depth = 12; depth <= 18; ++depth) {  // around the nesting limit
        V t = base;
        t.m.push_back({S("deep"), nested(depth)});
        agree(bytes(t), "deep top-level value", depth);
        V w = base;
        w.m[10].second.a[0].m.push_back({S("deep"), nested(depth)});
        agree(bytes(w), "deep bucket value", depth);
    }
    for (std::size_t count : {4096u, 4097u}) {
        std::vector<V> bs;
        for (std::size_t i = 0; i < count; ++i) bs.push_back(bucket("b" + std::to_string(i)));
        agree(bytes(report(bs)), "bucket count", static_cast<long>(count));
    }
    agree(bytes(A({})), "array body");
    agree(bytes(U(1)), "scalar body");
    agree(std::string(), "empty");
    agree(std::string("\xc1"), "never-used tag");
    agree(std::string("\xdf\xff\xff\xff\xff", 5), "huge map header");
    std::vector<V> big;
    for (int i = 0; i < 4000; ++i)
        big.push_back(bucket(std::string(60, 'x') + std::to_string(i % 10) + std::to_string(i)));
    std::string huge = bytes(report(big));
    ASSERT_GT(huge.size(), kMaxMessageBytes / 2);
    V padded = report({bucket("a")});
    padded.m.push_back({S("pad"), Bin(std::string(kMaxMessageBytes, 'p'))});
    agree(bytes(padded), "oversized");
}

TEST(ReportReader, RandomMutationsAgree) {
    std::mt19937_64 rng(2026);
    std::vector<std::string> bases;
    for (const V& v : valid_samples()) bases.push_back(bytes(v));
    for (int round = 0; round < 40000; ++round) {
        std::string b = bases[rng() % 5];  // the 300-bucket sample is slow to mutate often
        int edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < edits; ++e) {
            std::size_t pos = rng() % b.size();
            switch (rng() % 4) {
                case 0: b[pos] = static_cast<char>(rng()); break;
                case 1: b[pos] = static_cast<char>(b[pos] ^ (1 << (rng() % 8))); break;
                case 2: b.erase(pos, 1 + rng() % 3); break;
                case 3: b.insert(pos, 1, static_cast<char>(rng())); break;
            }
            if (b.empty()) b = "x";
        }
        agree(b, "mutation", round);
        if (testing::Test::HasFatalFailure()) return;
    }
}

TEST(ReportReader, KeyedEditsAgree) {
    const std::vector<V> types = {U(3),   I(-3), S("x"),    Bin("x"),           F(),
                                  Bool(), V(),   A({U(1)}), M({{S("a"), U(1)}})};
    const V base =
        report({keyed_bucket("k", {key_entry(5, 10, 1, "a"), key_entry(6, 3, 0, nullptr)})});
    long n = 0;
    auto edit = [&](const char* what, auto&& fn) {
        V t = base;
        fn(t.m[10].second.a[0]);
        agree(bytes(t), what, n++);
    };
    for (std::size_t k = 0; k < 4; ++k) {  // each key entry field: missing, wrong type, twice
        edit("key missing field", [&](V& b) {
            b.m[9].second.a[0].m.erase(b.m[9].second.a[0].m.begin() + static_cast<long>(k));
        });
        for (const V& x : types)
            edit("key wrong type", [&](V& b) { b.m[9].second.a[0].m[k].second = x; });
        edit("key field twice",
             [&](V& b) { b.m[9].second.a[0].m.push_back(b.m[9].second.a[0].m[k]); });
    }
    for (std::uint64_t h : {0ULL, 1ULL, 6ULL, 2ULL}) {  // 0 and 1 refused, 6 twice, 2 fine
        edit("hash", [&](V& b) { b.m[9].second.a[0].m[0].second = U(h); });
    }
    for (std::size_t len : {0u, 47u, 48u}) {
        edit("text length",
             [&](V& b) { b.m[9].second.a[0].m[3].second = S(std::string(len, 't')); });
    }
    edit("dropped above offered", [](V& b) { b.m[9].second.a[0].m[2].second = U(11); });
    edit("dropped equal offered", [](V& b) { b.m[9].second.a[0].m[2].second = U(10); });
    edit("hosts ignored in a report", [](V& b) {
        b.m[9].second.a[0].m.push_back({S("hosts"), U(9)});
    });
    edit("keyed false with keys", [](V& b) { b.m[8].second = Bool(false); });
    edit("keys without keyed", [](V& b) { b.m.erase(b.m.begin() + 8); });
    edit("keyed false alone", [](V& b) {
        b.m.pop_back();
        b.m[8].second = Bool(false);
    });
    edit("keys first", [](V& b) { std::swap(b.m[8], b.m[9]); });
    for (const V& x : types) {
        edit("keyed wrong type", [&](V& b) { b.m[8].second = x; });
        edit("keys wrong type", [&](V& b) { b.m[9].second = x; });
        edit("key entry wrong type", [&](V& b) { b.m[9].second.a[1] = x; });
    }
    for (std::size_t count : {kMaxReportKeys, kMaxReportKeys + 1}) {
        edit("many keys", [&](V& b) {
            b.m[9].second.a.clear();
            for (std::size_t i = 0; i < count; ++i)
                b.m[9].second.a.push_back(key_entry(2 + i, 1, 0, nullptr));
        });
    }
}

TEST(ReportReader, AReusedViewForgetsThePreviousRecentCounts) {
    ReportView v;
    std::string err;
    ASSERT_TRUE(read_report(bytes(with_recent(report({bucket("a")}), 250, {counts(8)})), v, err))
        << err;
    EXPECT_TRUE(v.buckets[0].has_recent);
    EXPECT_EQ(v.recent_ms, 250u);
    ASSERT_TRUE(read_report(bytes(report({bucket("a")})), v, err)) << err;
    EXPECT_FALSE(v.buckets[0].has_recent);
    EXPECT_EQ(v.recent_ms, 0u);
}

TEST(ReportReader, ViewOfReport) {
    Report r;
    std::string err;
    ASSERT_TRUE(decode(bytes(report({bucket("a"), bucket("b", 99)})), r, err)) << err;
    ReportView v;
    view_of(r, v);
    ASSERT_EQ(v.buckets.size(), 2u);
    EXPECT_EQ(v.buckets[1].name, "b");
    EXPECT_EQ(v.buckets[1].offered, 99u);
    EXPECT_EQ(v.host, "web-1");
}

}  // namespace
}  // namespace grl::wire
