// Unit tests of the control-plane messages (grl/wire_control.h, docs/protocol.md): round
// trips, the exact key sets, and strict rejection of everything malformed.
#include "grl/wire/wire_control.h"

#include <gtest/gtest.h>
#include <msgpack.h>

#include <functional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace grl::wire {
namespace {

// ---------------------------------------------------------------------------------------------
// A msgpack value tree: valid messages are decoded into it, mutated, and packed again.

struct Val {
    enum class Kind { Nil, Bool, UInt, Int, Float, Str, Arr, Map };
    Kind kind = Kind::Nil;
    bool b = false;
    std::uint64_t u = 0;
    std::int64_t i = 0;
    double f = 0;
    std::string s;
    std::vector<Val> arr;
    std::vector<std::pair<std::string, Val>> map;

    Val* find(const std::string& k) {
        for (auto& kv : map) {
            if (kv.first == k) return &kv.second;
        }
        return nullptr;
    }
    void erase(const std::string& k) {
        for (auto it = map.begin(); it != map.end(); ++it) {
            if (it->first == k) {
                map.erase(it);
                return;
            }
        }
    }
};

Val from_object(const msgpack_object& o) {
    Val v;
    switch (o.type) {
        case MSGPACK_OBJECT_NIL: break;
        case MSGPACK_OBJECT_BOOLEAN:
            v.kind = Val::Kind::Bool;
            v.b = o.via.boolean;
            break;
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            v.kind = Val::Kind::UInt;
            v.u = o.via.u64;
            break;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
            v.kind = Val::Kind::Int;
            v.i = o.via.i64;
            break;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
            v.kind = Val::Kind::Float;
            v.f = o.via.f64;
            break;
        case MSGPACK_OBJECT_STR:
            v.kind = Val::Kind::Str;
            v.s.assign(o.via.str.ptr, o.via.str.size);
            break;
        case MSGPACK_OBJECT_ARRAY:
            v.kind = Val::Kind::Arr;
            for (std::uint32_t k = 0; k < o.via.array.size; ++k) {
                v.arr.push_back(from_object(o.via.array.ptr[k]));
            }
            break;
        case MSGPACK_OBJECT_MAP:
            v.kind = Val::Kind::Map;
            for (std::uint32_t k = 0; k < o.via.map.size; ++k) {
                const auto& kv = o.via.map.ptr[k];
                v.map.emplace_back(std::string(kv.key.via.str.ptr, kv.key.via.str.size),
                                   from_object(kv.val));
            }
            break;
        default: break;
    }
    return v;
}

Val parse(const std::string& bytes) {
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    std::size_t off = 0;
    EXPECT_EQ(msgpack_unpack_next(&u, bytes.data(), bytes.size(), &off), MSGPACK_UNPACK_SUCCESS);
    Val v = from_object(u.data);
    msgpack_unpacked_destroy(&u);
    return v;
}

void pack(msgpack_packer& pk, const Val& v) {
    switch (v.kind) {
        case Val::Kind::Nil: msgpack_pack_nil(&pk); break;
        case Val::Kind::Bool: v.b ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk); break;
        case Val::Kind::UInt: msgpack_pack_uint64(&pk, v.u); break;
        case Val::Kind::Int: msgpack_pack_int64(&pk, v.i); break;
        case Val::Kind::Float: msgpack_pack_double(&pk, v.f); break;
        case Val::Kind::Str:
            msgpack_pack_str(&pk, v.s.size());
            msgpack_pack_str_body(&pk, v.s.data(), v.s.size());
            break;
        case Val::Kind::Arr:
            msgpack_pack_array(&pk, v.arr.size());
            for (const Val& x : v.arr) pack(pk, x);
            break;
        case Val::Kind::Map:
            msgpack_pack_map(&pk, v.map.size());
            for (const auto& kv : v.map) {
                msgpack_pack_str(&pk, kv.first.size());
                msgpack_pack_str_body(&pk, kv.first.data(), kv.first.size());
                pack(pk, kv.second);
            }
            break;
    }
}

std::string bytes_of(const Val& v) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack(pk, v);
    std::string out(sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    return out;
}

Val S(const std::string& s) {
    Val v;
    v.kind = Val::Kind::Str;
    v.s = s;
    return v;
}
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

std::set<std::string> keys(const Val& map) {
    std::set<std::string> k;
    for (const auto& kv : map.map) k.insert(kv.first);
    return k;
}

// ---------------------------------------------------------------------------------------------
// Sample messages

RuntimeMatch sample_match() {
    RuntimeMatch m;
    m.caller = "bot-";
    m.caller_kind = MatchKind::Prefix;
    m.procedure = "^/search";
    m.procedure_kind = MatchKind::Regex;
    m.scope = Scope::Zone;
    return m;
}

UsageBucket sample_bucket(const std::string& name, bool with_hosts) {
    UsageBucket b;
    b.name = name;
    b.offered_mrps = 150000;
    b.admitted_mrps = 100000;
    b.dropped_mrps = 50000;
    b.shadow_dropped_mrps = 7;
    b.hosts = 3;
    b.rated_hosts = 2;
    b.definitions = {{{Scope::Global, Mode::Deny, 100000}, 2}, {{Scope::Zone, Mode::Shadow, 5}, 1}};
    if (with_hosts) b.host_names = {"h1", "h3"};
    return b;
}

ZoneUsage sample_zone_usage() {
    ZoneUsage m;
    m.source = "col-a";
    m.region = "eu";
    m.zone = "eu-1a";
    m.seq = 42;
    m.ts_ms = 1700000000123;
    m.interval_ms = 250;
    m.hosts = 3;
    m.stale_hosts = 1;
    m.host_names = {"h1", "h2", "h3"};
    m.buckets = {sample_bucket("api", true), sample_bucket("web", false)};
    return m;
}

RegionUsage sample_region_usage() {
    RegionUsage m;
    m.source = "ctl-eu-1";
    m.region = "eu";
    m.seq = 9;
    m.ts_ms = 1700000000999;
    m.interval_ms = 1000;
    m.zones = 2;
    m.hosts = 7;
    m.limits_digest = "0123456789abcdef";
    m.buckets = {sample_bucket("api", false)};
    Override a;
    a.name = "api";
    a.limit_mrps = 5000;
    a.expires_ms = 1700000060000;
    a.set_ms = 1700000000000;
    a.origin = "ctl-eu-1";
    Override b;
    b.name = "bots";
    b.limit_mrps = 0;
    b.mode = Mode::Shadow;
    b.has_match = true;
    b.match = sample_match();
    b.set_ms = 1700000000001;
    b.origin = "ctl-us-1";
    Override t;  // tombstone
    t.name = "old";
    t.set_ms = 5;
    t.origin = "ctl-eu-2";
    m.overrides = {a, b, t};
    return m;
}

AdminRequest sample_request() {
    AdminRequest m;
    m.seq = 3;
    m.ts_ms = 77;
    m.op = AdminOp::Add;
    m.bucket = "bots";
    m.limit_mrps = 1000;
    m.mode = Mode::Deny;
    m.for_ms = 600000;
    m.has_match = true;
    m.match = sample_match();
    return m;
}

AdminReply sample_reply() {
    AdminReply m;
    m.seq = 3;
    m.ts_ms = 78;
    m.source = "ctl-eu-1";
    m.region = "eu";
    m.ok = true;
    m.interval_ms = 1000;
    m.ttl_ms = 3000;
    BucketStatus b;
    b.name = "api";
    b.scope = Scope::Zone;
    b.region = "eu";
    b.zone = "eu-1a";
    b.offered_mrps = 150000;
    b.admitted_mrps = 100000;
    b.shadow_dropped_mrps = 0;
    b.limit_mrps = 100000;
    b.ratio_ppm = 333333;
    b.mode = Mode::Deny;
    b.limit_source = "file";
    b.mode_source = "conf";
    b.expires_ms = 0;
    b.hosts = 2;
    b.host_names = {"h1", "h2"};
    b.definitions = {{{Scope::Zone, Mode::Deny, 100000}, 2}};
    BucketStatus r = b;
    r.name = "bots";
    r.has_match = true;
    r.match = sample_match();
    r.limit_source = r.mode_source = "override";
    r.expires_ms = 99;
    r.candidate_limit_mrps = 80000;
    r.candidate_would_drop_mrps = 12345;
    r.dropping_since_ms = 1764000000000;
    r.zone_load = {{"eu-1a", 90000, 2}, {"eu-1b", 60000, 1}};
    r.quota = 600;
    r.quota_used = 601;
    r.quota_reset_ms = 1764003600000;
    m.buckets = {b, r};
    m.zones = {{"eu-1a", "col-a", 2, 0, 120, true, 1}, {"eu-1b", "col-b", 1, 0, 90, true, 0}};
    m.peers = {{"ctl-us-1", "us", 800, "abcd", true, 2}};
    m.limits = {"etcd://127.0.0.1:2379/grl/limits",
                false,
                "limits.yaml:3: bad",
                "0011",
                12345,
                4,
                "17",
                "etcd://127.0.0.1:2379/grl/limits: no answer"};
    return m;
}

void expect_equal(const UsageBucket& a, const UsageBucket& b) {
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.offered_mrps, b.offered_mrps);
    EXPECT_EQ(a.admitted_mrps, b.admitted_mrps);
    EXPECT_EQ(a.dropped_mrps, b.dropped_mrps);
    EXPECT_EQ(a.shadow_dropped_mrps, b.shadow_dropped_mrps);
    EXPECT_EQ(a.hosts, b.hosts);
    EXPECT_EQ(a.rated_hosts, b.rated_hosts);
    EXPECT_EQ(a.definitions, b.definitions);
    EXPECT_EQ(a.host_names, b.host_names);
}

template <typename M>
std::string enc(const M& m) {
    std::string out;
    encode(m, out);
    return out;
}

// ---------------------------------------------------------------------------------------------
// Round trips and key sets

TEST(WireControl, ZoneUsageRoundTrip) {
    ZoneUsage m = sample_zone_usage(), d;
    std::string err;
    ASSERT_TRUE(decode(enc(m), d, err)) << err;
    EXPECT_EQ(d.source, m.source);
    EXPECT_EQ(d.region, m.region);
    EXPECT_EQ(d.zone, m.zone);
    EXPECT_EQ(d.seq, m.seq);
    EXPECT_EQ(d.ts_ms, m.ts_ms);
    EXPECT_EQ(d.interval_ms, m.interval_ms);
    EXPECT_EQ(d.hosts, m.hosts);
    EXPECT_EQ(d.stale_hosts, m.stale_hosts);
    EXPECT_EQ(d.host_names, m.host_names);
    ASSERT_EQ(d.buckets.size(), 2u);
    expect_equal(d.buckets[0], m.buckets[0]);
    expect_equal(d.buckets[1], m.buckets[1]);
}

TEST(WireControl, RegionUsageRoundTrip) {
    RegionUsage m = sample_region_usage(), d;
    std::string err;
    ASSERT_TRUE(decode(enc(m), d, err)) << err;
    EXPECT_EQ(d.source, m.source);
    EXPECT_EQ(d.region, m.region);
    EXPECT_EQ(d.zones, m.zones);
    EXPECT_EQ(d.hosts, m.hosts);
    EXPECT_EQ(d.limits_digest, m.limits_digest);
    ASSERT_EQ(d.buckets.size(), 1u);
    expect_equal(d.buckets[0], m.buckets[0]);
    ASSERT_EQ(d.overrides.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(d.overrides[i] == m.overrides[i]) << i;
    EXPECT_TRUE(d.overrides[2].tombstone());
    EXPECT_FALSE(d.overrides[0].tombstone());
}

TEST(WireControl, AdminRoundTrips) {
    AdminRequest q = sample_request(), dq;
    std::string err;
    ASSERT_TRUE(decode(enc(q), dq, err)) << err;
    EXPECT_EQ(dq.op, AdminOp::Add);
    EXPECT_EQ(dq.bucket, "bots");
    EXPECT_EQ(dq.limit_mrps, 1000u);
    EXPECT_EQ(dq.mode, Mode::Deny);
    EXPECT_EQ(dq.for_ms, 600000u);
    EXPECT_TRUE(dq.has_match);
    EXPECT_TRUE(dq.match == q.match);
    AdminRequest minimal;
    minimal.op = AdminOp::Buckets;
    ASSERT_TRUE(decode(enc(minimal), dq, err)) << err;
    EXPECT_FALSE(dq.limit_mrps.has_value());
    EXPECT_FALSE(dq.mode.has_value());
    EXPECT_FALSE(dq.has_match);
    EXPECT_EQ(dq.for_ms, 0u);

    AdminReply r = sample_reply(), dr;
    ASSERT_TRUE(decode(enc(r), dr, err)) << err;
    EXPECT_EQ(dr.source, r.source);
    ASSERT_EQ(dr.buckets.size(), 2u);
    EXPECT_EQ(dr.buckets[0].zone, "eu-1a");
    EXPECT_EQ(dr.buckets[0].ratio_ppm, 333333u);
    EXPECT_EQ(dr.buckets[0].host_names, r.buckets[0].host_names);
    EXPECT_EQ(dr.buckets[0].definitions, r.buckets[0].definitions);
    EXPECT_FALSE(dr.buckets[0].has_match);
    EXPECT_TRUE(dr.buckets[1].has_match);
    EXPECT_EQ(dr.buckets[1].expires_ms, 99u);
    EXPECT_FALSE(dr.buckets[0].candidate_limit_mrps);  // absent: no candidate
    EXPECT_EQ(dr.buckets[0].candidate_would_drop_mrps, 0u);
    EXPECT_EQ(dr.buckets[1].candidate_limit_mrps, std::optional<std::uint64_t>(80000));
    EXPECT_EQ(dr.buckets[1].candidate_would_drop_mrps, 12345u);
    EXPECT_EQ(dr.buckets[0].dropping_since_ms, 0u);  // optional keys, absent
    EXPECT_TRUE(dr.buckets[0].zone_load.empty());
    EXPECT_EQ(dr.buckets[1].dropping_since_ms, 1764000000000u);
    EXPECT_EQ(dr.buckets[0].quota, 0u);  // no quota: the keys are absent
    EXPECT_EQ(dr.buckets[1].quota, 600u);
    EXPECT_EQ(dr.buckets[1].quota_used, 601u);
    EXPECT_EQ(dr.buckets[1].quota_reset_ms, 1764003600000u);
    ASSERT_EQ(dr.buckets[1].zone_load.size(), 2u);
    EXPECT_EQ(dr.buckets[1].zone_load[1].zone, "eu-1b");
    EXPECT_EQ(dr.buckets[1].zone_load[1].offered_mrps, 60000u);
    EXPECT_EQ(dr.buckets[1].zone_load[1].hosts, 1u);
    ASSERT_EQ(dr.zones.size(), 2u);
    EXPECT_EQ(dr.zones[0].age_ms, 120u);
    EXPECT_EQ(dr.zones[0].usage_v, 1u);  // the usage version each zone sends (optional key)
    EXPECT_EQ(dr.zones[1].usage_v, 0u);  // not said (a controller of the release before)
    ASSERT_EQ(dr.peers.size(), 1u);
    EXPECT_EQ(dr.peers[0].limits_digest, "abcd");
    EXPECT_EQ(dr.peers[0].usage_v, 2u);
    EXPECT_EQ(dr.limits.error, "limits.yaml:3: bad");
    EXPECT_FALSE(dr.limits.ok);
    EXPECT_EQ(dr.limits.buckets, 4u);
    EXPECT_EQ(dr.limits.version, "17");
    EXPECT_EQ(dr.limits.store_error, "etcd://127.0.0.1:2379/grl/limits: no answer");
}

TEST(WireControl, ExactlyTheDocumentedKeys) {
    EXPECT_EQ(
        keys(parse(enc(sample_zone_usage()))),
        (std::set<std::string>{"v", "type", "ts_ms", "seq", "source", "region", "zone",
                               "interval_ms", "hosts", "stale_hosts", "host_names", "buckets"}));
    // Usage entries and their definitions are positional (docs/protocol.md "Usage entry").
    Val zu = parse(enc(sample_zone_usage()));
    EXPECT_EQ(zu.find("v")->u, kUsageVersion);
    const Val& ze = zu.find("buckets")->arr[0];
    ASSERT_EQ(ze.kind, Val::Kind::Arr);
    ASSERT_EQ(ze.arr.size(), 9u);  // name .. definitions, host_names
    EXPECT_EQ(ze.arr[0].s, "api");
    EXPECT_EQ(ze.arr[1].u, sample_zone_usage().buckets[0].offered_mrps);
    EXPECT_EQ(ze.arr[6].u, sample_zone_usage().buckets[0].rated_hosts);
    ASSERT_EQ(ze.arr[7].arr[0].arr.size(), 4u);  // scope, mode, limit_mrps, hosts
    EXPECT_EQ(ze.arr[7].arr[0].arr[0].s,
              to_string(sample_zone_usage().buckets[0].definitions[0].def.scope));
    EXPECT_EQ(ze.arr[8].kind, Val::Kind::Arr);
    Val ru = parse(enc(sample_region_usage()));
    EXPECT_EQ(keys(ru),
              (std::set<std::string>{"v", "type", "ts_ms", "seq", "source", "region", "interval_ms",
                                     "zones", "hosts", "limits_digest", "buckets", "overrides"}));
    EXPECT_EQ(ru.find("v")->u, kUsageVersion);
    EXPECT_EQ(ru.find("buckets")->arr[0].arr.size(), 8u);  // no host_names
    EXPECT_EQ(keys(ru.find("overrides")->arr[1]),
              (std::set<std::string>{"name", "limit_mrps", "mode", "match", "expires_ms", "set_ms",
                                     "origin"}));
    EXPECT_EQ(keys(ru.find("overrides")->arr[2]),
              (std::set<std::string>{"name", "expires_ms", "set_ms", "origin"}));
    EXPECT_EQ(
        keys(*ru.find("overrides")->arr[1].find("match")),
        (std::set<std::string>{"caller", "caller_kind", "procedure", "procedure_kind", "scope"}));
    EXPECT_EQ(keys(parse(enc(sample_request()))),
              (std::set<std::string>{"v", "type", "ts_ms", "seq", "op", "bucket", "hosts",
                                     "limit_mrps", "mode", "for_ms", "match"}));
    Val rep = parse(enc(sample_reply()));
    EXPECT_EQ(keys(rep), (std::set<std::string>{"v", "type", "ts_ms", "seq", "source", "region",
                                                "ok", "error", "interval_ms", "ttl_ms", "buckets",
                                                "zones", "peers", "limits"}));
    EXPECT_EQ(rep.find("v")->u, 1u);
    EXPECT_EQ(rep.find("type")->s, "admin_reply");
    EXPECT_EQ(keys(*rep.find("limits")),
              (std::set<std::string>{"file", "ok", "error", "digest", "loaded_ms", "buckets",
                                     "version", "store_error"}));
}

// ---------------------------------------------------------------------------------------------
// Rejection

struct Case {
    const char* what;
    std::string bytes;
    std::function<bool(const std::string&, std::string&)> decode;
    std::set<std::string> optional;  // top-level keys that may be absent
};

std::vector<Case> cases() {
    auto zu = [](const std::string& b, std::string& e) {
        ZoneUsage m;
        return decode(b, m, e);
    };
    auto ru = [](const std::string& b, std::string& e) {
        RegionUsage m;
        return decode(b, m, e);
    };
    auto rq = [](const std::string& b, std::string& e) {
        AdminRequest m;
        return decode(b, m, e);
    };
    auto rp = [](const std::string& b, std::string& e) {
        AdminReply m;
        return decode(b, m, e);
    };
    return {
        {"zone_usage", enc(sample_zone_usage()), zu, {}},
        {"region_usage", enc(sample_region_usage()), ru, {}},
        {"admin_request",
         enc(sample_request()),
         rq,
         {"hosts", "limit_mrps", "mode", "for_ms", "bucket", "match"}},
        {"admin_reply", enc(sample_reply()), rp, {}},
    };
}

TEST(WireControl, SamplesAreValid) {
    for (const Case& c : cases()) {
        std::string err;
        EXPECT_TRUE(c.decode(c.bytes, err)) << c.what << ": " << err;
    }
}

TEST(WireControl, EveryTruncationIsRejected) {
    for (const Case& c : cases()) {
        for (std::size_t n = 0; n < c.bytes.size(); ++n) {
            std::string err;
            EXPECT_FALSE(c.decode(c.bytes.substr(0, n), err)) << c.what << " cut at " << n;
            EXPECT_FALSE(err.empty());
        }
        std::string err;
        EXPECT_FALSE(c.decode(c.bytes + '\0', err)) << c.what;
        EXPECT_EQ(err, "trailing bytes after message");
    }
}

TEST(WireControl, MissingKeysRejected) {
    for (const Case& c : cases()) {
        Val root = parse(c.bytes);
        for (const auto& kv : root.map) {
            Val v = root;
            v.erase(kv.first);
            std::string err;
            bool ok = c.decode(bytes_of(v), err);
            if (c.optional.count(kv.first) && kv.first != "bucket" && kv.first != "match") {
                EXPECT_TRUE(ok) << c.what << " without " << kv.first << ": " << err;
            } else {
                EXPECT_FALSE(ok) << c.what << " without " << kv.first;
            }
        }
    }
}

TEST(WireControl, WrongKeyTypesRejected) {
    for (const Case& c : cases()) {
        Val root = parse(c.bytes);
        for (std::size_t k = 0; k < root.map.size(); ++k) {
            for (const Val& bad : {S("x"), U(7), I(-1), Val{}}) {
                if (bad.kind == root.map[k].second.kind) continue;
                Val v = root;
                v.map[k].second = bad;
                std::string err;
                EXPECT_FALSE(c.decode(bytes_of(v), err)) << c.what << " " << root.map[k].first;
                EXPECT_NE(err.find(root.map[k].first), std::string::npos) << err;
            }
        }
    }
}

TEST(WireControl, WrongVersionOrTypeRejected) {
    for (const Case& c : cases()) {
        Val v = parse(c.bytes);
        const std::uint64_t next = v.find("v")->u + 1;
        v.find("v")->u = next;
        std::string err;
        EXPECT_FALSE(c.decode(bytes_of(v), err));
        EXPECT_NE(err.find("\"v\" " + std::to_string(next)), std::string::npos) << err;
        v = parse(c.bytes);
        v.find("type")->s = "report";
        EXPECT_FALSE(c.decode(bytes_of(v), err));
        EXPECT_NE(err.find("\"type\""), std::string::npos) << err;
    }
    // Each message is refused by the others' decoders.
    ZoneUsage z;
    std::string err;
    EXPECT_FALSE(decode(enc(sample_region_usage()), z, err));
}

TEST(WireControl, DuplicateAndNonStringKeysRejected) {
    Val v = parse(enc(sample_zone_usage()));
    v.map.push_back({"hosts", U(9)});
    ZoneUsage m;
    std::string err;
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "duplicate key \"hosts\"");
    // A non-string key, hand-packed.
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_uint64(&pk, 1);
    msgpack_pack_uint64(&pk, 1);
    EXPECT_FALSE(decode(std::string(sb.data, sb.size), m, err));
    EXPECT_EQ(err, "uint key in map");
    msgpack_sbuffer_destroy(&sb);
}

TEST(WireControl, NestedErrorsNameTheirPath) {
    Val v = parse(enc(sample_zone_usage()));
    v.find("buckets")->arr[1].arr[7].arr[0].arr[0].s = "planet";
    ZoneUsage m;
    std::string err;
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad \"scope\" \"planet\" in buckets[1].definitions[0]");
    v = parse(enc(sample_zone_usage()));
    v.find("buckets")->arr[0].arr[0].s = "no spaces";
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "invalid \"name\" \"no spaces\" in buckets[0]");
    v = parse(enc(sample_zone_usage()));
    v.find("host_names")->arr[2] = S("bad/host");
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "invalid name \"bad/host\" in host_names[2]");
}

// Every item of a positional usage entry is refused by its name when it has the wrong type,
// and so is an entry of the wrong shape (docs/protocol.md "Usage entry").
TEST(WireControl, UsageEntryItemsRefusedByName) {
    const std::vector<std::string> zone_items = {
        "name",  "offered_mrps", "admitted_mrps", "dropped_mrps", "shadow_dropped_mrps",
        "hosts", "rated_hosts",  "definitions",   "host_names"};
    ZoneUsage m;
    std::string err;
    for (std::size_t i = 0; i < zone_items.size(); ++i) {
        Val v = parse(enc(sample_zone_usage()));
        Val& item = v.find("buckets")->arr[1].arr[i];
        item = item.kind == Val::Kind::Str ? U(7) : S("x");
        EXPECT_FALSE(decode(bytes_of(v), m, err)) << zone_items[i];
        EXPECT_EQ(err.rfind("bad \"" + zone_items[i] + "\" type ", 0), 0u) << err;
        EXPECT_NE(err.find(" in buckets[1]"), std::string::npos) << err;
    }
    Val v = parse(enc(sample_zone_usage()));
    v.find("buckets")->arr[0] = Val{};
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad entry type nil (want array) in buckets[0]");
    v = parse(enc(sample_zone_usage()));
    v.find("buckets")->arr[0].arr.pop_back();  // no host_names
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad entry length 8 (want 9..10) in buckets[0]");
    v = parse(enc(sample_zone_usage()));
    v.find("buckets")->arr[0].arr.push_back(U(1));
    v.find("buckets")->arr[0].arr.push_back(U(1));
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad entry length 11 (want 9..10) in buckets[0]");
    // A definition: scope, mode, limit_mrps, hosts and (only when true) keyed.
    v = parse(enc(sample_zone_usage()));
    v.find("buckets")->arr[0].arr[7].arr[0].arr.pop_back();
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad entry length 3 (want 4..5) in buckets[0].definitions[0]");
    v = parse(enc(sample_zone_usage()));
    v.find("buckets")->arr[0].arr[7].arr[0].arr[1].s = "maybe";
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad \"mode\" \"maybe\" in buckets[0].definitions[0]");
    v = parse(enc(sample_zone_usage()));
    v.find("buckets")->arr[0].arr[7].arr[0].arr[2] = S("1000");
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad \"limit_mrps\" type str (want uint) in buckets[0].definitions[0]");
    v = parse(enc(sample_zone_usage()));
    v.find("buckets")->arr[0].arr[7].arr[0].arr.push_back(U(1));
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad \"keyed\" type uint (want bool) in buckets[0].definitions[0]");
    // A region usage entry has no host_names: the item after definitions is keys.
    RegionUsage r;
    v = parse(enc(sample_region_usage()));
    v.find("buckets")->arr[0].arr.push_back(S("x"));
    EXPECT_FALSE(decode(bytes_of(v), r, err));
    EXPECT_EQ(err, "\"keys\" without a \"keyed\" definition in buckets[0]");
    // Version 2 entries are arrays: a map entry (version 1's form) is refused by its shape.
    v = parse(enc(sample_zone_usage()));
    Val entry;
    entry.kind = Val::Kind::Map;
    entry.map.emplace_back("name", S("api"));
    v.find("buckets")->arr[0] = entry;
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad entry type map (want array) in buckets[0]");
}

// ---------------------------------------------------------------------------------------------
// Usage of protocol version 1 (docs/protocol.md "Versions"): entries and definitions are maps
// of the names version 2 gives their positions. Read, and written on request
// (--usage-version 1), so that a rolling upgrade never leaves a zone or region out.

template <class Usage>
Usage at_version_1(Usage m) {
    m.v = 1;
    return m;
}

// Version 2's positional entry `e` as the map of version 1 (same items, named, in order).
Val keyed_entry(const Val& e, const std::vector<std::string>& names) {
    Val m;
    m.kind = Val::Kind::Map;
    for (std::size_t i = 0; i < e.arr.size(); ++i) m.map.emplace_back(names[i], e.arr[i]);
    return m;
}

const std::vector<std::string> kZoneItems = {
    "name",  "offered_mrps", "admitted_mrps", "dropped_mrps", "shadow_dropped_mrps",
    "hosts", "rated_hosts",  "definitions",   "host_names",   "keys"};
const std::vector<std::string> kRegionItems = {
    "name",  "offered_mrps", "admitted_mrps", "dropped_mrps", "shadow_dropped_mrps",
    "hosts", "rated_hosts",  "definitions",   "keys"};
const std::vector<std::string> kDefinitionItems = {"scope", "mode", "limit_mrps", "hosts", "keyed"};

// The bytes of version 1 are version 2's with each entry and definition a map of its items'
// names in their order: what the release before version 2 wrote (c16207a^).
template <class Usage>
void expect_version_1_layout(const Usage& m, const std::vector<std::string>& items) {
    Val want = parse(enc(m));
    want.find("v")->u = 1;
    for (Val& e : want.find("buckets")->arr) {
        for (Val& d : e.arr[7].arr) d = keyed_entry(d, kDefinitionItems);
        e = keyed_entry(e, items);
    }
    EXPECT_EQ(enc(at_version_1(m)), bytes_of(want));
}

ZoneUsage keyed_zone_usage() {
    ZoneUsage m = sample_zone_usage();
    m.buckets[1].definitions = {{{Scope::Global, Mode::Deny, 1000, true}, 1}};
    m.buckets[1].keys.push_back({42, "", 5000, 10, 1});
    return m;
}

TEST(WireControl, UsageOfVersion1RoundTrips) {
    for (const ZoneUsage& m : {sample_zone_usage(), keyed_zone_usage()}) {
        expect_version_1_layout(m, kZoneItems);
        ZoneUsage d;
        std::string err;
        ASSERT_TRUE(decode(enc(at_version_1(m)), d, err)) << err;
        EXPECT_EQ(d.v, 1u);
        EXPECT_EQ(d.source, m.source);
        EXPECT_EQ(d.host_names, m.host_names);
        ASSERT_EQ(d.buckets.size(), m.buckets.size());
        for (std::size_t i = 0; i < m.buckets.size(); ++i) {
            expect_equal(d.buckets[i], m.buckets[i]);
            EXPECT_EQ(d.buckets[i].keys, m.buckets[i].keys);
        }
        // Written again at the version read: the same bytes.
        EXPECT_EQ(enc(d), enc(at_version_1(m)));
        // And version 2 reads as version 2.
        ASSERT_TRUE(decode(enc(m), d, err)) << err;
        EXPECT_EQ(d.v, 2u);
    }
    const RegionUsage m = sample_region_usage();
    expect_version_1_layout(m, kRegionItems);
    RegionUsage d;
    std::string err;
    ASSERT_TRUE(decode(enc(at_version_1(m)), d, err)) << err;
    EXPECT_EQ(d.v, 1u);
    EXPECT_EQ(d.limits_digest, m.limits_digest);
    ASSERT_EQ(d.buckets.size(), 1u);
    expect_equal(d.buckets[0], m.buckets[0]);
    ASSERT_EQ(d.overrides.size(), m.overrides.size());
    for (std::size_t i = 0; i < m.overrides.size(); ++i)
        EXPECT_TRUE(d.overrides[i] == m.overrides[i]);
}

// Every item of a version 1 entry and definition is refused by its name (wrong type, missing,
// twice), as every item of a version 2 entry is; an entry of the other version's shape is
// refused by its shape; keys that version 1 did not know are ignored, as it ignored them.
TEST(WireControl, UsageOfVersion1RefusedByItemName) {
    const ZoneUsage sample = at_version_1(keyed_zone_usage());
    ZoneUsage m;
    std::string err;
    for (const std::string& item : kZoneItems) {
        Val v = parse(enc(sample));
        Val& e = v.find("buckets")->arr[1];
        ASSERT_EQ(e.kind, Val::Kind::Map);
        Val& x = *e.find(item);
        x = x.kind == Val::Kind::Str ? U(7) : S("x");
        EXPECT_FALSE(decode(bytes_of(v), m, err)) << item;
        if (item == "keys") {  // named by the key list's reader, as in version 2
            EXPECT_EQ(err, "bad \"buckets[1].keys\" type str (want array)");
        } else {
            EXPECT_EQ(err.rfind("bad \"" + item + "\" type ", 0), 0u) << err;
            EXPECT_NE(err.find(" in buckets[1]"), std::string::npos) << err;
        }
        v = parse(enc(sample));
        v.find("buckets")->arr[1].erase(item);
        const bool ok = decode(bytes_of(v), m, err);
        if (item == "keys") {
            EXPECT_TRUE(ok) << err;  // optional
        } else {
            EXPECT_FALSE(ok) << item;
            EXPECT_EQ(err, "missing \"" + item + "\" in buckets[1]");
        }
        v = parse(enc(sample));
        Val& twice = v.find("buckets")->arr[1];
        twice.map.push_back({item, *twice.find(item)});
        EXPECT_FALSE(decode(bytes_of(v), m, err)) << item;
        EXPECT_EQ(err, "duplicate key \"" + item + "\" in buckets[1]");
    }
    for (const char* item : {"scope", "mode", "limit_mrps", "hosts"}) {
        Val v = parse(enc(sample));
        Val& d = v.find("buckets")->arr[0].find("definitions")->arr[0];
        ASSERT_EQ(d.kind, Val::Kind::Map);
        d.erase(item);
        EXPECT_FALSE(decode(bytes_of(v), m, err)) << item;
        EXPECT_EQ(err, std::string("missing \"") + item + "\" in buckets[0].definitions[0]");
    }
    Val v = parse(enc(sample));
    v.find("buckets")->arr[0].find("definitions")->arr[0].find("scope")->s = "planet";
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad \"scope\" \"planet\" in buckets[0].definitions[0]");
    // An unknown key is ignored (version 1 ignored them).
    v = parse(enc(sample));
    v.find("buckets")->arr[0].map.push_back({"future", U(1)});
    EXPECT_TRUE(decode(bytes_of(v), m, err)) << err;
    // A positional entry under "v" 1, a map one under "v" 2: refused by the shape.
    v = parse(enc(sample_zone_usage()));
    v.find("v")->u = 1;
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad entry type array (want map) in buckets[0]");
    v = parse(enc(sample));
    v.find("v")->u = 2;
    EXPECT_FALSE(decode(bytes_of(v), m, err));
    EXPECT_EQ(err, "bad entry type map (want array) in buckets[0]");
    RegionUsage r;
    v = parse(enc(at_version_1(sample_region_usage())));
    v.find("buckets")->arr[0].map.push_back({"keys", S("x")});
    EXPECT_FALSE(decode(bytes_of(v), r, err));
    EXPECT_EQ(err, "\"keys\" without a \"keyed\" definition in buckets[0]");
}

// Only versions 1 and 2 of usage are read; the other control messages stay at version 1.
TEST(WireControl, UsageOfOtherVersionsRefused) {
    for (std::uint64_t bad : {0u, 3u, 99u}) {
        Val v = parse(enc(sample_zone_usage()));
        v.find("v")->u = bad;
        ZoneUsage m;
        std::string err;
        EXPECT_FALSE(decode(bytes_of(v), m, err));
        EXPECT_EQ(err, "bad \"v\" " + std::to_string(bad) + " (want 1 or 2)");
        v = parse(enc(sample_region_usage()));
        v.find("v")->u = bad;
        RegionUsage r;
        EXPECT_FALSE(decode(bytes_of(v), r, err));
        EXPECT_EQ(err, "bad \"v\" " + std::to_string(bad) + " (want 1 or 2)");
    }
    EXPECT_EQ(parse(enc(sample_request())).find("v")->u, 1u);
}

TEST(WireControl, BadMatchRejected) {
    RegionUsage m = sample_region_usage(), d;
    std::string err;
    m.overrides[1].match.procedure = "(unclosed";
    EXPECT_FALSE(decode(enc(m), d, err));
    EXPECT_NE(err.find("in overrides[1].match"), std::string::npos) << err;
    m = sample_region_usage();
    m.overrides[1].match.caller = std::string(kMaxMatchValueLen + 1, 'a');
    EXPECT_FALSE(decode(enc(m), d, err));
    Val v = parse(enc(sample_region_usage()));
    v.find("overrides")->arr[1].find("match")->find("caller_kind")->s = "regex";
    EXPECT_FALSE(decode(bytes_of(v), d, err));
    EXPECT_NE(err.find("caller_kind"), std::string::npos) << err;
    // A match must match on something.
    RuntimeMatch empty;
    EXPECT_NE(check_match(empty), "");
    EXPECT_EQ(check_match(sample_match()), "");
}

TEST(WireControl, AdminRequestSemantics) {
    AdminRequest q = sample_request(), d;
    std::string err;
    q.bucket.clear();
    EXPECT_FALSE(decode(enc(q), d, err));
    EXPECT_NE(err.find("missing \"bucket\""), std::string::npos) << err;
    q = sample_request();
    q.has_match = false;
    EXPECT_FALSE(decode(enc(q), d, err));
    Val v = parse(enc(sample_request()));
    v.find("op")->s = "reboot";
    EXPECT_FALSE(decode(bytes_of(v), d, err));
    EXPECT_EQ(err, "bad \"op\" \"reboot\"");
}

TEST(WireControl, CountLimits) {
    ZoneUsage m = sample_zone_usage(), d;
    std::string err;
    m.host_names.assign(kMaxHostNames + 1, "h");
    EXPECT_FALSE(decode(enc(m), d, err));
    EXPECT_NE(err.find("too many \"host_names\""), std::string::npos) << err;
    m = sample_zone_usage();
    m.buckets[0].host_names.assign(kMaxBucketHostNames + 1, "h");
    EXPECT_FALSE(decode(enc(m), d, err));
    m = sample_zone_usage();
    for (std::size_t i = 0; i <= kMaxDefinitions; ++i) {
        m.buckets[0].definitions.push_back({{Scope::Global, Mode::Deny, 1000000 + i}, 1});
    }
    EXPECT_FALSE(decode(enc(m), d, err));
    m = sample_zone_usage();
    m.buckets[1].definitions[1] = m.buckets[1].definitions[0];
    EXPECT_FALSE(decode(enc(m), d, err));
    EXPECT_NE(err.find("duplicate definition"), std::string::npos) << err;
    m = sample_zone_usage();
    m.buckets[0].rated_hosts = m.buckets[0].hosts + 1;
    EXPECT_FALSE(decode(enc(m), d, err));
    EXPECT_EQ(err, "\"rated_hosts\" greater than \"hosts\" in buckets[0]");
    m = sample_zone_usage();
    m.buckets[1].name = "api";
    EXPECT_FALSE(decode(enc(m), d, err));
    EXPECT_EQ(err, "duplicate bucket name \"api\"");
    // Oversized body.
    std::string huge(kMaxMessageBytes + 1, '\x90');
    EXPECT_FALSE(decode(huge, d, err));
    EXPECT_NE(err.find("too large"), std::string::npos);
}

// Counts that no sender could have seen make the whole message invalid: summed, they could
// overflow, and one message claiming limit 0 for 10^12 hosts could outvote a fleet.
TEST(WireControl, CountsThatCannotBeTrueRejected) {
    ZoneUsage m = sample_zone_usage(), d;
    std::string err;
    ASSERT_TRUE(decode(enc(m), d, err)) << err;
    // A bucket with more hosts than the message (zone: 3).
    m.buckets[1].hosts = 4;
    EXPECT_FALSE(decode(enc(m), d, err));
    EXPECT_EQ(err, "\"hosts\" 4 greater than the message's \"hosts\" 3 in buckets[1]");
    // Definitions counting more hosts than the bucket has (2 + 1 = 3 is fine).
    m = sample_zone_usage();
    m.buckets[0].definitions[0].hosts = 1'000'000'000'000;
    EXPECT_FALSE(decode(enc(m), d, err));
    EXPECT_EQ(err,
              "\"definitions\" count 1000000000001 hosts, more than \"hosts\" 3 in buckets[0]");
    m = sample_zone_usage();
    m.buckets[0].definitions[0].hosts = UINT64_MAX;  // the sum must not wrap back under 3
    EXPECT_FALSE(decode(enc(m), d, err));
    // More host names than hosts.
    m = sample_zone_usage();
    m.hosts = 2;
    m.buckets[0].hosts = m.buckets[1].hosts = 2;
    m.buckets[0].definitions = m.buckets[1].definitions = {{{Scope::Global, Mode::Deny, 1}, 2}};
    EXPECT_FALSE(decode(enc(m), d, err));
    EXPECT_EQ(err, "\"host_names\" lists 3 hosts, more than \"hosts\" 2");
    m = sample_zone_usage();
    m.buckets[0].host_names = {"h1", "h2", "h3", "h4"};
    EXPECT_FALSE(decode(enc(m), d, err));
    EXPECT_EQ(err, "\"host_names\" lists 4 hosts, more than \"hosts\" 3 in buckets[0]");
    // The same rules for region_usage (hosts: 7).
    RegionUsage r = sample_region_usage(), rd;
    ASSERT_TRUE(decode(enc(r), rd, err)) << err;
    r.buckets[0].hosts = 8;
    r.buckets[0].definitions[0].hosts = 7;
    EXPECT_FALSE(decode(enc(r), rd, err));
    EXPECT_EQ(err, "\"hosts\" 8 greater than the message's \"hosts\" 7 in buckets[0]");
    r = sample_region_usage();
    r.buckets[0].definitions[1].hosts = 5;
    EXPECT_FALSE(decode(enc(r), rd, err));
    EXPECT_EQ(err, "\"definitions\" count 7 hosts, more than \"hosts\" 3 in buckets[0]");
}

TEST(WireControl, RandomAndMutatedBytesNeverCrash) {
    std::mt19937_64 rng(12345);
    for (const Case& c : cases()) {
        for (int round = 0; round < 3000; ++round) {
            std::string b = c.bytes;
            int flips = 1 + static_cast<int>(rng() % 4);
            for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<char>(rng());
            std::string err;
            // Must not crash, leak or hang (CI runs this under ASan); a failure says why.
            if (!c.decode(b, err)) {
                EXPECT_FALSE(err.empty());
            }
        }
        for (int round = 0; round < 1000; ++round) {
            std::string b(rng() % 64, '\0');
            for (char& ch : b) ch = static_cast<char>(rng());
            std::string err;
            if (!c.decode(b, err)) {
                EXPECT_FALSE(err.empty());
            }
        }
    }
}

}  // namespace
}  // namespace grl::wire
