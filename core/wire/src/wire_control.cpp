// Control-plane messages (docs/protocol.md: zone_usage, region_usage, admin_request,
// admin_reply), encoded and strictly decoded with the helpers of codec.h.
#include "grl/wire/wire_control.h"

#include <algorithm>
#include <utility>

#include "codec.h"
#include "grl/common/bucket.h"
#include "grl/common/saturating.h"

namespace grl::wire {

using codec::MapReader;
using codec::Packer;
using codec::Path;
using codec::RowReader;

namespace {

// ---------------------------------------------------------------------------------------------
// Shared pieces

bool read_match(const msgpack_object& o, const Path& path, RuntimeMatch& m, std::string& error) {
    MapReader r(o, path, error);
    if (!r.ok()) return false;
    std::string ck, pk;
    if (!r.str("caller", m.caller, kMaxMatchValueLen) || !r.str("caller_kind", ck, 16) ||
        !r.str("procedure", m.procedure, kMaxMatchValueLen) || !r.str("procedure_kind", pk, 16) ||
        !r.scope("scope", m.scope)) {
        return false;
    }
    std::optional<MatchKind> c = codec::parse_match_kind(ck, false);
    if (!c) return r.fail("bad \"caller_kind\" " + codec::quote(ck));
    std::optional<MatchKind> q = codec::parse_match_kind(pk, true);
    if (!q) return r.fail("bad \"procedure_kind\" " + codec::quote(pk));
    m.caller_kind = *c;
    m.procedure_kind = *q;
    std::string bad = check_match(m);
    if (!bad.empty()) return r.fail(bad);
    return true;
}

// The optional "usage_v" of a zone's or a peer's status (absent from an older controller: 0).
bool opt_usage_v(const MapReader& r, std::uint64_t& v) {
    std::optional<std::uint64_t> o;
    if (!r.opt_u64("usage_v", o)) return false;
    v = o.value_or(0);
    return true;
}

// An optional "match" key of `r`.
bool opt_match(const MapReader& r, bool& has, RuntimeMatch& m, std::string& error) {
    has = false;
    const msgpack_object* o = nullptr;
    if (!r.find("match", o)) return false;
    if (o == nullptr) return true;
    Path p{&r.path(), "match", -1};
    if (!read_match(*o, p, m, error)) return false;
    has = true;
    return true;
}

void pack_definitions(Packer& p, const std::vector<DefinitionCount>& defs) {
    p.str("definitions");
    p.array(defs.size());
    for (const DefinitionCount& d : defs) {
        // "keyed" only when true: an unkeyed definition's bytes are those of older senders.
        p.map(d.def.keyed ? 5 : 4);
        p.kv("scope", to_string(d.def.scope));
        p.kv("mode", to_string(d.def.mode));
        p.kv("limit_mrps", d.def.limit_mrps);
        p.kv("hosts", d.hosts);
        if (d.def.keyed) p.kv_bool("keyed", true);
    }
}

bool read_definitions(const MapReader& r, std::vector<DefinitionCount>& out, std::string& error) {
    const msgpack_object* arr = nullptr;
    if (!r.array("definitions", arr, kMaxDefinitions)) return false;
    out.clear();
    out.reserve(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Path p{&r.path(), "definitions", static_cast<long>(i)};
        MapReader d(arr->via.array.ptr[i], p, error);
        if (!d.ok()) return false;
        DefinitionCount dc;
        if (!d.scope("scope", dc.def.scope) || !d.mode("mode", dc.def.mode) ||
            !d.u64("limit_mrps", dc.def.limit_mrps) || !d.u64("hosts", dc.hosts) ||
            !d.opt_bool("keyed", dc.def.keyed)) {
            return false;
        }
        for (const DefinitionCount& prev : out) {
            if (prev.def == dc.def) return d.fail("duplicate definition");
        }
        out.push_back(dc);
    }
    return true;
}

void pack_names(Packer& p, std::string_view key, const std::vector<std::string>& names) {
    p.str(key);
    p.array(names.size());
    for (const std::string& n : names) p.str(n);
}

// The names of the array `arr`, the value of `key` in the map or entry at `where`.
bool names_of(const msgpack_object& arr, const Path& where, std::string_view key,
              std::vector<std::string>& out, std::string& error) {
    out.clear();
    out.reserve(arr.via.array.size);
    for (std::uint32_t i = 0; i < arr.via.array.size; ++i) {
        const msgpack_object& o = arr.via.array.ptr[i];
        std::string_view v;
        if (o.type == MSGPACK_OBJECT_STR && o.via.str.size > 0) {
            v = std::string_view(o.via.str.ptr, o.via.str.size);
        }
        if (o.type != MSGPACK_OBJECT_STR || !valid_name(v)) {
            Path p{&where, key, static_cast<long>(i)};
            error = "invalid name " +
                    (o.type == MSGPACK_OBJECT_STR ? codec::quote(v)
                                                  : std::string(codec::type_name(o))) +
                    " in " + p.render();
            return false;
        }
        out.emplace_back(v);
    }
    return true;
}

bool read_names(const MapReader& r, std::string_view key, std::size_t max,
                std::vector<std::string>& out, std::string& error) {
    const msgpack_object* arr = nullptr;
    return r.array(key, arr, max) && names_of(*arr, r.path(), key, out, error);
}

template <typename T>
bool unique_by_name(const std::vector<T>& v, const char* what, std::string& error) {
    std::vector<std::string_view> names;
    names.reserve(v.size());
    for (const T& x : v) names.emplace_back(x.name);
    std::sort(names.begin(), names.end());
    auto dup = std::adjacent_find(names.begin(), names.end());
    if (dup == names.end()) return true;
    error = std::string("duplicate ") + what + " " + codec::quote(*dup);
    return false;
}

// Usage entries are positional since v 2 (docs/protocol.md "Usage entry"): an array whose
// items are named by their position, a definition the same. The names below are those the
// errors give them, and the keys of the map form that v 1 sends (same order, same items).
constexpr std::string_view kZoneEntryFields[] = {
    "name",  "offered_mrps", "admitted_mrps", "dropped_mrps", "shadow_dropped_mrps",
    "hosts", "rated_hosts",  "definitions",   "host_names",   "keys"};
constexpr std::string_view kRegionEntryFields[] = {
    "name",  "offered_mrps", "admitted_mrps", "dropped_mrps", "shadow_dropped_mrps",
    "hosts", "rated_hosts",  "definitions",   "keys"};
constexpr std::string_view kDefinitionFields[] = {"scope", "mode", "limit_mrps", "hosts", "keyed"};
// Items every entry has (name .. definitions, and host_names in zone_usage); keys is optional.
constexpr std::size_t kEntryRequired = 8;
constexpr std::size_t kDefinitionRequired = 4;

// How a usage message of version `v` writes its entries and definitions.
RowReader::Form usage_form(std::uint64_t v) {
    return v == 1 ? RowReader::Form::Keyed : RowReader::Form::Positional;
}

// Writes one entry (a map in v 1, an array since v 2) of `n` items named by `fields`: `item(i)`
// before item i's value writes its key when the entry is a map.
class EntryPacker {
  public:
    EntryPacker(Packer& p, RowReader::Form form, const std::string_view* fields, std::size_t n)
        : p_(p), keyed_(form == RowReader::Form::Keyed), fields_(fields) {
        if (keyed_) {
            p_.map(n);
        } else {
            p_.array(n);
        }
    }
    Packer& item(std::size_t i) {
        if (keyed_) p_.str(fields_[i]);
        return p_;
    }

  private:
    Packer& p_;
    bool keyed_;
    const std::string_view* fields_;
};

void pack_usage_definitions(Packer& p, RowReader::Form form,
                            const std::vector<DefinitionCount>& defs) {
    p.array(defs.size());
    for (const DefinitionCount& d : defs) {
        // "keyed" only when true.
        EntryPacker e(p, form, kDefinitionFields, d.def.keyed ? 5 : 4);
        e.item(0).str(to_string(d.def.scope));
        e.item(1).str(to_string(d.def.mode));
        e.item(2).u64(d.def.limit_mrps);
        e.item(3).u64(d.hosts);
        if (d.def.keyed) e.item(4).boolean(true);
    }
}

// Usage bucket entries: `with_hosts` for zone_usage (host_names item present).
void pack_usage_buckets(Packer& p, RowReader::Form form, const UsageBucket* first, std::size_t n,
                        bool with_hosts) {
    const std::string_view* fields = with_hosts ? kZoneEntryFields : kRegionEntryFields;
    const std::size_t keys_at = kEntryRequired + (with_hosts ? 1 : 0);
    p.str("buckets");
    p.array(n);
    for (const UsageBucket* it = first; it != first + n; ++it) {
        const UsageBucket& b = *it;
        EntryPacker e(p, form, fields, keys_at + (b.keys.empty() ? 0 : 1));
        e.item(0).str(b.name);
        e.item(1).u64(b.offered_mrps);
        e.item(2).u64(b.admitted_mrps);
        e.item(3).u64(b.dropped_mrps);
        e.item(4).u64(b.shadow_dropped_mrps);
        e.item(5).u64(b.hosts);
        e.item(6).u64(b.rated_hosts);
        pack_usage_definitions(e.item(7), form, b.definitions);
        if (with_hosts) {
            e.item(8).array(b.host_names.size());
            for (const std::string& n : b.host_names) p.str(n);
        }
        if (!b.keys.empty()) {
            e.item(keys_at).array(b.keys.size());
            for (const KeyRate& k : b.keys) codec::pack_key_rate(p, k, true);
        }
    }
}

bool read_usage_definitions(const RowReader& b, std::size_t at, RowReader::Form form,
                            std::vector<DefinitionCount>& out, std::string& error) {
    const msgpack_object* arr = nullptr;
    if (!b.array(at, arr, kMaxDefinitions)) return false;
    out.clear();
    out.reserve(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Path p{&b.path(), "definitions", static_cast<long>(i)};
        RowReader d(arr->via.array.ptr[i], p, kDefinitionFields, std::size(kDefinitionFields),
                    kDefinitionRequired, error, form);
        if (!d.ok()) return false;
        DefinitionCount dc;
        if (!d.scope(0, dc.def.scope) || !d.mode(1, dc.def.mode) || !d.u64(2, dc.def.limit_mrps) ||
            !d.u64(3, dc.hosts) || (d.has(4) && !d.boolean(4, dc.def.keyed))) {
            return false;
        }
        for (const DefinitionCount& prev : out) {
            if (prev.def == dc.def) return d.fail("duplicate definition");
        }
        out.push_back(dc);
    }
    return true;
}

// The host names of a zone_usage entry (item `at`).
bool read_entry_names(const RowReader& b, std::size_t at, std::vector<std::string>& out,
                      std::string& error) {
    const msgpack_object* arr = nullptr;
    return b.array(at, arr, kMaxBucketHostNames) &&
           names_of(*arr, b.path(), b.field(at), out, error);
}

// Host counts no sender could have seen: a usage entry describes at most the message's hosts,
// its definitions and host names at most its own hosts. Checked here because they hold for
// every valid message whoever receives it (a collector counts them itself, one definition per
// host); summed unchecked, they could overflow or outvote a fleet. Rates are not bounded here:
// one host's report can carry any rate, and refusing the zone's whole usage for it would let
// one host silence its zone; the controller's sums of rates saturate instead.
bool check_usage_counts(const RowReader& b, const UsageBucket& u, std::uint64_t message_hosts) {
    if (u.hosts > message_hosts) {
        return b.fail("\"hosts\" " + std::to_string(u.hosts) + " greater than the message's " +
                      "\"hosts\" " + std::to_string(message_hosts));
    }
    std::uint64_t defined = 0;
    for (const DefinitionCount& d : u.definitions) defined = sat_add(defined, d.hosts);
    if (defined > u.hosts) {
        return b.fail("\"definitions\" count " + std::to_string(defined) +
                      " hosts, more than \"hosts\" " + std::to_string(u.hosts));
    }
    if (u.host_names.size() > u.hosts) {
        return b.fail("\"host_names\" lists " + std::to_string(u.host_names.size()) +
                      " hosts, more than \"hosts\" " + std::to_string(u.hosts));
    }
    return true;
}

// The optional "keys" of a usage entry (item `at`): only for a bucket some host defines as
// keyed; each key named by at most the entry's hosts.
bool read_usage_keys(const RowReader& b, std::size_t at, UsageBucket& u, std::string& error) {
    if (!b.has(at)) return true;
    bool keyed = false;
    for (const DefinitionCount& d : u.definitions) keyed = keyed || d.def.keyed;
    if (!keyed) return b.fail("\"keys\" without a \"keyed\" definition");
    Path kp{&b.path(), "keys", -1};
    if (!codec::read_key_rates(b.at(at), kp, kMaxUsageKeys, true, u.keys, error)) return false;
    for (const KeyRate& k : u.keys) {
        if (k.hosts > u.hosts) {
            return b.fail("\"hosts\" " + std::to_string(k.hosts) + " of " +
                          codec::key_name(k.hash) + " greater than the entry's \"hosts\" " +
                          std::to_string(u.hosts));
        }
    }
    return true;
}

bool read_usage_buckets(const MapReader& r, RowReader::Form form, std::vector<UsageBucket>& out,
                        bool with_hosts, std::uint64_t message_hosts, std::string& error) {
    const msgpack_object* arr = nullptr;
    if (!r.array("buckets", arr, kMaxBucketsPerMessage)) return false;
    out.clear();
    out.reserve(arr->via.array.size);
    const std::string_view* fields = with_hosts ? kZoneEntryFields : kRegionEntryFields;
    const std::size_t n_fields =
        with_hosts ? std::size(kZoneEntryFields) : std::size(kRegionEntryFields);
    const std::size_t required = kEntryRequired + (with_hosts ? 1 : 0);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Path p{&r.path(), "buckets", static_cast<long>(i)};
        RowReader b(arr->via.array.ptr[i], p, fields, n_fields, required, error, form);
        if (!b.ok()) return false;
        UsageBucket u;
        if (!b.name(0, u.name) || !b.u64(1, u.offered_mrps) || !b.u64(2, u.admitted_mrps) ||
            !b.u64(3, u.dropped_mrps) || !b.u64(4, u.shadow_dropped_mrps) || !b.u64(5, u.hosts) ||
            !b.u64(6, u.rated_hosts) || !read_usage_definitions(b, 7, form, u.definitions, error)) {
            return false;
        }
        if (u.rated_hosts > u.hosts) return b.fail("\"rated_hosts\" greater than \"hosts\"");
        if (with_hosts && !read_entry_names(b, 8, u.host_names, error)) return false;
        if (!check_usage_counts(b, u, message_hosts) || !read_usage_keys(b, required, u, error)) {
            return false;
        }
        out.push_back(std::move(u));
    }
    return unique_by_name(out, "bucket name", error);
}

// "v" (1 or 2, into `v`) and the type (docs/protocol.md "Versions").
bool usage_header(const MapReader& r, std::string_view type, std::uint64_t& v) {
    if (!r.u64("v", v)) return false;
    if (v < kMinUsageVersion || v > kUsageVersion) {
        return r.fail("bad \"v\" " + std::to_string(v) + " (want " +
                      std::to_string(kMinUsageVersion) + " or " + std::to_string(kUsageVersion) +
                      ")");
    }
    return codec::check_header(r, type, v);
}

// The optional "part" and "parts" keys of a usage message (docs/protocol.md "Usage in parts").
// `head_extra` is the size of what only part 0 may carry (host names, overrides).
bool read_part(const MapReader& r, std::uint32_t& part, std::uint32_t& parts,
               std::size_t head_extra, const char* extra_key) {
    std::optional<std::uint64_t> pt, pts;
    if (!r.opt_u64("part", pt) || !r.opt_u64("parts", pts)) return false;
    if (pt.has_value() != pts.has_value()) return r.fail("\"part\" and \"parts\" go together");
    part = 0;
    parts = 1;
    if (!pts) return true;
    if (*pts < 1 || *pts > kMaxParts) {
        return r.fail("\"parts\" " + std::to_string(*pts) + " out of 1.." +
                      std::to_string(kMaxParts));
    }
    if (*pt >= *pts) {
        return r.fail("\"part\" " + std::to_string(*pt) + " not below \"parts\" " +
                      std::to_string(*pts));
    }
    if (*pt > 0 && head_extra > 0) {
        return r.fail(std::string("\"") + extra_key + "\" in part " + std::to_string(*pt) +
                      " (only part 0 carries them)");
    }
    part = static_cast<std::uint32_t>(*pt);
    parts = static_cast<std::uint32_t>(*pts);
    return true;
}

// ---------------------------------------------------------------------------------------------
// zone_usage

// The optional "quotas" of a usage message (docs/protocol.md "Quotas"): maps, at most
// kMaxQuotas, checked as a report's quota keys are; only part 0 of a set carries them.
bool read_quota_spec(const MapReader& e, QuotaSpec& q) {
    std::string_view period;
    if (!e.u64("n", q.n) || !e.str("period", period) || !e.u64("offset_ms", q.offset_ms)) {
        return false;
    }
    std::optional<Period> p = parse_period(period);
    if (!p) return e.fail("bad \"period\" \"" + std::string(period) + "\"");
    q.period = *p;
    if (q.n == 0) return e.fail("\"n\" 0 (want 1 or more)");
    if (q.offset_ms >= max_offset_ms(q.period)) {
        return e.fail("\"offset_ms\" " + std::to_string(q.offset_ms) + " not shorter than a " +
                      std::string(period));
    }
    return true;
}

template <typename Entry, typename ReadOne>
bool read_quotas(const MapReader& r, std::vector<Entry>& out, std::string& error, ReadOne one) {
    out.clear();
    if (!r.present("quotas")) return true;
    const msgpack_object* arr = nullptr;
    if (!r.array("quotas", arr, kMaxQuotas)) return false;
    out.resize(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Path p{&r.path(), "quotas", static_cast<long>(i)};
        MapReader e(arr->via.array.ptr[i], p, error);
        if (!e.ok() || !e.name("name", out[i].name) || !e.scope("scope", out[i].scope) ||
            !read_quota_spec(e, out[i].spec) || !one(e, out[i])) {
            return false;
        }
    }
    return true;
}

// A quota entry's optional "keys": [h, used] pairs, h > 1, sorted by hash without repeats.
bool read_key_uses(const MapReader& e, std::vector<KeyUse>& out) {
    out.clear();
    if (!e.present("keys")) return true;
    const msgpack_object* arr = nullptr;
    if (!e.array("keys", arr, kMaxQuotaKeys)) return false;
    out.resize(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        if (!codec::uint_pair(arr->via.array.ptr[i], out[i].hash, out[i].used)) {
            return e.fail("bad \"keys[" + std::to_string(i) + "]\" (want [h, used])");
        }
        if (out[i].hash <= 1) {
            return e.fail("bad key hash " + std::to_string(out[i].hash) + " in \"keys\"[" +
                          std::to_string(i) + "] (a key hash is > 1)");
        }
        if (i > 0 && out[i].hash <= out[i - 1].hash) {
            return e.fail("\"keys\" not sorted by hash, or " + codec::key_name(out[i].hash) +
                          " twice");
        }
    }
    return true;
}

// At most kMaxQuotaKeys keys over a whole "quotas" list.
bool quota_keys_bounded(const MapReader& r, const std::vector<QuotaUse>& qs) {
    std::size_t n = 0;
    for (const QuotaUse& q : qs) n += q.keys.size();
    if (n <= kMaxQuotaKeys) return true;
    return r.fail("\"quotas\" list " + std::to_string(n) + " keys, more than " +
                  std::to_string(kMaxQuotaKeys));
}

void pack_quota_spec(Packer& p, const QuotaSpec& q) {
    p.kv("n", q.n);
    p.kv("period", to_string(q.period));
    p.kv("offset_ms", q.offset_ms);
}

void pack_quotas(Packer& p, const std::vector<QuotaDef>& qs) {
    p.str("quotas");
    p.array(qs.size());
    for (const QuotaDef& q : qs) {
        p.map(5);
        p.kv("name", q.name);
        p.kv("scope", to_string(q.scope));
        pack_quota_spec(p, q.spec);
    }
}

void pack_quotas(Packer& p, const std::vector<QuotaUse>& qs) {
    p.str("quotas");
    p.array(qs.size());
    for (const QuotaUse& q : qs) {
        p.map(q.keys.empty() ? 9 : 10);
        p.kv("name", q.name);
        p.kv("scope", to_string(q.scope));
        p.kv("zone", q.zone);
        pack_quota_spec(p, q.spec);
        p.kv("window_ms", q.window_ms);
        p.kv("use_mu", q.use_mu);
        p.kv("at_ms", q.at_ms);
        if (q.keys.empty()) continue;
        p.str("keys");
        p.array(q.keys.size());
        for (const KeyUse& k : q.keys) {
            p.array(2);
            p.u64(k.hash);
            p.u64(k.used);
        }
    }
}

bool decode_zone_usage(std::string_view bytes, ZoneUsage& out, std::string& error) {
    codec::Body body;
    if (!body.parse(bytes, error)) return false;
    Path root;
    MapReader r(body.root(), root, error);
    ZoneUsage m;
    if (!r.ok() || !usage_header(r, "zone_usage", m.v)) return false;
    if (!r.u64("ts_ms", m.ts_ms) || !r.u64("seq", m.seq) || !r.name("source", m.source) ||
        !r.name("region", m.region) || !r.name("zone", m.zone) ||
        !r.u64("interval_ms", m.interval_ms) || !r.u64("hosts", m.hosts) ||
        !r.u64("stale_hosts", m.stale_hosts) ||
        !read_names(r, "host_names", kMaxHostNames, m.host_names, error)) {
        return false;
    }
    if (m.host_names.size() > m.hosts) {
        return r.fail("\"host_names\" lists " + std::to_string(m.host_names.size()) +
                      " hosts, more than \"hosts\" " + std::to_string(m.hosts));
    }
    if (!read_usage_buckets(r, usage_form(m.v), m.buckets, true, m.hosts, error) ||
        !read_quotas(r, m.quotas, error, [](const MapReader&, QuotaDef&) { return true; }) ||
        !read_part(r, m.part, m.parts, m.host_names.size() + m.quotas.size(), "host_names")) {
        return false;
    }
    out = std::move(m);
    return true;
}

// ---------------------------------------------------------------------------------------------
// region_usage

void pack_override(Packer& p, const Override& o) {
    std::size_t n = 4 + (o.limit_mrps ? 1 : 0) + (o.mode ? 1 : 0) + (o.has_match ? 1 : 0);
    p.map(n);
    p.kv("name", o.name);
    if (o.limit_mrps) p.kv("limit_mrps", *o.limit_mrps);
    if (o.mode) p.kv("mode", to_string(*o.mode));
    if (o.has_match) {
        p.str("match");
        codec::pack_match(p, o.match);
    }
    p.kv("expires_ms", o.expires_ms);
    p.kv("set_ms", o.set_ms);
    p.kv("origin", o.origin);
}

bool read_overrides(const MapReader& r, std::vector<Override>& out, std::string& error) {
    const msgpack_object* arr = nullptr;
    if (!r.array("overrides", arr, kMaxOverrides)) return false;
    out.clear();
    out.reserve(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Path p{&r.path(), "overrides", static_cast<long>(i)};
        MapReader e(arr->via.array.ptr[i], p, error);
        if (!e.ok()) return false;
        Override o;
        if (!e.name("name", o.name) || !e.opt_u64("limit_mrps", o.limit_mrps) ||
            !e.opt_mode("mode", o.mode) || !opt_match(e, o.has_match, o.match, error) ||
            !e.u64("expires_ms", o.expires_ms) || !e.u64("set_ms", o.set_ms) ||
            !e.name("origin", o.origin)) {
            return false;
        }
        out.push_back(std::move(o));
    }
    return unique_by_name(out, "override", error);
}

bool decode_region_usage(std::string_view bytes, RegionUsage& out, std::string& error) {
    codec::Body body;
    if (!body.parse(bytes, error)) return false;
    Path root;
    MapReader r(body.root(), root, error);
    RegionUsage m;
    if (!r.ok() || !usage_header(r, "region_usage", m.v)) return false;
    if (!r.u64("ts_ms", m.ts_ms) || !r.u64("seq", m.seq) || !r.name("source", m.source) ||
        !r.name("region", m.region) || !r.u64("interval_ms", m.interval_ms) ||
        !r.u64("zones", m.zones) || !r.u64("hosts", m.hosts) ||
        !r.str("limits_digest", m.limits_digest, kMaxDigestLen) ||
        !read_usage_buckets(r, usage_form(m.v), m.buckets, false, m.hosts, error) ||
        !read_overrides(r, m.overrides, error) ||
        !read_quotas(r, m.quotas, error,
                     [](const MapReader& e, QuotaUse& q) {
                         return e.name_or_empty("zone", q.zone) &&
                                e.u64("window_ms", q.window_ms) && e.u64("use_mu", q.use_mu) &&
                                e.u64("at_ms", q.at_ms) && read_key_uses(e, q.keys);
                     }) ||
        !quota_keys_bounded(r, m.quotas) ||
        !read_part(r, m.part, m.parts, m.overrides.size() + m.quotas.size(), "overrides")) {
        return false;
    }
    out = std::move(m);
    return true;
}

// ---------------------------------------------------------------------------------------------
// admin_request

bool decode_admin_request(std::string_view bytes, AdminRequest& out, std::string& error) {
    codec::Body body;
    if (!body.parse(bytes, error)) return false;
    Path root;
    MapReader r(body.root(), root, error);
    if (!r.ok() || !codec::check_header(r, "admin_request")) return false;
    AdminRequest m;
    std::string op;
    if (!r.u64("ts_ms", m.ts_ms) || !r.u64("seq", m.seq) || !r.str("op", op, 16)) return false;
    std::optional<AdminOp> parsed = parse_admin_op(op);
    if (!parsed) return r.fail("bad \"op\" " + codec::quote(op));
    m.op = *parsed;
    std::optional<std::uint64_t> for_ms, top;
    const msgpack_object* bucket = nullptr;
    if (!r.find("bucket", bucket) || (bucket && !r.name_or_empty("bucket", m.bucket)) ||
        !r.opt_bool("hosts", m.hosts) || !r.opt_u64("limit_mrps", m.limit_mrps) ||
        !r.opt_mode("mode", m.mode) || !r.opt_u64("for_ms", for_ms) ||
        !r.opt_bool("clear_limit", m.clear_limit) || !r.opt_bool("clear_mode", m.clear_mode) ||
        !opt_match(r, m.has_match, m.match, error) || !r.opt_u64("top", top)) {
        return false;
    }
    if (top && (*top < 1 || *top > kMaxAdminTopKeys)) {
        return r.fail("\"top\" " + std::to_string(*top) + " out of 1.." +
                      std::to_string(kMaxAdminTopKeys));
    }
    m.top = static_cast<std::uint32_t>(top.value_or(0));
    m.for_ms = for_ms.value_or(0);
    bool needs_bucket = m.op != AdminOp::Status && m.op != AdminOp::Buckets;
    if (needs_bucket && m.bucket.empty()) return r.fail("missing \"bucket\" for op " + op);
    if (m.op == AdminOp::Add && !m.has_match) return r.fail("missing \"match\" for op add");
    out = std::move(m);
    return true;
}

// ---------------------------------------------------------------------------------------------
// admin_reply

void pack_bucket_status(Packer& p, const BucketStatus& b) {
    p.map(16 + (b.has_match ? 1 : 0) + (b.candidate_limit_mrps ? 2 : 0) + (b.keyed ? 2 : 0) +
          (b.dropping_since_ms ? 1 : 0) + (b.zone_load.empty() ? 0 : 1) + (b.quota ? 3 : 0) +
          (b.key_quota ? 3 : 0));
    p.kv("name", b.name);
    p.kv("scope", to_string(b.scope));
    p.kv("region", b.region);
    p.kv("zone", b.zone);
    p.kv("offered_mrps", b.offered_mrps);
    p.kv("admitted_mrps", b.admitted_mrps);
    p.kv("shadow_dropped_mrps", b.shadow_dropped_mrps);
    p.kv("limit_mrps", b.limit_mrps);
    p.kv("ratio_ppm", b.ratio_ppm);
    p.kv("mode", to_string(b.mode));
    p.kv("limit_source", b.limit_source);
    p.kv("mode_source", b.mode_source);
    p.kv("expires_ms", b.expires_ms);
    p.kv("hosts", b.hosts);
    pack_names(p, "host_names", b.host_names);
    pack_definitions(p, b.definitions);
    if (b.has_match) {
        p.str("match");
        codec::pack_match(p, b.match);
    }
    if (b.candidate_limit_mrps) {
        p.kv("candidate_limit_mrps", *b.candidate_limit_mrps);
        p.kv("candidate_would_drop_mrps", b.candidate_would_drop_mrps);
    }
    if (b.keyed) {
        p.kv_bool("keyed", true);
        p.kv("keys_limited", b.keys_limited);
    }
    if (b.dropping_since_ms) p.kv("dropping_since_ms", b.dropping_since_ms);
    if (b.quota) {
        p.kv("quota", b.quota);
        p.kv("quota_used", b.quota_used);
        p.kv("quota_reset_ms", b.quota_reset_ms);
    }
    if (b.key_quota) {
        p.kv("key_quota", b.key_quota);
        p.kv("key_quota_reset_ms", b.key_quota_reset_ms);
        p.kv("keys_used_up", b.keys_used_up);
    }
    if (!b.zone_load.empty()) {
        p.str("zone_load");
        p.array(b.zone_load.size());
        for (const ZoneLoad& z : b.zone_load) {
            p.map(3);
            p.kv("zone", z.zone);
            p.kv("offered_mrps", z.offered_mrps);
            p.kv("hosts", z.hosts);
        }
    }
}

bool read_zone_load(const MapReader& r, std::vector<ZoneLoad>& out, std::string& error) {
    out.clear();
    if (!r.present("zone_load")) return true;
    const msgpack_object* arr = nullptr;
    if (!r.array("zone_load", arr, kMaxStatusEntries)) return false;
    out.reserve(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Path p{&r.path(), "zone_load", static_cast<long>(i)};
        MapReader z(arr->via.array.ptr[i], p, error);
        ZoneLoad l;
        if (!z.ok() || !z.name("zone", l.zone) || !z.u64("offered_mrps", l.offered_mrps) ||
            !z.u64("hosts", l.hosts)) {
            return false;
        }
        out.push_back(std::move(l));
    }
    return true;
}

// A KeyStatus: the instance's fields and the key entry's, in one map.
void pack_key_status(Packer& p, const KeyStatus& k) {
    p.map(10 + (k.key.text.empty() ? 0 : 1) + (k.key.used ? 1 : 0));
    p.kv("name", k.name);
    p.kv("scope", to_string(k.scope));
    p.kv("region", k.region);
    p.kv("zone", k.zone);
    p.kv("limit_mrps", k.limit_mrps);
    p.kv("ratio_ppm", k.ratio_ppm);
    p.kv("h", k.key.hash);
    if (!k.key.text.empty()) p.kv("k", k.key.text);
    p.kv("offered_mrps", k.key.offered_mrps);
    p.kv("dropped_mrps", k.key.dropped_mrps);
    p.kv("hosts", k.key.hosts);
    if (k.key.used) p.kv("used", k.key.used);  // a per-key quota's use in the window
}

bool read_key_status(const msgpack_object& o, const Path& path, KeyStatus& k, std::string& error) {
    MapReader r(o, path, error);
    if (!r.ok()) return false;
    std::uint64_t ratio = 0;
    if (!r.name("name", k.name) || !r.scope("scope", k.scope) ||
        !r.name_or_empty("region", k.region) || !r.name_or_empty("zone", k.zone) ||
        !r.u64("limit_mrps", k.limit_mrps) || !r.u64("ratio_ppm", ratio) ||
        !codec::read_key_rate(o, path, true, k.key, error)) {
        return false;
    }
    if (ratio > 1000000) {
        return r.fail("\"ratio_ppm\" " + std::to_string(ratio) + " of " +
                      codec::key_name(k.key.hash) + " out of range");
    }
    k.ratio_ppm = static_cast<std::uint32_t>(ratio);
    return true;
}

bool read_bucket_status(const msgpack_object& o, const Path& path, BucketStatus& b,
                        std::string& error) {
    MapReader r(o, path, error);
    if (!r.ok()) return false;
    std::uint64_t ratio = 0;
    if (!r.name("name", b.name) || !r.scope("scope", b.scope) ||
        !r.name_or_empty("region", b.region) || !r.name_or_empty("zone", b.zone) ||
        !r.u64("offered_mrps", b.offered_mrps) || !r.u64("admitted_mrps", b.admitted_mrps) ||
        !r.u64("shadow_dropped_mrps", b.shadow_dropped_mrps) ||
        !r.u64("limit_mrps", b.limit_mrps) || !r.u64("ratio_ppm", ratio) ||
        !r.mode("mode", b.mode) || !r.str("limit_source", b.limit_source, 16) ||
        !r.str("mode_source", b.mode_source, 16) || !r.u64("expires_ms", b.expires_ms) ||
        !r.u64("hosts", b.hosts) ||
        !read_names(r, "host_names", kMaxHostNames, b.host_names, error) ||
        !read_definitions(r, b.definitions, error) || !opt_match(r, b.has_match, b.match, error) ||
        !r.opt_u64("candidate_limit_mrps", b.candidate_limit_mrps)) {
        return false;
    }
    if (b.candidate_limit_mrps) {
        std::optional<std::uint64_t> would_drop;
        if (!r.opt_u64("candidate_would_drop_mrps", would_drop)) return false;
        b.candidate_would_drop_mrps = would_drop.value_or(0);
    }
    if (ratio > 1000000) return r.fail("\"ratio_ppm\" " + std::to_string(ratio) + " out of range");
    b.ratio_ppm = static_cast<std::uint32_t>(ratio);
    std::optional<std::uint64_t> limited;
    if (!r.opt_bool("keyed", b.keyed) || !r.opt_u64("keys_limited", limited)) return false;
    if (limited && !b.keyed) return r.fail("\"keys_limited\" without \"keyed\"");
    b.keys_limited = limited.value_or(0);
    std::optional<std::uint64_t> since;
    if (!r.opt_u64("dropping_since_ms", since)) return false;
    b.dropping_since_ms = since.value_or(0);
    std::optional<std::uint64_t> quota, used, reset;
    if (!r.opt_u64("quota", quota) || !r.opt_u64("quota_used", used) ||
        !r.opt_u64("quota_reset_ms", reset)) {
        return false;
    }
    if ((quota.value_or(0) != 0) != (used && reset)) {
        return r.fail("\"quota\", \"quota_used\" and \"quota_reset_ms\" go together");
    }
    b.quota = quota.value_or(0);
    b.quota_used = used.value_or(0);
    b.quota_reset_ms = reset.value_or(0);
    std::optional<std::uint64_t> key_quota, key_reset, used_up;
    if (!r.opt_u64("key_quota", key_quota) || !r.opt_u64("key_quota_reset_ms", key_reset) ||
        !r.opt_u64("keys_used_up", used_up)) {
        return false;
    }
    if ((key_quota.value_or(0) != 0) != (key_reset && used_up)) {
        return r.fail("\"key_quota\", \"key_quota_reset_ms\" and \"keys_used_up\" go together");
    }
    if (key_quota && !b.keyed) return r.fail("\"key_quota\" without \"keyed\"");
    b.key_quota = key_quota.value_or(0);
    b.key_quota_reset_ms = key_reset.value_or(0);
    b.keys_used_up = used_up.value_or(0);
    return read_zone_load(r, b.zone_load, error);
}

bool decode_admin_reply(std::string_view bytes, AdminReply& out, std::string& error) {
    codec::Body body;
    if (!body.parse(bytes, error)) return false;
    Path root;
    MapReader r(body.root(), root, error);
    if (!r.ok() || !codec::check_header(r, "admin_reply")) return false;
    AdminReply m;
    const msgpack_object* arr = nullptr;
    const msgpack_object* limits = nullptr;
    if (!r.u64("ts_ms", m.ts_ms) || !r.u64("seq", m.seq) || !r.name("source", m.source) ||
        !r.name("region", m.region) || !r.boolean("ok", m.ok) ||
        !r.str("error", m.error, kMaxErrorLen) || !r.u64("interval_ms", m.interval_ms) ||
        !r.u64("ttl_ms", m.ttl_ms) || !r.array("buckets", arr, kMaxStatusEntries)) {
        return false;
    }
    m.buckets.resize(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Path p{&root, "buckets", static_cast<long>(i)};
        if (!read_bucket_status(arr->via.array.ptr[i], p, m.buckets[i], error)) return false;
    }
    if (!r.array("zones", arr, kMaxStatusEntries)) return false;
    m.zones.resize(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Path p{&root, "zones", static_cast<long>(i)};
        MapReader z(arr->via.array.ptr[i], p, error);
        ZoneStatus& s = m.zones[i];
        if (!z.ok() || !z.name("zone", s.zone) || !z.name("source", s.source) ||
            !z.u64("hosts", s.hosts) || !z.u64("stale_hosts", s.stale_hosts) ||
            !z.u64("age_ms", s.age_ms) || !z.boolean("fresh", s.fresh) ||
            !opt_usage_v(z, s.usage_v)) {
            return false;
        }
    }
    if (!r.array("peers", arr, kMaxStatusEntries)) return false;
    m.peers.resize(arr->via.array.size);
    for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
        Path p{&root, "peers", static_cast<long>(i)};
        MapReader z(arr->via.array.ptr[i], p, error);
        PeerStatus& s = m.peers[i];
        if (!z.ok() || !z.name("source", s.source) || !z.name("region", s.region) ||
            !z.u64("age_ms", s.age_ms) || !z.str("limits_digest", s.limits_digest, kMaxDigestLen) ||
            !z.boolean("fresh", s.fresh) || !opt_usage_v(z, s.usage_v)) {
            return false;
        }
    }
    if (!r.map("limits", limits)) return false;
    Path lp{&root, "limits", -1};
    MapReader l(*limits, lp, error);
    if (!l.ok() || !l.str("file", m.limits.file, 4096) || !l.boolean("ok", m.limits.ok) ||
        !l.str("error", m.limits.error, kMaxErrorLen) ||
        !l.str("digest", m.limits.digest, kMaxDigestLen) ||
        !l.u64("loaded_ms", m.limits.loaded_ms) || !l.u64("buckets", m.limits.buckets)) {
        return false;
    }
    // Optional: controllers before limits versions and etcd do not send them.
    if (l.present("version") && !l.str("version", m.limits.version, kMaxLimitsVersionLen))
        return false;
    if (l.present("store_error") && !l.str("store_error", m.limits.store_error, kMaxErrorLen))
        return false;
    // Optional: op keys only, and controllers before keyed buckets do not send it.
    if (r.present("keys")) {
        if (!r.array("keys", arr, kMaxStatusEntries)) return false;
        m.keys.resize(arr->via.array.size);
        for (std::uint32_t i = 0; i < arr->via.array.size; ++i) {
            Path p{&root, "keys", static_cast<long>(i)};
            if (!read_key_status(arr->via.array.ptr[i], p, m.keys[i], error)) return false;
        }
    }
    out = std::move(m);
    return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API

std::string_view to_string(AdminOp op) {
    switch (op) {
        case AdminOp::Status: return "status";
        case AdminOp::Buckets: return "buckets";
        case AdminOp::Set: return "set";
        case AdminOp::Clear: return "clear";
        case AdminOp::Add: return "add";
        case AdminOp::Remove: return "remove";
        case AdminOp::Keys: return "keys";
    }
    return "?";
}

std::optional<AdminOp> parse_admin_op(std::string_view s) {
    for (AdminOp op : {AdminOp::Status, AdminOp::Buckets, AdminOp::Set, AdminOp::Clear,
                       AdminOp::Add, AdminOp::Remove, AdminOp::Keys}) {
        if (to_string(op) == s) return op;
    }
    return std::nullopt;
}

std::string check_match(const RuntimeMatch& m) {
    if (m.caller_kind != MatchKind::Exact && m.caller_kind != MatchKind::Prefix) {
        return "caller match must be exact or prefix";
    }
    if (m.procedure_kind == MatchKind::Any) return "procedure match kind missing";
    if (m.caller.size() > kMaxMatchValueLen || m.procedure.size() > kMaxMatchValueLen) {
        return "match value longer than " + std::to_string(kMaxMatchValueLen) + " bytes";
    }
    if (m.caller.empty() && m.procedure.empty()) {
        return "match needs a caller or a procedure";
    }
    if (m.procedure_kind == MatchKind::Regex) return check_regex(m.procedure);
    return {};
}

namespace {
// A whole message (parts = 1) has no "part"/"parts" keys: its bytes are those of a sender
// that predates parts.
void pack_part(Packer& p, std::uint32_t part, std::uint32_t parts) {
    if (parts <= 1) return;
    p.kv("part", part);
    p.kv("parts", parts);
}
}  // namespace

void encode(const ZoneUsage& m, std::string& out) {
    codec::encode_usage(m, m.buckets.data(), m.buckets.size(), out);
}

void encode(const RegionUsage& m, std::string& out) {
    codec::encode_usage(m, m.buckets.data(), m.buckets.size(), out);
}

namespace codec {

void encode_usage(const ZoneUsage& m, const UsageBucket* first, std::size_t n, std::string& out) {
    Packer p(out);
    p.map((m.parts > 1 ? 14 : 12) + (m.quotas.empty() ? 0 : 1));
    p.kv("v", m.v == 1 ? 1 : kUsageVersion);
    p.kv("type", "zone_usage");
    p.kv("ts_ms", m.ts_ms);
    p.kv("seq", m.seq);
    p.kv("source", m.source);
    p.kv("region", m.region);
    p.kv("zone", m.zone);
    p.kv("interval_ms", m.interval_ms);
    p.kv("hosts", m.hosts);
    p.kv("stale_hosts", m.stale_hosts);
    pack_names(p, "host_names", m.host_names);
    pack_usage_buckets(p, usage_form(m.v), first, n, true);
    if (!m.quotas.empty()) pack_quotas(p, m.quotas);
    pack_part(p, m.part, m.parts);
    p.finish();
}

void encode_usage(const RegionUsage& m, const UsageBucket* first, std::size_t n, std::string& out) {
    Packer p(out);
    p.map((m.parts > 1 ? 14 : 12) + (m.quotas.empty() ? 0 : 1));
    p.kv("v", m.v == 1 ? 1 : kUsageVersion);
    p.kv("type", "region_usage");
    p.kv("ts_ms", m.ts_ms);
    p.kv("seq", m.seq);
    p.kv("source", m.source);
    p.kv("region", m.region);
    p.kv("interval_ms", m.interval_ms);
    p.kv("zones", m.zones);
    p.kv("hosts", m.hosts);
    p.kv("limits_digest", m.limits_digest);
    pack_usage_buckets(p, usage_form(m.v), first, n, false);
    p.str("overrides");
    p.array(m.overrides.size());
    for (const Override& o : m.overrides) pack_override(p, o);
    if (!m.quotas.empty()) pack_quotas(p, m.quotas);
    pack_part(p, m.part, m.parts);
    p.finish();
}

}  // namespace codec

void encode(const AdminRequest& m, std::string& out) {
    std::size_t n = 7 + (m.limit_mrps ? 1 : 0) + (m.mode ? 1 : 0) + (m.for_ms ? 1 : 0) +
                    (m.clear_limit ? 1 : 0) + (m.clear_mode ? 1 : 0) + (m.has_match ? 1 : 0) +
                    (m.top ? 1 : 0);
    Packer p(out);
    p.map(n);
    p.kv("v", kVersion);
    p.kv("type", "admin_request");
    p.kv("ts_ms", m.ts_ms);
    p.kv("seq", m.seq);
    p.kv("op", to_string(m.op));
    p.kv("bucket", m.bucket);
    p.kv_bool("hosts", m.hosts);
    if (m.limit_mrps) p.kv("limit_mrps", *m.limit_mrps);
    if (m.mode) p.kv("mode", to_string(*m.mode));
    if (m.for_ms) p.kv("for_ms", m.for_ms);
    if (m.clear_limit) p.kv_bool("clear_limit", true);
    if (m.clear_mode) p.kv_bool("clear_mode", true);
    if (m.has_match) {
        p.str("match");
        codec::pack_match(p, m.match);
    }
    if (m.top) p.kv("top", m.top);
    p.finish();
}

void encode(const AdminReply& m, std::string& out) {
    Packer p(out);
    p.map(14 + (m.keys.empty() ? 0 : 1));
    p.kv("v", kVersion);
    p.kv("type", "admin_reply");
    p.kv("ts_ms", m.ts_ms);
    p.kv("seq", m.seq);
    p.kv("source", m.source);
    p.kv("region", m.region);
    p.kv_bool("ok", m.ok);
    p.kv("error", m.error);
    p.kv("interval_ms", m.interval_ms);
    p.kv("ttl_ms", m.ttl_ms);
    p.str("buckets");
    p.array(m.buckets.size());
    for (const BucketStatus& b : m.buckets) pack_bucket_status(p, b);
    p.str("zones");
    p.array(m.zones.size());
    for (const ZoneStatus& z : m.zones) {
        p.map(z.usage_v ? 7 : 6);
        p.kv("zone", z.zone);
        p.kv("source", z.source);
        p.kv("hosts", z.hosts);
        p.kv("stale_hosts", z.stale_hosts);
        p.kv("age_ms", z.age_ms);
        p.kv_bool("fresh", z.fresh);
        if (z.usage_v) p.kv("usage_v", z.usage_v);
    }
    p.str("peers");
    p.array(m.peers.size());
    for (const PeerStatus& s : m.peers) {
        p.map(s.usage_v ? 6 : 5);
        p.kv("source", s.source);
        p.kv("region", s.region);
        p.kv("age_ms", s.age_ms);
        p.kv("limits_digest", s.limits_digest);
        p.kv_bool("fresh", s.fresh);
        if (s.usage_v) p.kv("usage_v", s.usage_v);
    }
    p.str("limits");
    p.map(8);
    p.kv("file", m.limits.file);
    p.kv_bool("ok", m.limits.ok);
    p.kv("error", m.limits.error);
    p.kv("digest", m.limits.digest);
    p.kv("loaded_ms", m.limits.loaded_ms);
    p.kv("buckets", m.limits.buckets);
    p.kv("version", m.limits.version);
    p.kv("store_error", m.limits.store_error);
    if (!m.keys.empty()) {
        p.str("keys");
        p.array(m.keys.size());
        for (const KeyStatus& k : m.keys) pack_key_status(p, k);
    }
    p.finish();
}

bool decode(std::string_view bytes, ZoneUsage& m, std::string& error) {
    return codec::guarded([&] { return decode_zone_usage(bytes, m, error); }, error);
}
bool decode(std::string_view bytes, RegionUsage& m, std::string& error) {
    return codec::guarded([&] { return decode_region_usage(bytes, m, error); }, error);
}
bool decode(std::string_view bytes, AdminRequest& m, std::string& error) {
    return codec::guarded([&] { return decode_admin_request(bytes, m, error); }, error);
}
bool decode(std::string_view bytes, AdminReply& m, std::string& error) {
    return codec::guarded([&] { return decode_admin_reply(bytes, m, error); }, error);
}

}  // namespace grl::wire
