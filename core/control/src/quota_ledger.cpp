#include "grl/control/quota_ledger.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

namespace grl::control {
namespace {

InstanceKey key_of(const std::string& name, Scope scope, const std::string& zone) {
    return {name, scope, "", scope == Scope::Zone ? zone : std::string()};
}

const wire::UsageBucket* find_bucket(const wire::ZoneUsage& u, const std::string& name) {
    auto it = std::lower_bound(
        u.buckets.begin(), u.buckets.end(), name,
        [](const wire::UsageBucket& b, const std::string& n) { return b.name < n; });
    return it != u.buckets.end() && it->name == name ? &*it : nullptr;
}

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

// Milli-units as a count, saturating: a peer's use near 2^64 must not overflow a conversion.
constexpr double kMaxMu = 4.0e18;
std::uint64_t to_mu(double mu) {
    return mu <= 0 ? 0 : mu >= kMaxMu ? static_cast<std::uint64_t>(kMaxMu) : std::llround(mu);
}

bool same_window(const QuotaSpec& a, const QuotaSpec& b) {
    return a.period == b.period && a.offset_ms == b.offset_ms;
}

std::string describe(const std::string& name, Scope scope, const std::string& zone) {
    std::string s = "quota of bucket \"" + name + "\" (" + std::string(to_string(scope));
    if (scope == Scope::Zone) s += " " + zone;
    return s + ")";
}

}  // namespace

// Null when the instance is new and the ledger holds wire::kMaxQuotas instances already (all
// it holds fit one region_usage and the state file). A new instance takes `spec`.
QuotaLedger::Entry* QuotaLedger::entry(const InstanceKey& k, const QuotaSpec& spec) {
    auto it = entries_.find(k);
    if (it == entries_.end()) {
        if (entries_.size() >= wire::kMaxQuotas) return nullptr;
        it = entries_.emplace(k, Entry{}).first;
        it->second.spec = spec;
    }
    return &it->second;
}

namespace {

// The order that breaks a tie between definitions, the same on every controller.
bool before(const QuotaSpec& a, const QuotaSpec& b) {
    return std::tie(a.period, a.offset_ms, a.n) < std::tie(b.period, b.offset_ms, b.n);
}

}  // namespace

// The definition in force is the one most zones sent in their last usage, of the zones heard
// within kMaxQuotaSpanMs by this controller's clock: it takes more votes than the one in force
// has to replace it (a tie keeps it), and among several with as many, the first by before() wins,
// the same on every controller. So while a change rolls out zone by zone, the instance keeps
// one window and switches once. For kQuotaVoteHoldMs after an instance's first usage here (a
// new one, or one restored from the state file) nothing switches: every zone votes first, so
// the first zone heard cannot decide alone. Another N keeps the use (the units admitted in the
// window are the same). Another window keeps it too when the old window began inside the new
// one (e.g. an hour's use within its day); else the use starts afresh at the switch.
void QuotaLedger::settle(Entry& e, std::uint64_t now_wall_ms) {
    if (now_wall_ms < e.first_ms + kQuotaVoteHoldMs) return;
    std::vector<std::pair<QuotaSpec, std::size_t>> votes;
    std::size_t in_force = 0;
    for (const auto& named : e.zones) {
        const Entry::ZoneSeen& z = named.second;
        if (z.ms + kMaxQuotaSpanMs < now_wall_ms) continue;
        if (z.spec == e.spec) ++in_force;
        auto v = std::find_if(votes.begin(), votes.end(),
                              [&](const auto& t) { return t.first == z.spec; });
        if (v == votes.end()) {
            votes.emplace_back(z.spec, 1);
        } else {
            ++v->second;
        }
    }
    if (votes.empty()) return;
    auto won = std::min_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second > b.second : before(a.first, b.first);
    });
    if (won->second <= in_force) return;
    const QuotaSpec& spec = won->first;
    if (!same_window(e.spec, spec)) {
        // The window in force by this controller's clock: no sender moves it ahead.
        const std::uint64_t start = window_at(spec, now_wall_ms).start_ms;
        if (e.window_ms >= start) {
            e.window_ms = start;
        } else {
            roll(e, start);
        }
    }
    e.spec = spec;
}

void QuotaLedger::refuse(std::uint64_t& reason, const std::string& what, const std::string& from,
                         const std::string& why) {
    ++reason;
    last_refused_ = what + " from " + from + " refused: " + why;
}

void QuotaLedger::roll(Entry& e, std::uint64_t window_ms) {
    e.window_ms = window_ms;
    e.own_mu = 0;
    e.peer_mu.clear();
    keys_ -= e.keys.size();
    e.keys.clear();
    e.key_regions.clear();
}

std::uint64_t QuotaLedger::Entry::KeyUse::total() const {
    std::uint64_t t = own;
    for (std::uint64_t p : peer) t = sat_add(t, p);
    return t;
}

QuotaLedger::Entry::KeyUse* QuotaLedger::key_use(Entry& e, std::uint64_t hash,
                                                 std::uint64_t units) {
    auto it = e.keys.find(hash);
    if (it != e.keys.end()) return &it->second;
    if (keys_ >= max_keys_) {
        ++refused_.keys;
        refused_.key_units = sat_add(refused_.key_units, units);
        return nullptr;
    }
    ++keys_;
    return &e.keys[hash];
}

// A zone usage's keys: the units each admitted since the zone's previous usage.
void QuotaLedger::take_keys(Entry& e, const wire::UsageBucket& b, const std::string& what,
                            const std::string& zone) {
    const std::uint64_t before = refused_.keys;
    for (const wire::KeyRate& k : b.keys) {
        if (k.used == 0) continue;
        Entry::KeyUse* ku = key_use(e, k.hash, k.used);
        if (ku == nullptr) continue;
        ku->own = sat_add(ku->own, k.used);
        if (ku->text.empty() && !k.text.empty()) ku->text = k.text;
    }
    if (refused_.keys != before) {
        last_refused_ = std::to_string(refused_.keys - before) + " key(s) of " + what +
                        " from zone " + zone + " refused: the ledger holds " +
                        std::to_string(max_keys_) + " keys (their units are not counted)";
    }
}

// A peer's keys: its region's use of each (the larger stands, as for the instance's use).
void QuotaLedger::take_peer_keys(Entry& e, const wire::QuotaUse& q, bool twin,
                                 const std::string& region, const std::string& from) {
    if (q.keys.empty()) return;
    const std::uint64_t before = refused_.keys;
    std::size_t r = 0;
    if (!twin) {  // at most max_regions: take_peer refused the others
        auto it = std::find(e.key_regions.begin(), e.key_regions.end(), region);
        r = static_cast<std::size_t>(it - e.key_regions.begin());
        if (it == e.key_regions.end()) e.key_regions.push_back(region);
    }
    for (const wire::KeyUse& k : q.keys) {
        Entry::KeyUse* ku = key_use(e, k.hash, 0);
        if (ku == nullptr) continue;
        if (twin) {
            ku->own = std::max(ku->own, k.used);
            continue;
        }
        if (ku->peer.size() <= r) ku->peer.resize(r + 1, 0);
        ku->peer[r] = std::max(ku->peer[r], k.used);
    }
    if (refused_.keys != before) {
        last_refused_ = std::to_string(refused_.keys - before) + " key(s) of " +
                        describe(q.name, q.scope, q.zone) + " from " + from +
                        " refused: the ledger holds " + std::to_string(max_keys_) + " keys";
    }
}

void QuotaLedger::take_zone(const wire::ZoneUsage& u, std::uint64_t now_wall_ms) {
    for (const wire::QuotaDef& q : u.quotas) {
        const wire::UsageBucket* b = find_bucket(u, q.name);
        if (b == nullptr) {
            refuse(refused_.unlisted, describe(q.name, q.scope, u.zone), "zone " + u.zone,
                   "the usage lists no such bucket");
            continue;
        }
        Entry* held = entry(key_of(q.name, q.scope, u.zone), q.spec);
        if (held == nullptr) {
            refuse(refused_.full, describe(q.name, q.scope, u.zone), "zone " + u.zone,
                   "the ledger holds " + std::to_string(wire::kMaxQuotas) + " instances");
            continue;
        }
        Entry& e = *held;
        // The window of the definition in force, whichever this zone sent.
        const Window w = window_at(e.spec, u.ts_ms);
        if (w.start_ms < e.window_ms) continue;  // a late usage of a window that ended
        // Stamped in a window that has not begun by this controller's clock (a collector's
        // clock ahead, up to the skew allowed): its rate is counted by the zone's next usage
        // instead, so that no sender can end the window in force early; its keys' units are
        // counts, taken into the window in force.
        const std::uint64_t now_start = window_at(e.spec, now_wall_ms).start_ms;
        if (w.start_ms > now_start) {
            if (now_start > e.window_ms) roll(e, now_start);
            take_keys(e, *b, describe(q.name, q.scope, u.zone), u.zone);
            continue;
        }
        if (w.start_ms > e.window_ms) roll(e, w.start_ms);
        if (!b->keys.empty()) take_keys(e, *b, describe(q.name, q.scope, u.zone), u.zone);
        auto z = e.zones.find(u.zone);
        std::uint64_t from = z != e.zones.end()        ? z->second.ms
                             : e.restored_ms != 0      ? e.restored_ms
                             : u.ts_ms > u.interval_ms ? u.ts_ms - u.interval_ms
                                                       : 0;
        from =
            std::max({from, w.start_ms, u.ts_ms > kMaxQuotaSpanMs ? u.ts_ms - kMaxQuotaSpanMs : 0});
        if (u.ts_ms > from) {
            e.own_mu += static_cast<double>(b->admitted_mrps) *
                        static_cast<double>(u.ts_ms - from) / 1000.0;
        }
        Entry::ZoneSeen& seen = e.zones[u.zone];
        seen.ms = std::max(seen.ms, u.ts_ms);
        e.at_ms = std::max(e.at_ms, u.ts_ms);
        if (e.first_ms == 0) e.first_ms = now_wall_ms;
        // Usually every zone sends the definition in force: nothing to count.
        if (seen.spec != q.spec || q.spec != e.spec) {
            seen.spec = q.spec;
            settle(e, now_wall_ms);
        }
    }
}

void QuotaLedger::take_peer(const wire::RegionUsage& u, std::uint64_t now_wall_ms) {
    const bool twin = u.region == region_;
    const std::string from = "peer " + u.source + " (region " + u.region + ")";
    // A peer controller speaks for the region it first named (its connection speaks for its
    // name: controller/intake.cpp), so one peer cannot fill instances with made-up regions.
    // Pins are as many as peers, the least recently heard one making room.
    auto pinned = region_of_.find(u.source);
    if (pinned == region_of_.end()) {
        if (region_of_.size() >= max_regions_) {
            auto oldest = std::min_element(
                region_of_.begin(), region_of_.end(),
                [](const auto& a, const auto& b) { return a.second.heard_ms < b.second.heard_ms; });
            region_of_.erase(oldest);
        }
        pinned = region_of_.emplace(u.source, Pin{u.region, 0}).first;
    }
    pinned->second.heard_ms = now_wall_ms;
    if (pinned->second.region != u.region) {
        if (!u.quotas.empty()) {
            refused_.other_region += u.quotas.size();
            last_refused_ = std::to_string(u.quotas.size()) + " quota entries from " + from +
                            " refused: it spoke for region " + pinned->second.region + " before";
        }
        return;
    }
    for (const wire::QuotaUse& q : u.quotas) {
        if (!twin && q.scope != Scope::Global) continue;  // another region's own instance
        auto it = entries_.find(key_of(q.name, q.scope, q.zone));
        if (it == entries_.end()) {
            refuse(refused_.not_ours, describe(q.name, q.scope, q.zone), from,
                   "no zone of this controller defines it");
            continue;
        }
        Entry& e = it->second;
        // A window of ours that has begun by this controller's clock: a peer cannot move the
        // instance to another window. The next window from a peer whose clock is a little
        // ahead is left for its next messages, not counted as refused.
        const Window now = window_at(e.spec, now_wall_ms);
        if (same_window(e.spec, q.spec) && q.window_ms == now.end_ms) continue;
        if (!same_window(e.spec, q.spec) || q.window_ms > now.start_ms ||
            window_at(e.spec, q.window_ms).start_ms != q.window_ms) {
            refuse(refused_.other_window, describe(q.name, q.scope, q.zone), from,
                   "window_ms " + std::to_string(q.window_ms) + " of " +
                       std::string(to_string(q.spec.period)) +
                       " windows is not one of ours (a period or window_offset change?)");
            continue;
        }
        if (!twin && e.peer_mu.size() >= max_regions_ && e.peer_mu.count(u.region) == 0) {
            refuse(refused_.too_many_regions, describe(q.name, q.scope, q.zone), from,
                   "it already holds " + std::to_string(max_regions_) + " other regions");
            continue;
        }
        if (q.window_ms < e.window_ms) continue;
        if (q.window_ms > e.window_ms) roll(e, q.window_ms);
        const auto mu = std::min(static_cast<double>(q.use_mu), kMaxMu);
        if (twin) {
            e.own_mu = std::max(e.own_mu, mu);
            e.at_ms = std::max(e.at_ms, std::min(q.at_ms, u.ts_ms));
        } else {
            std::uint64_t& held = e.peer_mu[u.region];
            held = std::max(held, to_mu(mu));
        }
        take_peer_keys(e, q, twin, u.region, from);
    }
}

void QuotaLedger::restore(const std::vector<wire::QuotaUse>& saved) {
    for (const wire::QuotaUse& q : saved) {
        Entry* held = entry(key_of(q.name, q.scope, q.zone), q.spec);
        if (held == nullptr) return;  // the file was written from at most as many
        Entry& e = *held;
        e.spec = q.spec;
        roll(e, q.window_ms);
        e.own_mu = static_cast<double>(q.use_mu);
        e.at_ms = e.restored_ms = q.at_ms;
        for (const wire::KeyUse& k : q.keys) {
            if (Entry::KeyUse* ku = key_use(e, k.hash, 0)) ku->own = k.used;
        }
    }
}

void QuotaLedger::used_up(const InstanceKey& k, std::uint64_t wall_ms,
                          std::vector<std::uint64_t>& out) const {
    out.clear();
    auto it = entries_.find(k);
    if (it == entries_.end()) return;
    const Entry& e = it->second;
    if (e.keys.empty() || e.window_ms < window_at(e.spec, wall_ms).start_ms) return;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> up;  // (use, hash)
    for (const auto& [hash, use] : e.keys) {
        const std::uint64_t t = use.total();
        if (t >= e.spec.n) up.emplace_back(t, hash);
    }
    std::sort(up.begin(), up.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    out.reserve(up.size());
    for (const auto& u : up) out.push_back(u.second);
}

std::vector<QuotaLedger::KeyAnswer> QuotaLedger::most_used(const InstanceKey& k,
                                                           std::uint64_t wall_ms,
                                                           std::size_t n) const {
    std::vector<KeyAnswer> out;
    auto it = entries_.find(k);
    if (it == entries_.end()) return out;
    const Entry& e = it->second;
    if (e.window_ms < window_at(e.spec, wall_ms).start_ms) return out;
    out.reserve(e.keys.size());
    for (const auto& [hash, use] : e.keys) out.push_back({hash, use.total(), use.text});
    const auto more = [](const KeyAnswer& a, const KeyAnswer& b) {
        return a.used != b.used ? a.used > b.used : a.hash < b.hash;
    };
    if (out.size() > n) {
        std::nth_element(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), out.end(),
                         more);
        out.resize(n);
    }
    std::sort(out.begin(), out.end(), more);
    return out;
}

std::uint64_t QuotaLedger::key_used(const InstanceKey& k, std::uint64_t hash,
                                    std::uint64_t wall_ms) const {
    auto it = entries_.find(k);
    if (it == entries_.end()) return 0;
    const Entry& e = it->second;
    if (e.window_ms < window_at(e.spec, wall_ms).start_ms) return 0;
    auto key = e.keys.find(hash);
    return key == e.keys.end() ? 0 : key->second.total();
}

bool QuotaLedger::at(const InstanceKey& k, std::uint64_t wall_ms, Answer& out) const {
    auto it = entries_.find(k);
    if (it == entries_.end()) return false;
    const Entry& e = it->second;
    out.spec = e.spec;
    out.window = window_at(e.spec, wall_ms);
    out.used = 0;
    if (e.window_ms < out.window.start_ms) return true;  // no usage of this window yet
    double mu = e.own_mu;
    for (const auto& [region, peer] : e.peer_mu) mu += static_cast<double>(peer);
    out.used = to_mu(std::floor(std::min(mu, kMaxMu) / 1000.0));
    return true;
}

void QuotaLedger::own_use(std::vector<wire::QuotaUse>& out) const {
    out.clear();
    for (const auto& [k, e] : entries_) {
        out.push_back({k.bucket, k.scope, k.zone, e.spec, e.window_ms, to_mu(e.own_mu), e.at_ms});
        std::vector<wire::KeyUse>& keys = out.back().keys;
        for (const auto& [hash, use] : e.keys) {
            if (use.own != 0) keys.push_back({hash, use.own});
        }
        std::sort(keys.begin(), keys.end(),
                  [](const wire::KeyUse& a, const wire::KeyUse& b) { return a.hash < b.hash; });
    }
}

void QuotaLedger::forget(std::uint64_t wall_ms) {
    for (auto it = entries_.begin(); it != entries_.end();) {
        // A zone silent this long is gone (or back later with one interval counted).
        auto& zones = it->second.zones;
        for (auto z = zones.begin(); z != zones.end();) {
            z = z->second.ms + kForgetZoneMs < wall_ms ? zones.erase(z) : std::next(z);
        }
        const Window w = window_at(it->second.spec, wall_ms);
        // A window that ended holds no keys (their room goes to the windows in force).
        if (it->second.window_ms < w.start_ms && !it->second.keys.empty()) {
            keys_ -= it->second.keys.size();
            it->second.keys.clear();
            it->second.key_regions.clear();
        }
        const std::uint64_t len = w.end_ms - w.start_ms;
        const bool stale = it->second.window_ms + 2 * len < w.end_ms;
        if (stale) keys_ -= it->second.keys.size();
        it = stale ? entries_.erase(it) : std::next(it);
    }
}

}  // namespace grl::control
