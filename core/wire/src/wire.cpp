// Wire messages of protocol version 1 (docs/protocol.md) encoded with the msgpack-c C API.
//
// Decoding is two-pass: a bounds-checking scan of the raw bytes first proves that the body is
// exactly one well-formed msgpack object whose declared element counts fit in the bytes present,
// so msgpack_unpack_next() never sizes an allocation from an unchecked count and never sees a
// nesting depth it cannot handle (codec::Body). The object tree is then validated field by
// field with codec::MapReader, the map reader of every codec.
#include "grl/wire/wire.h"

#include "codec.h"

#include <msgpack.h>

#include <algorithm>
#include <array>
#include <new>
#include <optional>
#include <utility>

namespace grl::wire {

namespace {

// The packer, quoting, raw scan and body parsing are shared with the
// control-plane codecs (codec.h).
using codec::Packer;
using codec::quote;
using codec::type_name;

constexpr std::uint32_t kMaxRatioPpm = 1'000'000;

std::string quote_key(std::string_view key) {
    return '"' + std::string(key) + '"';
}

// ---------------------------------------------------------------------------------------------
// Field access: codec::MapReader with the keys of each map listed (collected in one pass,
// duplicates refused first) and errors ending in where the map is (` for bucket "api"`).

using codec::MapReader;

template <std::size_t N>
MapReader reader(const msgpack_object& map, const std::array<std::string_view, N>& keys,
                 std::string where, std::string& error) {
    return MapReader(map, keys.data(), N, std::move(where), error);
}

// Checks "v" (first) and "type" of a top-level map (any length of type: the error quotes it).
bool header_ok(const MapReader& f, std::string_view want_type) {
    std::uint64_t v = 0;
    if (!f.u64("v", v)) return false;
    if (v != kVersion) {
        return f.fail("bad \"v\" " + std::to_string(v) + " (want " + std::to_string(kVersion) +
                      ")");
    }
    std::string_view type;
    if (!f.str("type", type)) return false;
    if (type != want_type) {
        return f.fail("bad \"type\" " + quote(type) + " (want " + quote(want_type) + ")");
    }
    return true;
}

// The bucket entries array of a message: type and count checked.
bool bucket_array(const msgpack_object* arr, std::string& error) {
    if (arr->via.array.size > kMaxBucketsPerMessage) {
        error = "too many buckets (" + std::to_string(arr->via.array.size) + ", max " +
                std::to_string(kMaxBucketsPerMessage) + ")";
        return false;
    }
    return true;
}

// Common handling of one bucket entry: it must be a map (checked before `f` is made of it) with
// a valid "name". On success `name` is set and `f` reports later errors against the bucket name.
bool bucket_map(const msgpack_object& e, std::uint32_t index, std::string& error) {
    if (e.type == MSGPACK_OBJECT_MAP) return true;
    error = "bad \"buckets[" + std::to_string(index) + "]\" type " + type_name(e) + " (want map)";
    return false;
}

std::string bucket_at(std::uint32_t index) {
    return " in buckets[" + std::to_string(index) + "]";
}

bool bucket_name(MapReader& f, std::string& name, std::string& error) {
    if (!f.ok()) return false;
    std::string_view v;
    if (!f.str("name", v)) return false;
    if (!valid_name(v)) {
        error = "invalid bucket name " + quote(v);
        return false;
    }
    name.assign(v.data(), v.size());
    f.set_where(" for bucket " + quote(v));
    return true;
}

template <typename Bucket>
bool unique_names(const std::vector<Bucket>& buckets, std::string& error) {
    std::vector<std::string_view> names;
    names.reserve(buckets.size());
    for (const Bucket& b : buckets) names.emplace_back(b.name);
    std::sort(names.begin(), names.end());
    auto dup = std::adjacent_find(names.begin(), names.end());
    if (dup != names.end()) {
        error = "duplicate bucket name " + quote(*dup);
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// report

constexpr std::array<std::string_view, 13> kReportKeys = {
    "v",     "type",        "ts_ms",           "seq",     "host",      "zone",   "region",
    "epoch", "interval_ms", "reports_dropped", "buckets", "recent_ms", "recent",
};
constexpr std::size_t kReportRequiredKeys = 11;  // all but the optional recent_ms and recent
static_assert(kReportKeys[kReportRequiredKeys] == "recent_ms");

// The optional "recent_ms" and "recent" of a report: both or neither; "recent" has one entry
// per bucket, in the same order: [offered, admitted, dropped, shadow_dropped] or [] (unknown).
bool recent_counts(const MapReader& f, Report& m, std::string& error) {
    if (f.present("recent_ms") != f.present("recent")) {
        error = "\"recent\" and \"recent_ms\" go together";
        return false;
    }
    if (!f.present("recent")) return true;
    const msgpack_object* arr = nullptr;
    if (!f.u64("recent_ms", m.recent_ms) || !f.array("recent", arr, SIZE_MAX)) return false;
    if (arr->via.array.size != m.buckets.size()) {
        error = "\"recent\" has " + std::to_string(arr->via.array.size) + " entries for " +
                std::to_string(m.buckets.size()) + " buckets";
        return false;
    }
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        const msgpack_object& e = arr->via.array.ptr[i];
        if (e.type != MSGPACK_OBJECT_ARRAY || (e.via.array.size != 0 && e.via.array.size != 4)) {
            error = "bad \"recent[" + std::to_string(i) + "]\" (want [] or 4 uints)";
            return false;
        }
        ReportBucket& b = m.buckets[i];
        b.has_recent = e.via.array.size == 4;
        for (std::uint32_t k = 0; k < e.via.array.size; ++k) {
            if (e.via.array.ptr[k].type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
                error = "bad \"recent[" + std::to_string(i) + "]\" (want [] or 4 uints)";
                return false;
            }
            b.recent[k] = e.via.array.ptr[k].via.u64;
        }
    }
    return true;
}

constexpr std::array<std::string_view, 13> kReportBucketKeys = {
    "name",           "scope", "mode", "limit_mrps", "offered",      "admitted",        "dropped",
    "shadow_dropped", "keyed", "keys", "quota",      "quota_period", "quota_offset_ms",
};
constexpr std::size_t kReportBucketRequiredKeys = 8;  // all but the optional keyed and keys
static_assert(kReportBucketKeys[kReportBucketRequiredKeys] == "keyed");

// The optional "keyed" and "keys" of a report bucket entry: "keys" only with "keyed" true.
bool report_keys(const MapReader& bf, std::uint32_t index, ReportBucket& b, std::string& error) {
    if (!bf.opt_bool("keyed", b.keyed)) return false;
    if (!bf.present("keys")) return true;
    if (!b.keyed) return bf.fail("\"keys\" without \"keyed\"");
    const msgpack_object* arr = nullptr;
    if (!bf.array("keys", arr, SIZE_MAX)) return false;
    codec::Path bucket{nullptr, "buckets", static_cast<long>(index)};
    codec::Path keys{&bucket, "keys", -1};
    return codec::read_key_rates(*arr, keys, kMaxReportKeys, false, b.keys, error);
}

// The optional "quota", "quota_period", "quota_offset_ms" of a report bucket entry (all three
// or none), checked as nginx -t checks quota= and window_offset=.
bool report_quota(const MapReader& bf, QuotaSpec& q) {
    if (!bf.present("quota")) return true;
    std::string_view period;
    if (!bf.u64("quota", q.n) || !bf.str("quota_period", period) ||
        !bf.u64("quota_offset_ms", q.offset_ms)) {
        return false;
    }
    std::optional<Period> p = parse_period(period);
    if (!p) return bf.fail("bad \"quota_period\" " + quote(period));
    q.period = *p;
    if (q.n == 0) return bf.fail("\"quota\" 0 (want 1 or more)");
    if (q.offset_ms >= max_offset_ms(q.period)) {
        return bf.fail("\"quota_offset_ms\" " + std::to_string(q.offset_ms) +
                       " not shorter than a " + std::string(period));
    }
    return true;
}

bool decode_report(std::string_view bytes, Report& out, std::string& error) {
    codec::Body body;
    if (!body.parse(bytes, error)) return false;
    const MapReader f = reader(body.root(), kReportKeys, "", error);
    if (!f.ok() || !header_ok(f, "report")) return false;

    Report m;
    const msgpack_object* arr = nullptr;
    if (!f.u64("ts_ms", m.ts_ms) || !f.u64("seq", m.seq) || !f.name("host", m.host) ||
        !f.name("zone", m.zone) || !f.name("region", m.region) || !f.u64("epoch", m.epoch) ||
        !f.u64("interval_ms", m.interval_ms) || !f.u64("reports_dropped", m.reports_dropped) ||
        !f.array("buckets", arr, SIZE_MAX) || !bucket_array(arr, error)) {
        return false;
    }

    m.buckets.reserve(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        const msgpack_object& e = arr->via.array.ptr[i];
        if (!bucket_map(e, i, error)) return false;
        MapReader bf = reader(e, kReportBucketKeys, bucket_at(i), error);
        ReportBucket b;
        if (!bucket_name(bf, b.name, error)) return false;
        if (!bf.scope("scope", b.scope) || !bf.mode("mode", b.mode) ||
            !bf.u64("limit_mrps", b.limit_mrps) || !bf.u64("offered", b.offered) ||
            !bf.u64("admitted", b.admitted) || !bf.u64("dropped", b.dropped) ||
            !bf.u64("shadow_dropped", b.shadow_dropped) || !report_keys(bf, i, b, error) ||
            !report_quota(bf, b.quota)) {
            return false;
        }
        m.buckets.push_back(std::move(b));
    }
    if (!unique_names(m.buckets, error)) return false;
    if (!recent_counts(f, m, error)) return false;
    out = std::move(m);
    return true;
}

// ---------------------------------------------------------------------------------------------
// instructions

constexpr std::array<std::string_view, 10> kInstructionsKeys = {
    "v", "type", "ts_ms", "seq", "source", "ttl_ms", "scope", "region", "zone", "buckets",
};
constexpr std::array<std::string_view, 14> kInstructionKeys = {
    "name",       "ratio_ppm",
    "limit_mrps", "mode",
    "match",      "basis_offered_mrps",
    "basis_ms",   "keyed",
    "keys",       "quota",
    "quota_used", "quota_reset_ms",
    "key_quota",  "key_quota_reset_ms",
};
constexpr std::array<std::string_view, 5> kMatchKeys = {
    "caller", "caller_kind", "procedure", "procedure_kind", "scope",
};

// The optional surge-damping basis of an instruction entry: both keys or neither (an older
// controller sends neither, and nginx then applies the ratio alone).
bool surge_basis(const MapReader& bf, Instruction& b) {
    if (bf.present("basis_offered_mrps") != bf.present("basis_ms")) {
        return bf.fail("\"basis_offered_mrps\" and \"basis_ms\" go together");
    }
    b.has_basis = bf.present("basis_ms");
    if (!b.has_basis) return true;
    return bf.u64("basis_offered_mrps", b.basis_offered_mrps) && bf.u64("basis_ms", b.basis_ms);
}

// The optional "match" map of an instruction entry (a run-time bucket).
bool runtime_match(const MapReader& bf, Instruction& b, std::string& error) {
    const msgpack_object* o = nullptr;
    if (!bf.present("match")) return true;
    if (!bf.map("match", o)) return false;
    const MapReader mf = reader(*o, kMatchKeys, " in \"match\"" + bf.where(), error);
    if (!mf.ok()) return false;
    std::string_view ck, pk;
    if (!mf.str("caller", b.match.caller, SIZE_MAX) || !mf.str("caller_kind", ck) ||
        !mf.str("procedure", b.match.procedure, SIZE_MAX) || !mf.str("procedure_kind", pk) ||
        !mf.scope("scope", b.match.scope)) {
        return false;
    }
    std::optional<MatchKind> c = codec::parse_match_kind(ck, false);
    if (!c) return mf.fail("bad \"caller_kind\" " + quote(ck));
    std::optional<MatchKind> q = codec::parse_match_kind(pk, true);
    if (!q) return mf.fail("bad \"procedure_kind\" " + quote(pk));
    b.match.caller_kind = *c;
    b.match.procedure_kind = *q;
    if (b.match.caller.size() > kMaxMatchValueLen || b.match.procedure.size() > kMaxMatchValueLen) {
        return mf.fail("match value longer than " + std::to_string(kMaxMatchValueLen) + " bytes");
    }
    if (b.match.procedure_kind == MatchKind::Regex) {
        std::string re = check_regex(b.match.procedure);
        if (!re.empty()) return mf.fail(re);
    }
    b.has_match = true;
    return true;
}

// The optional "keyed" and "keys" of an instruction entry. A keyed entry's own ratio is 0 and it
// has no surge basis (docs/protocol.md "Keyed buckets"); "keys" is an array of [h, ratio_ppm].
bool instruction_keys(const MapReader& bf, Instruction& b) {
    if (!bf.opt_bool("keyed", b.keyed)) return false;
    if (!b.keyed) {
        if (!bf.present("keys")) return true;
        return bf.fail("\"keys\" without \"keyed\"");
    }
    if (b.ratio_ppm != 0) {
        return bf.fail("\"ratio_ppm\" " + std::to_string(b.ratio_ppm) +
                       " of a keyed bucket (want 0)");
    }
    if (b.has_basis) return bf.fail("surge basis of a keyed bucket");
    if (!bf.present("keys")) return true;
    const msgpack_object* arr = nullptr;
    if (!bf.array("keys", arr, SIZE_MAX)) return false;
    if (arr->via.array.size > kMaxInstructionKeys) {
        return bf.fail("too many keys (" + std::to_string(arr->via.array.size) + ", max " +
                       std::to_string(kMaxInstructionKeys) + ")");
    }
    b.keys.resize(arr->via.array.size);
    std::vector<std::uint64_t> hashes(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        std::uint64_t h = 0, ratio = 0;
        if (!codec::uint_pair(arr->via.array.ptr[i], h, ratio)) {
            return bf.fail("bad \"keys[" + std::to_string(i) + "]\" (want [h, ratio_ppm])");
        }
        if (h <= 1) {
            return bf.fail("bad hash " + std::to_string(h) + " in \"keys[" + std::to_string(i) +
                           "]\" (a key hash is > 1)");
        }
        if (ratio > kMaxRatioPpm) {
            return bf.fail("\"ratio_ppm\" " + std::to_string(ratio) + " of " + codec::key_name(h) +
                           " out of range");
        }
        b.keys[i] = {h, static_cast<std::uint32_t>(ratio)};
        hashes[i] = h;
    }
    std::sort(hashes.begin(), hashes.end());
    auto dup = std::adjacent_find(hashes.begin(), hashes.end());
    if (dup != hashes.end()) {
        return bf.fail("duplicate " + codec::key_name(*dup) + " in \"keys\"");
    }
    return true;
}

// The optional "quota", "quota_used", "quota_reset_ms" of an instruction entry (all three or
// none; docs/protocol.md "Quotas"). A used-up quota rejects everything: ratio_ppm 1'000'000.
bool instruction_quota(const MapReader& bf, Instruction& b) {
    if (!bf.present("quota")) return true;
    if (!bf.u64("quota", b.quota) || !bf.u64("quota_used", b.quota_used) ||
        !bf.u64("quota_reset_ms", b.quota_reset_ms)) {
        return false;
    }
    if (b.quota == 0) return bf.fail("\"quota\" 0 (want 1 or more)");
    if (b.keyed) return bf.fail("quota of a keyed bucket");
    if (b.quota_used >= b.quota && b.ratio_ppm != kMaxRatioPpm) {
        return bf.fail("\"quota_used\" " + std::to_string(b.quota_used) + " of " +
                       std::to_string(b.quota) + " with \"ratio_ppm\" " +
                       std::to_string(b.ratio_ppm) + " (want 1000000)");
    }
    return true;
}

// The optional "key_quota", "key_quota_reset_ms" of a keyed entry (both or none;
// docs/design/009-per-key-quotas.md): each key's N and when the window ends; its keys with
// ratio_ppm 1'000'000 have used theirs up.
bool instruction_key_quota(const MapReader& bf, Instruction& b) {
    if (!bf.present("key_quota") && !bf.present("key_quota_reset_ms")) return true;
    if (!bf.u64("key_quota", b.key_quota) || !bf.u64("key_quota_reset_ms", b.key_quota_reset_ms)) {
        return false;
    }
    if (b.key_quota == 0) return bf.fail("\"key_quota\" 0 (want 1 or more)");
    if (!b.keyed) return bf.fail("\"key_quota\" of a bucket that is not keyed");
    return true;
}

// "region"/"zone" of an instructions message: a valid name when the scope needs it, otherwise
// empty or a valid name.
bool locality(std::string_view key, std::string_view v, bool required, Scope scope,
              std::string& error) {
    if (valid_name(v) || (!required && v.empty())) return true;
    error = "invalid " + quote_key(key) + " " + quote(v);
    if (required) error += " for scope " + quote(to_string(scope));
    return false;
}

bool decode_instructions(std::string_view bytes, Instructions& out, std::string& error) {
    codec::Body body;
    if (!body.parse(bytes, error)) return false;
    const MapReader f = reader(body.root(), kInstructionsKeys, "", error);
    if (!f.ok() || !header_ok(f, "instructions")) return false;

    Instructions m;
    const msgpack_object* arr = nullptr;
    if (!f.u64("ts_ms", m.ts_ms) || !f.u64("seq", m.seq) || !f.str("source", m.source, SIZE_MAX) ||
        !f.u64("ttl_ms", m.ttl_ms) || !f.scope("scope", m.scope) ||
        !f.str("region", m.region, SIZE_MAX) || !f.str("zone", m.zone, SIZE_MAX) ||
        !locality("region", m.region, m.scope != Scope::Global, m.scope, error) ||
        !locality("zone", m.zone, m.scope == Scope::Zone, m.scope, error) ||
        !f.array("buckets", arr, SIZE_MAX) || !bucket_array(arr, error)) {
        return false;
    }

    m.buckets.reserve(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        const msgpack_object& e = arr->via.array.ptr[i];
        if (!bucket_map(e, i, error)) return false;
        MapReader bf = reader(e, kInstructionKeys, bucket_at(i), error);
        Instruction b;
        if (!bucket_name(bf, b.name, error)) return false;
        std::uint64_t ratio = 0;
        if (!bf.u64("ratio_ppm", ratio)) return false;
        if (ratio > kMaxRatioPpm) {
            return bf.fail("\"ratio_ppm\" " + std::to_string(ratio) + " out of range");
        }
        b.ratio_ppm = static_cast<std::uint32_t>(ratio);
        if (!bf.u64("limit_mrps", b.limit_mrps) || !bf.mode("mode", b.mode) ||
            !runtime_match(bf, b, error) || !surge_basis(bf, b) || !instruction_keys(bf, b) ||
            !instruction_quota(bf, b) || !instruction_key_quota(bf, b)) {
            return false;
        }
        m.buckets.push_back(std::move(b));
    }
    if (!unique_names(m.buckets, error)) return false;
    out = std::move(m);
    return true;
}

// Runs a decoder so that nothing escapes: std::bad_alloc (or anything else) becomes `false`.
template <typename Msg>
bool guarded(bool (*fn)(std::string_view, Msg&, std::string&), std::string_view bytes, Msg& m,
             std::string& error) {
    try {
        return fn(bytes, m, error);
    } catch (...) {
    }
    try {
        error = "out of memory";
    } catch (...) {
    }
    return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API

void encode(const Report& m, std::string& out) {
    Packer p(out);
    p.map(m.recent_ms ? kReportKeys.size() : kReportRequiredKeys);
    p.kv("v", kVersion);
    p.kv("type", "report");
    p.kv("ts_ms", m.ts_ms);
    p.kv("seq", m.seq);
    p.kv("host", m.host);
    p.kv("zone", m.zone);
    p.kv("region", m.region);
    p.kv("epoch", m.epoch);
    p.kv("interval_ms", m.interval_ms);
    p.kv("reports_dropped", m.reports_dropped);
    p.str("buckets");
    p.array(m.buckets.size());
    for (const ReportBucket& b : m.buckets) {
        p.map(kReportBucketRequiredKeys + (b.keyed ? 2 : 0) + (b.quota ? 3 : 0));
        p.kv("name", b.name);
        p.kv("scope", to_string(b.scope));
        p.kv("mode", to_string(b.mode));
        p.kv("limit_mrps", b.limit_mrps);
        p.kv("offered", b.offered);
        p.kv("admitted", b.admitted);
        p.kv("dropped", b.dropped);
        p.kv("shadow_dropped", b.shadow_dropped);
        if (b.keyed) {
            p.kv_bool("keyed", true);
            codec::pack_key_rates(p, "keys", b.keys, false);
        }
        if (b.quota) {
            p.kv("quota", b.quota.n);
            p.kv("quota_period", to_string(b.quota.period));
            p.kv("quota_offset_ms", b.quota.offset_ms);
        }
    }
    if (m.recent_ms) {
        p.kv("recent_ms", m.recent_ms);
        p.str("recent");
        p.array(m.buckets.size());
        for (const ReportBucket& b : m.buckets) {
            p.array(b.has_recent ? 4 : 0);
            if (b.has_recent) {
                for (std::uint64_t c : b.recent) p.u64(c);
            }
        }
    }
    p.finish();
}

void encode(const Instructions& m, std::string& out) {
    Packer p(out);
    p.map(kInstructionsKeys.size());
    p.kv("v", kVersion);
    p.kv("type", "instructions");
    p.kv("ts_ms", m.ts_ms);
    p.kv("seq", m.seq);
    p.kv("source", m.source);
    p.kv("ttl_ms", m.ttl_ms);
    p.kv("scope", to_string(m.scope));
    p.kv("region", m.region);
    p.kv("zone", m.zone);
    p.str("buckets");
    p.array(m.buckets.size());
    for (const Instruction& b : m.buckets) {
        p.map(kInstructionKeys.size() - (b.has_match ? 0 : 1) - (b.has_basis ? 0 : 2) -
              (b.keyed ? 0 : 2) - (b.quota ? 0 : 3) - (b.key_quota ? 0 : 2));
        p.kv("name", b.name);
        p.kv("ratio_ppm", b.ratio_ppm);
        p.kv("limit_mrps", b.limit_mrps);
        p.kv("mode", to_string(b.mode));
        if (b.has_basis) {
            p.kv("basis_offered_mrps", b.basis_offered_mrps);
            p.kv("basis_ms", b.basis_ms);
        }
        if (b.has_match) {
            p.str("match");
            codec::pack_match(p, b.match);
        }
        if (b.keyed) {
            p.kv_bool("keyed", true);
            p.str("keys");
            p.array(b.keys.size());
            for (const KeyRatio& k : b.keys) {
                p.array(2);
                p.u64(k.hash);
                p.u64(k.ratio_ppm);
            }
        }
        if (b.quota) {
            p.kv("quota", b.quota);
            p.kv("quota_used", b.quota_used);
            p.kv("quota_reset_ms", b.quota_reset_ms);
        }
        if (b.key_quota) {
            p.kv("key_quota", b.key_quota);
            p.kv("key_quota_reset_ms", b.key_quota_reset_ms);
        }
    }
    p.finish();
}

bool decode(std::string_view bytes, Report& m, std::string& error) {
    return guarded(&decode_report, bytes, m, error);
}

bool decode(std::string_view bytes, Instructions& m, std::string& error) {
    return guarded(&decode_instructions, bytes, m, error);
}

std::string peek_type(std::string_view bytes) {
    try {
        codec::Body body;
        std::string error;
        if (!body.parse(bytes, error)) return {};
        static constexpr std::array<std::string_view, 2> kKeys = {"v", "type"};
        const MapReader f = reader(body.root(), kKeys, "", error);
        std::uint64_t v = 0;
        std::string_view type;
        if (!f.ok() || !f.u64("v", v) || v != kVersion || !f.str("type", type)) return {};
        return std::string(type);
    } catch (...) {
        return {};
    }
}

std::string topic(Scope scope, std::string_view region, std::string_view zone) {
    std::string t;
    switch (scope) {
        case Scope::Global: t = "grl/g/"; break;
        case Scope::Region:
            t.reserve(7 + region.size());
            t.append("grl/r/").append(region).append("/");
            break;
        case Scope::Zone:
            t.reserve(8 + region.size() + zone.size());
            t.append("grl/z/").append(region).append("/").append(zone).append("/");
            break;
    }
    return t;
}

}  // namespace grl::wire
