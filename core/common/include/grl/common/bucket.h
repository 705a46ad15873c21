// Bucket definitions and the matcher that finds the buckets a request belongs to.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grl/common/bucket_types.h"

namespace grl {

enum class MatchKind : std::uint8_t { Any, Exact, Prefix, Regex };

struct MatchSpec {
    MatchKind kind = MatchKind::Any;
    std::string value;  // literal for Exact/Prefix, pattern for Regex
};

struct BucketDef {
    std::string name;
    MatchSpec caller;
    MatchSpec procedure;
    Scope scope = Scope::Global;
    Mode mode = Mode::Deny;
    std::uint64_t limit_mrps = 0;  // milli-requests per second
};

// What the request carries. A request without a caller (missing header,
// empty value) never matches a bucket that matches on caller.
struct RequestKey {
    std::string_view caller;
    bool has_caller = false;
    std::string_view procedure;
};

inline constexpr std::size_t kMaxMatchesPerRequest = 16;

// Candidates match() verifies per request at most; beyond (a configuration
// where one value selects more buckets), it falls back to match_linear().
inline constexpr std::size_t kMaxMatchCandidates = 64;

// Up to this many buckets, match() scans them linearly: a few compares of
// 8-byte heads cost less than hashing the request's values.
inline constexpr std::size_t kLinearMatchBuckets = 4;

// Immutable after construction; one per configuration per process. Regexes are
// compiled once (PCRE2, JIT where available) with preallocated match data, so
// match() never allocates. Not thread-safe (nginx workers are single-threaded).
class Matcher {
  public:
    Matcher() = default;
    ~Matcher();
    Matcher(const Matcher&) = delete;
    Matcher& operator=(const Matcher&) = delete;

    // Adds a bucket; returns an error message (empty on success): a bad regex
    // or a duplicate name. Bucket i is the i-th successfully added.
    std::string add(const BucketDef& def);

    // Writes the indices of all matching buckets (in definition order, at most
    // `max`) to `out` and returns how many. Its cost does not grow with the number
    // of buckets: exact values and prefixes are looked up in a hash index, and
    // only buckets matching on neither caller nor procedure literally (regexes,
    // catch-alls) are tried one by one.
    // Inline for the case of no matchers at all (limit_req's usual setup).
    std::size_t match(const RequestKey& key, std::uint16_t* out, std::size_t max) const {
        if (!all_match_every_request_) return match_indexed(key, out, max);
        const std::size_t n = std::min(entries_.size(), max);
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint16_t>(i);
        return n;
    }

    // The same answer by trying every bucket in turn: the reference match() must
    // equal (t/unit/bucket_test.cpp), and its fallback.
    std::size_t match_linear(const RequestKey& key, std::uint16_t* out, std::size_t max) const;

    std::size_t size() const { return entries_.size(); }
    const BucketDef& def(std::size_t i) const { return entries_[i].def; }

    // Where to count regex matches that hit a limit (kRegexMatchLimit steps, or the JIT
    // stack): they count as no match, so a pathological pattern costs a bounded time per
    // request. The nginx module points it at its worker's slot in the shared zone.
    void count_limit_hits_in(std::atomic<std::uint64_t>* counter);

  private:
    struct Compiled;
    struct CompiledDeleter {
        void operator()(Compiled* c) const;
    };
    using CompiledPtr = std::unique_ptr<Compiled, CompiledDeleter>;
    // A literal's first 8 bytes as one word, so most mismatches cost a single
    // compare; see match().
    struct Literal {
        std::uint64_t head = 0;
        std::uint64_t mask = 0;
        std::uint32_t len = 0;
        MatchKind kind = MatchKind::Any;
        const char* data = nullptr;  // into Entry::def
        const Compiled* re = nullptr;
    };
    struct Hot {
        Literal caller;
        Literal procedure;
    };
    struct Entry {
        BucketDef def;
        CompiledPtr caller_re;
        CompiledPtr procedure_re;
    };
    std::size_t match_indexed(const RequestKey& key, std::uint16_t* out, std::size_t max) const;
    static CompiledPtr compile(std::string_view pattern, std::string& error);
    static bool matches(const Literal& lit, std::string_view v, std::uint64_t v_head);
    static bool regex_matches(const Compiled& re, std::string_view v);
    static Literal literal(const MatchSpec& spec, const Compiled* re);

    // The head words of both literals side by side (32 bytes a bucket), so the
    // first pass of match() is a tight scan; Any and Regex use mask 0 (always
    // a candidate).
    struct Prefilter {
        std::uint64_t caller_mask, caller_head, procedure_mask, procedure_head;
    };

    bool candidate(std::size_t i, const RequestKey& key, std::uint64_t caller_head,
                   std::uint64_t procedure_head) const;

    // The index: each bucket is filed once, under the most selective literal it
    // has (procedure exact, caller exact, procedure prefix, caller prefix), or
    // else in scan_. A prefix is looked up once per distinct prefix length.
    enum Tag : std::uint8_t { kProcedureExact, kCallerExact, kProcedurePrefix, kCallerPrefix };
    struct IndexKey {
        std::uint64_t hash = 0;
        std::uint32_t list = 0;  // 1 + index into lists_; 0: empty slot
    };
    struct List {
        const char* key = nullptr;  // into Entry::def
        std::uint32_t len = 0;
        Tag tag = kProcedureExact;
        std::vector<std::uint16_t> buckets;  // ascending
    };
    static std::uint64_t hash(Tag tag, const char* data, std::size_t len);
    const List* lookup(Tag tag, const char* data, std::size_t len) const;
    // Adds to found[n...] the lists of the keys `v` has under `exact` and `prefix` and returns
    // the new count; kMaxFoundLists + 1 when they do not fit (match() then scans linearly).
    static constexpr std::size_t kMaxFoundLists = 16;
    std::size_t probe(Tag exact, Tag prefix, std::string_view v, const List** found,
                      std::size_t n) const;
    void build_index();
    std::vector<IndexKey> table_;  // open addressing, a power of two
    std::vector<List> lists_;
    std::vector<std::uint16_t> scan_;
    // Distinct key lengths per tag, ascending, each with the set of last bytes its keys end
    // in: a request value whose byte at that position is not in the set cannot match a key
    // of that length, so the lookup (a hash of the value's first `len` bytes) is skipped.
    // Prefixes usually end at a path segment ('/'), so only the value's segment boundaries
    // are looked up, however many prefix lengths the configuration has. Exact keys use the
    // same filter on the value's own length and last byte.
    struct KeyLength {
        std::uint32_t len = 0;
        std::uint64_t last[4] = {0, 0, 0, 0};  // 256 bits; len 0 always looked up
        bool may_match(std::string_view v) const {
            if (len == 0) return true;
            const auto b = static_cast<unsigned char>(v[len - 1]);
            return (last[b >> 6] >> (b & 63)) & 1;
        }
    };
    std::vector<KeyLength> lengths_[4];

    std::vector<Entry> entries_;
    std::vector<Hot> hot_;              // parallel to entries_, rebuilt by add()
    std::vector<Prefilter> prefilter_;  // parallel to entries_
    // No bucket has caller= or procedure=: every request matches them all (limit_req's usual
    // setup), and match() only counts them out.
    bool all_match_every_request_ = false;
};

// Backtracking steps one regex match may take (pcre2_set_match_limit; PCRE2's own default
// is 10,000,000). Paths and callers are short; a sane pattern needs a few hundred.
inline constexpr std::uint32_t kRegexMatchLimit = 100000;

// Error text for an invalid regex, or empty when `pattern` compiles.
std::string check_regex(std::string_view pattern);

}  // namespace grl
