// Wire messages of protocol version 1 (docs/protocol.md) encoded with the msgpack-c C API.
//
// Decoding is two-pass: a bounds-checking scan of the raw bytes first proves that the body is
// exactly one well-formed msgpack object whose declared element counts fit in the bytes present,
// so msgpack_unpack_next() never sizes an allocation from an unchecked count and never sees a
// nesting depth it cannot handle. The object tree is then validated field by field.
#include "grl/wire.h"

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
// Field access

std::string_view str_of(const msgpack_object& o) {
    return o.via.str.size == 0 ? std::string_view()
                               : std::string_view(o.via.str.ptr, o.via.str.size);
}

// The known keys of one map, looked up once. `where` is appended to every error, e.g.
// ` for bucket "api"`; it is empty for the top-level map.
template <std::size_t N>
class Fields {
  public:
    explicit Fields(const std::array<std::string_view, N>& keys) : keys_(keys) {}

    bool collect(const msgpack_object& map, std::string& error) {
        for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
            const msgpack_object_kv& kv = map.via.map.ptr[i];
            if (kv.key.type != MSGPACK_OBJECT_STR) {
                error = std::string(type_name(kv.key)) + " key in map" + where_;
                return false;
            }
            const std::string_view key = str_of(kv.key);
            for (std::size_t k = 0; k < N; ++k) {
                if (keys_[k] != key) continue;
                if (vals_[k] != nullptr) {
                    error = "duplicate key " + quote_key(key) + where_;
                    return false;
                }
                vals_[k] = &kv.val;
                break;
            }
        }
        return true;
    }

    void set_where(std::string where) { where_ = std::move(where); }
    bool present(std::size_t k) const { return vals_[k] != nullptr; }

    bool get(std::size_t k, msgpack_object_type want, const char* want_name,
             const msgpack_object*& o, std::string& error) const {
        o = vals_[k];
        if (o == nullptr) {
            error = "missing " + quote_key(keys_[k]) + where_;
            return false;
        }
        if (o->type != want) {
            error = "bad " + quote_key(keys_[k]) + " type " + type_name(*o) + " (want " +
                    want_name + ")" + where_;
            return false;
        }
        return true;
    }

    bool u64(std::size_t k, std::uint64_t& out, std::string& error) const {
        const msgpack_object* o = nullptr;
        if (!get(k, MSGPACK_OBJECT_POSITIVE_INTEGER, "uint", o, error)) return false;
        out = o->via.u64;
        return true;
    }

    bool str(std::size_t k, std::string_view& out, std::string& error) const {
        const msgpack_object* o = nullptr;
        if (!get(k, MSGPACK_OBJECT_STR, "str", o, error)) return false;
        out = str_of(*o);
        return true;
    }

    bool str(std::size_t k, std::string& out, std::string& error) const {
        std::string_view v;
        if (!str(k, v, error)) return false;
        out.assign(v.data(), v.size());
        return true;
    }

    bool name(std::size_t k, std::string& out, std::string& error) const {
        std::string_view v;
        if (!str(k, v, error)) return false;
        if (!valid_name(v)) {
            error = "invalid " + quote_key(keys_[k]) + " " + quote(v) + where_;
            return false;
        }
        out.assign(v.data(), v.size());
        return true;
    }

    bool scope(std::size_t k, Scope& out, std::string& error) const {
        std::string_view v;
        if (!str(k, v, error)) return false;
        std::optional<Scope> s = parse_scope(v);
        if (!s) {
            error = "bad " + quote_key(keys_[k]) + " " + quote(v) + where_;
            return false;
        }
        out = *s;
        return true;
    }

    bool mode(std::size_t k, Mode& out, std::string& error) const {
        std::string_view v;
        if (!str(k, v, error)) return false;
        std::optional<Mode> m = parse_mode(v);
        if (!m) {
            error = "bad " + quote_key(keys_[k]) + " " + quote(v) + where_;
            return false;
        }
        out = *m;
        return true;
    }

    bool array(std::size_t k, const msgpack_object*& o, std::string& error) const {
        return get(k, MSGPACK_OBJECT_ARRAY, "array", o, error);
    }

    // An optional bool: absent leaves `out` false.
    bool opt_bool(std::size_t k, bool& out, std::string& error) const {
        out = false;
        if (!present(k)) return true;
        const msgpack_object* o = nullptr;
        if (!get(k, MSGPACK_OBJECT_BOOLEAN, "bool", o, error)) return false;
        out = o->via.boolean;
        return true;
    }

    const std::string& where() const { return where_; }

  private:
    const std::array<std::string_view, N>& keys_;
    std::array<const msgpack_object*, N> vals_{};
    std::string where_;
};

// Checks "v" (first) and "type" of a top-level map whose fields were collected with kV and kType
// at indices 0 and 1.
template <std::size_t N>
bool check_header(const Fields<N>& f, std::string_view want_type, std::string& error) {
    std::uint64_t v = 0;
    if (!f.u64(0, v, error)) return false;
    if (v != kVersion) {
        error = "bad \"v\" " + std::to_string(v) + " (want " + std::to_string(kVersion) + ")";
        return false;
    }
    std::string_view type;
    if (!f.str(1, type, error)) return false;
    if (type != want_type) {
        error = "bad \"type\" " + quote(type) + " (want " + quote(want_type) + ")";
        return false;
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

// Common handling of one bucket entry: it must be a map with a valid "name" (index 0 in `f`).
// On success `name` is set and `f` reports later errors against the bucket name.
template <std::size_t N>
bool bucket_entry(const msgpack_object& e, std::uint32_t index, Fields<N>& f, std::string& name,
                  std::string& error) {
    const std::string at = "buckets[" + std::to_string(index) + "]";
    if (e.type != MSGPACK_OBJECT_MAP) {
        error = "bad \"" + at + "\" type " + type_name(e) + " (want map)";
        return false;
    }
    f.set_where(" in " + at);
    if (!f.collect(e, error)) return false;
    std::string_view v;
    if (!f.str(0, v, error)) return false;
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

enum ReportKey : std::size_t {
    kRV,
    kRType,
    kRTsMs,
    kRSeq,
    kRHost,
    kRZone,
    kRRegion,
    kREpoch,
    kRIntervalMs,
    kRReportsDropped,
    kRBuckets,
    kRRecentMs,  // optional, with kRRecent
    kRRecent,
    kReportKeys
};
const std::array<std::string_view, kReportKeys> kReportKeyNames = {
    "v",     "type",        "ts_ms",           "seq",     "host",      "zone",   "region",
    "epoch", "interval_ms", "reports_dropped", "buckets", "recent_ms", "recent",
};
constexpr std::size_t kReportRequiredKeys = kRRecentMs;

// The optional "recent_ms" and "recent" of a report: both or neither; "recent" has one entry
// per bucket, in the same order: [offered, admitted, dropped, shadow_dropped] or [] (unknown).
template <std::size_t N>
bool recent_counts(const Fields<N>& f, Report& m, std::string& error) {
    if (f.present(kRRecentMs) != f.present(kRRecent)) {
        error = "\"recent\" and \"recent_ms\" go together";
        return false;
    }
    if (!f.present(kRRecent)) return true;
    const msgpack_object* arr = nullptr;
    if (!f.u64(kRRecentMs, m.recent_ms, error) || !f.array(kRRecent, arr, error)) return false;
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

enum ReportBucketKey : std::size_t {
    kRBName,
    kRBScope,
    kRBMode,
    kRBLimitMrps,
    kRBOffered,
    kRBAdmitted,
    kRBDropped,
    kRBShadowDropped,
    kRBKeyed,  // optional: a keyed bucket...
    kRBKeys,   // ...and its heavy hitters
    kReportBucketKeys
};
const std::array<std::string_view, kReportBucketKeys> kReportBucketKeyNames = {
    "name",     "scope",   "mode",           "limit_mrps", "offered",
    "admitted", "dropped", "shadow_dropped", "keyed",      "keys",
};
constexpr std::size_t kReportBucketRequiredKeys = kRBKeyed;

// The optional "keyed" and "keys" of a report bucket entry: "keys" only with "keyed" true.
template <std::size_t N>
bool report_keys(const Fields<N>& bf, std::uint32_t index, ReportBucket& b, std::string& error) {
    if (!bf.opt_bool(kRBKeyed, b.keyed, error)) return false;
    if (!bf.present(kRBKeys)) return true;
    if (!b.keyed) {
        error = "\"keys\" without \"keyed\"" + bf.where();
        return false;
    }
    const msgpack_object* arr = nullptr;
    if (!bf.array(kRBKeys, arr, error)) return false;
    codec::Path bucket{nullptr, "buckets", static_cast<long>(index)};
    codec::Path keys{&bucket, "keys", -1};
    return codec::read_key_rates(*arr, keys, kMaxReportKeys, false, b.keys, error);
}

bool decode_report(std::string_view bytes, Report& out, std::string& error) {
    codec::Body body;
    if (!body.parse(bytes, error)) return false;
    const msgpack_object* root = &body.root();
    Fields<kReportKeys> f(kReportKeyNames);
    if (!f.collect(*root, error)) return false;
    if (!check_header(f, "report", error)) return false;

    Report m;
    const msgpack_object* arr = nullptr;
    if (!f.u64(kRTsMs, m.ts_ms, error) || !f.u64(kRSeq, m.seq, error) ||
        !f.name(kRHost, m.host, error) || !f.name(kRZone, m.zone, error) ||
        !f.name(kRRegion, m.region, error) || !f.u64(kREpoch, m.epoch, error) ||
        !f.u64(kRIntervalMs, m.interval_ms, error) ||
        !f.u64(kRReportsDropped, m.reports_dropped, error) || !f.array(kRBuckets, arr, error) ||
        !bucket_array(arr, error)) {
        return false;
    }

    m.buckets.reserve(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Fields<kReportBucketKeys> bf(kReportBucketKeyNames);
        ReportBucket b;
        if (!bucket_entry(arr->via.array.ptr[i], i, bf, b.name, error)) return false;
        if (!bf.scope(kRBScope, b.scope, error) || !bf.mode(kRBMode, b.mode, error) ||
            !bf.u64(kRBLimitMrps, b.limit_mrps, error) || !bf.u64(kRBOffered, b.offered, error) ||
            !bf.u64(kRBAdmitted, b.admitted, error) || !bf.u64(kRBDropped, b.dropped, error) ||
            !bf.u64(kRBShadowDropped, b.shadow_dropped, error) || !report_keys(bf, i, b, error)) {
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

enum InstructionsKey : std::size_t {
    kIV,
    kIType,
    kITsMs,
    kISeq,
    kISource,
    kITtlMs,
    kIScope,
    kIRegion,
    kIZone,
    kIBuckets,
    kInstructionsKeys
};
const std::array<std::string_view, kInstructionsKeys> kInstructionsKeyNames = {
    "v", "type", "ts_ms", "seq", "source", "ttl_ms", "scope", "region", "zone", "buckets",
};

enum InstructionKey : std::size_t {
    kIBName,
    kIBRatioPpm,
    kIBLimitMrps,
    kIBMode,
    kIBMatch,
    kIBBasisOfferedMrps,  // optional, with kIBBasisMs: the surge-damping basis
    kIBBasisMs,
    kIBKeyed,  // optional: a keyed bucket...
    kIBKeys,   // ...and its keys' ratios
    kInstructionKeys
};
const std::array<std::string_view, kInstructionKeys> kInstructionKeyNames = {
    "name",     "ratio_ppm", "limit_mrps", "mode", "match", "basis_offered_mrps",
    "basis_ms", "keyed",     "keys",
};

enum MatchKey : std::size_t {
    kMCaller,
    kMCallerKind,
    kMProcedure,
    kMProcedureKind,
    kMScope,
    kMatchKeys
};
const std::array<std::string_view, kMatchKeys> kMatchKeyNames = {
    "caller", "caller_kind", "procedure", "procedure_kind", "scope",
};

// The optional surge-damping basis of an instruction entry: both keys or neither (an older
// controller sends neither, and nginx then applies the ratio alone).
template <std::size_t N>
bool surge_basis(const Fields<N>& bf, Instruction& b, std::string& error) {
    if (bf.present(kIBBasisOfferedMrps) != bf.present(kIBBasisMs)) {
        error = "\"basis_offered_mrps\" and \"basis_ms\" go together" + bf.where();
        return false;
    }
    b.has_basis = bf.present(kIBBasisMs);
    if (!b.has_basis) return true;
    return bf.u64(kIBBasisOfferedMrps, b.basis_offered_mrps, error) &&
           bf.u64(kIBBasisMs, b.basis_ms, error);
}

// The optional "match" map of an instruction entry (a run-time bucket).
template <std::size_t N>
bool runtime_match(const Fields<N>& bf, Instruction& b, std::string& error) {
    const msgpack_object* o = nullptr;
    if (!bf.present(kIBMatch)) return true;
    if (!bf.get(kIBMatch, MSGPACK_OBJECT_MAP, "map", o, error)) return false;
    Fields<kMatchKeys> mf(kMatchKeyNames);
    mf.set_where(" in \"match\"" + bf.where());
    if (!mf.collect(*o, error)) return false;
    std::string_view ck, pk;
    if (!mf.str(kMCaller, b.match.caller, error) || !mf.str(kMCallerKind, ck, error) ||
        !mf.str(kMProcedure, b.match.procedure, error) || !mf.str(kMProcedureKind, pk, error) ||
        !mf.scope(kMScope, b.match.scope, error)) {
        return false;
    }
    std::optional<MatchKind> c = codec::parse_match_kind(ck, false);
    if (!c) {
        error = "bad \"caller_kind\" " + quote(ck) + mf.where();
        return false;
    }
    std::optional<MatchKind> q = codec::parse_match_kind(pk, true);
    if (!q) {
        error = "bad \"procedure_kind\" " + quote(pk) + mf.where();
        return false;
    }
    b.match.caller_kind = *c;
    b.match.procedure_kind = *q;
    if (b.match.caller.size() > kMaxMatchValueLen || b.match.procedure.size() > kMaxMatchValueLen) {
        error =
            "match value longer than " + std::to_string(kMaxMatchValueLen) + " bytes" + mf.where();
        return false;
    }
    if (b.match.procedure_kind == MatchKind::Regex) {
        std::string re = check_regex(b.match.procedure);
        if (!re.empty()) {
            error = re + mf.where();
            return false;
        }
    }
    b.has_match = true;
    return true;
}

// The optional "keyed" and "keys" of an instruction entry. A keyed entry's own ratio is 0 and it
// has no surge basis (docs/protocol.md "Keyed buckets"); "keys" is an array of [h, ratio_ppm].
template <std::size_t N>
bool instruction_keys(const Fields<N>& bf, Instruction& b, std::string& error) {
    if (!bf.opt_bool(kIBKeyed, b.keyed, error)) return false;
    if (!b.keyed) {
        if (!bf.present(kIBKeys)) return true;
        error = "\"keys\" without \"keyed\"" + bf.where();
        return false;
    }
    if (b.ratio_ppm != 0) {
        error = "\"ratio_ppm\" " + std::to_string(b.ratio_ppm) + " of a keyed bucket (want 0)" +
                bf.where();
        return false;
    }
    if (b.has_basis) {
        error = "surge basis of a keyed bucket" + bf.where();
        return false;
    }
    if (!bf.present(kIBKeys)) return true;
    const msgpack_object* arr = nullptr;
    if (!bf.array(kIBKeys, arr, error)) return false;
    if (arr->via.array.size > kMaxInstructionKeys) {
        error = "too many keys (" + std::to_string(arr->via.array.size) + ", max " +
                std::to_string(kMaxInstructionKeys) + ")" + bf.where();
        return false;
    }
    b.keys.resize(arr->via.array.size);
    std::vector<std::uint64_t> hashes(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        const msgpack_object& e = arr->via.array.ptr[i];
        if (e.type != MSGPACK_OBJECT_ARRAY || e.via.array.size != 2 ||
            e.via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            e.via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
            error = "bad \"keys[" + std::to_string(i) + "]\" (want [h, ratio_ppm])" + bf.where();
            return false;
        }
        const std::uint64_t h = e.via.array.ptr[0].via.u64, ratio = e.via.array.ptr[1].via.u64;
        if (h <= 1) {
            error = "bad hash " + std::to_string(h) + " in \"keys[" + std::to_string(i) +
                    "]\" (a key hash is > 1)" + bf.where();
            return false;
        }
        if (ratio > kMaxRatioPpm) {
            error = "\"ratio_ppm\" " + std::to_string(ratio) + " of " + codec::key_name(h) +
                    " out of range" + bf.where();
            return false;
        }
        b.keys[i] = {h, static_cast<std::uint32_t>(ratio)};
        hashes[i] = h;
    }
    std::sort(hashes.begin(), hashes.end());
    auto dup = std::adjacent_find(hashes.begin(), hashes.end());
    if (dup != hashes.end()) {
        error = "duplicate " + codec::key_name(*dup) + " in \"keys\"" + bf.where();
        return false;
    }
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
    const msgpack_object* root = &body.root();
    Fields<kInstructionsKeys> f(kInstructionsKeyNames);
    if (!f.collect(*root, error)) return false;
    if (!check_header(f, "instructions", error)) return false;

    Instructions m;
    const msgpack_object* arr = nullptr;
    if (!f.u64(kITsMs, m.ts_ms, error) || !f.u64(kISeq, m.seq, error) ||
        !f.str(kISource, m.source, error) || !f.u64(kITtlMs, m.ttl_ms, error) ||
        !f.scope(kIScope, m.scope, error) || !f.str(kIRegion, m.region, error) ||
        !f.str(kIZone, m.zone, error) ||
        !locality("region", m.region, m.scope != Scope::Global, m.scope, error) ||
        !locality("zone", m.zone, m.scope == Scope::Zone, m.scope, error) ||
        !f.array(kIBuckets, arr, error) || !bucket_array(arr, error)) {
        return false;
    }

    m.buckets.reserve(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Fields<kInstructionKeys> bf(kInstructionKeyNames);
        Instruction b;
        if (!bucket_entry(arr->via.array.ptr[i], i, bf, b.name, error)) return false;
        std::uint64_t ratio = 0;
        if (!bf.u64(kIBRatioPpm, ratio, error)) return false;
        if (ratio > kMaxRatioPpm) {
            error = "\"ratio_ppm\" " + std::to_string(ratio) + " out of range" + bf.where();
            return false;
        }
        b.ratio_ppm = static_cast<std::uint32_t>(ratio);
        if (!bf.u64(kIBLimitMrps, b.limit_mrps, error) || !bf.mode(kIBMode, b.mode, error) ||
            !runtime_match(bf, b, error) || !surge_basis(bf, b, error) ||
            !instruction_keys(bf, b, error)) {
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
    Packer p;
    p.map(m.recent_ms ? kReportKeys : kReportRequiredKeys);
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
        p.map(kReportBucketRequiredKeys + (b.keyed ? 2 : 0));
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
    p.append_to(out);
}

void encode(const Instructions& m, std::string& out) {
    Packer p;
    p.map(kInstructionsKeys);
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
        p.map(kInstructionKeys - (b.has_match ? 0 : 1) - (b.has_basis ? 0 : 2) - (b.keyed ? 0 : 2));
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
    }
    p.append_to(out);
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
        const msgpack_object* root = &body.root();
        static const std::array<std::string_view, 2> kKeys = {"v", "type"};
        Fields<2> f(kKeys);
        std::uint64_t v = 0;
        std::string_view type;
        if (!f.collect(*root, error) || !f.u64(0, v, error) || v != kVersion ||
            !f.str(1, type, error)) {
            return {};
        }
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
