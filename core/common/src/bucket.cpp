#include "grl/common/bucket.h"

#include <algorithm>
#include <cstring>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace grl {

// Every match runs with a match context: a step limit and, for JIT code, its own stack,
// so that no pattern can take unbounded time (or the machine stack) on one request.
struct Matcher::Compiled {
    pcre2_code* code = nullptr;
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* jit_stack = nullptr;
    std::atomic<std::uint64_t>* limit_hits = nullptr;
    ~Compiled() {
        if (jit_stack) pcre2_jit_stack_free(jit_stack);
        if (context) pcre2_match_context_free(context);
        if (data) pcre2_match_data_free(data);
        if (code) pcre2_code_free(code);
    }
};

namespace {

std::string pcre_error(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof(buf));
    return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string check_regex(std::string_view pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     0, &err, &off, nullptr);
    if (!code) {
        return "invalid regex \"" + std::string(pattern) + "\": " + pcre_error(err) +
               " at offset " + std::to_string(off);
    }
    pcre2_code_free(code);
    return {};
}

void Matcher::CompiledDeleter::operator()(Compiled* c) const {
    delete c;
}

Matcher::CompiledPtr Matcher::compile(std::string_view pattern, std::string& error) {
    error = check_regex(pattern);
    if (!error.empty()) return nullptr;
    int err = 0;
    PCRE2_SIZE off = 0;
    CompiledPtr c(new Compiled());
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &err,
                            &off, nullptr);
    // JIT is an optimisation only: a failure leaves the interpreter in use.
    (void)pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);
    c->data = pcre2_match_data_create_from_pattern(c->code, nullptr);
    c->context = pcre2_match_context_create(nullptr);
    c->jit_stack = pcre2_jit_stack_create(32 * std::size_t{1024}, 512 * std::size_t{1024}, nullptr);
    if (!c->data || !c->context || !c->jit_stack) {
        error = "out of memory compiling regex";
        return nullptr;
    }
    pcre2_set_match_limit(c->context, kRegexMatchLimit);
    pcre2_set_depth_limit(c->context, kRegexMatchLimit);
    pcre2_set_heap_limit(c->context, 1024);  // KiB, for the interpreter's backtracking
    pcre2_jit_stack_assign(c->context, nullptr, c->jit_stack);
    return c;
}

Matcher::~Matcher() = default;

void Matcher::count_limit_hits_in(std::atomic<std::uint64_t>* counter) {
    for (Entry& e : entries_) {
        if (e.caller_re) e.caller_re->limit_hits = counter;
        if (e.procedure_re) e.procedure_re->limit_hits = counter;
    }
}

// A regex match; an error (a limit hit) is no match, and counted.
bool Matcher::regex_matches(const Compiled& re, std::string_view v) {
    const int rc = pcre2_match(re.code, reinterpret_cast<PCRE2_SPTR>(v.data()), v.size(), 0, 0,
                               re.data, re.context);
    if (rc >= 0) return true;
    if (rc != PCRE2_ERROR_NOMATCH && re.limit_hits) {
        re.limit_hits->fetch_add(1, std::memory_order_relaxed);
    }
    return false;
}

std::string Matcher::add(const BucketDef& def) {
    for (const Entry& e : entries_) {
        if (e.def.name == def.name) return "duplicate bucket \"" + def.name + "\"";
    }
    Entry e;
    e.def = def;
    std::string error;
    if (def.caller.kind == MatchKind::Regex) {
        e.caller_re = compile(def.caller.value, error);
        if (!e.caller_re) return error;
    }
    if (def.procedure.kind == MatchKind::Regex) {
        e.procedure_re = compile(def.procedure.value, error);
        if (!e.procedure_re) return error;
    }
    entries_.push_back(std::move(e));
    // Literals point into entries_' strings, which a reallocation may move.
    hot_.clear();
    prefilter_.clear();
    for (const Entry& en : entries_) {
        Hot h{literal(en.def.caller, en.caller_re.get()),
              literal(en.def.procedure, en.procedure_re.get())};
        auto literal_only = [](const Literal& l, std::uint64_t v) {
            return l.kind == MatchKind::Exact || l.kind == MatchKind::Prefix ? v : 0;
        };
        prefilter_.push_back({literal_only(h.caller, h.caller.mask),
                              literal_only(h.caller, h.caller.head),
                              literal_only(h.procedure, h.procedure.mask),
                              literal_only(h.procedure, h.procedure.head)});
        hot_.push_back(h);
    }
    all_match_every_request_ = std::all_of(hot_.begin(), hot_.end(), [](const Hot& h) {
        return h.caller.kind == MatchKind::Any && h.procedure.kind == MatchKind::Any;
    });
    build_index();
    return {};
}

namespace {

// First min(8, size) bytes of `v` as a little-endian word, zero-padded.
std::uint64_t head8(std::string_view v) {
    std::uint64_t w = 0;
    if (v.size() >= 8) {
        std::memcpy(&w, v.data(), 8);  // one load
    } else {
        for (std::size_t i = 0; i < v.size(); ++i) {
            w |= static_cast<std::uint64_t>(static_cast<unsigned char>(v[i])) << (8 * i);
        }
    }
    return w;
}

}  // namespace

Matcher::Literal Matcher::literal(const MatchSpec& spec, const Compiled* re) {
    Literal l;
    l.kind = spec.kind;
    l.re = re;
    l.data = spec.value.data();
    l.len = static_cast<std::uint32_t>(spec.value.size());
    std::size_t n = spec.value.size() < 8 ? spec.value.size() : 8;
    l.head = head8(spec.value);
    l.mask = n == 8 ? ~0ULL : ((1ULL << (8 * n)) - 1);
    return l;
}

// Inlined into match(): the head word rejects most non-matching literals
// before any length check or memcmp.
inline __attribute__((always_inline)) bool Matcher::matches(const Literal& l, std::string_view v,
                                                            std::uint64_t v_head) {
    switch (l.kind) {
        case MatchKind::Any: return true;
        case MatchKind::Regex: return regex_matches(*l.re, v);
        case MatchKind::Exact:
        case MatchKind::Prefix: break;
    }
    if ((v_head & l.mask) != l.head || v.size() < l.len) return false;
    if (l.kind == MatchKind::Exact && v.size() != l.len) return false;
    return l.len <= 8 || std::memcmp(v.data() + 8, l.data + 8, l.len - 8) == 0;
}

inline __attribute__((always_inline)) bool Matcher::candidate(std::size_t i, const RequestKey& key,
                                                              std::uint64_t caller_head,
                                                              std::uint64_t procedure_head) const {
    const Prefilter& p = prefilter_[i];
    if (((caller_head & p.caller_mask) ^ p.caller_head) |
        ((procedure_head & p.procedure_mask) ^ p.procedure_head)) {
        return false;  // a literal's first bytes differ: most buckets stop here
    }
    const Hot& h = hot_[i];
    if (h.caller.kind != MatchKind::Any) {
        if (!key.has_caller || !matches(h.caller, key.caller, caller_head)) return false;
    }
    return matches(h.procedure, key.procedure, procedure_head);
}

std::size_t Matcher::match_linear(const RequestKey& key, std::uint16_t* out,
                                  std::size_t max) const {
    const std::uint64_t caller_head = key.has_caller ? head8(key.caller) : 0;
    const std::uint64_t procedure_head = head8(key.procedure);
    std::size_t n = 0;
    const std::size_t count = prefilter_.size();
    for (std::size_t i = 0; i < count && n < max; ++i) {
        if (candidate(i, key, caller_head, procedure_head))
            out[n++] = static_cast<std::uint16_t>(i);
    }
    return n;
}

namespace {

// Equality of short byte strings without a call to memcmp.
inline __attribute__((always_inline)) bool same_bytes(const char* a, const char* b,
                                                      std::size_t len) {
    std::size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        std::uint64_t x, y;
        std::memcpy(&x, a + i, 8);
        std::memcpy(&y, b + i, 8);
        if (x != y) return false;
    }
    for (; i < len; ++i) {
        if (a[i] != b[i]) return false;
    }
    return true;
}

}  // namespace

inline __attribute__((always_inline)) std::uint64_t Matcher::hash(Tag tag, const char* data,
                                                                  std::size_t len) {
    constexpr std::uint64_t kMul = 0x9E3779B97F4A7C15ULL;
    std::uint64_t h = (static_cast<std::uint64_t>(tag) << 56) ^ (len * 0xC2B2AE3D27D4EB4FULL);
    std::size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        std::uint64_t w;
        std::memcpy(&w, data + i, 8);
        h = (h ^ w) * kMul;
    }
    if (i < len) {
        std::uint64_t w = 0;
        std::memcpy(&w, data + i, len - i);
        h = (h ^ w) * kMul;
    }
    // Finalise (MurmurHash3's fmix64): a product's low bits depend only on the
    // inputs' low bytes, which paths share ("/api"), and the table uses low bits.
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    return h;
}

inline __attribute__((always_inline)) const Matcher::List* Matcher::lookup(Tag tag,
                                                                           const char* data,
                                                                           std::size_t len) const {
    const std::uint64_t h = hash(tag, data, len);
    const std::size_t mask = table_.size() - 1;
    for (std::size_t s = h & mask;; s = (s + 1) & mask) {
        const IndexKey& k = table_[s];
        if (k.list == 0) return nullptr;
        if (k.hash != h) continue;
        const List& l = lists_[k.list - 1];
        if (l.tag == tag && l.len == len && same_bytes(l.key, data, len)) return &l;
    }
}

void Matcher::build_index() {
    table_.clear();
    lists_.clear();
    scan_.clear();
    for (auto& l : lengths_) l.clear();
    std::size_t size = 16;
    while (size < 2 * entries_.size()) size *= 2;
    table_.assign(size, IndexKey{});
    for (std::size_t i = 0; i < entries_.size(); ++i) {
        const BucketDef& d = entries_[i].def;
        Tag tag;
        std::string_view key;
        if (d.procedure.kind == MatchKind::Exact) {
            tag = kProcedureExact, key = d.procedure.value;
        } else if (d.caller.kind == MatchKind::Exact) {
            tag = kCallerExact, key = d.caller.value;
        } else if (d.procedure.kind == MatchKind::Prefix) {
            tag = kProcedurePrefix, key = d.procedure.value;
        } else if (d.caller.kind == MatchKind::Prefix) {
            tag = kCallerPrefix, key = d.caller.value;
        } else {
            scan_.push_back(static_cast<std::uint16_t>(i));
            continue;
        }
        const List* found = lookup(tag, key.data(), key.size());
        if (found) {
            lists_[static_cast<std::size_t>(found - lists_.data())].buckets.push_back(
                static_cast<std::uint16_t>(i));
            continue;
        }
        lists_.push_back(List{key.data(),
                              static_cast<std::uint32_t>(key.size()),
                              tag,
                              {static_cast<std::uint16_t>(i)}});
        const std::uint64_t h = hash(tag, key.data(), key.size());
        std::size_t s = h & (size - 1);
        while (table_[s].list != 0) s = (s + 1) & (size - 1);
        table_[s] = {h, static_cast<std::uint32_t>(lists_.size())};
        auto& lens = lengths_[tag];
        const auto len = static_cast<std::uint32_t>(key.size());
        auto at = std::lower_bound(lens.begin(), lens.end(), len,
                                   [](const KeyLength& k, std::uint32_t l) { return k.len < l; });
        if (at == lens.end() || at->len != len) at = lens.insert(at, KeyLength{len, {0, 0, 0, 0}});
        if (len > 0) {
            const auto b = static_cast<unsigned char>(key[len - 1]);
            at->last[b >> 6] |= std::uint64_t{1} << (b & 63);
        }
    }
}

inline __attribute__((always_inline)) std::size_t Matcher::probe(Tag exact, Tag prefix,
                                                                 std::string_view v,
                                                                 const List** found,
                                                                 std::size_t n) const {
    for (const KeyLength& k : lengths_[exact]) {
        if (k.len < v.size()) continue;
        if (k.len == v.size() && k.may_match(v)) {
            if (const List* l = lookup(exact, v.data(), v.size())) {
                if (n >= kMaxFoundLists) return kMaxFoundLists + 1;
                found[n++] = l;
            }
        }
        break;
    }
    for (const KeyLength& k : lengths_[prefix]) {
        if (k.len > v.size()) break;
        if (!k.may_match(v)) continue;
        const List* l = lookup(prefix, v.data(), k.len);
        if (l == nullptr) continue;
        if (n >= kMaxFoundLists) return kMaxFoundLists + 1;
        found[n++] = l;
    }
    return n;
}

std::size_t Matcher::match_indexed(const RequestKey& key, std::uint16_t* out,
                                   std::size_t max) const {
    if (entries_.size() <= kLinearMatchBuckets) return match_linear(key, out, max);
    // The lists of the keys the request's values have (each in definition order).
    const List* found[kMaxFoundLists];
    std::size_t nf = probe(kProcedureExact, kProcedurePrefix, key.procedure, found, 0);
    if (key.has_caller && nf <= kMaxFoundLists) {
        nf = probe(kCallerExact, kCallerPrefix, key.caller, found, nf);
    }
    if (nf > kMaxFoundLists) return match_linear(key, out, max);
    const std::uint64_t caller_head = key.has_caller ? head8(key.caller) : 0;
    const std::uint64_t procedure_head = head8(key.procedure);
    std::size_t n = 0;
    // One list and nothing to scan (the usual case): it is in definition order already, so its
    // buckets are verified in place, without the copy and the merge below.
    if (scan_.empty() && nf <= 1) {
        if (nf == 0) return 0;
        for (const std::uint16_t i : found[0]->buckets) {
            if (n == max) break;
            if (candidate(i, key, caller_head, procedure_head)) out[n++] = i;
        }
        return n;
    }
    std::uint16_t cand[kMaxMatchCandidates];
    std::size_t c = 0;
    auto take_list = [&](const std::vector<std::uint16_t>& list) {
        if (list.size() > kMaxMatchCandidates - c) return false;
        for (std::uint16_t i : list) cand[c++] = i;
        return true;
    };
    for (std::size_t f = 0; f < nf; ++f) {
        if (!take_list(found[f]->buckets)) return match_linear(key, out, max);
    }
    if (!take_list(scan_)) return match_linear(key, out, max);
    // Lists are ascending; merging a few short ones by insertion keeps definition order.
    for (std::size_t i = 1; i < c; ++i) {
        const std::uint16_t v = cand[i];
        std::size_t j = i;
        for (; j > 0 && cand[j - 1] > v; --j) cand[j] = cand[j - 1];
        cand[j] = v;
    }
    for (std::size_t k = 0; k < c && n < max; ++k) {
        if (candidate(cand[k], key, caller_head, procedure_head)) out[n++] = cand[k];
    }
    return n;
}

}  // namespace grl
