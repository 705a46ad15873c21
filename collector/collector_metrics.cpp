// grl-collector's /metrics. Each family is declared once: the collector's own counters in
// collector_counters.h, the rest below as rows (name, type, help, what it reads), in order.
#include "collector.h"

namespace grl::collector {

// What one scrape reads: the collector, and what it computes per call.
struct Collector::Scrape {
    const Collector& c;
    std::uint64_t now;
    std::vector<rates::Table::Counted> counted;
    std::map<std::string, Relay::Entry> relayed;
};

void write_counters(daemon::MetricsText& m, const Counters& c) {
    static const daemon::Family<Counters> families[] = {
        GRL_COLLECTOR_COUNTERS(GRL_COUNTER_FAMILY, GRL_COUNTER_BY_FAMILY)};
    daemon::write(m, families, c);
}

namespace {

// Ages of things that have not happened yet have no sample (rather than a sentinel that a
// max() or an alert threshold would take for a value).
void age(daemon::Samples& o, std::uint64_t now, std::uint64_t t) {
    if (t) o(static_cast<double>(now - t) / 1000.0);
}

// The counts behind the rates, by their index in rates::Table::Counted::c.
template <std::size_t K>
void counted(daemon::Samples& o, const std::vector<rates::Table::Counted>& all) {
    for (const auto& c : all) o({{"bucket", c.bucket}}, static_cast<double>(c.c[K]));
}

}  // namespace

// Per bucket, in this zone.
const daemon::Family<Collector::Scrape> Collector::kBucketFamilies[] = {
    {"grl_bucket_offered_rps", "gauge", "Requests per second offered to the bucket in this zone.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& b : s.c.usage_.buckets) o({{"bucket", b.name}}, b.offered_mrps / 1000.0);
     }},
    {"grl_bucket_admitted_rps", "gauge", "Requests per second admitted by the bucket in this zone.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& b : s.c.usage_.buckets) o({{"bucket", b.name}}, b.admitted_mrps / 1000.0);
     }},
    {"grl_bucket_shadow_dropped_rps", "gauge",
     "Requests per second a shadow bucket would have dropped in this zone.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& b : s.c.usage_.buckets)
             o({{"bucket", b.name}}, b.shadow_dropped_mrps / 1000.0);
     }},
    // The counts behind the rates above, so that Prometheus rates survive scrape gaps and
    // collector restarts (counter resets) where a gauge sampled now and then would not.
    {"grl_bucket_offered_total", "counter",
     "Requests offered to the bucket in this zone, summed from the hosts' reports since the "
     "collector started.",
     [](daemon::Samples& o, const Scrape& s) { counted<0>(o, s.counted); }},
    {"grl_bucket_admitted_total", "counter",
     "Requests admitted by the bucket in this zone (from reports).",
     [](daemon::Samples& o, const Scrape& s) { counted<1>(o, s.counted); }},
    {"grl_bucket_dropped_total", "counter",
     "Requests dropped by the bucket in this zone (from reports).",
     [](daemon::Samples& o, const Scrape& s) { counted<2>(o, s.counted); }},
    {"grl_bucket_shadow_dropped_total", "counter",
     "Requests a shadow bucket would have dropped in this zone (from reports).",
     [](daemon::Samples& o, const Scrape& s) { counted<3>(o, s.counted); }},
    {"grl_bucket_hosts", "gauge", "Hosts reporting the bucket.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& b : s.c.usage_.buckets)
             o({{"bucket", b.name}}, static_cast<double>(b.hosts));
     }},
    {"grl_bucket_definitions", "gauge",
     "Distinct definitions of the bucket among the zone's hosts (more than 1: they disagree).",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& b : s.c.usage_.buckets)
             o({{"bucket", b.name}}, static_cast<double>(b.definitions.size()));
     }},
    {"grl_bucket_limit_rps", "gauge",
     "Effective limit of the bucket, from the last instruction relayed (configured limit when "
     "none).",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& b : s.c.usage_.buckets) {
             auto it = s.relayed.find(b.name);
             double lim = it != s.relayed.end()   ? it->second.limit_mrps / 1000.0
                          : b.definitions.empty() ? 0.0
                                                  : b.definitions[0].def.limit_mrps / 1000.0;
             o({{"bucket", b.name}}, lim);
         }
     }},
    {"grl_bucket_ratio", "gauge",
     "Drop ratio of the last instruction relayed for the bucket (0 when none is in force).",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& b : s.c.usage_.buckets) {
             auto it = s.relayed.find(b.name);
             o({{"bucket", b.name}}, it != s.relayed.end() ? it->second.ratio_ppm / 1e6 : 0.0);
         }
     }},
};

// The collector's hosts, rate table and usage sent.
const daemon::Family<Collector::Scrape> Collector::kCollectorFamilies[] = {
    {"grl_collector_hosts", "gauge", "Hosts known to the collector, by state (fresh: in the sums).",
     [](daemon::Samples& o, const Scrape& s) {
         o({{"state", "fresh"}}, static_cast<double>(s.c.table_.fresh_hosts()));
         o({{"state", "stale"}},
           static_cast<double>(s.c.table_.hosts() - s.c.table_.fresh_hosts()));
     }},
    {"grl_collector_memory_bytes", "gauge",
     "Bytes the rate table holds (hosts, buckets, heavy hitters, names), as --max-memory bounds "
     "them.",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.c.table_.bytes_held())); }},
    {"grl_collector_last_report_age_seconds", "gauge",
     "Time since the last accepted report (no sample before the first).",
     [](daemon::Samples& o, const Scrape& s) { age(o, s.now, s.c.last_report_mono_); }},
    {"grl_collector_usage_sent_total", "counter", "Zone usage messages queued for a controller.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& c : s.c.upstreams_)
             o({{"controller", c->endpoint}}, static_cast<double>(c->sent));
     }},
    {"grl_collector_messages_dropped_total", "counter",
     "Zone usage messages dropped (controller unreachable or slow) and instructions the relay "
     "could not queue.",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& c : s.c.upstreams_)
             o({{"controller", c->endpoint}}, static_cast<double>(c->dropped));
         o({{"controller", "relay"}}, static_cast<double>(s.c.relay_->dropped.load()));
     }},
    {"grl_collector_usage_dropped_total", "counter",
     "Zone usage messages not (or not wholly) queued for a controller, by reason: unreachable "
     "(no connection up) or queue_full (connected, but the controller takes usage slower than "
     "it is sent).",
     [](daemon::Samples& o, const Scrape& s) {
         for (const auto& c : s.c.upstreams_) {
             o({{"controller", c->endpoint}, {"reason", "unreachable"}},
               static_cast<double>(c->unreachable));
             o({{"controller", c->endpoint}, {"reason", "queue_full"}},
               static_cast<double>(c->queue_full));
         }
     }},
    {"grl_collector_usage_bytes", "gauge", "Size of the last zone usage, all its parts together.",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.c.usage_bytes_)); }},
    {"grl_collector_usage_parts", "gauge",
     "Parts the last zone usage was sent in (1: one whole message).",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.c.parts_.size())); }},
    {"grl_collector_usage_build_seconds", "gauge",
     "Time the last zone usage took to sum and encode.",
     [](daemon::Samples& o, const Scrape& s) { o(s.c.usage_build_us_ / 1e6); }},
    {"grl_collector_quota_keys_pending", "gauge",
     "Keys whose per-key quota use waits for the next zone usage.",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.c.pending_use_.keys())); }},
    {"grl_collector_quota_keys_refused_total", "counter",
     "Keys whose per-key quota use was refused: more keys waited for the next zone usage than "
     "the collector holds.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.c.pending_use_.refused().keys));
     }},
    {"grl_collector_quota_units_lost_total", "counter",
     "Units of per-key quota use lost here: of keys refused, and of buckets that no fresh host "
     "reports any more.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.c.pending_use_.refused().units));
     }},
    {"grl_collector_host_buckets", "gauge", "Host-bucket entries held (hosts x their buckets).",
     [](daemon::Samples& o, const Scrape& s) { o(static_cast<double>(s.c.table_.entries())); }},
};

// Instructions relayed to the zone's nginx (Relay's counters, written by its thread).
const daemon::Family<Collector::Scrape> Collector::kRelayFamilies[] = {
    {"grl_collector_instructions_relayed_total", "counter",
     "Instruction messages relayed to the zone's nginx.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.c.relay_->relayed.load()));
     }},
    {"grl_collector_instructions_replayed_total", "counter",
     "Last instruction messages sent again to nginx hosts that (re)subscribed.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.c.relay_->replayed.load()));
     }},
    {"grl_collector_replays_coalesced_total", "counter",
     "Subscriptions whose replay was folded into one replay of their topic at the end of its "
     "gap (a topic is replayed at most once per 100 ms): a flood of subscriptions.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.c.relay_->coalesced.load()));
     }},
    {"grl_collector_instructions_malformed_total", "counter",
     "Instruction messages dropped as malformed or not for this zone.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.c.relay_->malformed.load()));
     }},
    {"grl_collector_relay_late_replies_total", "counter",
     "Replies of the relay thread to a rebind of the publish socket that came after the request "
     "was given up on (5 s): dropped, never taken for a later request's.",
     [](daemon::Samples& o, const Scrape& s) {
         o(static_cast<double>(s.c.relay_->stale_replies()));
     }},
    {"grl_collector_last_instruction_age_seconds", "gauge",
     "Time since the last instruction message relayed (no sample before the first).",
     [](daemon::Samples& o, const Scrape& s) { age(o, s.now, s.c.relay_->last_mono.load()); }},
};

std::string Collector::metrics() {
    const std::uint64_t now = daemon::mono_ms();
    daemon::MetricsText m;
    daemon::write_build_info(m, "collector");
    const Scrape s{*this, now, table_.counted(), relay_->entries(now)};
    daemon::write(m, kBucketFamilies, s);
    daemon::write(m, kCollectorFamilies, s);
    write_counters(m, stats_);
    daemon::write(m, kRelayFamilies, s);
    if (relay_->watch()) {
        std::vector<const daemon::HandshakeWatch*> watches{relay_->watch()};
        for (const auto& c : upstreams_) watches.push_back(c->watch.get());
        daemon::write_client_metrics(m, "controller", watches);
    }
    if (curve_) {
        zap_->write_metrics(m);
        daemon::write_binding_metrics(m, "nginx", host_keys_);
        daemon::write_reload_metrics(m, {&client_list_});
    }
    daemon::write_connection_metrics(m, {report_limit_.get(), publish_limit_.get()});
    return m.text();
}

}  // namespace grl::collector
