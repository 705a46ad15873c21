// Usage in parts: splitting on the sender, assembly on the receiver (docs/protocol.md
// "Usage in parts").
#include "grl/usage_parts.h"

#include <algorithm>
#include <utility>

namespace grl::wire {

namespace {

// What only part 0 carries; the other parts leave it empty.
void clear_head_extra(ZoneUsage& m) {
    m.host_names.clear();
}
void clear_head_extra(RegionUsage& m) {
    m.overrides.clear();
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

// Part 0's extras (host names, overrides) go to the set's head; the other parts have none.
void keep_head_extra(ZoneUsage& head, ZoneUsage& part0) {
    head.host_names = std::move(part0.host_names);
}
void keep_head_extra(RegionUsage& head, RegionUsage& part0) {
    head.overrides = std::move(part0.overrides);
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
    return h;
}

template <class Usage>
bool encode_parts_of(const Usage& m, std::vector<std::string>& out, std::size_t max_bytes) {
    out.clear();
    const std::size_t n = m.buckets.size();
    if (n > kMaxUsageBuckets) return false;
    if (n <= kMaxBucketsPerMessage && m.parts <= 1) {
        out.emplace_back();
        encode(m, out.back());
        if (out.back().size() <= max_bytes) return true;
        out.clear();
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
            part.buckets.assign(m.buckets.begin() + static_cast<std::ptrdiff_t>(from),
                                m.buckets.begin() + static_cast<std::ptrdiff_t>(to));
            out.emplace_back();
            encode(part, out.back());
            fits = out.back().size() <= max_bytes;
        }
        if (fits) return true;
        out.clear();
        if (parts >= kMaxParts) return false;
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

std::string_view to_string(PartResult r) {
    switch (r) {
        case PartResult::Whole: return "whole";
        case PartResult::Complete: return "complete";
        case PartResult::Pending: return "pending";
        case PartResult::Stale: return "stale";
        case PartResult::Inconsistent: return "inconsistent";
        case PartResult::Full: return "full";
    }
    return "?";
}

template <class Usage>
void PartAssembler<Usage>::take(Set& s, Usage& m) {
    const std::size_t i = m.part;
    s.have[i] = true;
    ++s.received;
    s.buckets[i].swap(m.buckets);
    if (i == 0) keep_head_extra(s.head, m);
    m.buckets = spare(s.buckets[i].size());  // the sender's next part is most often as long
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
    return v;
}

template <class Usage>
void PartAssembler<Usage>::keep(std::vector<UsageBucket>&& v) {
    if (v.empty() || spares_.size() >= kMaxSpares) return;
    spares_.push_back(std::move(v));
}

template <class Usage>
void PartAssembler<Usage>::recycle(std::vector<UsageBucket>& v) {
    // v gets the smallest spare (reads are parts or small); what it held is kept as a spare.
    std::vector<UsageBucket> old = std::exchange(v, spare(0));
    keep(std::move(old));
}

template <class Usage>
bool PartAssembler<Usage>::assemble(Set& s, Usage& out, std::string* why) {
    std::size_t total = 0;
    for (const auto& b : s.buckets) total += b.size();
    // Entries swapped, not moved: both sides keep their strings' and vectors' capacity, the
    // parts' vectors go back to the spares for the next reads, the whole comes from them.
    std::vector<UsageBucket> whole = spare(total);
    whole.resize(total);
    std::size_t k = 0;
    for (auto& b : s.buckets) {
        for (UsageBucket& e : b) {
            using std::swap;
            swap(whole[k++], e);
        }
        keep(std::move(b));
    }
    keep(std::move(out.buckets));
    out = std::move(s.head);
    out.part = 0;
    out.parts = 1;
    out.buckets = std::move(whole);
    // Each part's names are unique (the decoder checks); across parts only here. Senders sort
    // the buckets and cut them into runs: names strictly ascending prove them unique without
    // the sort (at 10,000 buckets a sort per set was a tenth of the controller's intake).
    bool ascending = true;
    for (std::size_t i = 1; i < out.buckets.size() && ascending; ++i)
        ascending = out.buckets[i - 1].name < out.buckets[i].name;
    if (ascending) return true;
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
    if (m.parts <= 1) return PartResult::Whole;
    auto it = sets_.find(m.source);
    if (it != sets_.end() && m.seq != it->second.head.seq) {
        if (m.seq < it->second.head.seq) {
            if (why) {
                *why = "part " + std::to_string(m.part) + " of " + m.source + "'s usage seq " +
                       std::to_string(m.seq) + " is older than the set held (seq " +
                       std::to_string(it->second.head.seq) + ")";
            }
            return PartResult::Stale;
        }
        ++incomplete_;  // superseded before it was complete
        sets_.erase(it);
        it = sets_.end();
    }
    if (it == sets_.end()) {
        if (sets_.size() >= max_sources_) return PartResult::Full;
        Set s;
        // The head without the part's buckets (thousands: not copied only to be cleared).
        std::vector<UsageBucket> buckets;
        buckets.swap(m.buckets);
        s.head = m;
        m.buckets.swap(buckets);
        clear_head_extra(s.head);
        s.first_ms = now_ms;
        s.have.assign(m.parts, false);
        s.buckets.resize(m.parts);
        it = sets_.emplace(m.source, std::move(s)).first;
    }
    Set& s = it->second;
    if (!same_head(s.head, m)) {
        if (why) {
            *why = "part " + std::to_string(m.part) + " of " + m.source + "'s usage seq " +
                   std::to_string(m.seq) + " disagrees with part(s) received before";
        }
        sets_.erase(it);
        return PartResult::Inconsistent;
    }
    if (s.have[m.part]) {
        if (why) {
            *why = "part " + std::to_string(m.part) + " of " + m.source + "'s usage seq " +
                   std::to_string(m.seq) + " received twice";
        }
        sets_.erase(it);
        return PartResult::Inconsistent;
    }
    take(s, m);
    if (s.received < s.have.size()) return PartResult::Pending;
    const bool ok = assemble(s, m, why);
    sets_.erase(it);
    return ok ? PartResult::Complete : PartResult::Inconsistent;
}

template <class Usage>
std::size_t PartAssembler<Usage>::expire(std::uint64_t now_ms) {
    std::size_t n = 0;
    for (auto it = sets_.begin(); it != sets_.end();) {
        if (now_ms > it->second.first_ms + timeout_ms_) {
            it = sets_.erase(it);
            ++n;
        } else {
            ++it;
        }
    }
    incomplete_ += n;
    return n;
}

template class PartAssembler<ZoneUsage>;
template class PartAssembler<RegionUsage>;

}  // namespace grl::wire
