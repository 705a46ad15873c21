// Running sums (docs/control-plane.md "Running sums"): what aggregate() would sum for each
// bucket id, kept as usages come and go, so that a tick costs per bucket, not per entry.
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

// What aggregate() reads of a usage entry, written while the entry is in cache.
void Controller::fill(SumEntry& s, const wire::UsageBucket& b) {
    s.offered_mrps = b.offered_mrps;
    s.admitted_mrps = b.admitted_mrps;
    s.dropped_mrps = b.dropped_mrps;
    s.shadow_dropped_mrps = b.shadow_dropped_mrps;
    s.hosts = b.hosts;
    s.rated_hosts = b.rated_hosts;
    s.keys = !b.keys.empty();
    s.definitions = static_cast<std::uint8_t>(std::min<std::size_t>(b.definitions.size(), 2));
    if (s.definitions == 1) {
        const wire::DefinitionCount& d = b.definitions[0];
        s.def_limit_mrps = d.def.limit_mrps;
        s.def_hosts = d.hosts;
        s.def_scope = d.def.scope;
        s.def_mode = d.def.mode;
        s.def_keyed = d.def.keyed;
    }
}

// One entry into, out of a bucket's running sums. Inlined into their loops: run_replace()'s
// out-and-in then loads and stores each sum of the Run once.
[[gnu::always_inline]] inline void Controller::count_in(Run& r, SumEntry& c, bool short_of) {
    ++r.n;
    c.counted = 0;
    const bool missing = c.hosts > 0 && c.rated_hosts == 0;
    const std::uint64_t rates =
        c.offered_mrps | c.admitted_mrps | c.dropped_mrps | c.shadow_dropped_mrps;
    if (((rates | c.hosts | c.rated_hosts | c.def_hosts) >> 48) != 0 || (missing && rates != 0)) {
        ++r.odd;
        c.counted |= kOdd;
    }
    if (missing) ++r.missing;
    if (c.rated_hosts < c.hosts || short_of) {
        ++r.incomplete;
        c.counted |= kIncomplete;
    }
    r.hosts += c.hosts;
    r.offered += c.offered_mrps;
    r.admitted += c.admitted_mrps;
    r.dropped += c.dropped_mrps;
    r.shadow_dropped += c.shadow_dropped_mrps;
    r.rated_hosts += c.rated_hosts;
    r.keys += c.keys;
    if (c.definitions == 1) {
        // The first entry with one definition, when no kSimple entry is left, sets the run's:
        // a definition changed on every host becomes the simple case again once each zone
        // has sent one usage with it.
        if (r.simple == 0) {
            r.def_limit_mrps = c.def_limit_mrps;
            r.def_scope = c.def_scope;
            r.def_mode = c.def_mode;
            r.def_keyed = c.def_keyed;
        }
        if (r.is_def(c)) {
            ++r.simple;
            r.def_hosts += c.def_hosts;
            c.counted |= kSimple;
        } else {
            ++r.other;
            c.counted |= kOther;
        }
    } else if (c.definitions > 1) {
        ++r.other;
        c.counted |= kOther;
    }
}

[[gnu::always_inline]] inline void Controller::count_out(Run& r, const SumEntry& c) {
    --r.n;
    if (c.hosts > 0 && c.rated_hosts == 0) --r.missing;
    if (c.counted & kOdd) --r.odd;
    if (c.counted & kIncomplete) --r.incomplete;
    r.hosts -= c.hosts;
    r.offered -= c.offered_mrps;
    r.admitted -= c.admitted_mrps;
    r.dropped -= c.dropped_mrps;
    r.shadow_dropped -= c.shadow_dropped_mrps;
    r.rated_hosts -= c.rated_hosts;
    r.keys -= c.keys;
    if (c.counted & kSimple) {
        --r.simple;
        r.def_hosts -= c.def_hosts;
    }
    if (c.counted & kOther) --r.other;
}

void Controller::size_runs() {
    if (own_runs_.size() >= ids_.span()) return;
    own_runs_.resize(ids_.span());
    remote_runs_.resize(ids_.span());
}

void Controller::run_add(const std::vector<std::uint32_t>& ids, std::vector<SumEntry>& sums,
                         const ZoneEntry* zone) {
    size_runs();
    const bool short_of = zone && zone->short_of_hosts;
    std::vector<Run>& runs = zone ? own_runs_ : remote_runs_;
    for (std::size_t k = 0; k < sums.size(); ++k) count_in(runs[ids[k]], sums[k], short_of);
}

void Controller::run_sub(const std::vector<std::uint32_t>& ids, const std::vector<SumEntry>& sums,
                         bool zone) {
    for (std::size_t k = 0; k < sums.size(); ++k)
        count_out(zone ? own_runs_[ids[k]] : remote_runs_[ids[k]], sums[k]);
}

// A zone's usage replaced by one naming the same buckets at the same places: each bucket's
// sums are touched once, the old entry out and the new one in.
void Controller::run_replace(const std::vector<std::uint32_t>& ids,
                             const std::vector<SumEntry>& old, ZoneEntry& zone) {
    const bool short_of = zone.short_of_hosts;
    for (std::size_t k = 0; k < zone.sums.size(); ++k) {
        Run& r = own_runs_[ids[k]];
        count_out(r, old[k]);
        count_in(r, zone.sums[k], short_of);
    }
}

bool Controller::repeats(const std::vector<std::uint32_t>& ids) {
    if (seen_.size() < ids_.span()) seen_.resize(ids_.span());
    ++seen_check_;
    for (std::uint32_t id : ids) {
        if (seen_[id] == seen_check_) return true;
        seen_[id] = seen_check_;
    }
    return false;
}

// A bucket's sums from its running sums, exactly what walking its entries would give, when
// they say enough: its zones are none or all the fresh zones with entries, its peers none or
// all those chosen with entries (a zone names a bucket once: then basis_ms and inputs_gen are
// those inputs', and own_zones all of them), no entry
// carries keys or more than one definition, or another definition than the run's (then the
// definitions are one count each), none is zone-scoped (sampled per zone from the entries),
// and the rated sums are below 2^53 (then summing them as doubles, entry by entry, was exact).
bool Controller::from_run(BucketUsage& u, const Run& o, const Run& m) const {
    if (o.n != 0 && o.n != tick_zones_.size()) return false;
    if (m.n != 0 && m.n != run_peers_) return false;
    if (o.other || m.other || o.keys || m.keys) return false;
    if ((o.simple && o.def_scope == Scope::Zone) || (m.simple && m.def_scope == Scope::Zone))
        return false;
    // Below 2^15 entries of values below 2^48 each side (no entry odd), the sums are exact
    // and so is their total; below 2^53, summing the rates as doubles entry by entry was too.
    if (o.odd || m.odd || o.n >= (1u << 15) || m.n >= (1u << 15)) return false;
    constexpr std::uint64_t kExact = std::uint64_t{1} << 53;
    if (o.offered + m.offered >= kExact || o.admitted + m.admitted >= kExact ||
        o.dropped + m.dropped >= kExact || o.shadow_dropped + m.shadow_dropped >= kExact) {
        return false;
    }
    // No entry odd: an unrated entry has no rates, so the rated entries' are all of them.
    auto sums = [&](const Run& x, BucketUsage::Sums& s) {
        s.rated.offered = static_cast<double>(x.offered);
        s.rated.admitted = static_cast<double>(x.admitted);
        s.rated.dropped = static_cast<double>(x.dropped);
        s.rated.shadow_dropped = static_cast<double>(x.shadow_dropped);
        s.rated_n = x.n - x.missing;
        s.missing = x.missing;
        s.incomplete = x.incomplete;
        s.hosts = x.hosts;
        s.offered = x.offered;
        s.admitted = x.admitted;
        s.dropped = x.dropped;
        s.shadow_dropped = x.shadow_dropped;
        s.rated_hosts = x.rated_hosts;
        s.keys = false;
    };
    sums(o, u.own_sums);
    sums(m, u.remote_sums);
    u.own.clear();
    u.remote.clear();
    u.own_n = o.n;
    u.own_zones = o.n;
    u.remote_n = m.n;
    u.own_all = o.n == tick_zones_.size();
    u.basis_ms = o.n ? run_basis_ms_ : 0;
    u.inputs_gen = std::max(o.n ? run_zones_gen_ : 0, m.n ? run_peers_gen_ : 0);
    u.own_defs.clear();
    if (o.simple) u.own_defs.push_back({o.def(), o.def_hosts});
    u.fleet_defs = u.own_defs;
    if (m.simple) {
        // As merge_definitions() would merge the peers' entries one by one.
        if (u.fleet_defs.size() == 1 && u.fleet_defs[0].def == m.def()) {
            u.fleet_defs[0].hosts = o.def_hosts + m.def_hosts;
        } else {
            merge_definitions(u.fleet_defs, {{m.def(), m.def_hosts}});
        }
    }
    return true;
}

}  // namespace grl::control
