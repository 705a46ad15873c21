// What a tick publishes: instructions per scope instance and this region's region_usage;
// and what it leaves of each bucket id for the early judgement of the next usages.
#include "grl/control/control.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <tuple>
#include <unordered_set>
#include <utility>

#include "controller_detail.h"
#include "grl/common/bucket.h"
#include "grl/common/ratio.h"
#include "grl/common/saturating.h"

namespace grl::control {

using namespace detail;  // NOLINT(google-build-using-namespace): this library's own helpers

// One message per scope instance of this region, heartbeats included (an empty bucket list
// tells nginx "no drops", which differs from "no control plane"). At most
// kMaxBucketsPerMessage entries per message; the rest go in further messages.
// The same walk of instances_ (the tick's last change of it) forgets the instances no step
// updated this tick: they have lost their usage and their rule, are no longer published, and
// nginx fails open on them when their ratios expire. It notes the others by id for
// brings_new_rates() (note_instance()). At 10,000 buckets the map's nodes are cold: one walk
// for the three, not three walks.
void Controller::instructions(const Inputs& in, const Clock& now,
                              std::vector<wire::Instructions>& out) {
    // Message 0 is global, 1 the region's, 2 + i the zone in.zones[i] (sorted by name). They
    // and their entries are the last tick's, written over (by_scope_n_ entries in each), as are
    // the parts in `out`: a new entry per instance, moved as its message grew and again into
    // its part, was 15% of a tick's instructions at 10,000 buckets (grl_tick_bench).
    std::vector<wire::Instructions>& msgs = by_scope_;
    msgs.resize(2 + in.zones.size());
    by_scope_n_.assign(msgs.size(), 0);
    auto head = [&](wire::Instructions& m, Scope scope, std::string_view zone) {
        m.source = opt_.name;
        m.ts_ms = now.wall_ms;
        m.ttl_ms = opt_.ttl_ms;
        m.scope = scope;
        if (scope == Scope::Global) {
            m.region.clear();
        } else {
            m.region = opt_.region;
        }
        m.zone = zone;
    };
    head(msgs[0], Scope::Global, "");
    head(msgs[1], Scope::Region, "");
    for (std::size_t i = 0; i < in.zones.size(); ++i)
        head(msgs[2 + i], Scope::Zone, in.zones[i]->usage.zone);
    reset_id_instances();
    Noting noting;
    for (auto it = instances_.begin(); it != instances_.end();) {
        Instance& inst = it->second;
        if (inst.tick != tick_) {
            it = instances_.erase(it);
            continue;
        }
        note_instance(noting, inst);
        ++it;
        std::size_t idx = 0;
        switch (inst.scope) {
            case Scope::Global: idx = 0; break;
            case Scope::Region: idx = 1; break;
            case Scope::Zone: {
                auto z = std::lower_bound(
                    in.zones.begin(), in.zones.end(), inst.zone,
                    [](const ZoneEntry* e, const std::string& n) { return e->usage.zone < n; });
                if (z == in.zones.end() || (*z)->usage.zone != inst.zone) continue;
                idx = 2 + static_cast<std::size_t>(z - in.zones.begin());
                break;
            }
        }
        inst.published = (inst.own_hosts > 0 || inst.runtime) && inst.removed_mono == 0;
        if (!inst.published) continue;
        std::vector<wire::Instruction>& entries = msgs[idx].buckets;
        if (by_scope_n_[idx] == entries.size()) entries.emplace_back();
        write_instruction(entries[by_scope_n_[idx]++], inst);
    }
    for (std::size_t i = 0; i < msgs.size(); ++i) msgs[i].buckets.resize(by_scope_n_[i]);
    cut_into_parts(msgs, out);
}

// An instance's entry, written over the one the slot held last tick (its strings' capacity kept).
void Controller::write_instruction(wire::Instruction& e, const Instance& inst) {
    e.name = inst.bucket;
    e.ratio_ppm = inst.ratio_ppm;
    e.limit_mrps = inst.limit_mrps;
    e.mode = inst.mode;
    e.has_match = inst.runtime;
    if (inst.runtime) {
        e.match = inst.match;
    } else if (!(e.match == wire::RuntimeMatch{})) {
        e.match = wire::RuntimeMatch{};  // the slot's last entry was a run-time bucket's
    }
    e.has_basis = inst.basis_ms != 0 && !inst.keyed;
    e.basis_offered_mrps = round_mrps(inst.basis_offered_mrps);
    e.basis_ms = inst.basis_ms;
    e.quota = inst.quota;
    e.quota_used = inst.quota_used;
    e.quota_reset_ms = inst.quota_reset_ms;
    e.keyed = inst.keyed;
    e.key_quota = inst.key_quota;
    e.key_quota_reset_ms = inst.key_quota_reset_ms;
    if (inst.keyed) {
        e.ratio_ppm = 0;
        write_keys(e, inst);
    } else {
        e.keys.clear();
    }
}

// A keyed entry's keys: those that used their quota up first (ratio 1 until the window ends,
// so that the cut at wire::kMaxInstructionKeys leaves out keys over their rate before any of
// them), then the keys over their rate (Instance::keys).
void Controller::write_keys(wire::Instruction& e, const Instance& inst) {
    e.keys = inst.keys.ratios();
    if (inst.used_up_keys.empty()) return;
    std::vector<wire::KeyRatio> rates;
    rates.swap(e.keys);
    const std::size_t n = std::min(inst.used_up_keys.size(), wire::kMaxInstructionKeys);
    std::unordered_set<std::uint64_t> up(
        inst.used_up_keys.begin(), inst.used_up_keys.begin() + static_cast<std::ptrdiff_t>(n));
    e.keys.reserve(std::min(n + rates.size(), wire::kMaxInstructionKeys));
    for (std::size_t i = 0; i < n; ++i) e.keys.push_back({inst.used_up_keys[i], kPpmOne});
    for (const wire::KeyRatio& k : rates) {
        if (e.keys.size() == wire::kMaxInstructionKeys) break;
        if (up.count(k.hash) == 0) e.keys.push_back(k);
    }
}
// Entries are cut into messages of at most kMaxBucketsPerMessage and about 1 MiB, each part a
// message of its own (its own seq), written over the parts `out` held.
void Controller::cut_into_parts(std::vector<wire::Instructions>& msgs,
                                std::vector<wire::Instructions>& out) {
    // An entry's encoded size, bounded from above: ~130 bytes (docs/protocol.md), a match up
    // to ~300 more, and a keyed entry's [h, ratio_ppm] pairs at most 15 bytes each.
    auto entry_bytes = [](const wire::Instruction& e) {
        return std::size_t{160} + (e.has_match ? 320 : 0) + (e.keyed ? 16 + 16 * e.keys.size() : 0);
    };
    constexpr std::size_t kBudget = wire::kMaxMessageBytes - 4096;  // the header's room
    std::size_t parts = 0;
    for (wire::Instructions& m : msgs) {
        const std::size_t n = m.buckets.size();
        std::size_t from = 0;
        do {
            std::size_t to = from, bytes = 0;
            while (to < n && to - from < wire::kMaxBucketsPerMessage &&
                   (to == from || bytes + entry_bytes(m.buckets[to]) <= kBudget)) {
                bytes += entry_bytes(m.buckets[to]);
                ++to;
            }
            if (parts == out.size()) out.emplace_back();
            wire::Instructions& part = out[parts++];
            part.source = m.source;
            part.ts_ms = m.ts_ms;
            part.ttl_ms = m.ttl_ms;
            part.scope = m.scope;
            part.region = m.region;
            part.zone = m.zone;
            part.seq = ++seq_;
            if (from == 0 && to == n) {
                std::swap(part.buckets, m.buckets);  // the whole message, no entry moved
            } else {
                part.buckets.resize(to - from);
                std::move(m.buckets.begin() + static_cast<std::ptrdiff_t>(from),
                          m.buckets.begin() + static_cast<std::ptrdiff_t>(to),
                          part.buckets.begin());
            }
            from = to;
        } while (from < n);
    }
    out.resize(parts);
}

// What the peers need for global buckets: raw sums over this region's fresh zones (each peer
// smooths on its own), the limits digest (to detect different limits) and the whole override
// table (replication).
void Controller::region_usage(const Inputs& in, const Usage& usage, const Clock& now,
                              wire::RegionUsage& ru) {
    ru.v = wire::kUsageVersion;
    ru.source = opt_.name;
    ru.region = opt_.region;
    ru.seq = ++seq_;
    ru.ts_ms = now.wall_ms;
    ru.interval_ms = opt_.interval_ms;
    ru.zones = in.zones.size();
    ru.hosts = fresh_hosts_;
    ru.limits_digest = limits_digest_;
    ru.part = 0;
    ru.parts = 1;
    // Into the entries of the last tick's region usage (the daemon passes the same TickOutput
    // every tick): their names and definition lists keep their storage. A new entry per bucket
    // and a copy of its definitions were 13% of a tick's instructions at 10,000 buckets
    // (grl_tick_bench under callgrind).
    std::size_t n = 0;
    for (const BucketUsage* p : usage) {
        const BucketUsage& a = *p;
        if (a.own_n == 0) continue;
        if (n == ru.buckets.size()) ru.buckets.emplace_back();
        wire::UsageBucket& u = ru.buckets[n++];
        if (u.name != a.name) u.name = a.name;  // most often the same bucket as last tick
        u.offered_mrps = a.own_sums.offered;    // summed by aggregate()
        u.admitted_mrps = a.own_sums.admitted;
        u.dropped_mrps = a.own_sums.dropped;
        u.shadow_dropped_mrps = a.own_sums.shadow_dropped;
        u.hosts = a.own_sums.hosts;
        u.rated_hosts = a.own_sums.rated_hosts;
        u.definitions.assign(a.own_defs.begin(),
                             a.own_defs.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                      a.own_defs.size(), wire::kMaxDefinitions)));
        u.host_names.clear();
        u.keys.clear();
        // A keyed bucket's keys, summed over the region's zones (peers sum them for global
        // buckets); only beside a keyed definition, as the protocol requires.
        const bool keyed = std::any_of(u.definitions.begin(), u.definitions.end(),
                                       [](const wire::DefinitionCount& d) { return d.def.keyed; });
        if (keyed) {
            std::vector<const std::vector<wire::KeyRate>*> lists;
            for (const auto& [z, b] : a.own) {
                if (!b->keys.empty()) lists.push_back(&b->keys);
            }
            if (!lists.empty()) u.keys = sum_keys(lists, wire::kMaxUsageKeys);
        }
        // Sent in parts when it does not fit one message (wire::encode_parts).
        if (n == wire::kMaxUsageBuckets) break;
    }
    ru.buckets.resize(n);
    quotas_.own_use(ru.quotas);
    ru.overrides.clear();
    for (const auto& [name, o] : overrides_) {
        if (ru.overrides.size() == wire::kMaxOverrides) break;
        ru.overrides.push_back(o);
    }
}

// After each tick (instructions(), the only change of instances_): what brings_new_rates() asks
// of them, by id. An id free now has no instance here, and a name that takes it later changes
// its binds.
void Controller::reset_id_instances() {
    id_instances_.resize(ids_.span());
    for (std::uint32_t id = 0; id < id_instances_.size(); ++id)
        id_instances_[id] = IdInstances{ids_.binds(id)};
}

// Each instance kept, in the map's order (instances come by bucket).
void Controller::note_instance(Noting& n, const Instance& i) {
    if (n.first || i.bucket != n.bucket) {
        n.first = false;
        n.bucket = i.bucket;
        // The instance was updated this tick (the others are forgotten first), from the usage
        // of its id; a run-time bucket that no input names may still have an id (a stale zone
        // names it), found by name. 10,000 lookups a tick were 3.7% of the controller's cycles
        // at 50 zones x 10,000 buckets (perf, bench/control_plane/README.md).
        const std::uint32_t id =
            i.bucket_id != BucketIds::kNone ? i.bucket_id : ids_.find(n.bucket);
        n.f = id == BucketIds::kNone ? nullptr : &id_instances_[id];
        if (n.f) n.f->any = true;
    }
    if (n.f == nullptr || !i.last_provisional) return;
    (i.scope == Scope::Zone ? n.f->zone_provisional : n.f->wide_provisional) = true;
}

}  // namespace grl::control
