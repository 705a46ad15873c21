// See usage_reader.h. The fast path reads the layout wire::encode writes (either usage version),
// key by key in its order, with a bounds check on every read; it enforces every rule
// wire_control.cpp's decoder applies to that layout, and gives up (to wire::decode) at the first
// byte or value it does not expect. Giving up is never wrong, only slower; accepting is checked
// against wire::decode by t/unit/usage_reader_test.cpp and fuzz/fuzz_usage.cpp.
#include "grl/wire/usage_reader.h"

#include <cstring>
#include <type_traits>

#include "grl/common/saturating.h"

namespace grl::wire {

namespace {

// The big-endian integer of sizeof(T) bytes at q: one load.
template <typename T>
std::uint64_t load(const unsigned char* q) {
    T x;
    std::memcpy(&x, q, sizeof x);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if constexpr (sizeof x == 2) x = __builtin_bswap16(x);
    if constexpr (sizeof x == 4) x = __builtin_bswap32(x);
    if constexpr (sizeof x == 8) x = __builtin_bswap64(x);
#endif
    return x;
}

// A cursor over msgpack bytes that only knows the encodings wire::encode's packer emits for
// usage messages: positive integers, strings, arrays and maps.
class Cursor {
  public:
    explicit Cursor(std::string_view b, std::size_t at = 0)
        : p_(reinterpret_cast<const unsigned char*>(b.data()) + at),
          end_(reinterpret_cast<const unsigned char*>(b.data()) + b.size()) {}

    bool at_end() const { return p_ == end_; }
    std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }
    const unsigned char* at() const { return p_; }
    void move_to(const unsigned char* p) { p_ = p; }
    std::size_t offset(std::string_view b) const {
        return static_cast<std::size_t>(p_ - reinterpret_cast<const unsigned char*>(b.data()));
    }

    // A key: the packer writes every key of these messages as a fixstr.
    bool key(std::string_view k) {
        const std::size_t n = k.size();
        if (static_cast<std::size_t>(end_ - p_) < n + 1 || *p_ != (0xa0 | n) ||
            std::memcmp(p_ + 1, k.data(), n) != 0) {
            return false;
        }
        p_ += n + 1;
        return true;
    }

    bool uint(std::uint64_t& v) {
        if (p_ == end_) return false;
        const unsigned char t = *p_;
        if (t <= 0x7f) {
            v = t;
            ++p_;
            return true;
        }
        std::size_t n = 0;
        switch (t) {
            case 0xcc: n = 1; break;
            case 0xcd: n = 2; break;
            case 0xce: n = 4; break;
            case 0xcf: n = 8; break;
            default: return false;
        }
        return big_endian(1, n, v);
    }

    bool str(std::string_view& s) {
        if (p_ == end_) return false;
        const unsigned char t = *p_;
        std::uint64_t n = 0;
        std::size_t head = 1;
        if ((t & 0xe0) == 0xa0) {
            n = t & 0x1f;
        } else if (t == 0xd9 || t == 0xda || t == 0xdb) {
            head = 1 + (std::size_t{1} << (t - 0xd9));
            if (!big_endian(1, head - 1, n, false)) return false;
        } else {
            return false;
        }
        if (static_cast<std::uint64_t>(end_ - p_) - head < n) return false;
        s = std::string_view(reinterpret_cast<const char*>(p_ + head), static_cast<std::size_t>(n));
        p_ += head + n;
        return true;
    }

    bool name(std::string_view& s) { return str(s) && valid_name(s); }

    bool array(std::uint64_t& n) { return container(0x90, 0xdc, n); }
    bool map(std::uint64_t& n) { return container(0x80, 0xde, n); }

  private:
    // fix tag (0x90 array, 0x80 map) or 16/32-bit forms (0xdc/0xde and the next tag).
    bool container(unsigned char fix, unsigned char wide16, std::uint64_t& n) {
        if (p_ == end_) return false;
        const unsigned char t = *p_;
        if ((t & 0xf0) == fix) {
            n = t & 0x0f;
            ++p_;
            return true;
        }
        if (t == wide16) return big_endian(1, 2, n);
        if (t == wide16 + 1) return big_endian(1, 4, n);
        return false;
    }

    // The n-byte big-endian integer `skip` bytes ahead; moves past it when `advance`. The
    // packer's widths (1, 2, 4, 8) are one load each: the loop of a shift and an or per byte
    // was ~130 instructions per usage entry, a sixth of reading one (grl_usage_read_bench).
    bool big_endian(std::size_t skip, std::size_t n, std::uint64_t& v, bool advance = true) {
        if (static_cast<std::size_t>(end_ - p_) < skip + n) return false;
        const unsigned char* q = p_ + skip;
        switch (n) {
            case 1: v = q[0]; break;
            case 2: v = load<std::uint16_t>(q); break;
            case 4: v = load<std::uint32_t>(q); break;
            case 8: v = load<std::uint64_t>(q); break;
            default:
                v = 0;
                for (std::size_t i = 0; i < n; ++i) v = (v << 8) | q[i];
        }
        if (advance) p_ += skip + n;
        return true;
    }

    const unsigned char* p_;
    const unsigned char* end_;
};

// The header; `v` gets the version (1 or 2, docs/protocol.md "Versions").
bool header(Cursor& c, std::string_view type, std::uint64_t& keys, std::uint64_t& v) {
    std::string_view t;
    return c.map(keys) && c.key("v") && c.uint(v) && v >= kMinUsageVersion && v <= kUsageVersion &&
           c.key("type") && c.str(t) && t == type;
}

// An entry or definition of `n` items: a map of its keys in v 1 (`Keyed`), an array since v 2.
// `item` reads the key before each item of a map (the packer writes them in the positional
// order). A template parameter, so that reading v 2 costs no test per item.
template <bool Keyed>
struct Entry {
    static bool open(Cursor& c, std::uint64_t n) {
        std::uint64_t items = 0;
        return (Keyed ? c.map(items) : c.array(items)) && items == n;
    }
    static bool item(Cursor& c, std::string_view key) { return !Keyed || c.key(key); }
};

bool name_into(Cursor& c, std::string_view key, std::string& out) {
    std::string_view s;
    if (!c.key(key) || !c.name(s)) return false;
    out.assign(s.data(), s.size());
    return true;
}

bool uint_into(Cursor& c, std::string_view key, std::uint64_t& out) {
    return c.key(key) && c.uint(out);
}

// An array of names, at most `max`, into `out` (strings reused).
bool name_list(Cursor& c, std::size_t max, std::vector<std::string>& out) {
    std::uint64_t n = 0;
    if (!c.array(n) || n > max) return false;
    out.resize(static_cast<std::size_t>(n));
    for (std::string& s : out) {
        std::string_view v;
        if (!c.name(v)) return false;
        if (s != v) s.assign(v.data(), v.size());
    }
    return true;
}

bool names(Cursor& c, std::string_view key, std::size_t max, std::vector<std::string>& out) {
    return c.key(key) && name_list(c, max, out);
}

// Definitions of the unkeyed form (4 items); a keyed one (5 items) goes to wire::decode.
template <class E>
bool definitions(Cursor& c, E e, std::vector<DefinitionCount>& out) {
    std::uint64_t n = 0;
    if (!c.array(n) || n > kMaxDefinitions) return false;
    out.clear();
    for (std::uint64_t i = 0; i < n; ++i) {
        std::string_view scope, mode;
        DefinitionCount d;
        if (!e.open(c, 4) || !e.item(c, "scope") || !c.str(scope) || !e.item(c, "mode") ||
            !c.str(mode) || !e.item(c, "limit_mrps") || !c.uint(d.def.limit_mrps) ||
            !e.item(c, "hosts") || !c.uint(d.hosts)) {
            return false;
        }
        std::optional<Scope> s = parse_scope(scope);
        std::optional<Mode> m = parse_mode(mode);
        if (!s || !m) return false;
        d.def.scope = *s;
        d.def.mode = *m;
        for (const DefinitionCount& prev : out) {
            if (prev.def == d.def) return false;
        }
        out.push_back(d);
    }
    return true;
}

// The most common v 2 entry, read without a bounds check per item: one definition of the
// unkeyed form and (zone_usage) no host names, every item in the form wire::encode's packer
// gives it. `p` has at least kCompactEntryMax bytes after it, which no entry of that shape
// exceeds: each read below stays inside them. Returns the byte after the entry, or nullptr for
// any other shape or form (the checked path then reads the entry from its start, and refuses
// or hands over to wire::decode as it always did). The checks after the items (counts, names
// ascending) are the caller's, as for the checked path. Read and taken, an entry costs ~200
// instructions less than through the checked path's test before every item (863 -> 652 with
// the other changes of that day, bench/control_plane/README.md "Reading and taking usage in
// one process").
//
// kCompactEntryMax: the entry's tag, its name (str 8), six integers of at most 9 bytes, the
// definition list's and the definition's tags, two fixstr of at most 32 bytes, two integers,
// the host names' tag.
constexpr std::size_t kUintMax = 9, kFixstrMax = 32;
constexpr std::size_t kCompactEntryMax =
    1 + (2 + kMaxNameLen) + 6 * kUintMax + 2 + 2 * kFixstrMax + 2 * kUintMax + 1;

struct Compact {
    const unsigned char* p;

    bool uint(std::uint64_t& v) {
        const unsigned char t = *p;
        if (t <= 0x7f) {
            v = t;
            p += 1;
            return true;
        }
        switch (t) {
            case 0xcc:
                v = p[1];
                p += 2;
                return true;
            case 0xcd:
                v = load<std::uint16_t>(p + 1);
                p += 3;
                return true;
            case 0xce:
                v = load<std::uint32_t>(p + 1);
                p += 5;
                return true;
            case 0xcf:
                v = load<std::uint64_t>(p + 1);
                p += 9;
                return true;
            default: return false;
        }
    }
    // A fixstr (at most 31 bytes), or a str 8 of at most kMaxNameLen bytes when `name`.
    bool str(std::string_view& s, bool name) {
        std::size_t n = 0, head = 1;
        if ((*p & 0xe0) == 0xa0) {
            n = *p & 0x1f;
        } else if (name && *p == 0xd9 && p[1] <= kMaxNameLen) {
            n = p[1];
            head = 2;
        } else {
            return false;
        }
        s = std::string_view(reinterpret_cast<const char*>(p + head), n);
        p += head + n;
        return true;
    }
    bool tag(unsigned char t) { return *p++ == t; }
};

const unsigned char* compact_entry(const unsigned char* p, bool zone, UsageBucket& b,
                                   std::string_view& name, DefinitionCount& d) {
    Compact c{p};
    std::string_view scope, mode;
    if (!c.tag(zone ? 0x99 : 0x98) || !c.str(name, true) || !valid_name(name) ||
        !c.uint(b.offered_mrps) || !c.uint(b.admitted_mrps) || !c.uint(b.dropped_mrps) ||
        !c.uint(b.shadow_dropped_mrps) || !c.uint(b.hosts) || !c.uint(b.rated_hosts) ||
        !c.tag(0x91) || !c.tag(0x94) || !c.str(scope, false) || !c.str(mode, false) ||
        !c.uint(d.def.limit_mrps) || !c.uint(d.hosts) || (zone && !c.tag(0x90))) {
        return nullptr;
    }
    std::optional<Scope> sc = parse_scope(scope);
    std::optional<Mode> m = parse_mode(mode);
    if (!sc || !m) return nullptr;
    d.def.scope = *sc;
    d.def.mode = *m;
    d.def.keyed = false;
    return c.p;
}

// The usage entries (positional, docs/protocol.md "Usage entry"; maps in v 1) into
// out[at, at + n), `out` grown when shorter and never shrunk (the entries beyond keep their
// strings and vectors): `zone` for zone_usage (per-entry host_names); an entry with keys goes to
// wire::decode. Names strictly ascending, as senders sort them (which proves them unique;
// unsorted but unique ones go to wire::decode).
template <class E>
bool buckets(Cursor& c, E e, bool zone, std::uint64_t message_hosts, std::vector<UsageBucket>& out,
             std::size_t at, std::size_t& n, std::size_t& copied) {
    std::uint64_t count = 0;
    if (!c.key("buckets") || !c.array(count) || count > kMaxBucketsPerMessage) return false;
    n = static_cast<std::size_t>(count);
    if (out.size() < at + n) out.resize(at + n);
    for (std::size_t i = at; i < at + n; ++i) {
        UsageBucket& b = out[i];
        std::string_view name;
        if constexpr (std::is_same_v<E, Entry<false>>) {
            DefinitionCount d;
            const unsigned char* next = nullptr;
            if (c.left() >= kCompactEntryMax &&
                (next = compact_entry(c.at(), zone, b, name, d)) != nullptr) {
                c.move_to(next);
                if (b.definitions.size() == 1) {
                    b.definitions[0] = d;
                } else {
                    b.definitions.assign(1, d);
                }
                if (b.name != name) {
                    b.name.assign(name.data(), name.size());
                    ++copied;
                }
                b.host_names.clear();
                b.keys.clear();
                if (b.rated_hosts > b.hosts || b.hosts > message_hosts || d.hosts > b.hosts) {
                    return false;
                }
                if (i > at && !(out[i - 1].name < b.name)) return false;
                continue;
            }
        }
        if (!e.open(c, zone ? 9u : 8u) || !e.item(c, "name") || !c.name(name) ||
            !e.item(c, "offered_mrps") || !c.uint(b.offered_mrps) || !e.item(c, "admitted_mrps") ||
            !c.uint(b.admitted_mrps) || !e.item(c, "dropped_mrps") || !c.uint(b.dropped_mrps) ||
            !e.item(c, "shadow_dropped_mrps") || !c.uint(b.shadow_dropped_mrps) ||
            !e.item(c, "hosts") || !c.uint(b.hosts) || !e.item(c, "rated_hosts") ||
            !c.uint(b.rated_hosts) || !e.item(c, "definitions") ||
            !definitions(c, e, b.definitions)) {
            return false;
        }
        // Usage is read into the strings of the sender's last usage (ZoneUsage reused, and a
        // part into the vector its source's last set was assembled in): a name at the same
        // place is most often the same, and then needs no copy.
        if (b.name != name) {
            b.name.assign(name.data(), name.size());
            ++copied;
        }
        if (zone) {
            if (!e.item(c, "host_names") || !name_list(c, kMaxBucketHostNames, b.host_names)) {
                return false;
            }
        } else {
            b.host_names.clear();
        }
        b.keys.clear();
        // check_usage_counts() in wire_control.cpp.
        std::uint64_t defined = 0;
        for (const DefinitionCount& d : b.definitions) defined = sat_add(defined, d.hosts);
        if (b.rated_hosts > b.hosts || b.hosts > message_hosts || defined > b.hosts ||
            b.host_names.size() > b.hosts) {
            return false;
        }
        if (i > at && !(out[i - 1].name < b.name)) return false;
    }
    return true;
}

// "part"/"parts" when the map has the two more keys (read_part() in wire_control.cpp).
bool part(Cursor& c, std::uint64_t keys, std::size_t head_extra, std::uint32_t& part,
          std::uint32_t& parts) {
    part = 0;
    parts = 1;
    if (keys == 12) return true;
    std::uint64_t pt = 0, pts = 0;
    if (keys != 14 || !uint_into(c, "part", pt) || !uint_into(c, "parts", pts)) return false;
    if (pts < 1 || pts > kMaxParts || pt >= pts || (pt > 0 && head_extra > 0)) return false;
    part = static_cast<std::uint32_t>(pt);
    parts = static_cast<std::uint32_t>(pts);
    return true;
}

// The head is read: the buckets are next.
bool buckets_next(const Cursor& c, std::string_view bytes, UsageRest& rest) {
    rest.bytes = bytes;
    rest.at = c.offset(bytes);
    return true;
}

bool head(std::string_view bytes, ZoneUsage& m, UsageRest& rest) {
    if (bytes.size() > kMaxMessageBytes) return false;
    Cursor c(bytes);
    if (!header(c, "zone_usage", rest.keys, m.v) || !uint_into(c, "ts_ms", m.ts_ms) ||
        !uint_into(c, "seq", m.seq) || !name_into(c, "source", m.source) ||
        !name_into(c, "region", m.region) || !name_into(c, "zone", m.zone) ||
        !uint_into(c, "interval_ms", m.interval_ms) || !uint_into(c, "hosts", m.hosts) ||
        !uint_into(c, "stale_hosts", m.stale_hosts) ||
        !names(c, "host_names", kMaxHostNames, m.host_names) || m.host_names.size() > m.hosts) {
        return false;
    }
    return buckets_next(c, bytes, rest);
}

bool rest_of(const UsageRest& rest, ZoneUsage& m, std::vector<UsageBucket>& into, std::size_t at,
             std::size_t& n, std::size_t& copied) {
    Cursor c(rest.bytes, rest.at);
    if (!(m.v == 1 ? buckets(c, Entry<true>{}, true, m.hosts, into, at, n, copied)
                   : buckets(c, Entry<false>{}, true, m.hosts, into, at, n, copied)) ||
        !part(c, rest.keys, m.host_names.size(), m.part, m.parts)) {
        return false;
    }
    return c.at_end();
}

bool head(std::string_view bytes, RegionUsage& m, UsageRest& rest) {
    if (bytes.size() > kMaxMessageBytes) return false;
    Cursor c(bytes);
    std::string_view digest;
    if (!header(c, "region_usage", rest.keys, m.v) || !uint_into(c, "ts_ms", m.ts_ms) ||
        !uint_into(c, "seq", m.seq) || !name_into(c, "source", m.source) ||
        !name_into(c, "region", m.region) || !uint_into(c, "interval_ms", m.interval_ms) ||
        !uint_into(c, "zones", m.zones) || !uint_into(c, "hosts", m.hosts) ||
        !c.key("limits_digest") || !c.str(digest) || digest.size() > kMaxDigestLen) {
        return false;
    }
    m.limits_digest.assign(digest.data(), digest.size());
    return buckets_next(c, bytes, rest);
}

bool rest_of(const UsageRest& rest, RegionUsage& m, std::vector<UsageBucket>& into, std::size_t at,
             std::size_t& n, std::size_t& copied) {
    Cursor c(rest.bytes, rest.at);
    std::uint64_t overrides = 0;
    if (!(m.v == 1 ? buckets(c, Entry<true>{}, false, m.hosts, into, at, n, copied)
                   : buckets(c, Entry<false>{}, false, m.hosts, into, at, n, copied)) ||
        !c.key("overrides") || !c.array(overrides) || overrides != 0 ||
        !part(c, rest.keys, 0, m.part, m.parts)) {
        return false;
    }
    m.overrides.clear();
    return c.at_end();
}

// rest_of() for read_usage_rest(), its count of copied names optional.
template <class Usage>
bool rest_counted(const UsageRest& rest, Usage& out, std::vector<UsageBucket>& into, std::size_t at,
                  std::size_t& n, std::size_t* copied_names) {
    std::size_t copied = 0;
    const bool ok = rest_of(rest, out, into, at, n, copied);
    if (copied_names) *copied_names = copied;
    return ok;
}

template <class Usage>
bool read(std::string_view bytes, Usage& out, std::string& error, UsageRead* how) {
    UsageRest rest;
    std::size_t n = 0, copied = 0;
    out.quotas.clear();  // the one-pass reader takes no message with "quotas"
    if (head(bytes, out, rest) && rest_of(rest, out, out.buckets, 0, n, copied)) {
        out.buckets.resize(n);
        if (how) *how = UsageRead::Fast;
        return true;
    }
    if (how) *how = UsageRead::Decoded;
    return decode(bytes, out, error);
}

}  // namespace

bool read_usage(std::string_view bytes, ZoneUsage& out, std::string& error, UsageRead* how) {
    return read(bytes, out, error, how);
}

bool read_usage(std::string_view bytes, RegionUsage& out, std::string& error, UsageRead* how) {
    return read(bytes, out, error, how);
}

// The one-pass reader takes no "quotas" (a message with them is wire::decode's): a message it
// takes has none, whatever `out` held.
bool read_usage_head(std::string_view bytes, ZoneUsage& out, UsageRest& rest) {
    out.quotas.clear();
    return head(bytes, out, rest);
}
bool read_usage_head(std::string_view bytes, RegionUsage& out, UsageRest& rest) {
    out.quotas.clear();
    return head(bytes, out, rest);
}
bool read_usage_rest(const UsageRest& rest, ZoneUsage& out, std::vector<UsageBucket>& into,
                     std::size_t at, std::size_t& n, std::size_t* copied_names) {
    return rest_counted(rest, out, into, at, n, copied_names);
}
bool read_usage_rest(const UsageRest& rest, RegionUsage& out, std::vector<UsageBucket>& into,
                     std::size_t at, std::size_t& n, std::size_t* copied_names) {
    return rest_counted(rest, out, into, at, n, copied_names);
}

}  // namespace grl::wire
