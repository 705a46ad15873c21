// Usage in: a zone_usage or region_usage checked, interned (bucket ids) and taken into the
// zone and peer tables and the running sums. UsageIntake (usage_intake.cpp) feeds it.
#include "grl/control/control.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <tuple>
#include <utility>

#include "controller_detail.h"
#include "grl/common/bucket.h"
#include "grl/common/ratio.h"
#include "grl/common/saturating.h"

namespace grl::control {

using namespace detail;  // NOLINT(google-build-using-namespace): this library's own helpers

namespace {
// The positions of `buckets` in name order, in `order`; left empty when they are in order
// already (as senders send them).
void name_order(const std::vector<wire::UsageBucket>& buckets, std::vector<std::uint32_t>& order) {
    order.clear();
    auto less = [&](std::uint32_t a, std::uint32_t b) { return buckets[a].name < buckets[b].name; };
    bool sorted = true;
    for (std::size_t i = 1; i < buckets.size() && sorted; ++i)
        sorted = buckets[i - 1].name < buckets[i].name;
    if (sorted) return;
    order.resize(buckets.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), less);
}
}  // namespace

Accepted Controller::check_zone_usage(const wire::ZoneUsage& u, const Clock& now,
                                      std::string* why) const {
    if (u.region != opt_.region) return Accepted::WrongRegion;
    if (from_the_future(u.ts_ms, now)) {
        refuse(why, "zone usage from " + u.source + " (zone " + u.zone + ") refused: ts_ms " +
                        ahead(u.ts_ms, now));
        return Accepted::Future;
    }
    // The decoder checked that no bucket claims more hosts than the message: bounding the
    // message's count bounds every count and vote in it.
    if (u.hosts > opt_.max_zone_hosts || u.stale_hosts > opt_.max_zone_hosts) {
        refuse(why, "zone usage from " + u.source + " (zone " + u.zone + ") refused: it claims " +
                        std::to_string(u.hosts) + " hosts and " + std::to_string(u.stale_hosts) +
                        " stale hosts (at most " + std::to_string(opt_.max_zone_hosts) +
                        " each per zone)");
        return Accepted::TooManyHosts;
    }
    auto it = zones_.find(u.zone);
    if (it == zones_.end() && zones_.size() >= opt_.max_zones) {
        refuse(why, "zone usage from " + u.source + " (zone " + u.zone +
                        ") refused: this controller already holds " +
                        std::to_string(zones_.size()) + " zones (--max-zones)");
        return Accepted::Full;
    }
    if (it != zones_.end()) {
        const wire::ZoneUsage& held = it->second.usage;
        // Newer by the sender's clock, then by seq: a duplicate or a late message loses, a
        // restarted collector (seq from 1, later ts_ms) wins. A held entry that has gone stale
        // never blocks a newcomer (a collector whose clock stepped back).
        if (!newer_than(u, held) && zone_fresh(it->second, now)) return Accepted::Older;
    }
    return Accepted::Yes;
}

Accepted Controller::on_zone_usage(const wire::ZoneUsage& u, const Clock& now, std::string* why) {
    wire::ZoneUsage copy = u;
    return take_zone_usage(copy, now, why);
}

Accepted Controller::take_zone_usage(wire::ZoneUsage& u, const Clock& now, std::string* why,
                                     Early* early) {
    if (early) *early = Early{};
    const Accepted a = check_zone_usage(u, now, why);
    if (a != Accepted::Yes) return a;
    auto held = zones_.find(u.zone);
    const ZoneEntry* before = held == zones_.end() ? nullptr : &held->second;
    bool same_places = false;
    if (!intern(u.buckets, before ? &before->ids : nullptr, same_places)) {
        refuse(why, too_many_buckets("zone", u.source, u.zone));
        return Accepted::TooManyBuckets;
    }
    // Judged against the state before the usage is taken: freshness, awaited hosts, instances.
    const bool was_fresh = before && zone_fresh(*before, now);
    if (early) early->new_rates = brings_new_rates(u, before, now);
    // Back from silence, or a restarted collector (its seq starts again from 1).
    const bool returning = before && (!was_fresh || u.seq < before->usage.seq);
    ZoneEntry& e = zone_entry(u.zone);
    if (returning && !e.short_of_hosts) {
        e.awaited_hosts = e.usage.hosts;
        e.returned_mono = now.mono_ms;
    }
    // Out of the running sums before its ids may be released; with the same buckets at the
    // same places, out and in in one pass below.
    const bool replace = e.in_run && same_places && e.sums.size() == u.buckets.size();
    if (replace) {
        std::swap(e.sums, sums_scratch_);
    } else if (e.in_run) {
        run_sub(e.ids, e.sums, true);
    }
    std::swap(e.usage, u);
    std::swap(e.ids, ids_scratch_);
    keep_or_release(ids_scratch_, same_places);  // the replaced usage's
    if (!same_places) e.repeats = repeats(e.ids);
    e.gen = ++usage_gen_;
    const bool judge_change = early && was_fresh && !early->new_rates;
    stand_in(e, u.buckets, now, same_places, judge_change ? &early->change : nullptr);
    e.short_of_hosts = short_of_hosts(e, e.usage.hosts, now);
    if (replace) {
        run_replace(e.ids, sums_scratch_, e);
    } else if (e.in_run) {
        run_add(e.ids, e.sums, &e);
    }
    quotas_.take_zone(e.usage, now.wall_ms);
    return Accepted::Yes;
}

Controller::ZoneEntry& Controller::zone_entry(const std::string& zone) {
    auto it = zones_.try_emplace(zone).first;
    it->second.name = it->first;
    return it->second;
}

// A bucket whose hosts all lack a rate (a restarted collector, new hosts) has sums of zero that
// mean "unknown": its last rated entry stands in for a while, else it is unrated. Most usages
// name the same buckets at the same places as the one they replace: the last rated entries
// then stand beside them and are matched by place, without comparing a name. Else one merge
// of the new entries (in name order) with the last rated ones (sorted by name). At 10,000
// buckets x 50 zones, a map lookup and a copy per entry, then the comparisons of names in that
// merge and in the early judgement, were much of the controller's intake.
void Controller::stand_in(ZoneEntry& e, const std::vector<wire::UsageBucket>& prev,
                          const Clock& now, bool same_places, Change* change) {
    e.usage.interval_ms = clamp_interval(e.usage.interval_ms);
    e.recv_mono = now.mono_ms;
    const StandIn si{now.mono_ms,
                     opt_.hold_intervals * std::max(e.usage.interval_ms, opt_.interval_ms),
                     e.usage.interval_ms, change};
    std::vector<wire::UsageBucket>& buckets = e.usage.buckets;
    std::vector<LastRated>& old = e.last_rated;
    const std::size_t n = buckets.size();
    e.sums.resize(n);  // the entries as aggregate() reads them, once final
    // old[k] is buckets[k]'s; e.order still holds. (The previous stand_in left at least n
    // entries: checked all the same, since old[k] past the end would be no entry at all.)
    std::vector<std::string>& gone = e.gone_names;
    if (!same_places || old.size() < n + gone.size()) {
        stand_in_by_name(e, prev, si);
        return;
    }
    for (std::size_t k = 0; k < n; ++k) {
        stand_in_entry(buckets[k], old[k], si);
        fill(e.sums[k], buckets[k]);
    }
    std::size_t kept = n;
    for (std::size_t j = n; j < old.size(); ++j) {
        if (!si.live(old[j])) continue;
        old[kept] = old[j];
        std::swap(gone[kept - n], gone[j - n]);
        ++kept;
    }
    old.resize(kept);
    gone.resize(kept - n);
}

// Entry b with its last rated entry l (kept false: none): rated, b becomes the last; else a
// live l stands in; else the place is left without one. Early::change is judged on the way:
// only a sum over the same number of rated hosts as the last is compared.
[[gnu::always_inline]] inline void Controller::stand_in_entry(wire::UsageBucket& b, LastRated& l,
                                                              const StandIn& si) {
    if (l.kept && si.change && b.rated_hosts != 0 && b.rated_hosts == l.rated_hosts) {
        const Change c = changed_well(static_cast<double>(l.offered_mrps),
                                      static_cast<double>(b.offered_mrps), si.interval_ms);
        if (c == Change::Rise || (c == Change::Fall && *si.change == Change::None)) *si.change = c;
    }
    if (b.hosts > 0 && b.rated_hosts > 0) {
        l.offered_mrps = b.offered_mrps;
        l.admitted_mrps = b.admitted_mrps;
        l.dropped_mrps = b.dropped_mrps;
        l.shadow_dropped_mrps = b.shadow_dropped_mrps;
        l.rated_hosts = b.rated_hosts;
        l.mono = si.mono_ms;
        l.kept = true;
        return;
    }
    if (!l.kept || !si.live(l)) {
        l.kept = false;
        return;
    }
    if (b.hosts > 0) {
        b.offered_mrps = l.offered_mrps;
        b.admitted_mrps = l.admitted_mrps;
        b.dropped_mrps = l.dropped_mrps;
        b.shadow_dropped_mrps = l.shadow_dropped_mrps;
        b.rated_hosts = std::min(l.rated_hosts, b.hosts);
    }
}

// stand_in() when the usage does not name the buckets of the one it replaced at the same places:
// one merge of the new entries (in name order) with the last rated ones (sorted by name). The
// previous usage's entries stand first in last_rated, by place (their names are `prev`'s), then
// those of buckets it no longer named (names in gone_names).
void Controller::stand_in_by_name(ZoneEntry& e, const std::vector<wire::UsageBucket>& prev,
                                  const StandIn& si) {
    std::vector<wire::UsageBucket>& buckets = e.usage.buckets;
    std::vector<LastRated>& old = e.last_rated;
    std::vector<std::string>& gone = e.gone_names;
    const std::size_t n = buckets.size();
    const std::size_t places =
        std::min(old.size() - std::min(old.size(), gone.size()), prev.size());
    auto name_of = [&](std::uint32_t j) -> const std::string& {
        return j < places ? prev[j].name : gone[j - (old.size() - gone.size())];
    };
    name_order(buckets, e.order);
    std::vector<std::uint32_t>& sorted = last_sorted_;
    sorted.clear();
    for (std::uint32_t j = 0; j < old.size(); ++j) {
        if (old[j].kept && (j < places || j >= old.size() - gone.size())) sorted.push_back(j);
    }
    auto by_name = [&](std::uint32_t x, std::uint32_t y) { return name_of(x) < name_of(y); };
    if (!std::is_sorted(sorted.begin(), sorted.end(), by_name))
        std::sort(sorted.begin(), sorted.end(), by_name);
    std::vector<LastRated>& next = last_rated_scratch_;
    std::vector<std::string>& next_gone = gone_names_scratch_;
    next.clear();
    next.resize(n);
    next_gone.clear();
    auto keep_gone = [&](std::uint32_t j) {
        if (!si.live(old[j])) return;
        next.push_back(old[j]);
        next_gone.push_back(name_of(j));
    };
    std::size_t i = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t at = e.order.empty() ? k : e.order[k];
        const wire::UsageBucket& b = buckets[at];
        for (; i < sorted.size() && name_of(sorted[i]) < b.name; ++i) keep_gone(sorted[i]);
        LastRated& l = next[at];
        if (i < sorted.size() && name_of(sorted[i]) == b.name) l = old[sorted[i++]];
        stand_in_entry(buckets[at], l, si);
        fill(e.sums[at], buckets[at]);
    }
    for (; i < sorted.size(); ++i) keep_gone(sorted[i]);
    std::swap(old, next);
    std::swap(gone, next_gone);
}

Accepted Controller::check_region_usage(const wire::RegionUsage& u, const Clock& now,
                                        std::string* why) {
    if (u.source == opt_.name) return Accepted::Self;
    // Checked before the overrides are merged: a message that cannot be true is refused whole.
    if (from_the_future(u.ts_ms, now)) {
        refuse(why, "region usage from " + u.source + " (region " + u.region + ") refused: ts_ms " +
                        ahead(u.ts_ms, now));
        return Accepted::Future;
    }
    if (u.hosts > opt_.max_region_hosts) {
        refuse(why, "region usage from " + u.source + " (region " + u.region +
                        ") refused: it claims " + std::to_string(u.hosts) + " hosts (at most " +
                        std::to_string(opt_.max_region_hosts) + " per region)");
        return Accepted::TooManyHosts;
    }
    if (peers_.size() >= opt_.max_peers && peers_.count(u.source) == 0) {
        refuse(why, "region usage from " + u.source + " (region " + u.region +
                        ") refused: this controller already holds " +
                        std::to_string(peers_.size()) + " peer controllers (--max-peers)");
        return Accepted::Full;
    }
    // The override table is a last-writer-wins map: merging is idempotent and
    // order-independent, so even an older message's entries are merged.
    const wire::Override* first_refused = nullptr;
    std::size_t refused = 0;
    for (const wire::Override& o : u.overrides) {
        if (merge_override(o, now)) continue;
        if (refused++ == 0) first_refused = &o;
    }
    if (refused) {
        overrides_rejected_ += refused;
        refuse(why, "override of bucket \"" + first_refused->name + "\" (origin " +
                        first_refused->origin + ") from " + u.source + " refused: set_ms " +
                        ahead(first_refused->set_ms, now) +
                        (refused > 1 ? "; " + std::to_string(refused - 1) + " more refused" : ""));
    }
    auto it = peers_.find(u.source);
    if (it != peers_.end()) {
        const wire::RegionUsage& held = it->second.usage;
        if (!newer_than(u, held) && peer_fresh(it->second, now)) return Accepted::Older;
    }
    return Accepted::Yes;
}

Accepted Controller::on_region_usage(const wire::RegionUsage& u, const Clock& now,
                                     std::string* why) {
    const Accepted a = check_region_usage(u, now, why);
    if (a != Accepted::Yes) return a;
    wire::RegionUsage copy = u;
    return keep_region_usage(copy, now, why);
}

Accepted Controller::take_region_usage(wire::RegionUsage& u, const Clock& now, std::string* why) {
    const Accepted a = check_region_usage(u, now, why);
    if (a != Accepted::Yes) return a;
    return keep_region_usage(u, now, why);
}

Accepted Controller::keep_region_usage(wire::RegionUsage& u, const Clock& now, std::string* why) {
    auto held = peers_.find(u.source);
    bool same_places = false;
    if (!intern(u.buckets, held == peers_.end() ? nullptr : &held->second.ids, same_places)) {
        refuse(why, too_many_buckets("region", u.source, u.region));
        return Accepted::TooManyBuckets;
    }
    PeerEntry& e = held == peers_.end() ? peers_[u.source] : held->second;
    if (e.in_run) run_sub(e.ids, e.sums, false);
    std::swap(e.usage, u);
    quotas_.take_peer(e.usage, now.wall_ms);
    std::swap(e.ids, ids_scratch_);
    keep_or_release(ids_scratch_, same_places);
    if (!same_places) e.repeats = repeats(e.ids);
    e.gen = ++usage_gen_;
    e.sums.resize(e.usage.buckets.size());
    for (std::size_t k = 0; k < e.sums.size(); ++k) fill(e.sums[k], e.usage.buckets[k]);
    if (e.in_run) run_add(e.ids, e.sums, nullptr);
    e.usage.interval_ms = clamp_interval(e.usage.interval_ms);
    e.recv_mono = now.mono_ms;
    const wire::RegionUsage& m = e.usage;
    bool differs = m.limits_digest != limits_digest_;
    if (differs && digest_mismatch_.insert(m.source).second) {
        pending_.push_back({Event::Level::Warn, "",
                            "peer " + m.source + " (region " + m.region +
                                ") has different limits (digest " +
                                (m.limits_digest.empty() ? "none" : m.limits_digest) + ", ours " +
                                (limits_digest_.empty() ? "none" : limits_digest_) +
                                "): global buckets may get different answers"});
    } else if (!differs && digest_mismatch_.erase(m.source)) {
        pending_.push_back(
            {Event::Level::Info, "", "peer " + m.source + " has the same limits again"});
    }
    return Accepted::Yes;
}

// Most usages name the same buckets in the same order as the one they replace: one comparison
// with the name at the same place then finds the id without hashing the name. When every name
// stands at its place, the new usage takes over the old one's hold on its ids: nothing is
// retained here, nor released by the caller (a pass over the holders less, each way).
bool Controller::intern(const std::vector<wire::UsageBucket>& buckets,
                        const std::vector<std::uint32_t>* held, bool& same_places) {
    std::vector<std::uint32_t>& ids = ids_scratch_;
    const std::size_t n = buckets.size();
    const std::size_t places = held ? held->size() : 0;
    ids.resize(n);
    std::size_t k = 0;
    for (; k < n && k < places && ids_.name((*held)[k]) == buckets[k].name; ++k)
        ids[k] = (*held)[k];
    same_places = held && k == n && places == n;
    if (same_places) return true;
    for (std::size_t j = 0; j < k; ++j) ids_.retain(ids[j]);
    for (; k < n; ++k) {
        const std::string& name = buckets[k].name;
        if (k < places && ids_.name((*held)[k]) == name) {
            ids_.retain((*held)[k]);
            ids[k] = (*held)[k];
            continue;
        }
        ids[k] = ids_.acquire(name);
        if (ids[k] == BucketIds::kNone) {
            ids.resize(k);
            release(ids);
            return false;
        }
    }
    return true;
}

std::string Controller::too_many_buckets(std::string_view kind, const std::string& source,
                                         const std::string& place) const {
    return std::string(kind) + " usage from " + source + " (" + std::string(kind) + " " + place +
           ") refused: it names buckets beyond the " + std::to_string(opt_.max_bucket_names) +
           " this controller holds (--max-bucket-names)";
}

void Controller::keep_or_release(std::vector<std::uint32_t>& replaced, bool same_places) {
    if (same_places) {
        replaced.clear();  // the same ids, held on by the usage that replaced them
    } else {
        release(replaced);
    }
}

void Controller::release(std::vector<std::uint32_t>& ids) {
    for (std::uint32_t id : ids) ids_.release(id);
    ids.clear();
}

bool Controller::brings_new_rates(const wire::ZoneUsage& u, const ZoneEntry* z,
                                  const Clock& now) const {
    const bool zone_was_silent = z == nullptr || !zone_fresh(*z, now);
    // Still without some hosts the zone had before it came back: not complete yet.
    const bool short_of = !zone_was_silent && short_of_hosts(*z, u.hosts, now);
    for (std::size_t k = 0; k < u.buckets.size(); ++k) {
        const wire::UsageBucket& b = u.buckets[k];
        if (b.rated_hosts == 0) continue;
        if (zone_was_silent) return true;
        // Rates now complete where the newest sample was provisional.
        const bool complete = b.rated_hosts == b.hosts && !short_of;
        const std::uint32_t id = ids_scratch_[k];
        if (id >= id_instances_.size() || id_instances_[id].binds != ids_.binds(id)) {
            if (new_rates_by_name(b.name, u.zone, complete)) return true;
            continue;
        }
        const IdInstances& f = id_instances_[id];
        if (!f.any) return true;
        if (!complete) continue;
        if (f.wide_provisional) return true;
        if (f.zone_provisional) {
            const Instance* i = find_instance(b.name, Scope::Zone, u.zone);
            if (i && i->last_provisional) return true;
        }
    }
    return false;
}

bool Controller::new_rates_by_name(std::string_view bucket, std::string_view zone,
                                   bool complete) const {
    auto it = instances_.lower_bound(InstanceKeyRef{bucket, Scope::Global, "", ""});
    if (it == instances_.end() || it->second.bucket != bucket) return true;
    for (; complete && it != instances_.end() && it->second.bucket == bucket; ++it) {
        const Instance& i = it->second;
        if ((i.scope != Scope::Zone || i.zone == zone) && i.last_provisional) return true;
    }
    return false;
}

}  // namespace grl::control
