// Usage in parts: splitting on the sender, assembly on the receiver (docs/protocol.md
// "Usage in parts").
#include "grl/wire/usage_parts.h"

#include <algorithm>
#include <utility>

#include "codec.h"

namespace grl::wire {

namespace {

// What only part 0 carries; the other parts leave it empty.
void clear_head_extra(ZoneUsage& m) {
    m.host_names.clear();
    m.quotas.clear();
}
void clear_head_extra(RegionUsage& m) {
    m.overrides.clear();
    m.quotas.clear();
}

// The fields every part of a set repeats (the set's identity and what the receiver sums by).
bool same_head(const ZoneUsage& a, const ZoneUsage& b) {
    return a.v == b.v && a.source == b.source && a.region == b.region && a.zone == b.zone &&
           a.seq == b.seq && a.ts_ms == b.ts_ms && a.interval_ms == b.interval_ms &&
           a.hosts == b.hosts && a.stale_hosts == b.stale_hosts && a.parts == b.parts;
}
bool same_head(const RegionUsage& a, const RegionUsage& b) {
    return a.v == b.v && a.source == b.source && a.region == b.region && a.seq == b.seq &&
           a.ts_ms == b.ts_ms && a.interval_ms == b.interval_ms && a.zones == b.zones &&
           a.hosts == b.hosts && a.limits_digest == b.limits_digest && a.parts == b.parts;
}

// The fields same_head() compares, into a set's head: strings assigned into the head's, which
// keep their capacity from set to set.
void assign_head(ZoneUsage& head, const ZoneUsage& m) {
    head.v = m.v;
    head.source = m.source;
    head.region = m.region;
    head.zone = m.zone;
    head.seq = m.seq;
    head.ts_ms = m.ts_ms;
    head.interval_ms = m.interval_ms;
    head.hosts = m.hosts;
    head.stale_hosts = m.stale_hosts;
    head.parts = m.parts;
}
void assign_head(RegionUsage& head, const RegionUsage& m) {
    head.v = m.v;
    head.source = m.source;
    head.region = m.region;
    head.seq = m.seq;
    head.ts_ms = m.ts_ms;
    head.interval_ms = m.interval_ms;
    head.zones = m.zones;
    head.hosts = m.hosts;
    head.limits_digest = m.limits_digest;
    head.parts = m.parts;
}

// Part 0's extras (host names, overrides) go to the set's head, swapped (the part's message
// gets the head's old ones to read the next into); the other parts have none.
void keep_head_extra(ZoneUsage& head, ZoneUsage& part0) {
    head.host_names.swap(part0.host_names);
    head.quotas.swap(part0.quotas);
}
void keep_head_extra(RegionUsage& head, RegionUsage& part0) {
    head.overrides.swap(part0.overrides);
    head.quotas.swap(part0.quotas);
}

// Heap bytes of a string beyond its own object (none within the small-string buffer).
std::size_t heap_bytes(const std::string& s) {
    return s.capacity() > 15 ? s.capacity() + 1 : 0;
}

std::size_t range_bytes(const std::vector<UsageBucket>& v, std::size_t from, std::size_t n) {
    std::size_t bytes = 0;
    for (std::size_t i = from; i < from + n; ++i) bytes += held_bytes(v[i]);
    return bytes;
}

// The set key of a zone usage: its zone, then its source ('/' ends a name: docs/protocol.md).
void set_key(const ZoneUsage& m, std::string& key) {
    key.assign(m.zone);
    key += '/';
    key += m.source;
}
void set_key(const RegionUsage& m, std::string& key) {
    key.assign(m.source);
}
std::string_view zone_prefix(const ZoneUsage& m) {
    return m.zone;
}
std::string_view zone_prefix(const RegionUsage&) {
    return {};
}

bool ascending(const std::vector<UsageBucket>& v) {
    for (std::size_t i = 1; i < v.size(); ++i) {
        if (!(v[i - 1].name < v[i].name)) return false;
    }
    return true;
}

// `m` without its buckets (copying them only to clear them cost as much as encoding).
ZoneUsage head_of(const ZoneUsage& m) {
    ZoneUsage h;
    h.v = m.v;
    h.source = m.source;
    h.region = m.region;
    h.zone = m.zone;
    h.seq = m.seq;
    h.ts_ms = m.ts_ms;
    h.interval_ms = m.interval_ms;
    h.hosts = m.hosts;
    h.stale_hosts = m.stale_hosts;
    h.host_names = m.host_names;
    h.quotas = m.quotas;
    return h;
}
RegionUsage head_of(const RegionUsage& m) {
    RegionUsage h;
    h.v = m.v;
    h.source = m.source;
    h.region = m.region;
    h.seq = m.seq;
    h.ts_ms = m.ts_ms;
    h.interval_ms = m.interval_ms;
    h.zones = m.zones;
    h.hosts = m.hosts;
    h.limits_digest = m.limits_digest;
    h.overrides = m.overrides;
    h.quotas = m.quotas;
    return h;
}

template <class Usage>
bool encode_parts_of(const Usage& m, std::vector<std::string>& out, std::size_t max_bytes) {
    // Into out's strings, whose storage stays from call to call; the entries of a part are
    // encoded where they are (a copy of 10,000 entries into three parts cost a malloc for each
    // entry's definitions).
    std::size_t used = 0;
    auto next = [&]() -> std::string& {
        if (used == out.size()) out.emplace_back();
        return out[used++];
    };
    const std::size_t n = m.buckets.size();
    if (n > kMaxUsageBuckets) {
        out.clear();
        return false;
    }
    if (n <= kMaxBucketsPerMessage && m.parts <= 1) {
        std::string& whole = next();
        encode(m, whole);
        if (whole.size() <= max_bytes) {
            out.resize(used);
            return true;
        }
        used = 0;
    }
    // Fewest parts by bucket count first; twice as many while one of them is too large.
    std::size_t parts =
        std::max<std::size_t>((n + kMaxBucketsPerMessage - 1) / kMaxBucketsPerMessage, 2);
    Usage p = head_of(m);
    for (;;) {
        bool fits = true;
        for (std::size_t i = 0; fits && i < parts; ++i) {
            Usage& part = p;
            if (i == 1) clear_head_extra(part);
            part.part = static_cast<std::uint32_t>(i);
            part.parts = static_cast<std::uint32_t>(parts);
            const std::size_t from = n * i / parts, to = n * (i + 1) / parts;
            std::string& bytes = next();
            codec::encode_usage(part, m.buckets.data() + from, to - from, bytes);
            fits = bytes.size() <= max_bytes;
        }
        if (fits) {
            out.resize(used);
            return true;
        }
        used = 0;
        if (parts >= kMaxParts) {
            out.clear();
            return false;
        }
        parts = std::min(parts * 2, kMaxParts);
        p = head_of(m);
    }
}

}  // namespace

bool encode_parts(const ZoneUsage& m, std::vector<std::string>& out, std::size_t max_bytes) {
    return encode_parts_of(m, out, max_bytes);
}
bool encode_parts(const RegionUsage& m, std::vector<std::string>& out, std::size_t max_bytes) {
    return encode_parts_of(m, out, max_bytes);
}

std::size_t held_bytes(const UsageBucket& b) {
    std::size_t n = sizeof(UsageBucket) + heap_bytes(b.name) +
                    b.definitions.capacity() * sizeof(DefinitionCount) +
                    b.host_names.capacity() * sizeof(std::string) +
                    b.keys.capacity() * sizeof(KeyRate);
    for (const std::string& h : b.host_names) n += heap_bytes(h);
    for (const KeyRate& k : b.keys) n += heap_bytes(k.text);
    return n;
}

std::string_view to_string(PartResult r) {
    switch (r) {
        case PartResult::Whole: return "whole";
        case PartResult::Complete: return "complete";
        case PartResult::Pending: return "pending";
        case PartResult::Stale: return "stale";
        case PartResult::Inconsistent: return "inconsistent";
        case PartResult::Full: return "full";
        case PartResult::TooLarge: return "too_large";
    }
    return "?";
}

template <class Usage>
bool PartAssembler<Usage>::read(std::string_view bytes, Usage& m, std::string& error,
                                UsageRead* how) {
    placed_ = Placed{};
    UsageRest rest;
    std::size_t n = 0;
    if (read_usage_head(bytes, m, rest)) {
        auto it = rest.in_parts() ? sets_.find(key_of(m)) : sets_.end();
        if (it != sets_.end()) {
            // After the parts received: a part that add() then refuses (an older one, one of a
            // set it drops), or that never reaches add(), leaves them as they are.
            Set& s = it->second;
            const bool ok = read_usage_rest(rest, m, s.buckets, s.used, n);
            if (ok && m.parts > 1) {
                placed_ = Placed{&s, &m, m.seq, m.part, s.used, n};
                if (how) *how = UsageRead::Fast;
                return true;
            }
            // "parts": 1 written out is a whole message (no grl sender writes it): read again
            // into its own buckets, below.
        }
        if (read_usage_rest(rest, m, m.buckets, 0, n)) {
            m.buckets.resize(n);
            if (how) *how = UsageRead::Fast;
            return true;
        }
    }
    if (how) *how = UsageRead::Decoded;
    return decode(bytes, m, error);
}

template <class Usage>
void PartAssembler<Usage>::start(Set& s, Usage& m, std::uint64_t now_ms) {
    assign_head(s.head, m);
    s.active = true;
    s.first_ms = now_ms;
    s.received = 0;
    s.used = 0;
    s.bytes = 0;
    s.refused = false;
    s.have.assign(m.parts, false);
    s.ranges.assign(m.parts, Range{});
    ++pending_;
}

template <class Usage>
void PartAssembler<Usage>::stop(Set& s) {
    s.active = false;
    s.received = 0;
    s.used = 0;
    --pending_;
}

template <class Usage>
void PartAssembler<Usage>::release(Set& s) {
    std::vector<UsageBucket>().swap(s.buckets);
    Usage empty;
    keep_head_extra(s.head, empty);
    s.bytes = 0;
}

template <class Usage>
const std::string& PartAssembler<Usage>::key_of(const Usage& m) {
    set_key(m, key_);
    return key_;
}

template <class Usage>
bool PartAssembler<Usage>::room_in_zone(const Usage& m) {
    const std::string_view zone = zone_prefix(m);
    if (zone.empty()) return true;
    std::size_t n = 0;
    auto idle = sets_.end();
    std::string prefix(zone);
    prefix += '/';
    for (auto i = sets_.lower_bound(prefix);
         i != sets_.end() && i->first.compare(0, prefix.size(), prefix) == 0; ++i) {
        ++n;
        if (!i->second.active &&
            (idle == sets_.end() || i->second.first_ms < idle->second.first_ms))
            idle = i;
    }
    if (n < kMaxSourcesPerZone) return true;
    if (idle == sets_.end()) return false;
    keep(std::move(idle->second.buckets));
    sets_.erase(idle);
    return true;
}

template <class Usage>
void PartAssembler<Usage>::take(Set& s, Usage& m, const Placed& placed) {
    const std::size_t i = m.part;
    Range& r = s.ranges[i];
    r.begin = s.used;
    if (placed.set == &s && placed.m == &m && placed.seq == m.seq && placed.part == m.part) {
        // read() put the buckets in place; after a set dropped for this newer one they are
        // beyond its parts, and come to the front (rare: one rotation).
        r.n = placed.n;
        r.ascending = true;
        if (placed.at != s.used) {
            const auto b = s.buckets.begin();
            std::rotate(b + static_cast<std::ptrdiff_t>(s.used),
                        b + static_cast<std::ptrdiff_t>(placed.at),
                        b + static_cast<std::ptrdiff_t>(placed.at + placed.n));
        }
    } else {
        // Read elsewhere (wire::decode, read_usage()): the entries are swapped in.
        r.n = m.buckets.size();
        r.ascending = ascending(m.buckets);
        if (s.used == 0 && s.buckets.empty()) {
            s.buckets.swap(m.buckets);
        } else {
            if (s.buckets.size() < s.used + r.n) s.buckets.resize(s.used + r.n);
            for (std::size_t k = 0; k < r.n; ++k) {
                using std::swap;
                swap(s.buckets[s.used + k], m.buckets[k]);
            }
        }
    }
    s.bytes += range_bytes(s.buckets, r.begin, r.n);
    s.used += r.n;
    s.have[i] = true;
    ++s.received;
    if (i == 0) keep_head_extra(s.head, m);
}

template <class Usage>
std::vector<UsageBucket> PartAssembler<Usage>::spare(std::size_t n) {
    std::size_t best = spares_.size();
    for (std::size_t i = 0; i < spares_.size(); ++i) {
        const std::size_t size = spares_[i].size();
        if (best == spares_.size()) {
            best = i;
            continue;
        }
        const std::size_t have = spares_[best].size();
        if (have >= n ? (size >= n && size < have) : size > have) best = i;
    }
    std::vector<UsageBucket> v;
    if (best == spares_.size()) return v;
    v.swap(spares_[best]);
    spares_[best].swap(spares_.back());
    spares_.pop_back();
    spare_bytes_ -= spare_sizes_[best];
    spare_sizes_[best] = spare_sizes_.back();
    spare_sizes_.pop_back();
    return v;
}

template <class Usage>
void PartAssembler<Usage>::keep(std::vector<UsageBucket>&& v) {
    if (v.empty() || spares_.size() >= kMaxSpares) return;
    // Kept only within max_set_bytes in all (a hostile set's vector is not kept for reuse).
    const std::size_t bytes = v.capacity() * sizeof(UsageBucket) + range_bytes(v, 0, v.size()) -
                              v.size() * sizeof(UsageBucket);
    if (spare_bytes_ + bytes > max_set_bytes_) return;
    spare_bytes_ += bytes;
    spare_sizes_.push_back(bytes);
    spares_.push_back(std::move(v));
}

template <class Usage>
void PartAssembler<Usage>::recycle(Usage& m) {
    // The source's next set is read into its last one's vector: the same names at the same
    // places (no copy), entries whose definitions keep their capacity.
    auto it = sets_.find(key_of(m));
    if (it != sets_.end() && !it->second.active) {
        it->second.buckets.swap(m.buckets);
        return;
    }
    // m.buckets gets the smallest spare (reads are parts or small); what it held is kept.
    std::vector<UsageBucket> old = std::exchange(m.buckets, spare(0));
    keep(std::move(old));
}

template <class Usage>
bool PartAssembler<Usage>::assemble(Set& s, Usage& out, std::string* why) {
    const std::size_t total = s.used;
    bool in_order = true;
    for (std::size_t i = 0, at = 0; i < s.ranges.size(); at += s.ranges[i++].n)
        in_order = in_order && s.ranges[i].begin == at;
    if (!in_order) {
        // Parts out of order: their entries swapped into part order (both sides keep their
        // strings' and vectors' capacity).
        std::vector<UsageBucket> whole = spare(total);
        whole.resize(total);
        std::size_t k = 0;
        for (Range& r : s.ranges) {
            const std::size_t from = r.begin;
            r.begin = k;
            for (std::size_t j = 0; j < r.n; ++j) {
                using std::swap;
                swap(whole[k++], s.buckets[from + j]);
            }
        }
        s.buckets.swap(whole);
        keep(std::move(whole));
    }
    s.buckets.resize(total);
    // Each part's names are unique (the decoder checks); across parts only here. Senders sort
    // the buckets and cut them into runs: each part ascending (the one-pass reader checks) and
    // each part's first name above the last part's last prove them unique (a pass over every
    // name was a tenth of the controller's intake, a sort before that as much again).
    bool unique = true;
    const UsageBucket* last = nullptr;
    for (const Range& r : s.ranges) {
        if (r.n == 0) continue;
        unique = unique && r.ascending && (!last || last->name < s.buckets[r.begin].name);
        last = &s.buckets[r.begin + r.n - 1];
    }
    // `out` gets the head and the whole; the set keeps out's vector (and the head out's old
    // strings) for recycle() and the next set.
    using std::swap;
    swap(out, s.head);
    out.buckets.swap(s.buckets);
    s.buckets.swap(s.head.buckets);
    out.part = 0;
    out.parts = 1;
    if (unique) return true;
    std::vector<std::string_view> names;
    names.reserve(total);
    for (const UsageBucket& b : out.buckets) names.emplace_back(b.name);
    std::sort(names.begin(), names.end());
    auto dup = std::adjacent_find(names.begin(), names.end());
    if (dup != names.end()) {
        if (why) {
            *why = "bucket \"" + std::string(*dup) + "\" in two parts of " + out.source +
                   "'s usage seq " + std::to_string(out.seq);
        }
        return false;
    }
    return true;
}

template <class Usage>
PartResult PartAssembler<Usage>::add(Usage& m, std::uint64_t now_ms, std::string* why) {
    const Placed placed = std::exchange(placed_, Placed{});
    if (m.parts <= 1) return PartResult::Whole;
    auto it = sets_.find(key_of(m));
    if (it != sets_.end() && !it->second.active && it->second.refused &&
        it->second.refused_seq == m.seq) {
        if (why) *why = "part " + std::to_string(m.part) + " of a set dropped as too large";
        release(it->second);  // what read() put in place for it
        return PartResult::TooLarge;
    }
    if (it != sets_.end() && it->second.active && m.seq != it->second.head.seq) {
        if (m.seq < it->second.head.seq) {
            if (why) {
                *why = "part " + std::to_string(m.part) + " of " + m.source + "'s usage seq " +
                       std::to_string(m.seq) + " is older than the set held (seq " +
                       std::to_string(it->second.head.seq) + ")";
            }
            return PartResult::Stale;
        }
        ++incomplete_;  // superseded before it was complete
        stop(it->second);
    }
    if (it == sets_.end() || !it->second.active) {
        if (pending_ >= max_sources_) return PartResult::Full;
        if (it == sets_.end() && !room_in_zone(m)) {
            if (why) {
                *why = "part of " + m.source +
                       "'s usage ignored: " + std::to_string(kMaxSourcesPerZone) +
                       " sources of zone " + std::string(zone_prefix(m)) + " hold sets already";
            }
            return PartResult::Full;
        }
        if (it == sets_.end()) {
            if (sets_.size() >= max_sources_) {
                // Room for this source: the set kept longest for its vector goes (fewer than
                // max_sources_ are pending, so one is kept only for its vector).
                auto idle = sets_.end();
                for (auto i = sets_.begin(); i != sets_.end(); ++i) {
                    if (!i->second.active &&
                        (idle == sets_.end() || i->second.first_ms < idle->second.first_ms)) {
                        idle = i;
                    }
                }
                if (idle != sets_.end()) {
                    keep(std::move(idle->second.buckets));
                    sets_.erase(idle);
                }
            }
            it = sets_.try_emplace(key_).first;
        }
        start(it->second, m, now_ms);
    }
    Set& s = it->second;
    if (!same_head(s.head, m)) {
        if (why) {
            *why = "part " + std::to_string(m.part) + " of " + m.source + "'s usage seq " +
                   std::to_string(m.seq) + " disagrees with part(s) received before";
        }
        stop(s);
        return PartResult::Inconsistent;
    }
    if (s.have[m.part]) {
        if (why) {
            *why = "part " + std::to_string(m.part) + " of " + m.source + "'s usage seq " +
                   std::to_string(m.seq) + " received twice";
        }
        stop(s);
        return PartResult::Inconsistent;
    }
    take(s, m, placed);
    if (s.bytes > max_set_bytes_) {
        if (why) {
            *why = m.source + "'s usage seq " + std::to_string(m.seq) + " dropped at part " +
                   std::to_string(m.part) + ": its parts hold " + std::to_string(s.bytes) +
                   " bytes in memory, more than " + std::to_string(max_set_bytes_);
        }
        stop(s);
        release(s);
        s.refused = true;
        s.refused_seq = m.seq;
        return PartResult::TooLarge;
    }
    if (s.received < s.have.size()) return PartResult::Pending;
    const bool ok = assemble(s, m, why);
    stop(s);
    return ok ? PartResult::Complete : PartResult::Inconsistent;
}

template <class Usage>
std::size_t PartAssembler<Usage>::expire(std::uint64_t now_ms) {
    std::size_t n = 0;
    for (auto& [source, s] : sets_) {
        if (s.active && now_ms > s.first_ms + timeout_ms_) {
            stop(s);
            release(s);
            ++n;
        }
    }
    incomplete_ += n;
    return n;
}

template class PartAssembler<ZoneUsage>;
template class PartAssembler<RegionUsage>;

}  // namespace grl::wire
