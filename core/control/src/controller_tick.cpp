// The tick, step by step: gather the inputs in force, aggregate every bucket's sums, then
// update each instance (controller_instances.cpp) and publish (controller_publish.cpp).
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

TickOutput Controller::tick(const Clock& now) {
    TickOutput out;
    tick(now, out);
    return out;
}

void Controller::tick(const Clock& now, TickOutput& out) {
    ++tick_;
    out.events.clear();
    out.events.swap(pending_);
    const Inputs in = gather(now, out.events);
    expire_overrides(now, out.events);
    const Usage& usage = aggregate(in, now);
    next_instance_ = instances_.begin();
    for (const BucketUsage* bu : usage) {
        const BucketUsage& u = *bu;
        const std::string_view name = u.name;
        std::optional<BucketRule> rule = bucket_rule(name, u, now);
        if (!rule) continue;
        if (rule->scope == Scope::Zone) {
            sample_zones(name, u, *rule, in, now, out.events);
        } else {
            sample_wide(name, u, *rule, now, out.events);
        }
    }
    // One line when buckets start being walked, one when none is any more (the metric says
    // how many each tick).
    if (!opt_.walk_entries && (buckets_walked_ > 0) != walking_) {
        walking_ = buckets_walked_ > 0;
        out.events.push_back(
            {Event::Level::Info, "",
             walking_ ? std::to_string(buckets_walked_) +
                            " bucket(s) summed entry by entry, their running sums not saying "
                            "enough (some zones only, several definitions, keys, zone scope, "
                            "run-time buckets): grl_controller_buckets_walked"
                      : "every bucket read from its running sums again"});
    }
    instructions(in, now, out.instructions);  // forgets and notes the instances too
    quotas_.forget(now.wall_ms);
    region_usage(in, usage, now, out.region_usage);
}

// Inputs in force: this region's fresh zones, and the freshest fresh peer of every other region
// (active-active partners share a region: counting both would count it twice). Zones and peers
// silent for forget_intervals are forgotten here, which bounds what a departed sender costs.
Controller::Inputs Controller::gather(const Clock& now, std::vector<Event>& events) {
    Inputs in;
    gather_zones(in, now, events);
    gather_peers(in, now, events);
    return in;
}

// This region's zones: fresh ones into `in`, each into or out of the running sums as it
// becomes fresh or stale; those silent for forget_intervals forgotten.
void Controller::gather_zones(Inputs& in, const Clock& now, std::vector<Event>& events) {
    fresh_hosts_ = stale_hosts_ = 0;
    for (auto it = zones_.begin(); it != zones_.end();) {
        const ZoneEntry& z = it->second;
        std::uint64_t iv = std::max(z.usage.interval_ms, opt_.interval_ms);
        if (now.mono_ms >= z.recv_mono + opt_.forget_intervals * iv) {
            events.push_back({Event::Level::Warn, "", "zone " + it->first + " forgotten"});
            if (z.in_run) run_sub(z.ids, z.sums, true);
            release(it->second.ids);
            it = zones_.erase(it);
            continue;
        }
        // Into the running sums when it becomes fresh (again), out when it goes stale.
        const bool fresh = zone_fresh(z, now);
        if (fresh != z.in_run) {
            ZoneEntry& e = it->second;
            if (fresh) {
                run_add(e.ids, e.sums, &e);
            } else {
                run_sub(e.ids, e.sums, true);
            }
            e.in_run = fresh;
        }
        if (fresh) {
            in.zones.push_back(&z);
            fresh_hosts_ = sat_add(fresh_hosts_, z.usage.hosts);
            stale_hosts_ = sat_add(stale_hosts_, z.usage.stale_hosts);
        } else {
            stale_hosts_ = sat_add(stale_hosts_, sat_add(z.usage.hosts, z.usage.stale_hosts));
        }
        ++it;
    }
    fresh_zones_ = in.zones.size();
}

// Other regions: the freshest fresh peer of each; a region with none but a peer heard within
// peer_hold_ms keeps that peer's last usage (a partition: see Options). Peers silent longer
// than both forget_intervals and peer_hold_ms are forgotten.
void Controller::gather_peers(Inputs& in, const Clock& now, std::vector<Event>& events) {
    std::map<std::string, const PeerEntry*> held;
    for (auto it = peers_.begin(); it != peers_.end();) {
        const PeerEntry& p = it->second;
        std::uint64_t iv = std::max(p.usage.interval_ms, opt_.interval_ms);
        const std::uint64_t forget = std::max(opt_.forget_intervals * iv, opt_.peer_hold_ms);
        if (now.mono_ms >= sat_add(p.recv_mono, forget)) {
            digest_mismatch_.erase(it->first);
            if (p.in_run) run_sub(p.ids, p.sums, false);
            release(it->second.ids);
            it = peers_.erase(it);
            continue;
        }
        if (p.usage.region != opt_.region) {
            const bool fresh = peer_fresh(p, now);
            auto& slot = fresh ? in.remote : held;
            if (fresh || now.mono_ms < sat_add(p.recv_mono, opt_.peer_hold_ms)) {
                const PeerEntry*& r = slot[p.usage.region];
                if (r == nullptr || p.usage.ts_ms > r->usage.ts_ms) r = &p;
            }
        }
        ++it;
    }
    hold_regions(in, held, events);
    // Into the running sums: the peer chosen for each other region, and no other.
    for (auto& [source, p] : peers_) {
        auto r = in.remote.find(p.usage.region);
        const bool chosen = r != in.remote.end() && r->second == &p;
        if (chosen == p.in_run) continue;
        if (chosen) {
            run_add(p.ids, p.sums, nullptr);
        } else {
            run_sub(p.ids, p.sums, false);
        }
        p.in_run = chosen;
    }
}

// Regions none of whose peers is fresh: the last usage `held` of one stands in (announced once),
// until peer_hold_ms passed (then the region is lost) or a peer of it speaks again.
void Controller::hold_regions(Inputs& in, const std::map<std::string, const PeerEntry*>& held,
                              std::vector<Event>& events) {
    std::set<std::string> holding;
    for (const auto& [region, p] : held) {
        if (in.remote.count(region)) continue;  // another peer of the region still speaks
        in.remote[region] = p;
        holding.insert(region);
        if (held_regions_.count(region) == 0) {
            events.push_back({Event::Level::Warn, "",
                              "peer region " + region +
                                  " silent: its last usage stays in the "
                                  "global sums for up to " +
                                  std::to_string(opt_.peer_hold_ms / 1000) +
                                  " s (global limits split by the last known shares)"});
        }
    }
    for (const std::string& region : held_regions_) {
        if (holding.count(region)) continue;
        bool back = in.remote.count(region) > 0;
        if (!back) ++regions_lost_;
        events.push_back({back ? Event::Level::Info : Event::Level::Warn, "",
                          back ? "peer region " + region + " heard again"
                               : "peer region " + region + " silent for " +
                                     std::to_string(opt_.peer_hold_ms / 1000) +
                                     " s: out of the global sums (its share is no longer "
                                     "reserved)"});
    }
    held_regions_.swap(holding);
}

// Every bucket's entries among the inputs, with its definitions fleet-wide (the scope vote is
// fleet-wide so that a name is published in one scope only). Run-time buckets get an entry even
// without usage: they must reach nginx before any host has them.
//
// Most buckets' sums are read from their running sums (from_run()). The others are walked:
// each input's entries of those buckets are added into the sums of their bucket ids (ids_,
// given when the usage was taken in), list after list: zones first, in name order, then other
// regions, as every bucket was summed before running sums (docs/control-plane.md). The buckets
// are then listed in name order (ids_.by_name(), sorted again only when names came or went),
// merged with the run-time buckets'. At 50 zones x 10,000 buckets a merge of the 54 lists by
// name spent a third of the tick comparing names (docs/control-plane.md "Bucket ids"). The sums
// keep their vectors' capacity from tick to tick.
const Controller::Usage& Controller::aggregate(const Inputs& in, const Clock& now) {
    for (std::size_t id = by_id_.size(); id < ids_.span(); ++id) {
        by_id_.emplace_back();
        by_id_.back().id = static_cast<std::uint32_t>(id);
    }
    size_runs();
    if (plan_walk(in, now)) walk_inputs(in);
    list_usage(now);
    return usage_;
}

// Which buckets are walked this tick (walk_), and the others' sums from their running sums.
// True when some bucket is walked.
bool Controller::plan_walk(const Inputs& in, const Clock& now) {
    // What the running sums say of a bucket that every zone (or every peer) with entries
    // reports: the basis_ms and gen aggregate() would find walking those zones in name order.
    // (A zone without entries, such as a relay's collector without hosts, holds no bucket.)
    run_basis_ms_ = run_zones_gen_ = run_peers_gen_ = 0;
    run_peers_ = 0;
    tick_zones_.clear();
    // A usage names a bucket twice (counts then say nothing), or the option: walk all.
    bool walk_all = opt_.walk_entries;
    for (const ZoneEntry* z : in.zones) {
        walk_all = walk_all || z->repeats;
        if (z->usage.buckets.empty()) continue;
        const std::uint64_t ts = z->usage.ts_ms;
        run_basis_ms_ = run_basis_ms_ == 0 ? ts : std::min(run_basis_ms_, ts);
        run_zones_gen_ = std::max(run_zones_gen_, z->gen);
        tick_zones_.push_back(z->name);
    }
    for (const auto& [region, p] : in.remote) {
        walk_all = walk_all || p->repeats;
        if (p->usage.buckets.empty()) continue;
        run_peers_gen_ = std::max(run_peers_gen_, p->gen);
        ++run_peers_;
    }
    walk_.assign(ids_.span(), walk_all ? 1 : 0);
    bool any_walk = walk_all;
    // Run-time buckets are walked: a zone-scoped one is sampled per zone from the entries.
    auto walk_name = [&](const std::string& name) {
        const std::uint32_t id = ids_.find(name);
        if (id == BucketIds::kNone) return;
        walk_[id] = 1;
        any_walk = true;
    };
    for (const auto& [name, o] : overrides_) {
        if (o.has_match && override_active(o, now)) walk_name(name);
    }
    for (const auto& [name, f] : limits_.buckets) {
        if (f.has_match) walk_name(name);
    }
    for (std::uint32_t id = 0; id < walk_.size(); ++id) {
        const Run& o = own_runs_[id];
        const Run& m = remote_runs_[id];
        if (walk_[id] || o.n + m.n == 0) continue;  // walked, or in no input
        BucketUsage& u = by_id_[id];
        if (from_run(u, o, m)) {
            u.tick = tick_;
            u.name = ids_.name(id);
        } else {
            walk_[id] = 1;
            any_walk = true;
        }
    }
    return any_walk;
}

// A bucket's sums started for this tick (its vectors' capacity kept).
void Controller::start_usage(BucketUsage& u, std::string_view name) const {
    u.tick = tick_;
    u.name = name;
    u.own.clear();
    u.own_zones = 0;
    u.remote.clear();
    u.own_defs.clear();
    u.fleet_defs.clear();
    u.own_sums = u.remote_sums = BucketUsage::Sums{};
    u.basis_ms = 0;
    u.inputs_gen = 0;
    u.own_n = u.remote_n = 0;
    u.own_all = false;
}

// merge_definitions() without a call, nor a read of the entry's own list, in the most common
// case: every host of the fleet reports one definition.
void Controller::merge_entry(std::vector<wire::DefinitionCount>& into, const SumEntry& c,
                             const wire::UsageBucket& b) {
    if (c.definitions == 1 && into.size() == 1 && into[0].def == c.def()) {
        into[0].hosts = sat_add(into[0].hosts, c.def_hosts);
    } else if (c.definitions == 1 && into.empty()) {
        into.push_back({c.def(), c.def_hosts});
    } else if (c.definitions == 0) {
        // Nothing to add (`into` is sorted already, as merge_definitions() leaves it).
    } else {
        merge_definitions(into, b.definitions);
    }
}

// One entry of a walked bucket into its sums: `b` is the entry `entry` as stand_in() or
// keep_region_usage() left it; `entry` is only read when `b` does not say enough (several
// definitions). `zone`: the zone it came from, nullptr for a peer's.
void Controller::walk_entry(const SumEntry& b, const wire::UsageBucket& entry, std::uint32_t id,
                            const ZoneEntry* zone, std::uint64_t gen) {
    BucketUsage& u = by_id_[id];
    if (u.tick != tick_) start_usage(u, ids_.name(id));
    u.inputs_gen = std::max(u.inputs_gen, gen);
    BucketUsage::Sums& sums = zone ? u.own_sums : u.remote_sums;
    if (b.hosts > 0 && b.rated_hosts == 0) {
        ++sums.missing;
    } else {
        add_rates(sums.rated, b);
        ++sums.rated_n;
    }
    sums.incomplete += b.rated_hosts < b.hosts || (zone && zone->short_of_hosts);
    sums.hosts = sat_add(sums.hosts, b.hosts);
    sums.offered = sat_add(sums.offered, b.offered_mrps);
    sums.admitted = sat_add(sums.admitted, b.admitted_mrps);
    sums.dropped = sat_add(sums.dropped, b.dropped_mrps);
    sums.shadow_dropped = sat_add(sums.shadow_dropped, b.shadow_dropped_mrps);
    sums.rated_hosts = sat_add(sums.rated_hosts, b.rated_hosts);
    sums.keys = sums.keys || b.keys;
    if (zone) {
        // The hosts that apply an instance's ratio here reported to these zones: the
        // oldest of their usages bounds which of its own reports a host finds in the
        // sample (sample_wide).
        const std::uint64_t ts = zone->usage.ts_ms;
        u.basis_ms = u.basis_ms == 0 ? ts : std::min(u.basis_ms, ts);
        if (u.own.empty() || u.own.back().first != zone) ++u.own_zones;
        u.own.emplace_back(zone, &entry);
        merge_entry(u.own_defs, b, entry);
    } else {
        // This region's definitions, then the fleet's from them.
        if (u.remote.empty()) u.fleet_defs = u.own_defs;
        u.remote.push_back(&entry);
        merge_entry(u.fleet_defs, b, entry);
    }
}

// The buckets the running sums do not say enough of (walk_), summed entry by entry: zones
// first, in name order, then other regions.
void Controller::walk_inputs(const Inputs& in) {
    for (const ZoneEntry* z : in.zones) {
        const std::vector<wire::UsageBucket>& buckets = z->usage.buckets;
        for (std::size_t k = 0; k < buckets.size(); ++k) {
            if (walk_[z->ids[k]]) walk_entry(z->sums[k], buckets[k], z->ids[k], z, z->gen);
        }
    }
    for (const auto& [region, p] : in.remote) {
        const std::vector<wire::UsageBucket>& buckets = p->usage.buckets;
        for (std::size_t k = 0; k < buckets.size(); ++k) {
            if (walk_[p->ids[k]]) walk_entry(p->sums[k], buckets[k], p->ids[k], nullptr, p->gen);
        }
    }
}

// usage_: the buckets of this tick in name order (ids_.by_name()), merged with the run-time
// buckets', with or without usage.
void Controller::list_usage(const Clock& now) {
    std::vector<std::string_view> runtime;  // run-time buckets, with or without usage
    for (const auto& [name, o] : overrides_) {
        if (o.has_match && override_active(o, now)) runtime.emplace_back(name);
    }
    for (const auto& [name, f] : limits_.buckets) {
        if (f.has_match) runtime.emplace_back(name);
    }
    std::sort(runtime.begin(), runtime.end());
    runtime.erase(std::unique(runtime.begin(), runtime.end()), runtime.end());
    runtime_usage_.resize(runtime.size());  // not resized again: usage_ points into it
    std::size_t next_runtime = 0;
    auto runtime_only = [&](std::string_view name) {
        BucketUsage& u = runtime_usage_[next_runtime++];
        start_usage(u, name);
        usage_.push_back(&u);
    };
    usage_.clear();
    buckets_walked_ = 0;
    for (std::uint32_t id : ids_.by_name()) {
        BucketUsage& u = by_id_[id];
        if (u.tick != tick_) continue;  // no fresh input names it
        while (next_runtime < runtime.size() && runtime[next_runtime] < u.name)
            runtime_only(runtime[next_runtime]);
        if (next_runtime < runtime.size() && runtime[next_runtime] == u.name) ++next_runtime;
        if (walk_[id]) {
            ++buckets_walked_;
            if (u.remote.empty()) u.fleet_defs = u.own_defs;
            u.own_n = u.own.size();
            u.remote_n = u.remote.size();
            u.own_all = u.own.size() == u.own_zones && u.own_zones == tick_zones_.size();
        }
        usage_.push_back(&u);
    }
    while (next_runtime < runtime.size()) runtime_only(runtime[next_runtime]);
}

// What applies to every instance of a bucket: its override in force, its limits-file entry,
// its match when it is a run-time bucket, and its scope: a run-time bucket's own, else the one
// most hosts report (resolve_scope). nullopt when no host reports a definition.
std::optional<Controller::BucketRule> Controller::bucket_rule(std::string_view name,
                                                              const BucketUsage& u,
                                                              const Clock& now) const {
    BucketRule rule;
    if (!overrides_.empty()) {
        auto it = overrides_.find(std::string(name));
        if (it != overrides_.end() && override_active(it->second, now))
            rule.active_override = &it->second;
    }
    if (!limits_.buckets.empty()) {
        auto it = limits_.buckets.find(std::string(name));
        if (it != limits_.buckets.end()) rule.file = &it->second;
    }
    if (rule.active_override && rule.active_override->has_match) {
        rule.match = &rule.active_override->match;
    } else if (rule.file && rule.file->has_match) {
        rule.match = &rule.file->match;
    }
    if (rule.match) {
        rule.scope = rule.match->scope;
        return rule;
    }
    std::optional<Scope> s = resolve_scope(u.fleet_defs);
    if (!s) return std::nullopt;
    rule.scope = *s;
    return rule;
}

}  // namespace grl::control
