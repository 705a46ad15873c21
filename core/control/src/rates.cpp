#include "grl/control/rates.h"

#include <algorithm>
#include <cmath>

#include "grl/common/saturating.h"

namespace grl::rates {

namespace {

constexpr std::uint64_t kMinIntervalMs = 100;
constexpr std::uint64_t kMaxIntervalMs = 60000;
constexpr std::uint64_t kDefaultIntervalMs = 1000;

void counters_of(const wire::ReportBucketView& b, std::uint64_t (&c)[4]) {
    c[0] = b.offered;
    c[1] = b.admitted;
    c[2] = b.dropped;
    c[3] = b.shadow_dropped;
}

// A bucket name held once for all hosts: its string, its map node and key, its counts.
std::uint64_t name_bytes(std::size_t len) {
    return 2 * (len + 1) + 64 + sizeof(std::array<std::uint64_t, 4>) + sizeof(std::string);
}

// A host's map node beside the Host itself (key, hash, pointers).
constexpr std::uint64_t kHostNodeBytes = 64 + sizeof(std::string);

std::uint64_t round_mrps(double v) {
    if (!(v > 0)) return 0;
    if (v >= 1.8e19) return UINT64_MAX;
    return static_cast<std::uint64_t>(std::llround(v));
}

}  // namespace

std::string_view to_string(Verdict v) {
    switch (v) {
        case Verdict::First: return "first";
        case Verdict::Accepted: return "accepted";
        case Verdict::Restarted: return "restarted";
        case Verdict::Duplicate: return "duplicate";
        case Verdict::OldEpoch: return "old_epoch";
        case Verdict::NoTime: return "no_time";
        case Verdict::TooSoon: return "too_soon";
        case Verdict::Reclaimed: return "epoch_reclaimed";
        case Verdict::Conflict: return "epoch_conflict";
        case Verdict::Pending: return "epoch_pending";
        case Verdict::Full: return "hosts_full";
        case Verdict::MemoryFull: return "memory_full";
    }
    return "?";
}

Table::Table(Options o) : opt_(o) {
    if (opt_.stale_intervals == 0) opt_.stale_intervals = 1;
    if (opt_.forget_intervals < opt_.stale_intervals) opt_.forget_intervals = opt_.stale_intervals;
}

std::uint32_t Table::intern_name(std::string_view name) {
    key_.assign(name.data(), name.size());
    auto it = name_ids_.find(key_);
    if (it != name_ids_.end()) {
        ++name_refs_[it->second];
        return it->second;
    }
    std::uint32_t id;
    if (!free_names_.empty()) {
        id = free_names_.back();
        free_names_.pop_back();
        names_[id] = key_;
        name_refs_[id] = 1;
        counted_[id] = {};
    } else {
        id = static_cast<std::uint32_t>(names_.size());
        names_.push_back(key_);
        name_refs_.push_back(1);
        counted_.push_back({});
    }
    name_ids_.emplace(key_, id);
    bytes_ += name_bytes(key_.size());
    return id;
}

void Table::release_name(std::uint32_t id) {
    if (--name_refs_[id] > 0) return;
    name_ids_.erase(names_[id]);
    bytes_ -= name_bytes(names_[id].size());
    names_[id].clear();
    free_names_.push_back(id);
}

std::uint64_t Table::host_bytes(const Host& h) {
    std::uint64_t n = sizeof(Host) + kHostNodeBytes + 2 * (h.name.capacity() + 1) +
                      h.buckets.capacity() * sizeof(BucketState);
    for (const BucketState& b : h.buckets) {
        n += b.keys.capacity() * sizeof(wire::KeyRate);
        for (const wire::KeyRate& k : b.keys) n += k.text.capacity() + 1;
    }
    return n;
}

void Table::account(Host& h) {
    bytes_ -= h.bytes;
    h.bytes = host_bytes(h);
    bytes_ += h.bytes;
}

// Whether the table can take this report's buckets (a new host's, or more than the host
// held): the bytes they add, names included, are estimated before the report is taken;
// account() then counts what was taken (heavy hitters included), so the table exceeds
// max_bytes by at most one report.
bool Table::room_for(const Host* h, const wire::ReportView& r) const {
    const std::uint64_t held = h ? h->buckets.size() : 0;
    if (r.buckets.size() <= held) return true;
    std::uint64_t more = (r.buckets.size() - held) * (sizeof(BucketState) + name_bytes(16));
    if (!h) more += sizeof(Host) + kHostNodeBytes + 2 * (r.host.size() + 1);
    return bytes_ + more <= opt_.max_bytes;
}

std::uint64_t Table::interval_of(const Host& h) const {
    return std::clamp(h.interval_ms, kMinIntervalMs, kMaxIntervalMs);
}

// Rates from the counts a report carries for its previous interval ("recent"), for a host or
// bucket without a baseline. False when the report has none for this bucket.
bool Table::recent_rates(const wire::ReportView& r, const wire::ReportBucketView& rb,
                         BucketState& b) {
    if (r.recent_ms == 0 || !rb.has_recent) return false;
    for (int k = 0; k < 4; ++k)
        b.rate[k] = static_cast<float>(rate_mrps(rb.recent[k], r.recent_ms));
    b.has_rate = true;
    return true;
}

// A keyed bucket's heavy hitters, as reported (the reporter measured their rates itself). A key
// listed for its quota use alone (no rate) goes to PendingUse only.
void Table::take_keys(const wire::ReportView& r, const wire::ReportBucketView& rb, BucketState& b) {
    b.keyed = rb.keyed;
    b.keys.clear();
    for (const wire::KeyRateView& k : wire::keys_of(r, rb)) {
        if (k.offered_mrps == 0) continue;
        b.keys.push_back({k.hash, std::string(k.text), k.offered_mrps, k.dropped_mrps, 1});
    }
}

void Table::baseline(Host& h, const wire::ReportView& r, std::uint64_t now_ms, bool keep_rates) {
    std::vector<BucketState> next;
    next.reserve(r.buckets.size());
    for (const wire::ReportBucketView& rb : r.buckets) {
        BucketState b;
        b.name_id = intern_name(rb.name);
        b.scope = rb.scope;
        b.mode = rb.mode;
        b.limit_mrps = rb.limit_mrps;
        b.quota = rb.quota;
        counters_of(rb, b.c);
        take_keys(r, rb, b);
        if (recent_rates(r, rb, b)) {
            // The report carries the last interval's counts: a rate from one report.
        } else if (keep_rates) {
            // Hold the previous run's rate until the new epoch yields one: a restarted host
            // most likely carries the same load, and dropping it from the sums for an interval
            // would make every other host's ratio dip.
            for (const BucketState& old : h.buckets) {
                if (old.name_id != b.name_id) continue;
                std::copy(std::begin(old.rate), std::end(old.rate), std::begin(b.rate));
                b.has_rate = old.has_rate;
                break;
            }
        }
        next.push_back(b);
    }
    for (const BucketState& old : h.buckets) release_name(old.name_id);
    h.buckets.swap(next);
    h.epoch = r.epoch;
    h.seq = r.seq;
    h.ts_ms = r.ts_ms;
    h.recv_ms = now_ms;
    h.last_ms = now_ms;
    h.interval_ms = r.interval_ms ? r.interval_ms : kDefaultIntervalMs;
    h.proven = false;
    h.stale = false;
}

// A report of another epoch than the host's current one: a restart (new epoch), a late
// report of a previous run, or a second sender using the host's name (a forger). The epoch
// that reports steadily keeps the host: another epoch takes it only once the current one has
// been silent for its interval and a half (an epoch that has reported twice is judged by its
// own interval, so a forged short interval cannot make a genuine host "silent"; an epoch seen
// once, as a forged one, by the shorter of the two). So a restart is taken within two
// intervals (the old epoch's rates held meanwhile), and no number of forged epochs takes a
// host whose genuine epoch keeps reporting; one that took it while the host was briefly
// silent is taken back at the genuine epoch's next report after an interval.
Verdict Table::other_epoch(Host& h, const wire::ReportView& r, std::uint64_t now_ms) {
    Host::Other* o = nullptr;
    for (Host::Other& e : h.others) {
        if (e.set && e.epoch == r.epoch) o = &e;
    }
    if (o && r.seq <= o->seq) return Verdict::OldEpoch;  // late or repeated
    const std::uint64_t iv_cur = interval_of(h);
    const std::uint64_t iv_new = std::clamp(r.interval_ms ? r.interval_ms : kDefaultIntervalMs,
                                            kMinIntervalMs, kMaxIntervalMs);
    const std::uint64_t quiet = h.proven ? iv_cur + iv_cur / 2 : std::min(iv_cur, iv_new);
    if (now_ms >= h.last_ms + quiet) {
        const bool back = o && o->was_current;
        if (!o) o = &oldest_other(h);
        *o = Host::Other{true, true, h.epoch, h.seq, h.interval_ms, h.last_ms, 0};
        baseline(h, r, now_ms, true);
        return back ? Verdict::Reclaimed : Verdict::Restarted;
    }
    if (!o) {
        o = &oldest_other(h);
        *o = Host::Other{true, false, r.epoch, r.seq, iv_new, now_ms, 0};
        return Verdict::Pending;
    }
    // An epoch that keeps reporting beside the current one, report after report, beyond what
    // a restart takes to be taken: two senders.
    const bool paced =
        now_ms >= o->seen_ms + std::clamp(o->interval_ms, kMinIntervalMs, kMaxIntervalMs) / 2;
    o->seq = r.seq;
    if (!paced) return Verdict::Pending;
    o->seen_ms = now_ms;
    return ++o->paced >= 2 ? Verdict::Conflict : Verdict::Pending;
}

Table::Host::Other& Table::oldest_other(Host& h) {
    Host::Other* best = &h.others[0];
    for (Host::Other& e : h.others) {
        if (!e.set) return e;
        if (e.seen_ms < best->seen_ms) best = &e;
    }
    return *best;
}

Verdict Table::add(const wire::Report& r, std::uint64_t now_ms) {
    wire::view_of(r, view_);
    return add(view_, now_ms);
}

Verdict Table::add(const wire::ReportView& r, std::uint64_t now_ms) {
    key_.assign(r.host.data(), r.host.size());
    auto it = hosts_.find(key_);
    if (it == hosts_.end()) {
        if (hosts_.size() >= opt_.max_hosts) return Verdict::Full;
        if (!room_for(nullptr, r)) return Verdict::MemoryFull;
        Host& h = hosts_[key_];
        h.name = key_;
        baseline(h, r, now_ms, false);
        account(h);
        return Verdict::First;
    }
    Host& h = it->second;
    if (!room_for(&h, r)) return Verdict::MemoryFull;
    if (r.epoch != h.epoch) {
        const Verdict v = other_epoch(h, r, now_ms);
        if (v == Verdict::Restarted || v == Verdict::Reclaimed) account(h);
        return v;
    }
    if (r.seq <= h.seq) return Verdict::Duplicate;
    h.proven = true;
    std::uint64_t dt = 0;
    if (const std::optional<Verdict> v = too_soon(h, r, now_ms, dt)) return *v;
    rate_buckets(h, r, dt);
    h.seq = r.seq;
    h.ts_ms = r.ts_ms;
    h.recv_ms = now_ms;
    h.last_ms = now_ms;
    if (r.interval_ms) h.interval_ms = r.interval_ms;
    h.stale = false;
    account(h);
    return Verdict::Accepted;
}

// The interval a report measures (`dt`), or why it measures none: NoTime, or TooSoon for a
// sliver of an interval (the host's baseline is kept).
std::optional<Verdict> Table::too_soon(Host& h, const wire::ReportView& r, std::uint64_t now_ms,
                                       std::uint64_t& dt) {
    // The sender's clock measures the interval without our queueing delay; it is trusted
    // unless it disagrees wildly with ours (a clock step), in which case ours is used.
    const std::uint64_t dt_recv = now_ms > h.recv_ms ? now_ms - h.recv_ms : 0;
    dt = 0;
    if (r.ts_ms > h.ts_ms) {
        std::uint64_t dt_send = r.ts_ms - h.ts_ms;
        if (dt_send * 4 >= dt_recv && dt_send <= 4 * dt_recv + interval_of(h)) dt = dt_send;
    }
    if (dt == 0) dt = dt_recv;
    if (dt == 0) {
        h.seq = r.seq;
        h.last_ms = now_ms;
        return Verdict::NoTime;
    }
    // A rate over a sliver of an interval is mostly noise: keep measuring from the baseline.
    // (The host's interval as it reports it now: a reload may have shortened it.)
    if (r.interval_ms) h.interval_ms = r.interval_ms;
    if (dt * 2 < interval_of(h)) {
        h.seq = r.seq;
        h.last_ms = now_ms;
        h.stale = false;
        return Verdict::TooSoon;
    }
    return std::nullopt;
}

// The report's buckets as the host's next state: each matched with its last by name (most
// often at the same position), rated over `dt`; a new one gets a baseline.
void Table::rate_buckets(Host& h, const wire::ReportView& r, std::uint64_t dt) {
    std::vector<BucketState>& next = next_;
    next.clear();
    next.reserve(r.buckets.size());
    std::vector<char>& used = used_;
    used.assign(h.buckets.size(), 0);
    for (std::size_t i = 0; i < r.buckets.size(); ++i) {
        const wire::ReportBucketView& rb = r.buckets[i];
        // Reports list buckets in configuration order, so position i is almost always it.
        std::size_t j = i;
        if (j >= h.buckets.size() || used[j] || names_[h.buckets[j].name_id] != rb.name) {
            j = h.buckets.size();
            for (std::size_t k = 0; k < h.buckets.size(); ++k) {
                if (!used[k] && names_[h.buckets[k].name_id] == rb.name) {
                    j = k;
                    break;
                }
            }
        }
        BucketState b;
        b.scope = rb.scope;
        b.mode = rb.mode;
        b.limit_mrps = rb.limit_mrps;
        b.quota = rb.quota;
        counters_of(rb, b.c);
        take_keys(r, rb, b);
        if (j == h.buckets.size()) {
            // New bucket on this host (reload, or a run-time bucket): baseline, and a rate
            // if the report carries the bucket's recent counts.
            b.name_id = intern_name(rb.name);
            recent_rates(r, rb, b);
        } else {
            used[j] = 1;
            const BucketState& old = h.buckets[j];
            b.name_id = old.name_id;  // the reference moves over
            bool went_back = false;
            for (int k = 0; k < 4; ++k) went_back = went_back || b.c[k] < old.c[k];
            if (went_back) {
                // A counter went backwards within an epoch: treat as a restart of this
                // bucket (new baseline, previous rate held).
                std::copy(std::begin(old.rate), std::end(old.rate), std::begin(b.rate));
                b.has_rate = old.has_rate;
            } else {
                for (int k = 0; k < 4; ++k) {
                    b.rate[k] = static_cast<float>(rate_mrps(b.c[k] - old.c[k], dt));
                    counted_[b.name_id][k] += b.c[k] - old.c[k];
                }
                b.has_rate = true;
            }
        }
        next.push_back(b);
    }
    for (std::size_t k = 0; k < h.buckets.size(); ++k) {
        if (!used[k]) release_name(h.buckets[k].name_id);
    }
    h.buckets.swap(next);  // the old vector becomes the next report's scratch
}

std::vector<Table::Counted> Table::counted() const {
    std::vector<Counted> out;
    for (std::size_t id = 0; id < names_.size(); ++id) {
        if (name_refs_[id] == 0) continue;  // a free id
        out.push_back({names_[id], counted_[id]});
    }
    std::sort(out.begin(), out.end(),
              [](const Counted& a, const Counted& b) { return a.bucket < b.bucket; });
    return out;
}

void keep_busiest_keys(std::vector<wire::KeyRate>& keys, std::size_t max) {
    auto busier = [](const wire::KeyRate& a, const wire::KeyRate& b) {
        if (a.offered_mrps != b.offered_mrps) return a.offered_mrps > b.offered_mrps;
        return a.hash < b.hash;
    };
    if (keys.size() > max) {
        std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(max), keys.end(),
                         busier);
        keys.resize(max);
    }
    std::sort(keys.begin(), keys.end(), busier);
}

std::size_t keep_busiest(std::vector<wire::UsageBucket>& buckets, std::size_t max) {
    if (buckets.size() <= max) return 0;
    const std::size_t cut = buckets.size() - max;
    auto busier = [](const wire::UsageBucket& a, const wire::UsageBucket& b) {
        if (a.hosts != b.hosts) return a.hosts > b.hosts;
        if (a.offered_mrps != b.offered_mrps) return a.offered_mrps > b.offered_mrps;
        return a.name < b.name;
    };
    std::nth_element(buckets.begin(), buckets.begin() + static_cast<std::ptrdiff_t>(max),
                     buckets.end(), busier);
    buckets.resize(max);
    std::sort(
        buckets.begin(), buckets.end(),
        [](const wire::UsageBucket& a, const wire::UsageBucket& b) { return a.name < b.name; });
    return cut;
}

SweepResult Table::sweep(std::uint64_t now_ms) {
    SweepResult out;
    for (auto it = hosts_.begin(); it != hosts_.end();) {
        Host& h = it->second;
        std::uint64_t age = now_ms > h.last_ms ? now_ms - h.last_ms : 0;
        std::uint64_t iv = interval_of(h);
        if (age > opt_.forget_intervals * iv) {
            out.forgotten.push_back(h.name);
            for (const BucketState& b : h.buckets) release_name(b.name_id);
            bytes_ -= h.bytes;
            it = hosts_.erase(it);
            continue;
        }
        if (!h.stale && age > opt_.stale_intervals * iv) {
            h.stale = true;
            out.went_stale.push_back(h.name);
        }
        ++it;
    }
    std::sort(out.went_stale.begin(), out.went_stale.end());
    std::sort(out.forgotten.begin(), out.forgotten.end());
    return out;
}

std::size_t Table::fresh_hosts() const {
    std::size_t n = 0;
    for (const auto& kv : hosts_) n += kv.second.stale ? 0 : 1;
    return n;
}

std::size_t Table::entries() const {
    std::size_t n = 0;
    for (const auto& kv : hosts_) n += kv.second.buckets.size();
    return n;
}

std::vector<HostSummary> Table::summaries(std::uint64_t now_ms) const {
    std::vector<HostSummary> out;
    out.reserve(hosts_.size());
    for (const auto& kv : hosts_) {
        const Host& h = kv.second;
        HostSummary s;
        s.name = h.name;
        s.epoch = h.epoch;
        s.last_seq = h.seq;
        s.age_ms = now_ms > h.last_ms ? now_ms - h.last_ms : 0;
        s.interval_ms = h.interval_ms;
        s.buckets = h.buckets.size();
        s.stale = h.stale;
        out.push_back(std::move(s));
    }
    std::sort(out.begin(), out.end(),
              [](const HostSummary& a, const HostSummary& b) { return a.name < b.name; });
    return out;
}

namespace {
// One bucket's sums over the fresh hosts (Table::usage()).
struct BucketSum {
    double r[4] = {0, 0, 0, 0};
    std::uint64_t hosts = 0;
    std::uint64_t rated = 0;
    std::vector<wire::DefinitionCount> defs;
    std::unordered_map<std::uint64_t, std::size_t> key_index;  // keyed: hash -> index into keys
    std::vector<wire::KeyRate> keys;
    // The first fresh host's quota= stands for the zone; hosts that disagree on the rest of
    // the definition show as several definitions.
    QuotaSpec quota;
    Scope quota_scope = Scope::Global;
};

void add_keys(BucketSum& a, const std::vector<wire::KeyRate>& keys) {
    for (const wire::KeyRate& k : keys) {
        auto [at, added] = a.key_index.emplace(k.hash, a.keys.size());
        if (added) {
            a.keys.push_back(k);
            continue;
        }
        wire::KeyRate& sum = a.keys[at->second];
        sum.offered_mrps = sat_add(sum.offered_mrps, k.offered_mrps);
        sum.dropped_mrps = sat_add(sum.dropped_mrps, k.dropped_mrps);
        sum.hosts += 1;
        if (sum.text.empty()) sum.text = k.text;
    }
}

void add_definition(std::vector<wire::DefinitionCount>& defs, const wire::Definition& d) {
    for (wire::DefinitionCount& dc : defs) {
        if (dc.def == d) {
            ++dc.hosts;
            return;
        }
    }
    defs.push_back({d, 1});
}

// The usage entry of a bucket from its sums (whose definitions and keys move into it).
wire::UsageBucket usage_bucket(const std::string& name, BucketSum& a) {
    wire::UsageBucket u;
    u.name = name;
    u.offered_mrps = round_mrps(a.r[0]);
    u.admitted_mrps = round_mrps(a.r[1]);
    u.dropped_mrps = round_mrps(a.r[2]);
    u.shadow_dropped_mrps = round_mrps(a.r[3]);
    u.hosts = a.hosts;
    u.rated_hosts = a.rated;
    std::sort(a.defs.begin(), a.defs.end(),
              [](const wire::DefinitionCount& x, const wire::DefinitionCount& y) {
                  if (x.hosts != y.hosts) return x.hosts > y.hosts;
                  return x.def < y.def;
              });
    if (a.defs.size() > wire::kMaxDefinitions) a.defs.resize(wire::kMaxDefinitions);
    u.definitions = std::move(a.defs);
    bool keyed = false;
    for (const wire::DefinitionCount& dc : u.definitions) keyed = keyed || dc.def.keyed;
    if (keyed && !a.keys.empty()) {
        keep_busiest_keys(a.keys, wire::kMaxUsageKeys);
        u.keys = std::move(a.keys);
    }
    return u;
}
}  // namespace

void Table::usage(wire::ZoneUsage& out) const {
    std::vector<BucketSum> acc(names_.size());
    std::size_t fresh = 0;
    out.host_names.clear();
    out.quotas.clear();
    for (const auto& kv : hosts_) {
        const Host& h = kv.second;
        if (h.stale) continue;
        ++fresh;
        if (out.host_names.size() < wire::kMaxHostNames) out.host_names.push_back(h.name);
        for (const BucketState& b : h.buckets) {
            BucketSum& a = acc[b.name_id];
            if (b.has_rate) {
                for (int k = 0; k < 4; ++k) a.r[k] += b.rate[k];
                ++a.rated;
            }
            ++a.hosts;
            add_keys(a, b.keys);
            add_definition(a.defs, wire::Definition{b.scope, b.mode, b.limit_mrps, b.keyed});
            if (b.quota && !a.quota) {
                a.quota = b.quota;
                a.quota_scope = b.scope;
            }
        }
    }
    std::sort(out.host_names.begin(), out.host_names.end());
    out.hosts = fresh;
    out.stale_hosts = hosts_.size() - fresh;

    out.buckets.clear();
    std::vector<std::int64_t> slot_of(names_.size(), -1);  // a bucket some hosts lack: its entry
    bool partial = false;
    for (std::size_t id = 0; id < acc.size(); ++id) {
        if (acc[id].hosts == 0) continue;
        if (acc[id].hosts < fresh) {
            slot_of[id] = static_cast<std::int64_t>(out.buckets.size());
            partial = true;
        }
        out.buckets.push_back(usage_bucket(names_[id], acc[id]));
        if (acc[id].quota && out.quotas.size() < wire::kMaxQuotas)
            out.quotas.push_back({names_[id], acc[id].quota_scope, acc[id].quota});
    }
    std::sort(out.quotas.begin(), out.quotas.end(),
              [](const wire::QuotaDef& x, const wire::QuotaDef& y) { return x.name < y.name; });
    if (partial) name_hosts(out, slot_of);
    std::sort(
        out.buckets.begin(), out.buckets.end(),
        [](const wire::UsageBucket& x, const wire::UsageBucket& y) { return x.name < y.name; });
}

// The host names of the buckets only some fresh hosts report (slot_of: their entries in out).
void Table::name_hosts(wire::ZoneUsage& out, const std::vector<std::int64_t>& slot_of) const {
    for (const auto& kv : hosts_) {
        const Host& h = kv.second;
        if (h.stale) continue;
        for (const BucketState& b : h.buckets) {
            std::int64_t s = slot_of[b.name_id];
            if (s < 0) continue;
            auto& names = out.buckets[static_cast<std::size_t>(s)].host_names;
            if (names.size() < wire::kMaxBucketHostNames) names.push_back(h.name);
        }
    }
    for (std::int64_t s : slot_of) {
        if (s < 0) continue;
        std::vector<std::string>& names = out.buckets[static_cast<std::size_t>(s)].host_names;
        std::sort(names.begin(), names.end());
    }
}

}  // namespace grl::rates
