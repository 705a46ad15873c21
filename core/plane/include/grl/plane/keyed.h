// Per-key state of a keyed bucket (`grl_bucket NAME key=VALUE ...`, docs/per-key.md): one
// table per keyed bucket in shared memory, holding the keys seen lately, each with its
// counters, its local cap and the ratio the control plane sent for it.
//
// The request path touches one entry: found or claimed in a set of kWays entries (the key's
// hash picks the set), the set's least recently used entry evicted when the set is full.
// Every field is an independent atomic; claiming an entry is one compare-and-swap, so workers
// never lock and never allocate, and the work per request is bounded by kWays whatever the
// number of keys. As in limit_req's shared memory zone, memory is fixed by the operator (`keys=N`).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace grl::keyed {

inline constexpr std::uint32_t kWays = 8;                   // entries per set: probes per request
inline constexpr std::size_t kMaxKeyText = 47;              // bytes of a key kept for display
inline constexpr std::uint64_t kThresholdOne = 1ULL << 32;  // drop threshold of ratio 1.0
inline constexpr int kRaceAttempts = 4;  // compare-and-swaps tried before a race is given up

// 64-bit hash of a key's bytes (FNV-1a with a final avalanche); never 0 (a free entry) or 1
// (an entry being claimed). Reports may carry it instead of the key (docs/per-key.md).
// Inline (as the rest of the request path's steps below): it runs on every keyed request.
inline std::uint64_t hash_key(std::string_view key) {
    constexpr std::uint64_t kPrime = 0x100000001b3ULL;
    std::uint64_t h = 0xcbf29ce484222325ULL;
    const auto* p = reinterpret_cast<const unsigned char*>(key.data());
    std::size_t i = 0;
    // Four bytes a step, each still one FNV-1a round (an address key is 4 or 16 bytes).
    for (; i + 4 <= key.size(); i += 4) {
        h = (h ^ p[i]) * kPrime;
        h = (h ^ p[i + 1]) * kPrime;
        h = (h ^ p[i + 2]) * kPrime;
        h = (h ^ p[i + 3]) * kPrime;
    }
    for (; i < key.size(); ++i) h = (h ^ p[i]) * kPrime;
    // FNV-1a's low bits mix poorly; the set index and the check both need all of them.
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h < 2 ? h + 2 : h;
}

// A key as a log line shows it, in `out` (at least kLogKeyBytes): with hash_keys=on its hash as
// the status page and grlctl keys show it ("hash 0123456789abcdef"), never the key; else its
// first kMaxKeyText bytes, those outside printable ASCII and '"' and '\\' as \xHH (a key of
// $binary_remote_addr is 4 or 16 raw bytes), "..." after a longer key. Returns the length.
inline constexpr std::size_t kLogKeyBytes = 4 * kMaxKeyText + 4;
std::size_t key_for_log(std::string_view key, bool hashed, char* out);

struct alignas(64) Entry {
    std::atomic<std::uint64_t> hash;        // 0: free
    std::atomic<std::uint64_t> last_ms;     // last request (LRU order within the set)
    std::atomic<std::uint64_t> offered;     // since the entry was claimed
    std::atomic<std::uint64_t> dropped;     // by the local cap or the control plane's ratio
    std::atomic<std::uint64_t> tat_us;      // local cap: theoretical arrival time (GCRA)
    std::atomic<std::uint64_t> threshold;   // the control plane's ratio for this key...
    std::atomic<std::uint64_t> expires_ms;  // ...valid until then (0: none)
    // At the last report (reporter only): `dropped` in the high 32 bits, `offered` in the low
    // 32; the deltas are taken modulo 2^32, ample for one report interval of one key.
    std::atomic<std::uint64_t> reported;
};
static_assert(sizeof(Entry) == 64, "Entry is one cache line");

inline constexpr std::uint64_t kFree = 0;
inline constexpr std::uint64_t kClaiming = 1;  // held while a worker resets the entry

// The key's first bytes for display, beside its entry. Written by the claimer, `hash` last;
// a reader trusts the text only while `hash` equals the entry's (text_of).
struct KeyText {
    std::atomic<std::uint64_t> hash;
    std::uint8_t len;
    char text[kMaxKeyText];
    // A keyed bucket with quota= (take_quota_keys): the units admitted (offered - dropped) when
    // a report last listed the key's use; reset with the entry by a claim.
    std::atomic<std::uint64_t> listed;
};
static_assert(sizeof(KeyText) == 64, "KeyText layout");

struct alignas(64) TableHeader {
    std::uint32_t capacity;  // entries: a multiple of kWays
    std::uint32_t reserved;
    std::atomic<std::uint64_t> claims;       // keys that took an entry (new or evicting)
    std::atomic<std::uint64_t> evictions;    // keys pushed out by a newer one
    std::atomic<std::uint64_t> races;        // claims lost to another worker (then retried)
    std::atomic<std::uint64_t> reported_ms;  // monotonic ms of the last take_hitters (0: none)
    // Units admitted that no report listed as used: of keys evicted before a report listed
    // them, and dropped by drop_unlisted (a quota bucket's use lost on this host; other
    // buckets never list use, so for them it counts every unit of an evicted key and means
    // nothing).
    std::atomic<std::uint64_t> quota_units_lost;
};
static_assert(sizeof(TableHeader) == 64, "TableHeader is one cache line");

// Bytes for a table of `keys` entries (rounded up to a multiple of kWays), and the number of
// entries that fit in `bytes`.
std::size_t bytes_for(std::uint32_t keys);
std::uint32_t capacity_for(std::size_t bytes);

// What the request path decided for one key.
enum class Verdict : std::uint8_t {
    Pass,
    Ratio,     // dropped by the control plane's ratio for this key
    LocalCap,  // dropped because this host alone already admits the key's rate
};

// One heavy hitter for the report: a key's traffic since the previous report.
struct Hitter {
    std::uint64_t hash = 0;
    std::string_view text;  // points into the table; empty when unknown or overwritten
    std::uint64_t offered = 0;
    std::uint64_t dropped = 0;  // of `offered`
    std::uint64_t used = 0;     // take_quota_keys: units admitted since the key was last listed
};

class Table {
  public:
    Table() = default;
    explicit Table(void* base) : base_(static_cast<char*>(base)) {}

    // Formats fresh memory for `keys` entries (rounded up to a multiple of kWays).
    void format(std::uint32_t keys);

    // The entry of `hash` (claimed if absent, evicting the least recently used entry of its
    // set when the set is full), stamped with `now_ms`. `text` is kept for display.
    // Inline: a key found in its set (most requests) costs no call; claim() takes the rest.
    Entry& touch(std::uint64_t hash, std::string_view text, std::uint64_t now_ms) const {
        const std::uint32_t base = set_of(hash);
        for (std::uint32_t w = 0; w < kWays; ++w) {
            Entry& e = entry(base + w);
            if (e.hash.load(std::memory_order_acquire) == hash) {
                e.last_ms.store(now_ms, std::memory_order_relaxed);
                return e;
            }
        }
        return claim(hash, text, now_ms);
    }
    // The entry of `hash`, or nullptr (no claim).
    Entry* find(std::uint64_t hash) const;

    // Counts one request of the key in `e`, as `cost` units, and decides it: the control
    // plane's ratio first (while not expired), then the local cap: this host admits at most
    // `rate_mrps` units for the key (GCRA with a burst of `burst_ms` worth of units; a request
    // costing more than the burst passes alone when the key is idle). `rand32` samples the
    // ratio.
    // Inline, as touch().
    Verdict admit(Entry& e, std::uint64_t now_ms, std::uint64_t rate_mrps, std::uint64_t burst_ms,
                  std::uint32_t rand32, std::uint32_t cost = 1) const;
    // Counts `units` more for the key of `e` after its request was admitted (cost_after=):
    // offered, and the local cap's account.
    void charge(Entry& e, std::uint64_t now_ms, std::uint64_t rate_mrps, std::uint32_t units) const;

    // The reporter: the keys whose traffic since the previous call is at least `min_offered`,
    // the `k` busiest of them, busiest first; marks what it read as reported.
    std::vector<Hitter> take_hitters(std::uint64_t min_offered, std::size_t k) const;
    // The same for a keyed bucket with quota= (docs/design/009-per-key-quotas.md): a key with
    // use (units admitted since a report last listed it) is listed too, whatever its traffic:
    // at most k/2 heavy hitters, busiest first, then the keys of the most unlisted use, at
    // most `k` keys. A key left out keeps its use for a later call, so use is listed late,
    // not lost (but with an evicted entry: TableHeader::quota_units_lost).
    std::vector<Hitter> take_quota_keys(std::uint64_t min_offered, std::size_t k) const;
    // Gives back `units` of a key's listed use (its report was not sent): listed again later.
    void unlist(std::uint64_t hash, std::uint64_t units) const;
    // Drops every key's unlisted use (counted in quota_units_lost): use held back across the
    // end of its quota window must not count in the next one.
    void drop_unlisted() const;

    // Applies the control plane's ratio for a key present in this table (false: not here).
    bool set_ratio(std::uint64_t hash, std::uint64_t threshold, std::uint64_t expires_ms) const;

    // Entry i's key text (possibly truncated), or empty when it is not known to be this
    // entry's (free, being claimed, or overwritten meanwhile).
    std::string_view text_of(std::uint32_t i) const;
    TableHeader& header() const { return *reinterpret_cast<TableHeader*>(base_); }
    Entry& entry(std::uint32_t i) const {
        return reinterpret_cast<Entry*>(base_ + sizeof(TableHeader))[i];
    }
    KeyText& text(std::uint32_t i) const {
        return reinterpret_cast<KeyText*>(base_ + sizeof(TableHeader) +
                                          sizeof(Entry) * header().capacity)[i];
    }
    std::uint32_t capacity() const { return header().capacity; }
    bool valid() const { return base_ != nullptr; }
    char* base() const { return base_; }

  private:
    // The first entry of the set of `hash`.
    std::uint32_t set_of(std::uint64_t hash) const {
        return static_cast<std::uint32_t>((hash >> 32) % (capacity() / kWays)) * kWays;
    }
    // touch() for a key not found in its set: finds or claims its entry.
    Entry& claim(std::uint64_t hash, std::string_view text, std::uint64_t now_ms) const;
    char* base_ = nullptr;
};

inline Verdict Table::admit(Entry& e, std::uint64_t now_ms, std::uint64_t rate_mrps,
                            std::uint64_t burst_ms, std::uint32_t rand32,
                            std::uint32_t cost) const {
    e.offered.fetch_add(cost, std::memory_order_relaxed);
    if (e.expires_ms.load(std::memory_order_acquire) > now_ms &&
        rand32 < e.threshold.load(std::memory_order_relaxed)) {
        e.dropped.fetch_add(cost, std::memory_order_relaxed);
        return Verdict::Ratio;
    }
    if (rate_mrps == 0) {
        e.dropped.fetch_add(cost, std::memory_order_relaxed);
        return Verdict::LocalCap;
    }
    // GCRA: each admitted unit pushes the key's theoretical arrival time one emission interval
    // further; a request arriving more than the burst tolerance before it is over the rate. In
    // any window of t seconds this host admits at most rate x t + the burst (+ one request).
    const std::uint64_t emission_us = std::max<std::uint64_t>(1, 1000000000ULL / rate_mrps);
    const std::uint64_t now_us = now_ms * 1000;
    const std::uint64_t tolerance_us = burst_ms * 1000;
    std::uint64_t tat = e.tat_us.load(std::memory_order_relaxed);
    for (int attempt = 0; attempt < kRaceAttempts; ++attempt) {
        const std::uint64_t start = std::max(tat, now_us);
        if (start - now_us > tolerance_us) {
            e.dropped.fetch_add(cost, std::memory_order_relaxed);
            return Verdict::LocalCap;
        }
        if (e.tat_us.compare_exchange_weak(tat, start + emission_us * cost,
                                           std::memory_order_relaxed))
            return Verdict::Pass;
    }
    return Verdict::Pass;  // lost every race to other workers admitting the same key: admit
}

}  // namespace grl::keyed
