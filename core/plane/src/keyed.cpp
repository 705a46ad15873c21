#include "grl/plane/keyed.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

namespace grl::keyed {

namespace {

// Which entry of a full set a newcomer takes: a key idle for kIdleMs first, then a key seen
// once (a flood of one-request keys churns among its own kind), then any key; the least
// recently used within a rank. Pure LRU is not enough: workers stamp entries with their own
// cached clocks (ngx_current_msec), a few ms apart under load, so under a flood a busy key
// stamped by a lagging worker looks older than the flood's keys and was evicted, its local
// cap reset each time: the key got far more than its cap.
constexpr std::uint64_t kIdleMs = 1000;
int victim_rank(std::uint64_t last_ms, std::uint64_t offered, std::uint64_t now_ms) {
    if (last_ms + kIdleMs < now_ms) return 0;
    return offered <= 1 ? 1 : 2;
}

}  // namespace

std::size_t key_for_log(std::string_view key, bool hashed, char* out) {
    if (hashed) {
        return static_cast<std::size_t>(std::snprintf(
            out, kLogKeyBytes, "hash %016llx", static_cast<unsigned long long>(hash_key(key))));
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::size_t n = 0;
    for (std::size_t i = 0; i < key.size() && i < kMaxKeyText; ++i) {
        const auto c = static_cast<unsigned char>(key[i]);
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = 'x';
            out[n++] = kHex[c >> 4];
            out[n++] = kHex[c & 15];
        } else {
            out[n++] = static_cast<char>(c);
        }
    }
    if (key.size() > kMaxKeyText) {
        for (int i = 0; i < 3; ++i) out[n++] = '.';
    }
    return n;
}

std::size_t bytes_for(std::uint32_t keys) {
    std::size_t n = (static_cast<std::size_t>(keys) + kWays - 1) / kWays * kWays;
    return sizeof(TableHeader) + n * (sizeof(Entry) + sizeof(KeyText));
}

std::uint32_t capacity_for(std::size_t bytes) {
    if (bytes <= sizeof(TableHeader)) return 0;
    std::size_t n = (bytes - sizeof(TableHeader)) / (sizeof(Entry) + sizeof(KeyText));
    n = n / kWays * kWays;
    return n > 0x7fffffffU ? 0x7fffffffU / kWays * kWays : static_cast<std::uint32_t>(n);
}

void Table::format(std::uint32_t keys) {
    const std::uint32_t n = (keys + kWays - 1) / kWays * kWays;
    std::memset(base_, 0, bytes_for(n));
    auto* h = new (base_) TableHeader();
    h->capacity = n;
    for (std::uint32_t i = 0; i < n; ++i) {
        new (&entry(i)) Entry();
        new (&text(i)) KeyText();
    }
}

Entry* Table::find(std::uint64_t hash) const {
    if (capacity() < kWays) return nullptr;
    const std::uint32_t base = set_of(hash);
    for (std::uint32_t w = 0; w < kWays; ++w) {
        Entry& e = entry(base + w);
        if (e.hash.load(std::memory_order_acquire) == hash) return &e;
    }
    return nullptr;
}

Entry& Table::claim(std::uint64_t hash, std::string_view key, std::uint64_t now_ms) const {
    const std::uint32_t base = set_of(hash);
    for (int attempt = 0; attempt < kRaceAttempts; ++attempt) {
        std::uint32_t victim = kWays;
        std::uint64_t victim_hash = 0, oldest = UINT64_MAX;
        int victim_rank_ = 3;
        bool have_free = false;
        for (std::uint32_t w = 0; w < kWays; ++w) {
            Entry& e = entry(base + w);
            const std::uint64_t h = e.hash.load(std::memory_order_acquire);
            if (h == hash) {
                e.last_ms.store(now_ms, std::memory_order_relaxed);
                return e;
            }
            // Being claimed by another worker: never taken (a worker killed within the few
            // instructions of a claim would cost the set one entry until the shm is new).
            if (h == kClaiming || have_free) continue;
            if (h == kFree) {  // the first free entry beats any eviction
                victim = w;
                victim_hash = kFree;
                have_free = true;
                continue;
            }
            const std::uint64_t last = e.last_ms.load(std::memory_order_relaxed);
            const int rank = victim_rank(last, e.offered.load(std::memory_order_relaxed), now_ms);
            if (rank < victim_rank_ || (rank == victim_rank_ && last < oldest)) {
                victim = w;
                victim_hash = h;
                oldest = last;
                victim_rank_ = rank;
            }
        }
        if (victim == kWays) break;  // every entry of the set is being claimed
        Entry& e = entry(base + victim);
        std::uint64_t expected = victim_hash;
        if (!e.hash.compare_exchange_strong(expected, kClaiming, std::memory_order_acq_rel)) {
            header().races.fetch_add(1, std::memory_order_relaxed);
            continue;  // another worker took it first: look again
        }
        // Held: no other worker uses or claims this entry until the key's hash is published.
        KeyText& t = text(base + victim);
        if (victim_hash != kFree) {
            const std::uint64_t offered = e.offered.load(std::memory_order_relaxed);
            const std::uint64_t dropped = e.dropped.load(std::memory_order_relaxed);
            const std::uint64_t admitted = offered > dropped ? offered - dropped : 0;
            const std::uint64_t listed = t.listed.load(std::memory_order_relaxed);
            if (admitted > listed) {
                header().quota_units_lost.fetch_add(admitted - listed, std::memory_order_relaxed);
            }
        }
        e.last_ms.store(now_ms, std::memory_order_relaxed);
        e.offered.store(0, std::memory_order_relaxed);
        e.dropped.store(0, std::memory_order_relaxed);
        e.tat_us.store(0, std::memory_order_relaxed);
        e.threshold.store(0, std::memory_order_relaxed);
        e.expires_ms.store(0, std::memory_order_relaxed);
        e.reported.store(0, std::memory_order_relaxed);
        t.listed.store(0, std::memory_order_relaxed);
        t.hash.store(0, std::memory_order_relaxed);
        t.len = static_cast<std::uint8_t>(std::min(key.size(), kMaxKeyText));
        std::memcpy(t.text, key.data(), t.len);
        t.hash.store(hash, std::memory_order_release);
        e.hash.store(hash, std::memory_order_release);
        header().claims.fetch_add(1, std::memory_order_relaxed);
        if (victim_hash != kFree) header().evictions.fetch_add(1, std::memory_order_relaxed);
        return e;
    }
    // The set stayed contended through every attempt (several workers claiming in the same
    // set at once): count the request in a shared entry of the set rather than not at all.
    header().races.fetch_add(1, std::memory_order_relaxed);
    return entry(base + static_cast<std::uint32_t>(hash % kWays));
}

void Table::charge(Entry& e, std::uint64_t now_ms, std::uint64_t rate_mrps,
                   std::uint32_t units) const {
    e.offered.fetch_add(units, std::memory_order_relaxed);
    if (rate_mrps == 0 || units == 0) return;
    const std::uint64_t emission_us = std::max<std::uint64_t>(1, 1000000000ULL / rate_mrps);
    const std::uint64_t now_us = now_ms * 1000;
    std::uint64_t tat = e.tat_us.load(std::memory_order_relaxed);
    for (int attempt = 0; attempt < kRaceAttempts; ++attempt) {
        if (e.tat_us.compare_exchange_weak(tat, std::max(tat, now_us) + emission_us * units,
                                           std::memory_order_relaxed))
            return;
    }
}

namespace {

// Entry i's traffic since the previous take_hitters or take_quota_keys (its `reported` snapshot
// moves on), false when the entry holds no key.
struct Traffic {
    Hitter h;                    // hash, text, offered and dropped since the previous call
    std::uint64_t admitted = 0;  // units admitted since the entry was claimed
};
bool traffic_of(const Table& t, std::uint32_t i, Traffic& out) {
    Entry& e = t.entry(i);
    const std::uint64_t h = e.hash.load(std::memory_order_acquire);
    if (h == kFree || h == kClaiming) return false;
    const std::uint64_t offered = e.offered.load(std::memory_order_relaxed);
    const std::uint64_t dropped = e.dropped.load(std::memory_order_relaxed);
    const std::uint64_t now = (dropped << 32) | (offered & 0xffffffffULL);
    const std::uint64_t before = e.reported.exchange(now, std::memory_order_relaxed);
    // A claim resets the counters and `reported` together, so the deltas never go back;
    // modulo 2^32 they survive the low halves wrapping.
    const std::uint64_t delta = (offered - before) & 0xffffffffULL;
    const std::uint64_t dropped_delta = (dropped - (before >> 32)) & 0xffffffffULL;
    out.h = {h, t.text_of(i), delta, std::min(dropped_delta, delta), 0};
    out.admitted = offered > dropped ? offered - dropped : 0;
    return true;
}

bool busier(const Hitter& a, const Hitter& b) {
    return a.offered != b.offered ? a.offered > b.offered : a.hash < b.hash;
}

// Keeps the first `k` of `v` in the order `before`, sorted.
template <typename T, typename Before>
void keep_first(std::vector<T>& v, std::size_t k, Before before) {
    if (v.size() > k) {
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end(), before);
        v.resize(k);
    }
    std::sort(v.begin(), v.end(), before);
}

}  // namespace

std::vector<Hitter> Table::take_hitters(std::uint64_t min_offered, std::size_t k) const {
    std::vector<Hitter> out;
    const std::uint32_t n = capacity();
    Traffic t;
    for (std::uint32_t i = 0; i < n; ++i) {
        if (!traffic_of(*this, i, t) || t.h.offered == 0 || t.h.offered < min_offered) continue;
        out.push_back(t.h);
    }
    keep_first(out, k, busier);
    return out;
}

std::vector<Hitter> Table::take_quota_keys(std::uint64_t min_offered, std::size_t k) const {
    struct Listed {
        Hitter h;
        std::uint32_t i = 0;
        std::uint64_t listed = 0;   // KeyText::listed as read
        std::uint64_t last_ms = 0;  // the key's last request
    };
    std::vector<Listed> hitters, used;
    const std::uint32_t n = capacity();
    Traffic t;
    for (std::uint32_t i = 0; i < n; ++i) {
        if (!traffic_of(*this, i, t)) continue;
        const std::uint64_t listed = text(i).listed.load(std::memory_order_relaxed);
        t.h.used = t.admitted > listed ? t.admitted - listed : 0;
        const std::uint64_t last = entry(i).last_ms.load(std::memory_order_relaxed);
        if (t.h.offered != 0 && t.h.offered >= min_offered) {
            hitters.push_back({t.h, i, listed, last});
        } else if (t.h.used != 0) {
            used.push_back({t.h, i, listed, last});
        }
    }
    // At most half the keys are the heavy hitters, busiest first (their rates hold the keys'
    // ratios); of the others, an eighth are the keys whose unlisted use is the oldest (an idle
    // key's turn comes however busy the others are), the rest those of the most unlisted use,
    // the hitters left out among them.
    std::sort(hitters.begin(), hitters.end(),
              [](const Listed& a, const Listed& b) { return busier(a.h, b.h); });
    const std::size_t first = std::min(hitters.size(), k / 2);
    used.insert(used.end(), hitters.begin() + static_cast<std::ptrdiff_t>(first), hitters.end());
    hitters.resize(first);
    const std::size_t room = std::min(used.size(), k - first);
    const std::size_t oldest = (room + 7) / 8;
    if (oldest < used.size()) {
        std::nth_element(used.begin(), used.begin() + static_cast<std::ptrdiff_t>(oldest),
                         used.end(), [](const Listed& a, const Listed& b) {
                             if ((a.h.used != 0) != (b.h.used != 0)) return a.h.used != 0;
                             return a.last_ms != b.last_ms ? a.last_ms < b.last_ms
                                                           : a.h.hash < b.h.hash;
                         });
    }
    std::vector<Listed> rest(
        used.begin() + static_cast<std::ptrdiff_t>(std::min(oldest, used.size())), used.end());
    used.resize(std::min(oldest, used.size()));
    keep_first(rest, room - used.size(), [](const Listed& a, const Listed& b) {
        return a.h.used != b.h.used ? a.h.used > b.h.used : a.h.hash < b.h.hash;
    });
    used.insert(used.end(), rest.begin(), rest.end());
    std::vector<Hitter> out;
    out.reserve(hitters.size() + used.size());
    for (std::vector<Listed>* group : {&hitters, &used}) {
        for (Listed& l : *group) {
            std::atomic<std::uint64_t>& listed = text(l.i).listed;
            std::uint64_t expected = l.listed;
            if (l.h.used != 0 && !listed.compare_exchange_strong(expected, l.listed + l.h.used,
                                                                 std::memory_order_relaxed)) {
                l.h.used = 0;  // a claim reset it: the entry is another key's now
            } else if (l.h.used != 0 &&
                       entry(l.i).hash.load(std::memory_order_acquire) != l.h.hash) {
                // Claimed since the scan, the reset perhaps before the exchange above: the new
                // key starts from nothing listed, and the old key's unlisted use went with its
                // entry (counted by the claim as quota_units_lost), so none is listed here.
                expected = l.listed + l.h.used;
                listed.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
                l.h.used = 0;
            }
            out.push_back(l.h);
        }
    }
    return out;
}

void Table::drop_unlisted() const {
    std::uint64_t dropped = 0;
    for (std::uint32_t i = 0; i < capacity(); ++i) {
        const Entry& e = entry(i);
        const std::uint64_t h = e.hash.load(std::memory_order_acquire);
        if (h == kFree || h == kClaiming) continue;
        const std::uint64_t offered = e.offered.load(std::memory_order_relaxed);
        const std::uint64_t dropped_here = e.dropped.load(std::memory_order_relaxed);
        const std::uint64_t admitted = offered > dropped_here ? offered - dropped_here : 0;
        std::atomic<std::uint64_t>& listed = text(i).listed;
        std::uint64_t v = listed.load(std::memory_order_relaxed);
        if (admitted > v &&
            listed.compare_exchange_strong(v, admitted, std::memory_order_relaxed)) {
            dropped += admitted - v;
        }
    }
    header().quota_units_lost.fetch_add(dropped, std::memory_order_relaxed);
}

void Table::unlist(std::uint64_t hash, std::uint64_t units) const {
    Entry* e = find(hash);
    if (e == nullptr || units == 0) return;
    std::atomic<std::uint64_t>& listed = text(static_cast<std::uint32_t>(e - &entry(0))).listed;
    std::uint64_t v = listed.load(std::memory_order_relaxed);
    while (!listed.compare_exchange_weak(v, v > units ? v - units : 0, std::memory_order_relaxed)) {
    }
}

bool Table::set_ratio(std::uint64_t hash, std::uint64_t threshold, std::uint64_t expires_ms) const {
    Entry* e = find(hash);
    if (e == nullptr) return false;
    e->threshold.store(std::min(threshold, kThresholdOne), std::memory_order_relaxed);
    e->expires_ms.store(expires_ms, std::memory_order_release);
    return true;
}

std::string_view Table::text_of(std::uint32_t i) const {
    const std::uint64_t h = entry(i).hash.load(std::memory_order_acquire);
    const KeyText& t = text(i);
    if (h == kFree || h == kClaiming || t.hash.load(std::memory_order_acquire) != h) return {};
    return {t.text, std::min<std::size_t>(t.len, kMaxKeyText)};
}

}  // namespace grl::keyed
