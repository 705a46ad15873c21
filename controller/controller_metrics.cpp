// grl-controller's /metrics. Each family is declared once: the controller's own counters in
// controller_counters.h, the rest below as rows (name, type, help, what it reads), written in
// order.
#include <cstdio>

#include "controller_daemon.h"
#include "clock.h"

namespace grl::controller {

// What one scrape reads: the daemon, and what the controller computes per call.
struct Daemon::Scrape {
    const Daemon& d;
    control::Clock t;
    std::vector<wire::ZoneStatus> zones;
    std::vector<wire::PeerStatus> peers;
};

void write_counters(daemon::MetricsText& m, const Counters& c) {
    static const daemon::Family<Counters> families[] = {
        GRL_CONTROLLER_COUNTERS(GRL_COUNTER_FAMILY, GRL_COUNTER_BY_FAMILY)};
    daemon::write(m, families, c);
}

namespace {

using Instance = control::Instance;

// A gauge per bucket instance (labels bucket, scope, zone), for the instances `when` admits.
struct InstanceGauge {
    std::string_view name;
    std::string_view help;
    double (*get)(const Instance&);
    bool (*when)(const Instance&) = nullptr;
};

bool keyed(const Instance& i) {
    return i.keyed;
}
// Only instances that have a candidate (the limits file's `candidate:`), so that a series
// exists exactly while a candidate is soaking.
bool has_candidate(const Instance& i) {
    return i.candidate_mrps.has_value();
}

// Only quota instances (grl_bucket quota=, docs/design/008-quotas.md).
bool has_quota(const Instance& i) {
    return i.quota != 0;
}

const InstanceGauge kInstanceGauges[] = {
    {"grl_bucket_offered_rps",
     "Requests per second offered to the bucket (smoothed), per scope instance.",
     [](const Instance& i) { return i.offered_mrps / 1000.0; }},
    {"grl_bucket_admitted_rps", "Requests per second admitted by the bucket (smoothed).",
     [](const Instance& i) { return i.admitted_mrps / 1000.0; }},
    {"grl_bucket_shadow_dropped_rps",
     "Requests per second a shadow bucket would have dropped (smoothed).",
     [](const Instance& i) { return i.shadow_dropped_mrps / 1000.0; }},
    {"grl_bucket_limit_rps", "Effective limit of the bucket.",
     [](const Instance& i) { return i.limit_mrps / 1000.0; }},
    {"grl_bucket_ratio", "Drop ratio published for the bucket.",
     [](const Instance& i) { return i.ratio_ppm / 1e6; }},
    {"grl_bucket_shadow", "1 when the bucket's effective mode is shadow.",
     [](const Instance& i) { return i.mode == Mode::Shadow ? 1.0 : 0.0; }},
    {"grl_bucket_hosts", "Hosts reporting the bucket (all regions for a global bucket).",
     [](const Instance& i) { return static_cast<double>(i.hosts); }},
    {"grl_bucket_disagreeing_hosts",
     "Hosts whose nginx.conf definition of the bucket differs from the one in force.",
     [](const Instance& i) { return static_cast<double>(i.disagreeing_hosts); }},
    {"grl_bucket_definitions",
     "Distinct definitions of the bucket among its hosts (more than 1: they disagree).",
     [](const Instance& i) { return static_cast<double>(i.definitions.size()); }},
    {"grl_bucket_quota_limit", "The bucket's quota= per window (units), per scope instance.",
     [](const Instance& i) { return static_cast<double>(i.quota); }, has_quota},
    {"grl_bucket_quota_used",
     "Units the instance's hosts admitted in the quota's current window, fleet-wide.",
     [](const Instance& i) { return static_cast<double>(i.quota_used); }, has_quota},
    // Keyed buckets (docs/per-key.md): per instance, never per key.
    {"grl_bucket_keys_limited",
     "Keys of a keyed bucket with a drop ratio (over their per-key limit), per instance.",
     [](const Instance& i) { return static_cast<double>(i.keys.limited()); }, keyed},
    {"grl_bucket_keys", "Keys of a keyed bucket the controller holds sums for, per instance.",
     [](const Instance& i) { return static_cast<double>(i.keys.size()); }, keyed},
    {"grl_bucket_candidate_limit_rps",
     "Candidate limit evaluated beside the limit in force (limits file), never enforced.",
     [](const Instance& i) { return static_cast<double>(*i.candidate_mrps) / 1000.0; },
     has_candidate},
    {"grl_bucket_candidate_would_drop_rps",
     "Requests per second the candidate limit would drop (smoothed offered - candidate).",
     [](const Instance& i) { return i.candidate_would_drop_mrps / 1000.0; }, has_candidate},
};

template <class Map>
void write_by_kind(daemon::Samples& o, const Map& m, std::string_view second) {
    for (const auto& [k, n] : m) {
        auto slash = k.find('/');
        o({{"kind", std::string_view(k).substr(0, slash)},
           {second, std::string_view(k).substr(slash + 1)}},
          static_cast<double>(n));
    }
}

}  // namespace

const daemon::Family<Daemon::Scrape> Daemon::kFleetFamilies[] = {
    {"grl_controller_keys_refused_total", "counter",
     "Keys of keyed buckets refused because an instance's key table was full "
     "(--max-instance-keys).",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.d.ctl_.keys_refused())); }},
    {"grl_controller_bucket_names", "gauge",
     "Distinct bucket names in the usage held (at most --max-bucket-names; a usage naming more "
     "is refused: messages_ignored_total reason too_many_buckets).",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.d.ctl_.bucket_names())); }},
    {"grl_controller_buckets_walked", "gauge",
     "Buckets the last tick summed entry by entry, the running sums not saying enough of them "
     "(one zone only, several definitions, keys, zone scope, run-time buckets): 0 in a steady "
     "fleet.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.d.ctl_.buckets_walked()));
     }},
    // How well each limit held (grl/control/accuracy.h): enforcing, unkeyed instances only.
    {"grl_bucket_admitted_over_limit", "gauge",
     "Admitted over limit over the last minute's seconds in which offered exceeded the limit "
     "(1: held exactly; absent while offered stayed under it, in shadow mode and keyed).",
     [](daemon::Samples& o, const Scrape& s) {
         s.d.write_accuracy(o, [](const control::AccuracyResult& r) { return r.held; });
     }},
    {"grl_bucket_settle_seconds", "gauge",
     "Seconds the last change in demand over the limit took to bring admitted within 10% of "
     "the limit.",
     [](daemon::Samples& o, const Scrape& s) {
         s.d.write_accuracy(o, [](const control::AccuracyResult& r) { return r.settle_seconds; });
     }},
    {"grl_bucket_limit_source", "gauge",
     "Where the effective limit comes from (1 for the source in force).",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& [key, i] : s.d.ctl_.instances()) {
             o({{"bucket", i.bucket},
                {"scope", to_string(i.scope)},
                {"zone", i.zone},
                {"source", control::to_string(i.limit_source)}},
               1);
         }
     }},
    // Which region the instances above belong to: the labels of region-scope and zone-scope
    // instances do not say it, and grl-rlc record needs it to name them.
    {"grl_controller_info", "gauge", "This controller's region and name (always 1).",
     [](daemon::Samples& o, const Scrape& s) {
         o({{"region", s.d.cfg_.opts.region}, {"name", s.d.cfg_.opts.name}}, 1);
     }},
    {"grl_controller_zones", "gauge", "Zones of this region known to the controller, by state.",
     [](daemon::Samples& o, const Scrape& s) {
         std::size_t fresh = 0;
         for (const auto& z : s.zones) fresh += z.fresh;
         o({{"state", "fresh"}}, static_cast<double>(fresh));
         o({{"state", "stale"}}, static_cast<double>(s.zones.size() - fresh));
     }},
    {"grl_controller_hosts", "gauge",
     "Hosts of this region by state (fresh: in the sums; stale: silent, or in a silent zone).",
     [](daemon::Samples& o, const Scrape& s) {
         o({{"state", "fresh"}}, static_cast<double>(s.d.ctl_.fresh_hosts()));
         o({{"state", "stale"}}, static_cast<double>(s.d.ctl_.stale_hosts()));
     }},
    {"grl_controller_zone_usage_age_seconds", "gauge", "Age of the last zone usage from each zone.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& z : s.zones) o({{"zone", z.zone}}, z.age_ms / 1000.0);
     }},
    {"grl_controller_peer_age_seconds", "gauge",
     "Age of the last region usage from each peer controller.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& p : s.peers)
             o({{"peer", p.source}, {"region", p.region}}, p.age_ms / 1000.0);
     }},
    {"grl_controller_zone_usage_version", "gauge",
     "Protocol version (\"v\") of the last zone usage accepted from each zone: 1 while its "
     "collector is older or runs with --usage-version 1.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& z : s.zones) {
             auto v = s.d.zone_usage_v_.find(z.zone);
             if (v != s.d.zone_usage_v_.end())
                 o({{"zone", z.zone}}, static_cast<double>(v->second));
         }
     }},
    {"grl_controller_peer_usage_version", "gauge",
     "Protocol version (\"v\") of the last region usage accepted from each peer.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& p : s.peers) {
             auto v = s.d.peer_usage_v_.find(p.source);
             if (v != s.d.peer_usage_v_.end())
                 o({{"peer", p.source}, {"region", p.region}}, static_cast<double>(v->second));
         }
     }},
    {"grl_controller_peer_limits_mismatch", "gauge",
     "1 when a peer's limits file differs from ours.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& p : s.peers) {
             o({{"peer", p.source}, {"region", p.region}},
               p.limits_digest != s.d.ctl_.limits_digest() ? 1 : 0);
         }
     }},
    {"grl_controller_usage_received_total", "counter",
     "Valid zone_usage and region_usage messages received, by kind and protocol version (v); "
     "v=\"1\" stays flat once every collector and controller sends version 2.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const char* k : {"zone_usage", "region_usage"}) {
             for (std::uint64_t v = wire::kMinUsageVersion; v <= wire::kUsageVersion; ++v) {
                 auto n = s.d.usage_versions_.find({k, v});
                 o({{"kind", k}, {"v", std::to_string(v)}},
                   n == s.d.usage_versions_.end() ? 0.0 : static_cast<double>(n->second));
             }
         }
     }},
    {"grl_controller_messages_ignored_total", "counter",
     "Valid messages not used (older than the one held, other region, our own) or refused "
     "(future: stamped too far ahead of our clock; too_many_hosts; full: a new zone or peer "
     "while --max-zones / --max-peers are held; too_many_buckets: a new bucket name while "
     "--max-bucket-names are held).",
     [](daemon::Samples& o, const Scrape& s) { write_by_kind(o, s.d.ignored_, "reason"); }},
    {"grl_controller_last_instruction_age_seconds", "gauge",
     "Time since instructions were last published (no sample before the first).",
     [](daemon::Samples& o, const Scrape& s) {
         if (s.d.last_publish_mono_) o((s.t.mono_ms - s.d.last_publish_mono_) / 1000.0);
     }},
    {"grl_controller_overrides", "gauge",
     "Overrides in force, by kind (runtime: run-time buckets).",
     [](daemon::Samples& o, const Scrape& s) {
         std::size_t overrides = 0, runtime = 0;
         for (const auto& [name, ov] : s.d.ctl_.overrides()) {
             bool active = !ov.tombstone() && (ov.expires_ms == 0 || s.t.wall_ms < ov.expires_ms);
             if (!active) continue;
             (ov.has_match ? runtime : overrides)++;
         }
         o({{"kind", "override"}}, static_cast<double>(overrides));
         o({{"kind", "runtime"}}, static_cast<double>(runtime));
     }},
    {"grl_controller_override_tombstones_dropped_total", "counter",
     "Removed overrides (tombstones, expired entries) dropped before their 24 h to make room "
     "for a live override.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.d.ctl_.tombstones_dropped()));
     }},
    {"grl_controller_overrides_rejected_total", "counter",
     "Override entries from peers refused: set_ms too far ahead of our clock.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.d.ctl_.overrides_rejected()));
     }},
    {"grl_controller_quota_entries_refused_total", "counter",
     "Quota entries of usages not taken (docs/design/008-quotas.md): unlisted (a zone's quota "
     "for a bucket its usage does not list), full (a new instance while 4096 are held), "
     "other_region (a peer speaking for another region than it did), not_ours (a peer's entry "
     "for an instance no zone here defines), other_window (a peer's period, offset or window "
     "start that is not ours), too_many_regions (more other regions for one instance than "
     "--max-peers), keys (a key of a per-key quota while 16384 keys are held: its use is not "
     "counted).",
     [](daemon::Samples& o, const Scrape& s) {
         const control::QuotaLedger::Refused& r = s.d.ctl_.quotas().refused();
         o({{"reason", "unlisted"}}, static_cast<double>(r.unlisted));
         o({{"reason", "full"}}, static_cast<double>(r.full));
         o({{"reason", "other_region"}}, static_cast<double>(r.other_region));
         o({{"reason", "not_ours"}}, static_cast<double>(r.not_ours));
         o({{"reason", "other_window"}}, static_cast<double>(r.other_window));
         o({{"reason", "too_many_regions"}}, static_cast<double>(r.too_many_regions));
         o({{"reason", "keys"}}, static_cast<double>(r.keys));
     }},
    {"grl_controller_peer_regions_held", "gauge",
     "Other regions whose peers all went silent, their last usage held in the global sums "
     "(--peer-hold).",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.d.ctl_.held_regions())); }},
    {"grl_controller_peer_regions_lost_total", "counter",
     "Regions that stayed silent past --peer-hold and left the global sums.",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.d.ctl_.regions_lost())); }},
};

const daemon::Family<Daemon::Scrape> Daemon::kDashboardFamilies[] = {
    {"grl_controller_dashboard_uncharted_instances", "gauge",
     "Bucket instances the dashboard's history leaves out (it charts 500 at most).",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.d.dashboard_->series_refused()));
     }},
    {"grl_controller_dashboard_snapshots_total", "counter",
     "Tick snapshots handed to the dashboard (one per history step, every tick while "
     "/api/state is read).",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.d.dashboard_->snapshots()));
     }},
    {"grl_controller_dashboard_snapshots_skipped_total", "counter",
     "Tick snapshots replaced before the dashboard's thread took them (it lags).",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.d.dashboard_->snapshots_skipped()));
     }},
};

// The controller's own cost at scale: tick duration, usage in parts, region usage size.
const daemon::Family<Daemon::Scrape> Daemon::kTickFamilies[] = {
    {"grl_controller_tick_seconds", "histogram",
     "Duration of a tick: ratios computed, instructions and region usage encoded and queued.",
     [](daemon::Samples& o, const Scrape& s) {
         const Daemon& d = s.d;
         daemon::MetricsText& m = o.text();
         for (std::size_t i = 0; i < std::size(kTickBucketsUs); ++i) {
             char le[32];
             std::snprintf(le, sizeof(le), "%g", static_cast<double>(kTickBucketsUs[i]) / 1e6);
             m.sample("grl_controller_tick_seconds_bucket", {{"le", le}},
                      static_cast<double>(d.tick_le_us_.empty() ? 0 : d.tick_le_us_[i]));
         }
         m.sample("grl_controller_tick_seconds_bucket", {{"le", "+Inf"}},
                  static_cast<double>(d.tick_count_));
         m.sample("grl_controller_tick_seconds_sum", static_cast<double>(d.tick_sum_us_) / 1e6);
         m.sample("grl_controller_tick_seconds_count", static_cast<double>(d.tick_count_));
     }},
    {"grl_controller_tick_cpu_seconds_total", "counter",
     "CPU time the controller's thread spent in ticks (divided by the ticks: a tick's cost, "
     "without the time other processes ran).",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.d.tick_cpu_us_) / 1e6); }},
    {"grl_controller_early_ticks_deferred_total", "counter",
     "Early ticks (a zone usage with a bucket's first rates, a rise or a fall) not taken "
     "because the last tick was long: early ticks take at most a 40th of the time.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.d.early_tick_.deferred()));
     }},
    {"grl_controller_tick_last_seconds", "gauge", "Duration of the last tick.",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.d.tick_last_us_) / 1e6); }},
    {"grl_controller_tick_max_seconds", "gauge", "Longest tick since the controller started.",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.d.tick_max_us_) / 1e6); }},
    {"grl_controller_usage_parts_total", "counter",
     "Usage messages received as parts of a larger usage, by kind and result (pending: held "
     "for the rest of its set; complete: it completed the set; stale, inconsistent, full: "
     "dropped).",
     [](daemon::Samples& o, const Scrape& s) { write_by_kind(o, s.d.parts_, "result"); }},
    {"grl_controller_usage_sets_incomplete_total", "counter",
     "Usage sent in parts whose set never completed (a newer set came first, or an interval "
     "passed): the source's last whole usage stays in force.",
     [](daemon::Samples& o, const Scrape& s) {
         o({{"kind", "zone_usage"}}, static_cast<double>(s.d.intake_.incomplete_zone_sets()));
         o({{"kind", "region_usage"}}, static_cast<double>(s.d.intake_.incomplete_region_sets()));
     }},
    {"grl_controller_region_usage_bytes", "gauge",
     "Size of the last region usage published, all parts together.",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.d.region_usage_bytes_)); }},
    {"grl_controller_region_usage_parts", "gauge",
     "Parts the last region usage was published in (1: one whole message).",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.d.region_usage_parts_)); }},
};

void Daemon::write_accuracy(daemon::Samples& o,
                            std::optional<double> (*get)(const control::AccuracyResult&)) const {
    for (const auto& [key, i] : ctl_.instances()) {
        const auto r = accuracy_.result({i.bucket, i.scope, "", i.zone});
        const std::optional<double> v = r ? get(*r) : std::nullopt;
        if (v) o({{"bucket", i.bucket}, {"scope", to_string(i.scope)}, {"zone", i.zone}}, *v);
    }
}

std::string Daemon::metrics() {
    const control::Clock t = now();
    daemon::MetricsText m;
    daemon::write_build_info(m, "controller");
    for (const InstanceGauge& g : kInstanceGauges) {
        m.family(g.name, "gauge", g.help);
        for (const auto& [key, i] : ctl_.instances()) {
            if (g.when && !g.when(i)) continue;
            m.sample(g.name,
                     {{"bucket", i.bucket}, {"scope", to_string(i.scope)}, {"zone", i.zone}},
                     g.get(i));
        }
    }
    const Scrape s{*this, t, ctl_.zones(t), ctl_.peers(t)};
    daemon::write(m, kFleetFamilies, s);
    write_counters(m, stats_);
    limits_.write_metrics(m);
    state_.write_metrics(m);
    if (dashboard_) daemon::write(m, kDashboardFamilies, s);
    net_.write_peer_metrics(m);
    daemon::write(m, kTickFamilies, s);
    net_.write_metrics(m);
    return m.text();
}

}  // namespace grl::controller
