// See report_reader.h. One recursive-descent pass over the msgpack bytes with bounds checks on
// every read; the nesting limit and every rule mirror wire.cpp's two-pass decoder.
#include "grl/wire/report_reader.h"

#include <algorithm>
#include <cstring>

namespace grl::wire {

namespace {

constexpr std::size_t kMaxDepth = 16;  // nested non-empty containers, as in wire.cpp

enum class Kind : std::uint8_t { Nil, Bool, UInt, NegInt, Float, Str, Bin, Ext, Arr, Map };

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::Nil: return "nil";
        case Kind::Bool: return "bool";
        case Kind::UInt: return "uint";
        case Kind::NegInt: return "int";
        case Kind::Float: return "float";
        case Kind::Str: return "str";
        case Kind::Bin: return "bin";
        case Kind::Ext: return "ext";
        case Kind::Arr: return "array";
        case Kind::Map: return "map";
    }
    return "?";
}

struct Head {
    Kind kind = Kind::Nil;
    std::uint64_t u = 0;   // UInt value, or element count of Arr/Map (pairs for Map)
    std::string_view str;  // Str payload
};

class Reader {
  public:
    Reader(std::string_view b, std::string& error)
        : p_(reinterpret_cast<const unsigned char*>(b.data())), n_(b.size()), error_(error) {}

    bool fail(const char* what) {
        error_ = what;
        return false;
    }
    bool fail(std::string what) {
        error_ = std::move(what);
        return false;
    }
    bool at_end() const { return pos_ == n_; }
    std::size_t mark() const { return pos_; }
    void reset(std::size_t pos) { pos_ = pos; }
    // Consumes `lit` when the next bytes are exactly it.
    bool literal(std::string_view lit) {
        if (n_ - pos_ < lit.size() || std::memcmp(p_ + pos_, lit.data(), lit.size()) != 0)
            return false;
        pos_ += lit.size();
        return true;
    }

    // Fast paths: consume and return true only for the one encoding they handle.
    bool fast_fixstr(std::string_view& out) {
        if (pos_ >= n_) return false;
        unsigned char tag = p_[pos_];
        if ((tag & 0xe0) != 0xa0) return false;
        std::size_t len = tag & 0x1fu;
        if (n_ - pos_ - 1 < len) return false;  // let head() report the truncation
        out = std::string_view(reinterpret_cast<const char*>(p_ + pos_ + 1), len);
        pos_ += 1 + len;
        return true;
    }
    bool fast_uint(std::uint64_t& out) {
        if (pos_ >= n_) return false;
        unsigned char tag = p_[pos_];
        if (tag <= 0x7f) {
            out = tag;
            ++pos_;
            return true;
        }
        std::size_t bytes = tag == 0xcc   ? 1
                            : tag == 0xcd ? 2
                            : tag == 0xce ? 4
                            : tag == 0xcf ? 8
                                          : 0;
        if (bytes == 0 || n_ - pos_ - 1 < bytes) return false;
        std::uint64_t v = 0;
        for (std::size_t i = 1; i <= bytes; ++i) v = (v << 8) | p_[pos_ + i];
        out = v;
        pos_ += 1 + bytes;
        return true;
    }

    // Reads the next object's header and any scalar payload. Containers' children follow.
    bool head(Head& h) {
        if (pos_ >= n_) return fail("truncated message");
        const unsigned char tag = p_[pos_++];
        if ((tag & 0xe0) == 0xa0) return string(h, Kind::Str, tag & 0x1fu);  // fixstr: keys
        if (tag <= 0x7f) return uint_value(h, tag);
        if (tag >= 0xe0) return set(h, Kind::NegInt);
        if (tag <= 0x8f) return container(h, Kind::Map, tag & 0x0fu);
        if (tag <= 0x9f) return container(h, Kind::Arr, tag & 0x0fu);
        if (tag <= 0xbf) return string(h, Kind::Str, tag & 0x1fu);
        std::uint64_t v = 0;
        switch (tag) {
            case 0xc0: return set(h, Kind::Nil);
            case 0xc2:
            case 0xc3: h.u = tag == 0xc3; return set(h, Kind::Bool);
            case 0xc1: return fail("malformed msgpack");
            case 0xc4: return load(1, v) && string(h, Kind::Bin, v);
            case 0xc5: return load(2, v) && string(h, Kind::Bin, v);
            case 0xc6: return load(4, v) && string(h, Kind::Bin, v);
            case 0xd9: return load(1, v) && string(h, Kind::Str, v);
            case 0xda: return load(2, v) && string(h, Kind::Str, v);
            case 0xdb: return load(4, v) && string(h, Kind::Str, v);
            case 0xc7: return load(1, v) && skip(v + 1) && set(h, Kind::Ext);
            case 0xc8: return load(2, v) && skip(v + 1) && set(h, Kind::Ext);
            case 0xc9: return load(4, v) && skip(v + 1) && set(h, Kind::Ext);
            case 0xca: return skip(4) && set(h, Kind::Float);
            case 0xcb: return skip(8) && set(h, Kind::Float);
            case 0xcc: return load(1, v) && uint_value(h, v);
            case 0xcd: return load(2, v) && uint_value(h, v);
            case 0xce: return load(4, v) && uint_value(h, v);
            case 0xcf: return load(8, v) && uint_value(h, v);
            case 0xd0: return load(1, v) && signed_value(h, v, 1);
            case 0xd1: return load(2, v) && signed_value(h, v, 2);
            case 0xd2: return load(4, v) && signed_value(h, v, 4);
            case 0xd3: return load(8, v) && signed_value(h, v, 8);
            case 0xd4: return skip(2) && set(h, Kind::Ext);
            case 0xd5: return skip(3) && set(h, Kind::Ext);
            case 0xd6: return skip(5) && set(h, Kind::Ext);
            case 0xd7: return skip(9) && set(h, Kind::Ext);
            case 0xd8: return skip(17) && set(h, Kind::Ext);
            case 0xdc: return load(2, v) && container(h, Kind::Arr, v);
            case 0xdd: return load(4, v) && container(h, Kind::Arr, v);
            case 0xde: return load(2, v) && container(h, Kind::Map, v);
            case 0xdf: return load(4, v) && container(h, Kind::Map, v);
            default: return fail("malformed msgpack");
        }
    }

    // Skips one complete object; `depth` = non-empty containers already open.
    bool skip_object(std::size_t depth) {
        Head h;
        if (!head(h)) return false;
        return skip_children(h, depth);
    }

    // Skips the children of a container whose header was just read.
    bool skip_children(const Head& h, std::size_t depth) {
        if ((h.kind != Kind::Arr && h.kind != Kind::Map) || h.u == 0) return true;
        if (depth >= kMaxDepth) return fail("message nested too deeply");
        std::uint64_t items = h.kind == Kind::Map ? 2 * h.u : h.u;
        for (std::uint64_t i = 0; i < items; ++i) {
            if (!skip_object(depth + 1)) return false;
        }
        return true;
    }

  private:
    bool set(Head& h, Kind k) {
        h.kind = k;
        return true;
    }
    bool load(std::size_t bytes, std::uint64_t& v) {
        if (n_ - pos_ < bytes) return fail("truncated message");
        v = 0;
        for (std::size_t i = 0; i < bytes; ++i) v = (v << 8) | p_[pos_ + i];
        pos_ += bytes;
        return true;
    }
    bool skip(std::uint64_t bytes) {
        if (n_ - pos_ < bytes) return fail("truncated message");
        pos_ += static_cast<std::size_t>(bytes);
        return true;
    }
    bool uint_value(Head& h, std::uint64_t v) {
        h.kind = Kind::UInt;
        h.u = v;
        return true;
    }
    bool signed_value(Head& h, std::uint64_t raw, std::size_t bytes) {
        std::uint64_t sign = std::uint64_t{1} << (8 * bytes - 1);
        if (raw & sign) return set(h, Kind::NegInt);
        return uint_value(h, raw);
    }
    bool string(Head& h, Kind k, std::uint64_t len) {
        if (n_ - pos_ < len) return fail("truncated message");
        h.kind = k;
        h.str = std::string_view(reinterpret_cast<const char*>(p_ + pos_),
                                 static_cast<std::size_t>(len));
        pos_ += static_cast<std::size_t>(len);
        return true;
    }
    bool container(Head& h, Kind k, std::uint64_t count) {
        // Every element needs at least one byte: a count beyond the bytes left is truncated.
        std::uint64_t items = k == Kind::Map ? 2 * count : count;
        if (items > n_ - pos_) return fail("truncated message");
        h.kind = k;
        h.u = count;
        return true;
    }

    const unsigned char* p_;
    std::size_t n_;
    std::size_t pos_ = 0;
    std::string& error_;
};

// Field helpers: each reads the value of a known key. The common encodings (fixstr, fixint,
// uint 8..64) are read inline; anything else goes through Reader::head.
bool want(Reader& r, const Head& h, Kind k, std::string_view key) {
    if (h.kind == k) return true;
    return r.fail("bad \"" + std::string(key) + "\" type " + kind_name(h.kind) + " (want " +
                  kind_name(k) + ")");
}

bool read_uint(Reader& r, std::string_view key, std::uint64_t& out) {
    if (r.fast_uint(out)) return true;
    Head h;
    if (!r.head(h) || !want(r, h, Kind::UInt, key)) return false;
    out = h.u;
    return true;
}

bool read_str(Reader& r, std::string_view key, std::string_view& out) {
    if (r.fast_fixstr(out)) return true;
    Head h;
    if (!r.head(h) || !want(r, h, Kind::Str, key)) return false;
    out = h.str;
    return true;
}

// valid_name() (bucket_types.h) by table lookup: [A-Za-z0-9_.:-]{1,63}.
struct NameChars {
    bool ok[256] = {};
    NameChars() {
        for (int c = 0; c < 256; ++c) {
            ok[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == ':' || c == '-';
        }
    }
};
const NameChars kNameChars;

inline bool name_ok(std::string_view s) {
    if (s.empty() || s.size() > kMaxNameLen) return false;
    for (char c : s) {
        if (!kNameChars.ok[static_cast<unsigned char>(c)]) return false;
    }
    return true;
}

bool read_name(Reader& r, std::string_view key, std::string_view& out) {
    if (!read_str(r, key, out)) return false;
    if (!name_ok(out)) return r.fail("invalid \"" + std::string(key) + "\"");
    return true;
}

// Reads a map's key: it must be a string.
bool read_key(Reader& r, std::string_view& key) {
    if (r.fast_fixstr(key)) return true;
    Head h;
    if (!r.head(h)) return false;
    if (h.kind != Kind::Str) return r.fail(std::string(kind_name(h.kind)) + " key in map");
    key = h.str;
    return true;
}

// Marks key `bit` as seen; false on a duplicate.
inline bool seen(Reader& r, std::uint32_t& mask, int bit, std::string_view key) {
    if (__builtin_expect((mask & (1u << bit)) != 0, 0)) {
        return r.fail("duplicate key \"" + std::string(key) + "\"");
    }
    mask |= 1u << bit;
    return true;
}

enum BucketKey {
    kBName,
    kBScope,
    kBMode,
    kBLimit,
    kBOffered,
    kBAdmitted,
    kBDropped,
    kBShadow,
    kBKeyed,  // optional
    kBKeys,   // optional, keyed only
    kBQuota,  // optional, the three together
    kBQuotaPeriod,
    kBQuotaOffset,
    kBucketKeys
};
constexpr int kRequiredBucketKeys = kBKeyed;
constexpr std::string_view kBucketKeyNames[kBucketKeys] = {
    "name",           "scope", "mode", "limit_mrps", "offered",      "admitted",       "dropped",
    "shadow_dropped", "keyed", "keys", "quota",      "quota_period", "quota_offset_ms"};

// The index of a bucket entry key, or -1: dispatch on length first (this is the hot loop of
// the collector: 8 keys per bucket, 100 buckets per report, 10,000 reports per second).
template <std::size_t N>
inline bool is(std::string_view key, const char (&name)[N]) {
    return std::memcmp(key.data(), name, N - 1) == 0;  // constant size: inlined compares
}

int bucket_key(std::string_view k) {
    switch (k.size()) {
        case 4:
            if (is(k, "name")) return kBName;
            if (is(k, "mode")) return kBMode;
            if (is(k, "keys")) return kBKeys;
            return -1;
        case 5:
            if (is(k, "scope")) return kBScope;
            if (is(k, "keyed")) return kBKeyed;
            if (is(k, "quota")) return kBQuota;
            return -1;
        case 7:
            if (is(k, "offered")) return kBOffered;
            if (is(k, "dropped")) return kBDropped;
            return -1;
        case 8: return is(k, "admitted") ? kBAdmitted : -1;
        case 10: return is(k, "limit_mrps") ? kBLimit : -1;
        case 12: return is(k, "quota_period") ? kBQuotaPeriod : -1;
        case 14: return is(k, "shadow_dropped") ? kBShadow : -1;
        case 15: return is(k, "quota_offset_ms") ? kBQuotaOffset : -1;
        default: return -1;
    }
}

// The bucket entry exactly as wire::encode (nginx) writes it: a map of 8 keys in a fixed
// order, fixstr keys, scope and mode as fixstr. Read without dispatching on keys; anything
// else (another encoder, key order, extra keys) falls back to read_bucket's general path.
bool fast_bucket(Reader& r, ReportBucketView& b) {
    const std::size_t start = r.mark();
    b.keyed = false;
    b.quota = {};
    b.keys_count = 0;
    std::string_view s;
    auto fallback = [&] {
        r.reset(start);
        return false;
    };
    if (!r.literal("\x88\xa4"
                   "name") ||
        !r.fast_fixstr(s) || !name_ok(s))
        return fallback();
    b.name = s;
    if (!r.literal("\xa5"
                   "scope"))
        return fallback();
    if (r.literal("\xa6"
                  "global")) {
        b.scope = Scope::Global;
    } else if (r.literal("\xa4"
                         "zone")) {
        b.scope = Scope::Zone;
    } else if (r.literal("\xa6"
                         "region")) {
        b.scope = Scope::Region;
    } else {
        return fallback();
    }
    if (!r.literal("\xa4"
                   "mode"))
        return fallback();
    if (r.literal("\xa4"
                  "deny")) {
        b.mode = Mode::Deny;
    } else if (r.literal("\xa6"
                         "shadow")) {
        b.mode = Mode::Shadow;
    } else {
        return fallback();
    }
    if (!r.literal("\xaa"
                   "limit_mrps") ||
        !r.fast_uint(b.limit_mrps) ||
        !r.literal("\xa7"
                   "offered") ||
        !r.fast_uint(b.offered) ||
        !r.literal("\xa8"
                   "admitted") ||
        !r.fast_uint(b.admitted) ||
        !r.literal("\xa7"
                   "dropped") ||
        !r.fast_uint(b.dropped) ||
        !r.literal("\xae"
                   "shadow_dropped") ||
        !r.fast_uint(b.shadow_dropped)) {
        return fallback();
    }
    return true;
}

// A key entry of a report (codec::read_key_rate): "h" > 1, optional "k" of at most
// kMaxKeyTextLen bytes, "offered_mrps", "dropped_mrps" <= offered, optional "used"; other keys
// ("hosts" too) skipped.
bool read_key_entry(Reader& r, std::size_t depth, KeyRateView& k) {
    Head h;
    if (!r.head(h)) return false;
    if (h.kind != Kind::Map) return r.fail("key entry is not a map");
    if (h.u > 0 && depth >= kMaxDepth) return r.fail("message nested too deeply");
    std::uint32_t mask = 0;
    k.text = {};
    k.used = 0;
    for (std::uint64_t i = 0; i < h.u; ++i) {
        std::string_view key;
        if (!read_key(r, key)) return false;
        int bit = key == "h"              ? 0
                  : key == "offered_mrps" ? 1
                  : key == "dropped_mrps" ? 2
                  : key == "k"            ? 3
                  : key == "used"         ? 4
                                          : -1;
        if (bit < 0) {
            if (!r.skip_object(depth + 1)) return false;
            continue;
        }
        if (!seen(r, mask, bit, key)) return false;
        bool ok = true;
        switch (bit) {
            case 0: ok = read_uint(r, key, k.hash); break;
            case 1: ok = read_uint(r, key, k.offered_mrps); break;
            case 2: ok = read_uint(r, key, k.dropped_mrps); break;
            case 3:
                ok = read_str(r, key, k.text);
                if (ok && k.text.size() > kMaxKeyTextLen) return r.fail("\"k\" too long");
                break;
            case 4: ok = read_uint(r, key, k.used); break;
        }
        if (!ok) return false;
    }
    if ((mask & 7u) != 7u) return r.fail("missing \"h\", \"offered_mrps\" or \"dropped_mrps\"");
    if (k.hash <= 1) return r.fail("bad key hash " + std::to_string(k.hash));
    if (k.dropped_mrps > k.offered_mrps) return r.fail("key \"dropped_mrps\" above offered");
    return true;
}

// A bucket's "keys" array, appended to `keys`; its range goes to `b` once the bucket is read.
bool read_keys(Reader& r, std::string_view key, std::size_t depth, std::vector<KeyRateView>& keys,
               std::uint32_t& first, std::uint32_t& count) {
    Head ah;
    if (!r.head(ah) || !want(r, ah, Kind::Arr, key)) return false;
    if (ah.u > kMaxReportKeys) return r.fail("too many keys");
    if (ah.u > 0 && depth >= kMaxDepth) return r.fail("message nested too deeply");
    first = static_cast<std::uint32_t>(keys.size());
    count = static_cast<std::uint32_t>(ah.u);
    keys.resize(keys.size() + count);
    for (std::uint32_t j = 0; j < count; ++j) {
        if (!read_key_entry(r, depth + 1, keys[first + j])) return false;
    }
    // No hash twice (at most kMaxReportKeys: a sorted copy is cheap).
    thread_local std::vector<std::uint64_t> hashes;
    hashes.clear();
    for (std::uint32_t j = 0; j < count; ++j) hashes.push_back(keys[first + j].hash);
    std::sort(hashes.begin(), hashes.end());
    if (std::adjacent_find(hashes.begin(), hashes.end()) != hashes.end())
        return r.fail("duplicate key hash");
    return true;
}

// The quota keys: all three or none, as wire::decode's report_quota() wants them.
bool quota_ok(Reader& r, std::uint32_t mask, const QuotaSpec& q) {
    constexpr std::uint32_t kAll = (1u << kBQuota) | (1u << kBQuotaPeriod) | (1u << kBQuotaOffset);
    if ((mask & kAll) == 0) return true;
    if ((mask & kAll) != kAll) return r.fail("missing one of the \"quota\" keys");
    if (q.n == 0) return r.fail("\"quota\" 0");
    if (q.offset_ms >= max_offset_ms(q.period)) return r.fail("bad \"quota_offset_ms\"");
    return true;
}

bool read_bucket(Reader& r, std::size_t depth, ReportBucketView& b,
                 std::vector<KeyRateView>& keys) {
    if (fast_bucket(r, b)) return true;
    Head h;
    if (!r.head(h)) return false;
    if (h.kind != Kind::Map) return r.fail("bucket entry is not a map");
    if (h.u > 0 && depth >= kMaxDepth) return r.fail("message nested too deeply");
    std::uint32_t mask = 0;
    for (std::uint64_t i = 0; i < h.u; ++i) {
        std::string_view key;
        if (!read_key(r, key)) return false;
        int k = bucket_key(key);
        if (k < 0) {
            if (!r.skip_object(depth + 1)) return false;
            continue;
        }
        if (!seen(r, mask, k, key)) return false;
        std::string_view s;
        bool ok = true;
        switch (k) {
            case kBName:
                ok = read_str(r, key, s);
                if (ok && !name_ok(s)) return r.fail("invalid bucket name");
                b.name = s;
                break;
            case kBScope: {
                ok = read_str(r, key, s);
                auto v = parse_scope(s);
                if (ok && !v) return r.fail("bad \"scope\"");
                if (ok) b.scope = *v;
                break;
            }
            case kBMode: {
                ok = read_str(r, key, s);
                auto v = parse_mode(s);
                if (ok && !v) return r.fail("bad \"mode\"");
                if (ok) b.mode = *v;
                break;
            }
            case kBLimit: ok = read_uint(r, key, b.limit_mrps); break;
            case kBOffered: ok = read_uint(r, key, b.offered); break;
            case kBAdmitted: ok = read_uint(r, key, b.admitted); break;
            case kBDropped: ok = read_uint(r, key, b.dropped); break;
            case kBShadow: ok = read_uint(r, key, b.shadow_dropped); break;
            case kBKeyed: {
                Head bh;
                ok = r.head(bh) && want(r, bh, Kind::Bool, key);
                if (ok) b.keyed = bh.u != 0;
                break;
            }
            case kBKeys: ok = read_keys(r, key, depth + 1, keys, b.keys_first, b.keys_count); break;
            case kBQuota: ok = read_uint(r, key, b.quota.n); break;
            case kBQuotaPeriod: {
                ok = read_str(r, key, s);
                auto v = parse_period(s);
                if (ok && !v) return r.fail("bad \"quota_period\"");
                if (ok) b.quota.period = *v;
                break;
            }
            case kBQuotaOffset: ok = read_uint(r, key, b.quota.offset_ms); break;
        }
        if (!ok) return false;
    }
    if (!quota_ok(r, mask, b.quota)) return false;
    if ((mask & (1u << kBKeys)) && !b.keyed) return r.fail("\"keys\" without \"keyed\"");
    constexpr std::uint32_t kRequired = (1u << kRequiredBucketKeys) - 1;
    if ((mask & kRequired) != kRequired) {
        for (int j = 0; j < kRequiredBucketKeys; ++j) {
            if (!(mask & (1u << j)))
                return r.fail("missing \"" + std::string(kBucketKeyNames[j]) + "\" in a bucket");
        }
    }
    return true;
}

enum ReportKey {
    kV,
    kType,
    kTs,
    kSeq,
    kHost,
    kZone,
    kRegion,
    kEpoch,
    kInterval,
    kDropped,
    kBuckets,
    kRecentMs,  // optional, with kRecent
    kRecent,
    kReportKeys
};
constexpr std::string_view kReportKeyNames[kReportKeys] = {
    "v",     "type",        "ts_ms",           "seq",     "host",      "zone",  "region",
    "epoch", "interval_ms", "reports_dropped", "buckets", "recent_ms", "recent"};
constexpr int kRequiredReportKeys = kRecentMs;

// "recent": one [] or [4 uints] per bucket. Read into `recent` (with `known`), matched with the
// buckets once the whole message is read (the keys may come in any order).
bool read_recent(Reader& r, std::string_view key, std::vector<std::array<std::uint64_t, 4>>& recent,
                 std::vector<char>& known) {
    Head ah;
    if (!r.head(ah) || !want(r, ah, Kind::Arr, key)) return false;
    if (ah.u > kMaxBucketsPerMessage) return r.fail("\"recent\" has too many entries");
    recent.resize(static_cast<std::size_t>(ah.u));
    known.assign(static_cast<std::size_t>(ah.u), 0);
    for (std::uint64_t j = 0; j < ah.u; ++j) {
        Head e;
        if (!r.head(e)) return false;
        if (e.kind != Kind::Arr || (e.u != 0 && e.u != 4))
            return r.fail("bad \"recent[" + std::to_string(j) + "]\"");
        for (std::uint64_t k = 0; k < e.u; ++k) {
            if (!read_uint(r, key, recent[j][k])) return false;
        }
        known[j] = e.u == 4;
    }
    return true;
}

// Duplicate names by an open-addressing set of indices (cheaper than sorting per report).
bool has_duplicate(const std::vector<ReportBucketView>& b) {
    thread_local std::vector<std::uint32_t> slots;
    std::size_t cap = 16;
    while (cap < 2 * b.size()) cap <<= 1;
    slots.assign(cap, UINT32_MAX);
    for (std::uint32_t i = 0; i < b.size(); ++i) {
        std::uint64_t h = 14695981039346656037ULL;
        for (char c : b[i].name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
        std::size_t at = static_cast<std::size_t>(h ^ (h >> 32)) & (cap - 1);
        while (slots[at] != UINT32_MAX) {
            if (b[slots[at]].name == b[i].name) return true;
            at = (at + 1) & (cap - 1);
        }
        slots[at] = i;
    }
    return false;
}

int report_key(std::string_view k) {
    for (int j = 0; j < kReportKeys; ++j) {
        if (kReportKeyNames[j] == k) return j;
    }
    return -1;
}

bool read(std::string_view bytes, ReportView& out, std::string& error) {
    if (bytes.size() > kMaxMessageBytes) {
        error = "message too large (" + std::to_string(bytes.size()) + " bytes)";
        return false;
    }
    if (bytes.empty()) {
        error = "empty message";
        return false;
    }
    // Any violation rejects the message, so the first one found is reported (wire.cpp may name
    // another one when a message has several; the verdict is the same).
    Reader r(bytes, error);
    Head root;
    if (!r.head(root)) return false;
    if (root.kind != Kind::Map)
        return r.fail(std::string("message is ") + kind_name(root.kind) + ", not a map");
    std::uint32_t mask = 0;
    out.buckets.clear();
    out.keys.clear();
    out.recent_ms = 0;
    thread_local std::vector<std::array<std::uint64_t, 4>> recent;
    thread_local std::vector<char> known;
    for (std::uint64_t i = 0; i < root.u; ++i) {
        std::string_view key;
        if (!read_key(r, key)) return false;
        int k = report_key(key);
        if (k < 0) {
            if (!r.skip_object(1)) return false;
            continue;
        }
        if (!seen(r, mask, k, key)) return false;
        std::string_view s;
        bool ok = true;
        switch (k) {
            case kV: {
                std::uint64_t v = 0;
                ok = read_uint(r, key, v);
                if (ok && v != kVersion) return r.fail("bad \"v\" " + std::to_string(v));
                break;
            }
            case kType:
                ok = read_str(r, key, s);
                if (ok && s != "report") return r.fail("bad \"type\"");
                break;
            case kTs: ok = read_uint(r, key, out.ts_ms); break;
            case kSeq: ok = read_uint(r, key, out.seq); break;
            case kHost: ok = read_name(r, key, out.host); break;
            case kZone: ok = read_name(r, key, out.zone); break;
            case kRegion: ok = read_name(r, key, out.region); break;
            case kEpoch: ok = read_uint(r, key, out.epoch); break;
            case kInterval: ok = read_uint(r, key, out.interval_ms); break;
            case kDropped: ok = read_uint(r, key, out.reports_dropped); break;
            case kBuckets: {
                Head ah;
                if (!r.head(ah) || !want(r, ah, Kind::Arr, key)) return false;
                if (ah.u > kMaxBucketsPerMessage) return r.fail("too many buckets");
                out.buckets.resize(static_cast<std::size_t>(ah.u));
                for (std::uint64_t j = 0; j < ah.u; ++j) {
                    if (!read_bucket(r, 2, out.buckets[j], out.keys)) return false;
                }
                break;
            }
            case kRecentMs: ok = read_uint(r, key, out.recent_ms); break;
            case kRecent: ok = read_recent(r, key, recent, known); break;
        }
        if (!ok) return false;
    }
    if (!r.at_end()) return r.fail("trailing bytes after message");
    constexpr std::uint32_t kRequired = (1u << kRequiredReportKeys) - 1;
    if ((mask & kRequired) != kRequired) {
        for (int j = 0; j < kRequiredReportKeys; ++j) {
            if (!(mask & (1u << j)))
                return r.fail("missing \"" + std::string(kReportKeyNames[j]) + "\"");
        }
    }
    if (out.buckets.size() > 1 && has_duplicate(out.buckets))
        return r.fail("duplicate bucket name");
    bool has_ms = mask & (1u << kRecentMs), has_recent = mask & (1u << kRecent);
    if (has_ms != has_recent) return r.fail("\"recent\" and \"recent_ms\" go together");
    if (!has_ms) {
        for (ReportBucketView& b : out.buckets) b.has_recent = false;  // views are reused
        return true;
    }
    if (recent.size() != out.buckets.size()) return r.fail("\"recent\" does not match \"buckets\"");
    for (std::size_t j = 0; j < recent.size(); ++j) {
        out.buckets[j].has_recent = known[j] != 0;
        out.buckets[j].recent = recent[j];
    }
    return true;
}

}  // namespace

bool read_report(std::string_view bytes, ReportView& out, std::string& error) {
    try {
        return read(bytes, out, error);
    } catch (...) {  // std::bad_alloc from the bucket vector or an error string
        error = "out of memory";
        return false;
    }
}

void view_of(const Report& r, ReportView& out) {
    static_cast<ReportFields&>(out) = r;
    out.host = r.host;
    out.zone = r.zone;
    out.region = r.region;
    out.buckets.resize(r.buckets.size());
    out.keys.clear();
    for (std::size_t i = 0; i < r.buckets.size(); ++i) {
        static_cast<ReportCounts&>(out.buckets[i]) = r.buckets[i];
        out.buckets[i].name = r.buckets[i].name;
        out.buckets[i].keyed = r.buckets[i].keyed;
        out.buckets[i].keys_first = static_cast<std::uint32_t>(out.keys.size());
        out.buckets[i].keys_count = static_cast<std::uint32_t>(r.buckets[i].keys.size());
        for (const KeyRate& k : r.buckets[i].keys) {
            out.keys.push_back({k.hash, k.text, k.offered_mrps, k.dropped_mrps, k.used});
        }
    }
}

}  // namespace grl::wire
