// One tick of one bucket instance: its sample, smoothing, ratio, keys and announcements.
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
// No host of the entry has a rate yet: its zero sums mean "unknown", not "no traffic".
bool unrated(const wire::UsageBucket& b) {
    return b.hosts > 0 && b.rated_hosts == 0;
}
// Some hosts of the entry have no rate yet.
bool partial(const wire::UsageBucket& b) {
    return b.rated_hosts < b.hosts;
}
const std::vector<wire::DefinitionCount> kNoDefinitions;  // a Sample's without a domain
}  // namespace

// Zone buckets: one instance per zone of this region that reports the bucket. An unrated zone
// holds its instance's last samples, and creates none (a false ratio of 0 is never published).
// A run-time bucket also gets an instance in every other fresh zone: nginx creates it from the
// instruction, so it must be published before any host reports it.
void Controller::sample_zones(std::string_view name, const BucketUsage& u, const BucketRule& rule,
                              const Inputs& in, const Clock& now, std::vector<Event>& events) {
    for (const auto& [z, b] : u.own) {
        const std::string& zone = z->usage.zone;
        Sample s;
        s.hold = unrated(*b);
        if (s.hold && !rule.match && !find_instance(name, rule.scope, zone)) continue;
        if (!s.hold) add_rates(s.sum, *b);
        s.has_usage = true;
        s.provisional = partial(*b) || z->short_of_hosts;
        s.basis_ms = z->usage.ts_ms;
        s.inputs_gen = z->gen;
        s.bucket_id = u.id;
        s.hosts = s.own_hosts = b->hosts;
        s.domain = &b->definitions;
        s.keys = b->keys;  // one zone: already summed by its collector
        s.zone = z;
        update_instance(name, zone, rule, std::move(s), now, events);
    }
    if (!rule.match) return;
    for (const ZoneEntry* z : in.zones) {
        const Instance* done = find_instance(name, rule.scope, z->usage.zone);
        if (done && done->tick == tick_) continue;  // has usage, updated above
        Sample s;
        s.zone = z;
        s.bucket_id = u.id;
        update_instance(name, z->usage.zone, rule, std::move(s), now, events);
    }
}

// Region and global buckets: one instance summing this region's zones and, for a global
// bucket, the freshest usage of every other region. When part of the usage is unknown (a zone
// without rates yet), an existing instance holds its last samples rather than counting that
// part as zero; a new one starts from what is known, unless nothing is.
void Controller::sample_wide(std::string_view name, const BucketUsage& u, const BucketRule& rule,
                             const Clock& now, std::vector<Event>& events) {
    const bool global = rule.scope == Scope::Global;
    Sample s;
    // The sums aggregate() took: unrated entries are left out (and counted), so that an
    // unknown part of the usage is never counted as zero.
    auto add = [](Rates& into, const Rates& r) {
        into.offered += r.offered;
        into.admitted += r.admitted;
        into.dropped += r.dropped;
        into.shadow_dropped += r.shadow_dropped;
    };
    add(s.sum, u.own_sums.rated);
    std::size_t rated = u.own_sums.rated_n, missing = u.own_sums.missing,
                incomplete = u.own_sums.incomplete;
    s.basis_ms = u.basis_ms;
    s.inputs_gen = u.inputs_gen;
    s.bucket_id = u.id;
    s.own_hosts = u.own_sums.hosts;
    s.hosts = s.own_hosts;
    if (!global) s.domain = &u.own_defs;
    if (global) {
        add(s.sum, u.remote_sums.rated);
        rated += u.remote_sums.rated_n;
        missing += u.remote_sums.missing;
        incomplete += u.remote_sums.incomplete;
        s.hosts = sat_add(s.hosts, u.remote_sums.hosts);
        s.domain = &u.fleet_defs;  // a global bucket's hosts are the fleet's
    }
    s.has_usage = u.own_n > 0 || (global && u.remote_n > 0);
    if (!s.has_usage && !rule.match) return;
    s.hold = missing > 0 && find_instance(name, rule.scope, "") != nullptr;
    if (s.has_usage && rated == 0 && !s.hold && !rule.match) return;
    s.provisional = incomplete > 0;
    std::vector<const std::vector<wire::KeyRate>*> key_lists;
    if (u.own_sums.keys) {
        for (const auto& [z, b] : u.own) {
            if (!b->keys.empty()) key_lists.push_back(&b->keys);
        }
    }
    if (global && u.remote_sums.keys) {
        for (const wire::UsageBucket* b : u.remote) {
            if (!b->keys.empty()) key_lists.push_back(&b->keys);
        }
    }
    if (!key_lists.empty()) s.keys = sum_keys(key_lists, kMaxInstanceKeys);
    s.own = &u.own;
    s.own_all = u.own_all;
    update_instance(name, "", rule, std::move(s), now, events);
}

// One instance's tick: the definition in force, the smoothed rates and the ratio, and the
// events its change of state deserves. Instances are created here, on first use.
void Controller::update_instance(std::string_view name, const std::string& zone,
                                 const BucketRule& rule, Sample&& s, const Clock& now,
                                 std::vector<Event>& events) {
    // Buckets are sampled in name order, and a zone bucket's zones in name order, as instances
    // are kept: most often the instance is the one after the last updated, which saves a
    // descent of the tree per instance.
    auto it = next_instance_;
    if (it == instances_.end() || it->first.bucket != name || it->first.scope != rule.scope ||
        it->first.zone != zone) {
        it = instances_.find(InstanceKeyRef{name, rule.scope, "", zone});
    }
    if (it == instances_.end()) {
        it = instances_.emplace(InstanceKey{std::string(name), rule.scope, "", zone}, Instance{})
                 .first;
        // Its key's, for good: found by that key at every later tick.
        it->second.bucket = name;
        it->second.scope = rule.scope;
        it->second.zone = zone;
    }
    next_instance_ = std::next(it);
    Instance& inst = it->second;
    const Before before{inst.tick == 0, inst.ratio_ppm, inst.disagreeing_hosts};
    inst.tick = tick_;
    inst.bucket_id = s.bucket_id;
    inst.hosts = s.hosts;
    inst.own_hosts = s.own_hosts;
    inst.own_zones.clear();  // its capacity kept
    inst.own_zones_all = s.own_all;
    if (s.zone) inst.own_zones.push_back(s.zone->name);
    if (s.own && !s.own_all) {
        for (const auto& [z, b] : *s.own) inst.own_zones.push_back(z->name);
    }
    // A run-time bucket that lost its definition while hosts still report it: it is not a
    // bucket of nginx.conf, whatever the hosts' definitions say, until they drop it.
    // Past the grace, a name still reported is a bucket of nginx.conf by that name now.
    const bool defined = rule.match || rule.active_override || rule.file;
    const bool grace_over =
        inst.removed_mono && now.mono_ms >= inst.removed_mono + removed_grace_ms();
    if (defined || grace_over) {
        inst.removed_mono = 0;
    } else if (inst.runtime) {
        inst.removed_mono = std::max<std::uint64_t>(now.mono_ms, 1);
    }
    inst.runtime = rule.match != nullptr;
    inst.match = rule.match ? *rule.match : wire::RuntimeMatch{};
    inst.has_usage = s.has_usage;
    const std::optional<wire::Definition> conf =
        resolve_definition(inst, rule, s.domain ? *s.domain : kNoDefinitions);
    if (inst.removed_mono) inst.limit_source = inst.mode_source = LimitSource::Removed;
    inst.keyed = conf && conf->keyed && !inst.runtime;
    smooth(inst, s);
    if (inst.keyed) {
        update_keys(inst, s, now, events);
    } else if (inst.keys.size() > 0) {
        inst.keys = KeyTable{};  // no longer keyed (a reload): nginx drops its key ratios
    }
    evaluate_candidate(inst, rule);
    apply_quota(inst, it->first, now);
    announce(inst, before, conf, events);
    if (inst.ratio_ppm == 0) {
        inst.dropping_since_ms = 0;
    } else if (before.is_new || before.ratio_ppm == 0) {
        inst.dropping_since_ms = now.wall_ms;
    }
}

// A used-up quota rejects everything until its window ends: the ratio of a zero limit, and no
// surge basis (the damper would ease the ratio towards the host's share of the rate limit).
// Shadow mode keeps its mode: nginx then counts would-be rejections.
void Controller::apply_quota(Instance& inst, const InstanceKey& key, const Clock& now) const {
    QuotaLedger::Answer q;
    inst.quota = inst.quota_used = inst.quota_reset_ms = 0;
    inst.key_quota = inst.key_quota_reset_ms = 0;
    inst.used_up_keys.clear();
    if (!quotas_.at(key, now.wall_ms, q)) return;
    if (inst.keyed) {  // per key: the instance's own use means nothing
        inst.key_quota = q.spec.n;
        inst.key_quota_reset_ms = q.window.end_ms;
        quotas_.used_up(key, now.wall_ms, inst.used_up_keys);
        return;
    }
    inst.quota = q.spec.n;
    inst.quota_used = q.used;
    inst.quota_reset_ms = q.window.end_ms;
    if (q.used < q.spec.n) return;
    inst.ratio_ppm = kPpmOne;
    inst.basis_ms = 0;
    inst.basis_offered_mrps = 0;
}

// The definition in force: nginx.conf's as the instance's hosts vote (resolve()), then the
// limits file, then an override, for the limit and the mode separately. Returns the hosts'
// vote, which a disagreement event names.
std::optional<wire::Definition> Controller::resolve_definition(
    Instance& inst, const BucketRule& rule,
    const std::vector<wire::DefinitionCount>& domain) const {
    std::optional<wire::Definition> conf = resolve(domain, inst.scope);
    inst.limit_mrps = conf ? conf->limit_mrps : 0;
    inst.mode = conf ? conf->mode : Mode::Deny;
    inst.limit_source = inst.mode_source = LimitSource::Conf;
    inst.expires_ms = 0;
    inst.disagreeing_hosts = 0;
    if (conf) {
        for (const auto& d : domain) {
            if (d.def != *conf) inst.disagreeing_hosts = sat_add(inst.disagreeing_hosts, d.hosts);
        }
    }
    if (const FileLimit* file = rule.file) {
        if (file->limit_mrps) {
            inst.limit_mrps = *file->limit_mrps;
            inst.limit_source = LimitSource::File;
        }
        if (file->mode) {
            inst.mode = *file->mode;
            inst.mode_source = LimitSource::File;
        }
    }
    if (const wire::Override* ovr = rule.active_override) {
        if (ovr->limit_mrps) {
            inst.limit_mrps = *ovr->limit_mrps;
            inst.limit_source = LimitSource::Override;
        }
        if (ovr->mode) {
            inst.mode = *ovr->mode;
            inst.mode_source = LimitSource::Override;
        }
        inst.expires_ms = ovr->expires_ms;
    }
    if (inst.runtime) inst.disagreeing_hosts = 0;  // hosts echo the definition we publish
    // Copied into the instance's own vector, whose capacity stays from tick to tick.
    inst.definitions.assign(domain.begin(),
                            domain.begin() + static_cast<std::ptrdiff_t>(
                                                 std::min(domain.size(), wire::kMaxDefinitions)));
    return conf;
}

// The mean of the last `window` samples, then the ratio. `hold`: part of the usage is unknown
// this tick, so no sample is taken and the last ones stand. A provisional sample (some hosts
// have no rate yet) is replaced by the next sample rather than averaged with it, so that it
// costs nothing once the rates are complete.
void Controller::smooth(Instance& inst, const Sample& s) const {
    const bool pushed = !s.hold || inst.samples.empty();
    if (pushed) {
        // No usage newer than the newest sample's: a tick soon after an early one (which a
        // usage brought) sees that usage again. Pushed twice, it filled the window with one
        // sample and ended a fast attack: a 1.5x step seen in part by the early tick (1.21 L)
        // then averaged its next sample (1.5 L) with the repeat, 0.26 instead of 1/3 for an
        // interval, and the damped hosts let 1.1 L through.
        const bool repeat = s.inputs_gen != 0 && s.inputs_gen == inst.inputs_gen;
        if ((inst.last_provisional || repeat) && !inst.samples.empty()) inst.samples.pop_back();
        inst.samples.push_back(s.sum);
        inst.inputs_gen = s.inputs_gen;
        inst.last_provisional = s.provisional;
        // Surge damping needs the instance's offered rate *of one sample*, paired with the
        // sample's time, so that each host finds its own share of it (docs/design.md).
        if (!s.hold && s.has_usage && !s.provisional) {
            inst.basis_offered_mrps = s.sum.offered;
            inst.basis_ms = s.basis_ms;
        }
    }
    while (inst.samples.size() > opt_.window) inst.samples.pop_front();
    Rates mean;
    for (const Rates& r : inst.samples) {
        mean.offered += r.offered;
        mean.admitted += r.admitted;
        mean.dropped += r.dropped;
        mean.shadow_dropped += r.shadow_dropped;
    }
    double n = static_cast<double>(inst.samples.size());
    mean.offered /= n;
    mean.admitted /= n;
    mean.dropped /= n;
    mean.shadow_dropped /= n;
    // Fast attack: a newest sample well above the mean is a surge, not noise; use it alone so
    // that the ratio answers within one tick. Decreases stay averaged (a drop in demand
    // over-drops for at most one window, the safe direction). A surge usually spans two or
    // three samples (the first ones see it in part): while each new sample is still above
    // the one before, the attack goes on, rather than averaging the rise's last step with a
    // sample it has outgrown (a 1.5x step's ratio lagged a tick at 0.26 instead of 1/3).
    const Rates& newest = inst.samples.back();
    if (opt_.fast_attack > 0 && pushed) {
        const bool rising = inst.samples.size() >= 2 &&
                            newest.offered > inst.samples[inst.samples.size() - 2].offered;
        inst.attacking =
            newest.offered > mean.offered * (1.0 + opt_.fast_attack) || (inst.attacking && rising);
    }
    // Fast release: a newest sample under the limit needs no drop at all; averaged with the
    // sample before a fall, it kept rejecting legitimate requests for another tick (at 250 ms
    // intervals the last of them came 0.8 s after the fall, three intervals). Not from a
    // provisional sample: it sums only part of the hosts, not the demand. Only the ratio is
    // released; the rates shown (and a candidate limit's would-drop) stay smoothed.
    const bool released = opt_.fast_attack > 0 && inst.limit_mrps > 0 && !inst.last_provisional &&
                          round_mrps(newest.offered) <= inst.limit_mrps;
    if (opt_.fast_attack > 0 && inst.attacking) mean = newest;
    inst.offered_mrps = mean.offered;
    inst.admitted_mrps = mean.admitted;
    inst.dropped_mrps = mean.dropped;
    inst.shadow_dropped_mrps = mean.shadow_dropped;
    inst.ratio_ppm = inst.limit_mrps == 0 ? kPpmOne
                     : released           ? 0
                                : drop_ratio_ppm(round_mrps(inst.offered_mrps), inst.limit_mrps);
}

// A keyed instance: its own ratio stays 0 (its limit is each key's) and it has no surge basis;
// each key's ratio comes from the key table. A full table refuses new keys: counted, and one
// line when the instance starts and stops refusing.
void Controller::update_keys(Instance& inst, const Sample& s, const Clock& now,
                             std::vector<Event>& events) {
    inst.ratio_ppm = 0;
    inst.basis_ms = 0;
    inst.basis_offered_mrps = 0;
    KeyOptions ko;
    ko.window = opt_.window;
    ko.fast_attack = opt_.fast_attack;
    ko.ttl_ms = opt_.ttl_ms;
    ko.max_keys = opt_.max_instance_keys;
    const std::size_t refused =
        inst.keys.update(s.keys, s.hold, s.provisional, inst.limit_mrps, ko, now.mono_ms);
    keys_refused_ = sat_add(keys_refused_, refused);
    const std::string at = where(inst.scope, opt_.region, inst.zone);
    if (refused > 0 && !inst.keys_refusing) {
        events.push_back({Event::Level::Warn, inst.bucket,
                          "key table full in " + at + ": " + std::to_string(inst.keys.size()) +
                              " keys held (--max-instance-keys), " + std::to_string(refused) +
                              " new key(s) refused this tick; they are limited by each host's "
                              "local cap only"});
    } else if (refused == 0 && inst.keys_refusing) {
        events.push_back({Event::Level::Info, inst.bucket, "key table has room again in " + at});
    }
    inst.keys_refusing = refused > 0;
}

// The candidate is judged on the same smoothed offered rate as the ratio in force, so that its
// would-drops are what this instance would have dropped had the candidate been the limit.
void Controller::evaluate_candidate(Instance& inst, const BucketRule& rule) const {
    inst.candidate_mrps = rule.file ? rule.file->candidate_mrps : std::nullopt;
    inst.candidate_would_drop_mrps =
        inst.candidate_mrps
            ? std::max(0.0, inst.offered_mrps - static_cast<double>(*inst.candidate_mrps))
            : 0.0;
}

// One line when an instance starts or stops dropping, and when its hosts start or stop
// disagreeing on its definition: changes of state, never one line per tick.
void Controller::announce(const Instance& inst, const Before& before,
                          const std::optional<wire::Definition>& conf,
                          std::vector<Event>& events) const {
    const bool starts_dropping = inst.ratio_ppm > 0 && (before.is_new || before.ratio_ppm == 0);
    const bool stops_dropping = inst.ratio_ppm == 0 && !before.is_new && before.ratio_ppm > 0;
    const bool starts_disagreeing =
        inst.disagreeing_hosts > 0 && (before.is_new || before.disagreeing_hosts == 0);
    const bool stops_disagreeing =
        inst.disagreeing_hosts == 0 && !before.is_new && before.disagreeing_hosts > 0;
    if (!starts_dropping && !stops_dropping && !starts_disagreeing && !stops_disagreeing) return;
    const std::string at = where(inst.scope, opt_.region, inst.zone);
    if (starts_dropping) {
        events.push_back(
            {Event::Level::Info, inst.bucket,
             std::string(inst.mode == Mode::Shadow ? "would drop (shadow)" : "dropping") + " in " +
                 at + ": ratio " + ratio_text(inst.ratio_ppm) + ", offered " +
                 rps(inst.offered_mrps) + ", limit " + rps(inst.limit_mrps)});
    } else if (stops_dropping) {
        events.push_back({Event::Level::Info, inst.bucket,
                          "under the limit again in " + at + ": offered " + rps(inst.offered_mrps) +
                              ", limit " + rps(inst.limit_mrps)});
    }
    if (starts_disagreeing) {
        events.push_back(
            {Event::Level::Warn, inst.bucket,
             "hosts disagree on the definition in " + at + ": " +
                 std::to_string(inst.disagreeing_hosts) + " of " + std::to_string(inst.hosts) +
                 " host(s) differ from the one in force (" + std::string(to_string(inst.scope)) +
                 ", " + std::string(to_string(conf ? conf->mode : Mode::Deny)) + ", " +
                 rps(conf ? conf->limit_mrps : 0) + ")"});
    } else if (stops_disagreeing) {
        events.push_back(
            {Event::Level::Info, inst.bucket, "hosts agree on the definition again in " + at});
    }
}

}  // namespace grl::control
