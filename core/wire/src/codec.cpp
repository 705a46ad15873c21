// See codec.h. The raw scan proves that the body is exactly one
// well-formed msgpack object whose declared element counts fit in the bytes present, so
// msgpack_unpack_next() never sizes an allocation from an unchecked count.
#include "codec.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <new>
#include <stdexcept>

#include "grl/wire/wire.h"

namespace grl::wire::codec {

// ---------------------------------------------------------------------------------------------
// Packer

namespace {
PackBuffer g_pack_buffer;
std::atomic<bool> g_pack_buffer_busy{false};
}  // namespace

Packer::Packer(std::string& out) : out_(out), buf_(&own_) {
    if (!g_pack_buffer_busy.exchange(true, std::memory_order_acquire)) buf_ = &g_pack_buffer;
    msgpack_packer_init(&pk_, this, &Packer::append);
}

Packer::~Packer() {
    if (buf_ == &g_pack_buffer) g_pack_buffer_busy.store(false, std::memory_order_release);
}

void Packer::grow(std::size_t n) {
    const std::size_t room = std::max({buf_->room * 2, used_ + n, std::size_t{4096}});
    std::unique_ptr<char[]> bytes(new char[room]);
    if (used_ > 0) std::memcpy(bytes.get(), buf_->bytes.get(), used_);
    buf_->bytes = std::move(bytes);
    buf_->room = room;
}

// msgpack-c packs an item as one or two appends of 1 to 9 bytes (a string's bytes apart):
// copied with a constant size each, inlined, rather than by a call to memcpy.
int Packer::append(void* packer, const char* bytes, std::size_t n) {
    Packer& p = *static_cast<Packer*>(packer);
    if (n > p.buf_->room - p.used_) p.grow(n);
    char* to = p.buf_->bytes.get() + p.used_;
    switch (n) {
        case 1: *to = *bytes; break;
        case 2: std::memcpy(to, bytes, 2); break;
        case 3: std::memcpy(to, bytes, 3); break;
        case 5: std::memcpy(to, bytes, 5); break;
        case 9: std::memcpy(to, bytes, 9); break;
        default: std::memcpy(to, bytes, n);
    }
    p.used_ += n;
    return 0;
}

void Packer::finish() {
    out_.assign(buf_->bytes.get(), used_);
}

namespace {
// The packer's appends never fail (new throws std::bad_alloc itself).
void check(int rc) {
    if (rc != 0) throw std::bad_alloc();
}
}  // namespace

void Packer::map(std::size_t n) {
    check(msgpack_pack_map(&pk_, n));
}
void Packer::array(std::size_t n) {
    check(msgpack_pack_array(&pk_, n));
}
void Packer::u64(std::uint64_t v) {
    check(msgpack_pack_uint64(&pk_, v));
}
void Packer::boolean(bool v) {
    check(v ? msgpack_pack_true(&pk_) : msgpack_pack_false(&pk_));
}
void Packer::str(std::string_view s) {
    check(msgpack_pack_str(&pk_, s.size()));
    check(msgpack_pack_str_body(&pk_, s.data(), s.size()));
}

// ---------------------------------------------------------------------------------------------
// Error strings

std::string quote(std::string_view s) {
    static constexpr char kHex[] = "0123456789abcdef";
    constexpr std::size_t kMaxQuoted = 64;
    std::string q;
    q.reserve((s.size() < kMaxQuoted ? s.size() : kMaxQuoted) + 8);
    q += '"';
    for (std::size_t i = 0; i < s.size() && i < kMaxQuoted; ++i) {
        auto c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            q += '\\';
            q += static_cast<char>(c);
        } else if (c < 0x20 || c >= 0x7f) {
            q += "\\x";
            q += kHex[c >> 4];
            q += kHex[c & 0xf];
        } else {
            q += static_cast<char>(c);
        }
    }
    if (s.size() > kMaxQuoted) q += "...";
    q += '"';
    return q;
}

const char* type_name(const msgpack_object& o) {
    switch (o.type) {
        case MSGPACK_OBJECT_NIL: return "nil";
        case MSGPACK_OBJECT_BOOLEAN: return "bool";
        case MSGPACK_OBJECT_POSITIVE_INTEGER: return "uint";
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "int";
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64: return "float";
        case MSGPACK_OBJECT_STR: return "str";
        case MSGPACK_OBJECT_ARRAY: return "array";
        case MSGPACK_OBJECT_MAP: return "map";
        case MSGPACK_OBJECT_BIN: return "bin";
        case MSGPACK_OBJECT_EXT: return "ext";
    }
    return "unknown";
}

// ---------------------------------------------------------------------------------------------
// Raw scan

namespace {

enum class Scan { Ok, Truncated, Malformed, TooDeep };

std::uint64_t load_be(const unsigned char* p, std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
    return v;
}

Scan scan_object(std::string_view b, std::size_t& end) {
    const auto* p = reinterpret_cast<const unsigned char*>(b.data());
    const std::size_t len = b.size();
    std::size_t pos = 0;
    std::array<std::uint64_t, kMaxDepth + 1> left{};
    std::size_t depth = 1;
    left[0] = 1;
    std::uint64_t pending = 1;

    while (depth > 0) {
        if (left[depth - 1] == 0) {
            --depth;
            continue;
        }
        if (pos >= len) return Scan::Truncated;
        --left[depth - 1];
        --pending;
        const unsigned char tag = p[pos++];
        const std::size_t avail = len - pos;
        std::uint64_t skip = 0;
        std::uint64_t children = 0;
        bool container = false;
        auto need = [&](std::size_t n, std::uint64_t& v) {
            if (avail < n) return false;
            v = load_be(p + pos, n);
            pos += n;
            return true;
        };
        if (tag <= 0x7f || tag >= 0xe0) {
        } else if (tag <= 0x8f) {
            container = true;
            children = std::uint64_t{2} * (tag & 0x0fu);
        } else if (tag <= 0x9f) {
            container = true;
            children = tag & 0x0fu;
        } else if (tag <= 0xbf) {
            skip = tag & 0x1fu;
        } else {
            std::uint64_t n = 0;
            switch (tag) {
                case 0xc0:
                case 0xc2:
                case 0xc3: break;
                case 0xc1: return Scan::Malformed;
                case 0xc4:
                case 0xd9:
                    if (!need(1, n)) return Scan::Truncated;
                    skip = n;
                    break;
                case 0xc5:
                case 0xda:
                    if (!need(2, n)) return Scan::Truncated;
                    skip = n;
                    break;
                case 0xc6:
                case 0xdb:
                    if (!need(4, n)) return Scan::Truncated;
                    skip = n;
                    break;
                case 0xc7:
                    if (!need(1, n)) return Scan::Truncated;
                    skip = n + 1;
                    break;
                case 0xc8:
                    if (!need(2, n)) return Scan::Truncated;
                    skip = n + 1;
                    break;
                case 0xc9:
                    if (!need(4, n)) return Scan::Truncated;
                    skip = n + 1;
                    break;
                case 0xca: skip = 4; break;
                case 0xcb: skip = 8; break;
                case 0xcc: skip = 1; break;
                case 0xcd: skip = 2; break;
                case 0xce: skip = 4; break;
                case 0xcf: skip = 8; break;
                case 0xd0: skip = 1; break;
                case 0xd1: skip = 2; break;
                case 0xd2: skip = 4; break;
                case 0xd3: skip = 8; break;
                case 0xd4: skip = 2; break;
                case 0xd5: skip = 3; break;
                case 0xd6: skip = 5; break;
                case 0xd7: skip = 9; break;
                case 0xd8: skip = 17; break;
                case 0xdc:
                    if (!need(2, n)) return Scan::Truncated;
                    container = true;
                    children = n;
                    break;
                case 0xdd:
                    if (!need(4, n)) return Scan::Truncated;
                    container = true;
                    children = n;
                    break;
                case 0xde:
                    if (!need(2, n)) return Scan::Truncated;
                    container = true;
                    children = 2 * n;
                    break;
                case 0xdf:
                    if (!need(4, n)) return Scan::Truncated;
                    container = true;
                    children = 2 * n;
                    break;
                default: return Scan::Malformed;
            }
        }
        if (skip > len - pos) return Scan::Truncated;
        pos += static_cast<std::size_t>(skip);
        if (container && children > 0) {
            if (depth > kMaxDepth) return Scan::TooDeep;
            pending += children;
            if (pending > len - pos) return Scan::Truncated;
            left[depth++] = children;
        }
    }
    end = pos;
    return Scan::Ok;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Body

Body::Body() {
    msgpack_unpacked_init(&unpacked_);
}
Body::~Body() {
    msgpack_unpacked_destroy(&unpacked_);
}

bool Body::parse(std::string_view bytes, std::string& error) {
    if (bytes.size() > kMaxMessageBytes) {
        error = "message too large (" + std::to_string(bytes.size()) + " bytes, max " +
                std::to_string(kMaxMessageBytes) + ")";
        return false;
    }
    if (bytes.empty()) {
        error = "empty message";
        return false;
    }
    std::size_t end = 0;
    switch (scan_object(bytes, end)) {
        case Scan::Ok: break;
        case Scan::Truncated: error = "truncated message"; return false;
        case Scan::Malformed: error = "malformed msgpack"; return false;
        case Scan::TooDeep: error = "message nested too deeply"; return false;
    }
    if (end != bytes.size()) {
        error = "trailing bytes after message";
        return false;
    }
    std::size_t off = 0;
    msgpack_unpack_return rc = msgpack_unpack_next(&unpacked_, bytes.data(), bytes.size(), &off);
    if (rc != MSGPACK_UNPACK_SUCCESS || off != bytes.size()) {
        error = rc == MSGPACK_UNPACK_CONTINUE ? "truncated message" : "malformed msgpack";
        return false;
    }
    if (unpacked_.data.type != MSGPACK_OBJECT_MAP) {
        error = std::string("message is ") + type_name(unpacked_.data) + ", not a map";
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Path and MapReader

std::string Path::render() const {
    std::string parent_text = parent ? parent->render() : std::string();
    std::string s = parent_text;
    if (!key.empty()) {
        if (!s.empty()) s += '.';
        s.append(key.data(), key.size());
    }
    if (index >= 0) s += "[" + std::to_string(index) + "]";
    return s;
}

namespace {
std::string_view str_of(const msgpack_object& o) {
    return o.via.str.size == 0 ? std::string_view()
                               : std::string_view(o.via.str.ptr, o.via.str.size);
}
std::string quote_key(std::string_view key) {
    return '"' + std::string(key) + '"';
}

// The typed getters of MapReader (by key) and RowReader (by position), written once:
// `r.get(at, ...)` finds the value with its type checked, `r.label(at)` names it in errors.
template <class Reader, class At>
bool typed_u64(const Reader& r, At at, std::uint64_t& out) {
    const msgpack_object* o = nullptr;
    if (!r.get(at, MSGPACK_OBJECT_POSITIVE_INTEGER, "uint", o)) return false;
    out = o->via.u64;
    return true;
}

template <class Reader, class At>
bool typed_bool(const Reader& r, At at, bool& out) {
    const msgpack_object* o = nullptr;
    if (!r.get(at, MSGPACK_OBJECT_BOOLEAN, "bool", o)) return false;
    out = o->via.boolean;
    return true;
}

template <class Reader, class At>
bool typed_name(const Reader& r, At at, std::string& out) {
    const msgpack_object* o = nullptr;
    if (!r.get(at, MSGPACK_OBJECT_STR, "str", o)) return false;
    std::string_view v = str_of(*o);
    if (!valid_name(v)) return r.fail("invalid " + quote_key(r.label(at)) + " " + quote(v));
    out.assign(v.data(), v.size());
    return true;
}

// A str value parsed by `parse` (parse_scope, parse_mode).
template <class Reader, class At, class T, class Parse>
bool typed_enum(const Reader& r, At at, T& out, Parse parse) {
    const msgpack_object* o = nullptr;
    if (!r.get(at, MSGPACK_OBJECT_STR, "str", o)) return false;
    std::optional<T> v = parse(str_of(*o));
    if (!v) return r.fail("bad " + quote_key(r.label(at)) + " " + quote(str_of(*o)));
    out = *v;
    return true;
}

template <class Reader, class At>
bool typed_array(const Reader& r, At at, const msgpack_object*& out, std::size_t max_items) {
    if (!r.get(at, MSGPACK_OBJECT_ARRAY, "array", out)) return false;
    if (out->via.array.size > max_items) {
        return r.fail("too many " + quote_key(r.label(at)) + " (" +
                      std::to_string(out->via.array.size) + ", max " + std::to_string(max_items) +
                      ")");
    }
    return true;
}
}  // namespace

MapReader::MapReader(const msgpack_object& o, const Path& path, std::string& error)
    : path_(path), error_(error) {
    if (o.type != MSGPACK_OBJECT_MAP) {
        std::string where = path_.render();
        error_ = "bad " + (where.empty() ? std::string("message") : quote_key(where)) + " type " +
                 type_name(o) + " (want map)";
        return;
    }
    ok_ = check_keys(o);
}

MapReader::MapReader(const msgpack_object& o, const std::string_view* keys, std::size_t n_keys,
                     std::string where, std::string& error)
    : error_(error), keys_(keys), n_keys_(n_keys), where_(std::move(where)) {
    if (n_keys > kMaxListedKeys) throw std::logic_error("MapReader: too many listed keys");
    if (o.type != MSGPACK_OBJECT_MAP) {
        fail(std::string("bad map type ") + type_name(o));
        return;
    }
    ok_ = check_keys(o);
}

namespace {
// The values of the map `o`'s keys listed in `names` into `vals` (nullptr: absent), in one
// pass: a non-string key, or a listed key twice, is refused (by `r.fail`); other keys are left
// alone. MapReader's listed keys and RowReader's keyed entries.
template <class Reader>
bool collect_listed(const Reader& r, const msgpack_object& o, const std::string_view* names,
                    std::size_t n, const msgpack_object** vals) {
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
        const msgpack_object_kv& kv = o.via.map.ptr[i];
        if (kv.key.type != MSGPACK_OBJECT_STR) {
            return r.fail(std::string(type_name(kv.key)) + " key in map");
        }
        const std::string_view key = str_of(kv.key);
        for (std::size_t k = 0; k < n; ++k) {
            if (names[k] != key) continue;
            if (vals[k] != nullptr) return r.fail("duplicate key " + quote_key(key));
            vals[k] = &kv.val;
            break;
        }
    }
    return true;
}
}  // namespace

bool MapReader::check_keys(const msgpack_object& o) {
    if (!collect_listed(*this, o, keys_, n_keys_, vals_.data())) return false;
    map_ = &o;
    return true;
}

RowReader::RowReader(const msgpack_object& o, const Path& path, const std::string_view* fields,
                     std::size_t n_fields, std::size_t required, std::string& error, Form form)
    : path_(path), fields_(fields), n_fields_(n_fields), error_(error) {
    if (n_fields > kMaxFields) throw std::logic_error("RowReader: too many fields");
    ok_ = form == Form::Positional ? positional(o, required) : keyed(o);
}

bool RowReader::positional(const msgpack_object& o, std::size_t required) {
    if (o.type != MSGPACK_OBJECT_ARRAY) {
        return fail(std::string("bad entry type ") + type_name(o) + " (want array)");
    }
    if (o.via.array.size < required || o.via.array.size > n_fields_) {
        return fail("bad entry length " + std::to_string(o.via.array.size) + " (want " +
                    (required == n_fields_
                         ? std::to_string(n_fields_)
                         : std::to_string(required) + ".." + std::to_string(n_fields_)) +
                    ")");
    }
    for (std::uint32_t i = 0; i < o.via.array.size; ++i) items_[i] = &o.via.array.ptr[i];
    return true;
}

bool RowReader::keyed(const msgpack_object& o) {
    if (o.type != MSGPACK_OBJECT_MAP) {
        return fail(std::string("bad entry type ") + type_name(o) + " (want map)");
    }
    return collect_listed(*this, o, fields_, n_fields_, items_.data());
}

bool RowReader::fail(const std::string& what) const {
    error_ = what;
    std::string where = path_.render();
    if (!where.empty()) error_ += " in " + where;
    return false;
}

bool RowReader::get(std::size_t i, msgpack_object_type want, const char* want_name,
                    const msgpack_object*& o) const {
    if (!has(i)) return fail("missing " + quote_key(fields_[i]));
    o = items_[i];
    if (o->type != want) {
        return fail("bad " + quote_key(fields_[i]) + " type " + type_name(*o) + " (want " +
                    want_name + ")");
    }
    return true;
}

bool RowReader::u64(std::size_t i, std::uint64_t& out) const {
    return typed_u64(*this, i, out);
}

bool RowReader::boolean(std::size_t i, bool& out) const {
    return typed_bool(*this, i, out);
}

bool RowReader::name(std::size_t i, std::string& out) const {
    return typed_name(*this, i, out);
}

bool RowReader::scope(std::size_t i, Scope& out) const {
    return typed_enum(*this, i, out, parse_scope);
}

bool RowReader::mode(std::size_t i, Mode& out) const {
    return typed_enum(*this, i, out, parse_mode);
}

bool RowReader::array(std::size_t i, const msgpack_object*& out, std::size_t max_items) const {
    return typed_array(*this, i, out, max_items);
}

bool MapReader::fail(const std::string& what) const {
    error_ = what;
    if (keys_ != nullptr) {
        error_ += where_;
        return false;
    }
    std::string where = path_.render();
    if (!where.empty()) error_ += " in " + where;
    return false;
}

bool MapReader::find(std::string_view key, const msgpack_object*& out) const {
    out = nullptr;
    if (map_ == nullptr) return fail("not a map");
    if (keys_ != nullptr) {  // collected, duplicates refused: a lookup in the list
        for (std::size_t k = 0; k < n_keys_; ++k) {
            if (keys_[k] != key) continue;
            out = vals_[k];
            return true;
        }
        throw std::logic_error("MapReader: key " + std::string(key) + " not listed");
    }
    for (std::uint32_t i = 0; i < map_->via.map.size; ++i) {
        const msgpack_object_kv& kv = map_->via.map.ptr[i];
        if (str_of(kv.key) != key) continue;
        if (out != nullptr) return fail("duplicate key " + quote_key(key));
        out = &kv.val;
    }
    return true;
}

bool MapReader::present(std::string_view key) const {
    const msgpack_object* o = nullptr;
    return find(key, o) && o != nullptr;
}

bool MapReader::get(std::string_view key, msgpack_object_type want, const char* want_name,
                    const msgpack_object*& o) const {
    if (!find(key, o)) return false;
    if (o == nullptr) return fail("missing " + quote_key(key));
    if (o->type != want) {
        return fail("bad " + quote_key(key) + " type " + type_name(*o) + " (want " + want_name +
                    ")");
    }
    return true;
}

bool MapReader::u64(std::string_view key, std::uint64_t& out) const {
    return typed_u64(*this, key, out);
}

bool MapReader::boolean(std::string_view key, bool& out) const {
    return typed_bool(*this, key, out);
}

bool MapReader::str(std::string_view key, std::string& out, std::size_t max_len) const {
    const msgpack_object* o = nullptr;
    if (!get(key, MSGPACK_OBJECT_STR, "str", o)) return false;
    std::string_view v = str_of(*o);
    if (v.size() > max_len) {
        return fail(quote_key(key) + " longer than " + std::to_string(max_len) + " bytes");
    }
    out.assign(v.data(), v.size());
    return true;
}

bool MapReader::str(std::string_view key, std::string_view& out) const {
    const msgpack_object* o = nullptr;
    if (!get(key, MSGPACK_OBJECT_STR, "str", o)) return false;
    out = str_of(*o);
    return true;
}

bool MapReader::name(std::string_view key, std::string& out) const {
    return typed_name(*this, key, out);
}

bool MapReader::name_or_empty(std::string_view key, std::string& out) const {
    const msgpack_object* o = nullptr;
    if (!get(key, MSGPACK_OBJECT_STR, "str", o)) return false;
    std::string_view v = str_of(*o);
    if (!v.empty() && !valid_name(v)) return fail("invalid " + quote_key(key) + " " + quote(v));
    out.assign(v.data(), v.size());
    return true;
}

bool MapReader::scope(std::string_view key, Scope& out) const {
    return typed_enum(*this, key, out, parse_scope);
}

bool MapReader::mode(std::string_view key, Mode& out) const {
    return typed_enum(*this, key, out, parse_mode);
}

bool MapReader::array(std::string_view key, const msgpack_object*& out,
                      std::size_t max_items) const {
    return typed_array(*this, key, out, max_items);
}

bool MapReader::map(std::string_view key, const msgpack_object*& out) const {
    return get(key, MSGPACK_OBJECT_MAP, "map", out);
}

bool MapReader::opt_u64(std::string_view key, std::optional<std::uint64_t>& out) const {
    out.reset();
    const msgpack_object* o = nullptr;
    if (!find(key, o)) return false;
    if (o == nullptr) return true;
    std::uint64_t v = 0;
    if (!u64(key, v)) return false;
    out = v;
    return true;
}

bool MapReader::opt_bool(std::string_view key, bool& out) const {
    out = false;
    const msgpack_object* o = nullptr;
    if (!find(key, o)) return false;
    if (o == nullptr) return true;
    return boolean(key, out);
}

bool MapReader::opt_mode(std::string_view key, std::optional<Mode>& out) const {
    out.reset();
    const msgpack_object* o = nullptr;
    if (!find(key, o)) return false;
    if (o == nullptr) return true;
    Mode m = Mode::Deny;
    if (!mode(key, m)) return false;
    out = m;
    return true;
}

bool check_header(const MapReader& r, std::string_view want_type, std::uint64_t version) {
    std::uint64_t v = 0;
    if (!r.u64("v", v)) return false;
    if (v != version) {
        return r.fail("bad \"v\" " + std::to_string(v) + " (want " + std::to_string(version) + ")");
    }
    std::string type;
    if (!r.str("type", type, 64)) return false;
    if (type != want_type)
        return r.fail("bad \"type\" " + quote(type) + " (want " + quote(want_type) + ")");
    return true;
}

void pack_match(Packer& p, const RuntimeMatch& m) {
    p.map(5);
    p.kv("caller", m.caller);
    p.kv("caller_kind", match_kind_name(m.caller_kind));
    p.kv("procedure", m.procedure);
    p.kv("procedure_kind", match_kind_name(m.procedure_kind));
    p.kv("scope", to_string(m.scope));
}

std::string_view match_kind_name(MatchKind k) {
    switch (k) {
        case MatchKind::Exact: return "exact";
        case MatchKind::Prefix: return "prefix";
        case MatchKind::Regex: return "regex";
        case MatchKind::Any: break;
    }
    return "exact";
}

std::optional<MatchKind> parse_match_kind(std::string_view s, bool regex_ok) {
    if (s == "exact") return MatchKind::Exact;
    if (s == "prefix") return MatchKind::Prefix;
    if (s == "regex" && regex_ok) return MatchKind::Regex;
    return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Key lists of keyed buckets

std::string key_name(std::uint64_t hash) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s = "key 0x";
    for (int shift = 60; shift >= 0; shift -= 4) s += kHex[(hash >> shift) & 0xf];
    return s;
}

bool uint_pair(const msgpack_object& o, std::uint64_t& first, std::uint64_t& second) {
    if (o.type != MSGPACK_OBJECT_ARRAY || o.via.array.size != 2 ||
        o.via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        o.via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        return false;
    }
    first = o.via.array.ptr[0].via.u64;
    second = o.via.array.ptr[1].via.u64;
    return true;
}

void pack_key_rate(Packer& p, const KeyRate& k, bool with_hosts) {
    p.map(3 + (k.text.empty() ? 0 : 1) + (with_hosts ? 1 : 0) + (k.used != 0 ? 1 : 0));
    p.kv("h", k.hash);
    if (!k.text.empty()) p.kv("k", k.text);
    p.kv("offered_mrps", k.offered_mrps);
    p.kv("dropped_mrps", k.dropped_mrps);
    if (with_hosts) p.kv("hosts", k.hosts);
    if (k.used != 0) p.kv("used", k.used);
}

void pack_key_rates(Packer& p, std::string_view key, const std::vector<KeyRate>& keys,
                    bool with_hosts) {
    p.str(key);
    p.array(keys.size());
    for (const KeyRate& k : keys) pack_key_rate(p, k, with_hosts);
}

bool read_key_rate(const msgpack_object& o, const Path& path, bool with_hosts, KeyRate& out,
                   std::string& error) {
    MapReader r(o, path, error);
    if (!r.ok()) return false;
    KeyRate k;
    if (!r.u64("h", k.hash)) return false;
    if (k.hash <= 1) return r.fail("bad \"h\" " + std::to_string(k.hash) + " (a key hash is > 1)");
    const msgpack_object* text = nullptr;
    if (!r.find("k", text)) return false;
    if (text != nullptr) {
        if (text->type != MSGPACK_OBJECT_STR) {
            return r.fail("bad \"k\" type " + std::string(type_name(*text)) + " (want str) of " +
                          key_name(k.hash));
        }
        if (text->via.str.size > kMaxKeyTextLen) {
            return r.fail("\"k\" of " + key_name(k.hash) + " longer than " +
                          std::to_string(kMaxKeyTextLen) + " bytes");
        }
        k.text.assign(str_of(*text));
    }
    if (!r.u64("offered_mrps", k.offered_mrps) || !r.u64("dropped_mrps", k.dropped_mrps)) {
        return false;
    }
    if (k.dropped_mrps > k.offered_mrps) {
        return r.fail("\"dropped_mrps\" " + std::to_string(k.dropped_mrps) +
                      " greater than \"offered_mrps\" " + std::to_string(k.offered_mrps) + " of " +
                      key_name(k.hash));
    }
    k.hosts = 1;
    if (with_hosts && !r.u64("hosts", k.hosts)) return false;
    std::optional<std::uint64_t> used;
    if (!r.opt_u64("used", used)) return false;
    k.used = used.value_or(0);
    out = std::move(k);
    return true;
}

bool read_key_rates(const msgpack_object& arr, const Path& path, std::size_t max, bool with_hosts,
                    std::vector<KeyRate>& out, std::string& error) {
    if (arr.type != MSGPACK_OBJECT_ARRAY) {
        error = "bad \"" + path.render() + "\" type " + type_name(arr) + " (want array)";
        return false;
    }
    if (arr.via.array.size > max) {
        error = "too many keys (" + std::to_string(arr.via.array.size) + ", max " +
                std::to_string(max) + ") in " + path.render();
        return false;
    }
    out.clear();
    out.resize(arr.via.array.size);
    std::vector<std::uint64_t> hashes(arr.via.array.size);
    for (std::uint32_t i = 0; i < arr.via.array.size; ++i) {
        Path p{path.parent, path.key, static_cast<long>(i)};
        if (!read_key_rate(arr.via.array.ptr[i], p, with_hosts, out[i], error)) return false;
        hashes[i] = out[i].hash;
    }
    std::sort(hashes.begin(), hashes.end());
    auto dup = std::adjacent_find(hashes.begin(), hashes.end());
    if (dup != hashes.end()) {
        error = "duplicate " + key_name(*dup) + " in " + path.render();
        return false;
    }
    return true;
}

}  // namespace grl::wire::codec
