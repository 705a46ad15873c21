// Internal helpers for every msgpack codec (wire.cpp, wire_control.cpp):
// a packer, a bounds-checked body parser and a strict map reader. Not installed: the public
// API is grl/wire/wire.h and grl/wire/wire_control.h. The rules of docs/protocol.md apply: the body
// is exactly one map, at most kMaxMessageBytes, nesting at most kMaxDepth; keys are strings; known
// keys appear once; unknown keys are ignored.
#pragma once

#include <msgpack.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grl/common/bucket_types.h"
#include "grl/wire/wire.h"

namespace grl::wire {
struct UsageBucket;
struct ZoneUsage;
struct RegionUsage;
}  // namespace grl::wire

namespace grl::wire::codec {

// Deepest container nesting accepted (control messages need 4).
inline constexpr std::size_t kMaxDepth = 16;

// Room for packing, kept from message to message: a message is packed into it and copied
// into its destination once.
struct PackBuffer {
    std::unique_ptr<char[]> bytes;
    std::size_t room = 0;
};

// Packs with msgpack-c's packer; finish() puts the message into `out` (whatever it held is
// replaced). msgpack-c's own buffer (msgpack_sbuffer) took a call and a memcpy of a few bytes
// per item, and a new buffer grown by reallocation per message: 62% of the instructions of
// encoding a tick's 10,000 instructions and region usage (grl_tick_bench --collect encode,
// bench/control_plane/README.md).
class Packer {
  public:
    explicit Packer(std::string& out);
    ~Packer();
    Packer(const Packer&) = delete;
    Packer& operator=(const Packer&) = delete;

    void map(std::size_t n);
    void array(std::size_t n);
    void u64(std::uint64_t v);
    void boolean(bool v);
    void str(std::string_view s);
    void kv(std::string_view key, std::uint64_t v) {
        str(key);
        u64(v);
    }
    void kv(std::string_view key, std::string_view v) {
        str(key);
        str(v);
    }
    void kv(std::string_view key, const char* v) { kv(key, std::string_view(v)); }
    void kv_bool(std::string_view key, bool v) {
        str(key);
        boolean(v);
    }
    void finish();  // `out` holds what was packed, and nothing else

  private:
    static int append(void* packer, const char* bytes, std::size_t n);
    void grow(std::size_t n);

    std::string& out_;
    // The process's (no thread-local storage: the nginx module must not need the dynamic
    // loader's TLS), or own_ while another Packer holds it.
    PackBuffer* buf_;
    PackBuffer own_;
    std::size_t used_ = 0;  // bytes of buf_ packed
    msgpack_packer pk_;
};

// encode(ZoneUsage) and encode(RegionUsage) with the buckets [first, first + n) in place of
// m.buckets: a part of a usage in parts, encoded without a copy of its entries
// (usage_parts.cpp).
void encode_usage(const ZoneUsage& m, const UsageBucket* first, std::size_t n, std::string& out);
void encode_usage(const RegionUsage& m, const UsageBucket* first, std::size_t n, std::string& out);

// `s` quoted for an error message: escaped, cut at 64 bytes.
std::string quote(std::string_view s);
const char* type_name(const msgpack_object& o);

// The parsed body of one message. parse() checks size, scans the raw bytes (every declared
// count must fit in the bytes present, nesting bounded) and unpacks; the root must be a map.
class Body {
  public:
    Body();
    ~Body();
    Body(const Body&) = delete;
    Body& operator=(const Body&) = delete;
    bool parse(std::string_view bytes, std::string& error);
    const msgpack_object& root() const { return unpacked_.data; }

  private:
    msgpack_unpacked unpacked_;
};

// Where a map sits in the message, rendered only for error strings: `buckets[3].definitions[0]`.
struct Path {
    const Path* parent = nullptr;
    std::string_view key;  // array or map key leading here
    long index = -1;       // array index, or -1
    std::string render() const;
};

// Strict typed access to the keys of one map: the one map reader of every codec. Every getter
// returns false with `error` set (naming the key and where the map is) when the key is missing
// (required getters), appears twice, or has the wrong type or an invalid value.
class MapReader {
  public:
    // False (with error) when `o` is not a map or has a non-string key. Errors end with
    // " in <path>" (nothing at the top level).
    MapReader(const msgpack_object& o, const Path& path, std::string& error);
    // The same, for a map whose keys the caller lists: they are collected in one pass, which
    // also refuses a listed key that appears twice (before any getter runs), and a getter may
    // ask only for listed keys. Errors end with `where` (e.g. ` in buckets[3]`), which
    // set_where() changes once more is known (` for bucket "api"`).
    MapReader(const msgpack_object& o, const std::string_view* keys, std::size_t n_keys,
              std::string where, std::string& error);
    bool ok() const { return ok_; }
    void set_where(std::string where) { where_ = std::move(where); }
    const std::string& where() const { return where_; }  // with listed keys

    // The value of `key`, nullptr when absent; false on a duplicate.
    bool find(std::string_view key, const msgpack_object*& out) const;
    bool present(std::string_view key) const;

    bool u64(std::string_view key, std::uint64_t& out) const;
    bool boolean(std::string_view key, bool& out) const;
    bool str(std::string_view key, std::string& out, std::size_t max_len) const;
    bool str(std::string_view key, std::string_view& out) const;  // points into the message
    bool name(std::string_view key, std::string& out) const;      // valid_name()
    // A name or the empty string.
    bool name_or_empty(std::string_view key, std::string& out) const;
    bool scope(std::string_view key, Scope& out) const;
    bool mode(std::string_view key, Mode& out) const;
    bool array(std::string_view key, const msgpack_object*& out, std::size_t max_items) const;
    bool map(std::string_view key, const msgpack_object*& out) const;

    // Optional variants: absent leaves `out` unset and succeeds.
    bool opt_u64(std::string_view key, std::optional<std::uint64_t>& out) const;
    bool opt_bool(std::string_view key, bool& out) const;  // absent: out = false
    bool opt_mode(std::string_view key, std::optional<Mode>& out) const;

    // Sets `error` to "<what> in <path>" (or "<what><where>") and returns false.
    bool fail(const std::string& what) const;
    const Path& path() const { return path_; }
    // The value of a required `key` of type `want` (the typed getters above, shared with
    // RowReader), and how errors name it.
    bool get(std::string_view key, msgpack_object_type want, const char* want_name,
             const msgpack_object*& o) const;
    static std::string_view label(std::string_view key) { return key; }

  private:
    bool check_keys(const msgpack_object& o);

    const msgpack_object* map_ = nullptr;
    Path path_;
    std::string& error_;
    bool ok_ = false;
    // With listed keys: the keys, each one's value (nullptr: absent), and the error suffix.
    const std::string_view* keys_ = nullptr;
    std::size_t n_keys_ = 0;
    static constexpr std::size_t kMaxListedKeys = 16;
    std::array<const msgpack_object*, kMaxListedKeys> vals_{};
    std::string where_;
};

// Strict typed access to the items of one entry whose items have fixed names and positions:
// the one entry reader of every codec. `fields` names the items in order. An entry is either
// positional (an array whose items are named by their position, docs/protocol.md "Usage
// entry"), with at least `required` items and at most all, or keyed (a map of those names, as
// usage entries of protocol version 1 were: unlisted keys are ignored, a listed one twice is
// refused, a missing one is refused by the getter that asks for it). Errors name the item as
// MapReader names a key (`bad "hosts" type str (want uint) in buckets[3]`), so a message reads
// the same whichever form it took.
class RowReader {
  public:
    enum class Form : std::uint8_t { Positional, Keyed };
    static constexpr std::size_t kMaxFields = 16;
    RowReader(const msgpack_object& o, const Path& path, const std::string_view* fields,
              std::size_t n_fields, std::size_t required, std::string& error,
              Form form = Form::Positional);
    bool ok() const { return ok_; }
    bool has(std::size_t i) const { return i < n_fields_ && items_[i] != nullptr; }
    const msgpack_object& at(std::size_t i) const { return *items_[i]; }

    bool u64(std::size_t i, std::uint64_t& out) const;
    bool boolean(std::size_t i, bool& out) const;
    bool name(std::size_t i, std::string& out) const;  // valid_name()
    bool scope(std::size_t i, Scope& out) const;
    bool mode(std::size_t i, Mode& out) const;
    bool array(std::size_t i, const msgpack_object*& out, std::size_t max_items) const;

    // Sets `error` to "<what> in <path>" and returns false.
    bool fail(const std::string& what) const;
    const Path& path() const { return path_; }
    std::string_view field(std::size_t i) const { return fields_[i]; }
    // As MapReader's: item `i` of type `want`, and how errors name it.
    bool get(std::size_t i, msgpack_object_type want, const char* want_name,
             const msgpack_object*& o) const;
    std::string_view label(std::size_t i) const { return fields_[i]; }

  private:
    bool positional(const msgpack_object& o, std::size_t required);
    bool keyed(const msgpack_object& o);

    Path path_;
    const std::string_view* fields_;
    std::size_t n_fields_ = 0;
    std::array<const msgpack_object*, kMaxFields> items_{};  // nullptr: absent
    std::string& error_;
    bool ok_ = false;
};

// "v" == `version` (kVersion unless the message type says otherwise) and "type" == want.
bool check_header(const MapReader& r, std::string_view want_type, std::uint64_t version = kVersion);

// Runs a decoder so that nothing escapes: std::bad_alloc (or anything else) becomes false.
template <typename Fn>
bool guarded(Fn&& fn, std::string& error) noexcept {
    try {
        return fn();
    } catch (...) {
    }
    try {
        error = "out of memory";
    } catch (...) {
    }
    return false;
}

// The "match" map of a run-time bucket (docs/protocol.md): its value, as written by every
// message that carries one, and its kinds' names ("exact", "prefix", "regex").
class Packer;
void pack_match(Packer& p, const RuntimeMatch& m);
std::string_view match_kind_name(MatchKind k);
// Parses a kind name; "regex" only where `regex_ok` (procedures, not callers).
std::optional<MatchKind> parse_match_kind(std::string_view s, bool regex_ok);

// Key lists of keyed buckets (docs/protocol.md "Keyed buckets"), shared by the report, usage
// and admin codecs. A key entry is a map: "h", optional "k", "offered_mrps", "dropped_mrps",
// and "hosts" where `with_hosts` (usage, admin; a report's is ignored and read as 1).
void pack_key_rate(Packer& p, const KeyRate& k, bool with_hosts);
void pack_key_rates(Packer& p, std::string_view key, const std::vector<KeyRate>& keys,
                    bool with_hosts);
// One key entry at `path`: hash > 1, text at most kMaxKeyTextLen bytes, dropped <= offered.
bool read_key_rate(const msgpack_object& o, const Path& path, bool with_hosts, KeyRate& out,
                   std::string& error);
// The array `arr` (at `path`) of at most `max` key entries, no hash twice.
bool read_key_rates(const msgpack_object& arr, const Path& path, std::size_t max, bool with_hosts,
                    std::vector<KeyRate>& out, std::string& error);
// How errors name a key: `key 0x00000000000000ab` (the hash as grlctl shows it).
std::string key_name(std::uint64_t hash);
// A `[uint, uint]` pair (a key list's `[h, ratio_ppm]` or `[h, used]`): false when `o` is not one.
bool uint_pair(const msgpack_object& o, std::uint64_t& first, std::uint64_t& second);

}  // namespace grl::wire::codec
