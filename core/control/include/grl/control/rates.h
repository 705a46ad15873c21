// Rate derivation from the cumulative counters of nginx reports (the collector's core).
//
// Each host reports cumulative counters per (host, epoch). The rate of a bucket on a host is
// the difference between two accepted reports divided by the time between them, so a lost
// report only widens one interval, a duplicate or an older report is ignored (seq), and a new
// epoch (nginx restarted, counters from zero) starts a new baseline. Time is passed in by the
// caller (a monotonic clock in milliseconds), so tests drive it directly.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grl/wire/report_reader.h"
#include "grl/wire/wire.h"
#include "grl/wire/wire_control.h"

namespace grl::rates {

struct Options {
    // A host silent for this many of its report intervals leaves the sums ("stale")...
    std::uint32_t stale_intervals = 3;
    // ...and is forgotten after this many.
    std::uint32_t forget_intervals = 30;
    // Hosts held at most: a report from a new host beyond this is refused (Full); the
    // hosts already known keep working. Bounds memory against a flood of invented names.
    std::uint32_t max_hosts = 100000;
    // Bytes the table may hold (hosts, their buckets and heavy hitters, bucket names, as
    // bytes_held() counts them): a report that would take it beyond is refused (MemoryFull),
    // so that invented hosts of thousands of buckets cannot grow the collector without bound.
    std::uint64_t max_bytes = 1ULL << 30;
};

// What add() did with a report.
enum class Verdict : std::uint8_t {
    First,       // first report of a host: baseline only
    Accepted,    // rates updated
    Restarted,   // new epoch: counters restarted, new baseline
    Duplicate,   // seq not newer than the last accepted one of this epoch
    OldEpoch,    // from an epoch this host already left (a late report of a previous run)
    NoTime,      // no usable time difference (clock stepped back); baseline kept
    TooSoon,     // under half an interval after the baseline (nginx's extra report on
                 // reconnecting): baseline and rates kept, so the next rate spans longer
    Reclaimed,   // an epoch another one displaced reports again while that one is silent:
                 // the switch was a stray or forged report, so the old epoch is back
    Pending,     // another epoch while the current one keeps reporting: held aside, taken
                 // only once the current one falls silent (a restart, or a forged report)
    Conflict,    // another epoch keeps reporting beside the current one (two senders use
                 // one host name): ignored, the current epoch stays
    Full,        // a new host while max_hosts are held: refused
    MemoryFull,  // the report would take the table beyond max_bytes: refused
};
std::string_view to_string(Verdict v);

struct HostSummary {
    std::string name;
    std::uint64_t epoch = 0;
    std::uint64_t last_seq = 0;
    std::uint64_t age_ms = 0;  // since the last accepted report
    std::uint64_t interval_ms = 0;
    std::size_t buckets = 0;
    bool stale = false;
};

// Transitions found by sweep(), for one log line each.
struct SweepResult {
    std::vector<std::string> went_stale;
    std::vector<std::string> forgotten;
};

class Table {
  public:
    explicit Table(Options o = {});

    // Accepts one report received at `now_ms`.
    Verdict add(const wire::ReportView& r, std::uint64_t now_ms);
    Verdict add(const wire::Report& r, std::uint64_t now_ms);

    // Marks hosts silent for stale_intervals as stale and forgets those silent for
    // forget_intervals.
    SweepResult sweep(std::uint64_t now_ms);

    // The usage of the fresh hosts: hosts, stale_hosts, host_names, buckets (sorted by name).
    // A keyed bucket's `keys` are its fresh hosts' latest heavy hitters summed by hash (the
    // text from any host that sent one), the busiest wire::kMaxUsageKeys by offered rate;
    // only while a keyed definition is among the entry's definitions.
    // Leaves the other fields of `out` alone.
    void usage(wire::ZoneUsage& out) const;

    std::size_t hosts() const { return hosts_.size(); }
    std::size_t fresh_hosts() const;
    std::vector<HostSummary> summaries(std::uint64_t now_ms) const;
    // Host-bucket entries held (for memory accounting).
    std::size_t entries() const;
    // Bytes the table holds, as max_bytes bounds them.
    std::uint64_t bytes_held() const { return bytes_; }

    // Requests counted per bucket name since the name was first held: the sums of the
    // differences between consecutive accepted reports of one epoch (offered, admitted,
    // dropped, shadow_dropped), sorted by name. Monotonic while any host reports the bucket,
    // so that Prometheus takes rates from them across scrape gaps; a name no host reports
    // any more is let go with its counts (a later one starts again from zero).
    struct Counted {
        std::string bucket;
        std::array<std::uint64_t, 4> c{};
    };
    std::vector<Counted> counted() const;

  private:
    struct BucketState {
        std::uint32_t name_id = 0;
        Scope scope = Scope::Global;  // the host's definition of the bucket
        Mode mode = Mode::Deny;
        bool has_rate = false;
        std::uint64_t limit_mrps = 0;
        std::uint64_t c[4] = {0, 0, 0, 0};  // offered, admitted, dropped, shadow_dropped
        float rate[4] = {0, 0, 0, 0};       // mrps, same order
        bool keyed = false;                 // the host's definition: a keyed bucket
        QuotaSpec quota;                    // the host's quota= (n 0: none)
        // keyed: the host's heavy hitters of its latest report that carried rates (at most
        // wire::kMaxReportKeys, as the codec bounds them); gone with the host.
        std::vector<wire::KeyRate> keys;
    };
    struct Host {
        std::string name;
        std::uint64_t epoch = 0;
        std::uint64_t seq = 0;
        std::uint64_t ts_ms = 0;    // sender clock of the baseline
        std::uint64_t recv_ms = 0;  // our clock of the baseline
        std::uint64_t last_ms = 0;  // our clock of the last report accepted (liveness)
        std::uint64_t interval_ms = 1000;
        bool proven = false;  // the current epoch reported again after its first report
        // Other epochs that reported for this name (a restart's previous run, a second sender,
        // a forger), the least recently seen replaced by a new one.
        struct Other {
            bool set = false;
            bool was_current = false;  // it held the host before
            std::uint64_t epoch = 0;
            std::uint64_t seq = 0;
            std::uint64_t interval_ms = 0;
            std::uint64_t seen_ms = 0;  // our clock of its last report (paced, when pending)
            std::uint32_t paced = 0;    // reports half an interval apart, while pending
        };
        std::array<Other, 4> others{};
        std::uint64_t bytes = 0;  // what bytes_ counts for this host
        bool stale = false;
        std::vector<BucketState> buckets;
    };

    std::uint32_t intern_name(std::string_view name);
    void release_name(std::uint32_t id);
    void baseline(Host& h, const wire::ReportView& r, std::uint64_t now_ms, bool keep_rates);
    static void take_keys(const wire::ReportView& r, const wire::ReportBucketView& rb,
                          BucketState& b);
    static bool recent_rates(const wire::ReportView& r, const wire::ReportBucketView& rb,
                             BucketState& b);
    std::uint64_t interval_of(const Host& h) const;
    Verdict other_epoch(Host& h, const wire::ReportView& r, std::uint64_t now_ms);
    std::optional<Verdict> too_soon(Host& h, const wire::ReportView& r, std::uint64_t now_ms,
                                    std::uint64_t& dt);
    void rate_buckets(Host& h, const wire::ReportView& r, std::uint64_t dt);
    void name_hosts(wire::ZoneUsage& out, const std::vector<std::int64_t>& slot_of) const;
    static Host::Other& oldest_other(Host& h);
    static std::uint64_t host_bytes(const Host& h);
    bool room_for(const Host* h, const wire::ReportView& r) const;
    void account(Host& h);

    Options opt_;
    std::uint64_t bytes_ = 0;
    std::unordered_map<std::string, Host> hosts_;
    std::unordered_map<std::string, std::uint32_t> name_ids_;
    std::vector<std::string> names_;
    std::vector<std::uint32_t> name_refs_;
    std::vector<std::uint32_t> free_names_;
    std::vector<std::array<std::uint64_t, 4>> counted_;  // by name id, as names_
    // Scratch space reused by add(): no allocation per report in the steady state.
    std::string key_;
    std::vector<BucketState> next_;
    std::vector<char> used_;
    wire::ReportView view_;
};

// Keeps at most `max` buckets of a usage: those reported by the most hosts (then the most
// offered), so that a flood of rarely used bucket names cannot push the fleet's real
// buckets out of the message; the result stays sorted by name. Returns how many were cut.
std::size_t keep_busiest(std::vector<wire::UsageBucket>& buckets, std::size_t max);

// Keeps the `max` keys of the highest offered rate (then the lowest hash), busiest first.
void keep_busiest_keys(std::vector<wire::KeyRate>& keys, std::size_t max);

// Rate in milli-requests per second of `delta` events over `dt_ms` milliseconds.
inline double rate_mrps(std::uint64_t delta, std::uint64_t dt_ms) {
    return dt_ms == 0 ? 0.0 : static_cast<double>(delta) * 1e6 / static_cast<double>(dt_ms);
}

}  // namespace grl::rates
