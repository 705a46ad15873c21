// The controller's core: zone and region usage in, drop ratios out (docs/control-plane.md).
//
// Pure logic with an injected clock: every call that depends on time takes a Clock (a
// monotonic reading for ages and staleness, a wall-clock reading for override expiry and the
// replicated override table, whose timestamps must mean the same on every controller).
//
// Scopes. A bucket's usage is summed per instance of its scope: `zone` buckets per zone of this
// region, `region` buckets over this region's zones, `global` buckets over this region's zones
// plus the latest region_usage of every other region (from peer controllers). Each controller
// of each region computes the same answer from the same inputs: no leader.
//
// The ratio of an instance is drop_ratio(mean offered over the last `window` ticks, limit).
// Offered load includes what nginx dropped, so it measures demand whatever the ratio; the ratio
// for the next interval is then directly (offered - limit) / offered, with no feedback loop to
// oscillate.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "grl/control/bucket_ids.h"
#include "grl/common/bucket_types.h"
#include "grl/control/early.h"
#include "grl/control/instance_key.h"
#include "grl/control/key_limits.h"
#include "grl/control/quota_ledger.h"
#include "grl/wire/wire.h"
#include "grl/wire/wire_control.h"

namespace grl::control {

struct Clock {
    std::uint64_t mono_ms = 0;
    std::uint64_t wall_ms = 0;
};

// Bounds on what a zone_usage or region_usage may say about its sender's interval: a message's
// interval sets how long it stays fresh and is remembered, so one message must not claim years
// (docs/control-plane.md "Untrusted input"). The range the daemons accept for --interval.
inline constexpr std::uint64_t kMinIntervalMs = 50;
inline constexpr std::uint64_t kMaxIntervalMs = 60000;

struct Options {
    std::string name;    // this controller ("source" of its messages)
    std::string region;  // the region it controls
    std::uint64_t interval_ms = 1000;
    std::uint64_t ttl_ms = 3000;        // of the instructions it publishes
    std::uint32_t window = 2;           // ticks averaged for the ratio
    double fast_attack = 0.2;           // newest sample > mean x (1 + this): use it alone (0: off)
    std::uint32_t stale_intervals = 3;  // a zone or peer silent this long leaves the sums...
    std::uint32_t forget_intervals = 60;  // ...and is forgotten this long after
    std::uint32_t hold_intervals = 10;    // how long a bucket's last rates stand in for none
    std::size_t max_overrides = 1024;     // entries in the override table, tombstones included
    std::uint64_t tombstone_ms = 24ULL * 3600 * 1000;  // how long a removed override is kept
    // Untrusted input (docs/control-plane.md). A message or override entry stamped further
    // ahead of our wall clock than this is refused: held, it would win over every genuine one.
    std::uint64_t max_skew_ms = 60000;
    std::uint32_t max_zone_hosts = 100000;     // hosts (and stale hosts) one zone_usage may claim
    std::uint32_t max_region_hosts = 1000000;  // hosts one region_usage may claim
    // Table bounds: a zone (or a peer controller) not yet known is refused while this many are
    // held; the ones held keep working, and a departed one frees its place once forgotten.
    std::uint32_t max_zones = 1000;
    std::uint32_t max_peers = 256;
    // Distinct bucket names in the usage held (docs/control-plane.md "Bucket ids"): a usage
    // naming one more is refused whole (TooManyBuckets), and its sender's last one stays.
    std::uint32_t max_bucket_names = 100000;
    // Partition between regions: a region whose peers all went silent keeps its last usage in
    // the global sums this long (its share of every global limit stays reserved, so the two
    // sides of a partition together still admit about L, not L per side); after it, the
    // region leaves the sums (presumed gone). docs/control-plane.md, "Partitions".
    std::uint64_t peer_hold_ms = 600000;
    // Keys held per keyed bucket instance (docs/per-key.md): beyond it, new keys are refused.
    std::uint32_t max_instance_keys = kMaxInstanceKeys;
    // Sum every bucket entry by entry at every tick, not from the running sums
    // (docs/control-plane.md "Running sums"): the reference the unit tests compare them with.
    bool walk_entries = false;
};

// One bucket's entry in the limits file.
struct FileLimit {
    std::optional<std::uint64_t> limit_mrps;
    std::optional<Mode> mode;
    // A limit evaluated beside the one in force and never published: the controller exports
    // what it would drop, so that grl-rlc can soak a lowered limit without the bucket leaving
    // deny (docs/control-plane.md "The limits file").
    std::optional<std::uint64_t> candidate_mrps;
    bool has_match = false;  // a run-time bucket defined in the file
    wire::RuntimeMatch match;
    bool operator==(const FileLimit& o) const {
        return limit_mrps == o.limit_mrps && mode == o.mode && candidate_mrps == o.candidate_mrps &&
               has_match == o.has_match && (!has_match || match == o.match);
    }
};

struct Limits {
    std::map<std::string, FileLimit> buckets;
    // The file's top-level `version:` ("" when it has none): a label (grl-rlc writes its
    // version number) reported by the controller, not part of the digest.
    std::string version;
};

// Canonical 64-bit FNV-1a digest of a limits set, as 16 hex digits ("" for no file). Equal
// digests mean equal limits, whatever the file's layout, comments or `version:` label.
std::string digest(const Limits& l);

// One log-worthy change found by a tick or an admin operation.
struct Event {
    enum class Level : std::uint8_t { Info, Warn };
    Level level = Level::Info;
    std::string bucket;  // empty when not about one bucket
    std::string text;
};

// What became of a zone_usage or region_usage.
enum class Accepted : std::uint8_t {
    Yes,
    Older,           // not newer than the one held for the same sender (a duplicate, a late one)
    WrongRegion,     // a zone of another region (a misconfigured collector)
    Self,            // our own region_usage, back from a peer
    Future,          // stamped more than max_skew_ms ahead of our clock: it would pin the sender
    TooManyHosts,    // claims more hosts than max_zone_hosts / max_region_hosts
    Full,            // a new zone or peer while max_zones / max_peers are held
    TooManyBuckets,  // names a bucket beyond the max_bucket_names held
};
std::string_view to_string(Accepted a);

// What a zone usage asks of the daemon's early tick (docs/control-plane.md "Early answers to a
// change"), judged against the state before the usage was taken.
struct Early {
    // `u` carries rates for a bucket that has no instance yet (a controller or collector that
    // just started), comes from a zone that was silent (a collector restarted after its zone
    // went stale), or completes the rates of an instance whose newest sample was provisional:
    // ticking at once then saves up to an interval.
    bool new_rates = false;
    // Rise when some bucket's offered rate in `u` rose well above its rate in the zone's last
    // usage, else Fall when one fell well below it (grl::changed_well), else None: a change
    // that a tick at once answers up to an interval earlier. Changes that only bring more or
    // fewer of the bucket's hosts' rates are not judged (more: new_rates'). None when
    // new_rates (that tick answers both) or when the zone was unknown or silent.
    Change change = Change::None;
};

// Rates in milli-requests per second.
struct Rates {
    double offered = 0;
    double admitted = 0;
    double dropped = 0;
    double shadow_dropped = 0;
};

// Where a bucket's effective limit, or its mode, comes from. Precedence, for each separately:
// override > file > conf (docs/control-plane.md "Limits").
enum class LimitSource : std::uint8_t {
    Conf,      // nginx.conf: the definition the instance's hosts vote for
    File,      // the limits file
    Override,  // a grlctl override or run-time bucket
    // A run-time bucket that was removed (grlctl remove, --for ran out, gone from the limits
    // file) and that hosts still report until its ratio expires there: nothing is published
    // for it, and the limit and mode shown are the last the hosts had.
    Removed,
};
std::string_view to_string(LimitSource s);

// The state of one bucket instance after the last tick.
struct Instance {
    std::string bucket;
    Scope scope = Scope::Global;
    std::string zone;         // zone instances only
    double offered_mrps = 0;  // smoothed
    double admitted_mrps = 0;
    double dropped_mrps = 0;
    double shadow_dropped_mrps = 0;
    std::uint64_t limit_mrps = 0;
    Mode mode = Mode::Deny;
    LimitSource limit_source = LimitSource::Conf;
    LimitSource mode_source = LimitSource::Conf;
    std::uint64_t expires_ms = 0;  // of the override in force, 0 none
    std::uint32_t ratio_ppm = 0;
    std::uint64_t dropping_since_ms = 0;  // wall ms when ratio_ppm last became > 0; 0 while 0
    std::optional<std::uint64_t> candidate_mrps;  // the limits file's candidate, if any
    double candidate_would_drop_mrps = 0;         // max(0, offered - candidate): what it would drop
    std::uint64_t hosts = 0;
    std::uint64_t own_hosts = 0;                     // of this region
    std::vector<wire::DefinitionCount> definitions;  // in the instance's domain
    std::uint64_t disagreeing_hosts = 0;  // hosts whose definition is not the one in force
    bool runtime = false;
    wire::RuntimeMatch match;
    // Monotonic ms when this instance stopped being a run-time bucket while hosts still
    // reported it (limit_source Removed until then + removed_grace_ms()); 0 otherwise.
    std::uint64_t removed_mono = 0;
    bool has_usage = false;  // some fresh usage was summed (runtime buckets may have none)
    bool published = false;  // sent to this region's nginx (global: the region has such hosts)
    // This region's zones that reported the bucket. Views into the Controller's zone names:
    // valid until its next tick() (copies would cost a sixth of a tick at 50 x 10,000).
    std::vector<std::string_view> own_zones;
    // Instead of own_zones: every zone of the last tick's inputs that has entries (the common
    // case, which filled 500,000 views a tick at 50 zones x 10,000 buckets).
    bool own_zones_all = false;
    std::uint64_t tick = 0;  // last tick that produced the instance
    // The id of the bucket's name among the usage held (docs/control-plane.md "Bucket ids") as
    // of that tick: BucketIds::kNone for a run-time bucket no input names. The tick notes each
    // instance by it for the early judgement, without a lookup of the name.
    std::uint32_t bucket_id = BucketIds::kNone;

    std::deque<Rates> samples;      // the smoothing window, newest last
    bool last_provisional = false;  // the newest sample summed only part of the hosts
    bool attacking = false;         // fast attack: the newest sample alone sets the ratio
    // The newest usage summed into the newest sample (Controller's count of usages taken in): a
    // tick that finds no newer one (an early tick's usage seen again by the regular tick)
    // replaces that sample rather than counting the same usage twice in the window.
    std::uint64_t inputs_gen = 0;
    // Surge-damping basis sent with the ratio (docs/design.md "Surge damping"): the newest
    // sample's offered rate and the wall clock of the oldest zone usage in it (0: none yet).
    double basis_offered_mrps = 0;
    std::uint64_t basis_ms = 0;
    // A keyed bucket (the definition in force has `key=`, docs/per-key.md): limit_mrps is each
    // key's limit, the instance's own ratio stays 0 and it has no surge basis; `keys` holds the
    // per-key sums over the instance's scope and their ratios.
    bool keyed = false;
    KeyTable keys;
    bool keys_refusing = false;  // the key table was full last tick (logged on change)
    // A bucket with quota= (docs/design/008-quotas.md): N, its use in the window in force
    // (units) and the window's end (wall ms); quota 0: none. A used-up quota sets ratio_ppm
    // to 1'000'000 (reject until quota_reset_ms) and drops the surge basis.
    std::uint64_t quota = 0;
    std::uint64_t quota_used = 0;
    std::uint64_t quota_reset_ms = 0;
    // A keyed bucket with quota= (docs/design/009-per-key-quotas.md): each key's N, the
    // window's end, and the keys that used theirs up (most used first), published with ratio 1.
    std::uint64_t key_quota = 0;
    std::uint64_t key_quota_reset_ms = 0;
    std::vector<std::uint64_t> used_up_keys;
};

struct TickOutput {
    std::vector<wire::Instructions> instructions;  // topic: wire::topic(scope, region, zone)
    wire::RegionUsage region_usage;
    std::vector<Event> events;
};

class Controller {
  public:
    explicit Controller(Options o);

    const Options& options() const { return opt_; }

    // Inputs. A message older than the one held for the same zone (or peer) is ignored; one
    // that cannot be true (Future, TooManyHosts) is refused as a whole. Override entries of a
    // region_usage stamped beyond max_skew_ms are refused one by one (overrides_rejected()).
    // On any refusal `why` (when given) gets one line naming the sender and the value.
    Accepted on_zone_usage(const wire::ZoneUsage& u, const Clock& now, std::string* why = nullptr);
    Accepted on_region_usage(const wire::RegionUsage& u, const Clock& now,
                             std::string* why = nullptr);
    // The same, without copying the message: when accepted, `u` is swapped with the usage
    // held for its sender (the caller's next message reuses that storage); else unchanged.
    // `early` (when given) gets what the usage asks of an early tick; judged only when the
    // usage is accepted (else left as Early{}). UsageIntake (usage_intake.h) calls these with
    // messages in parts.
    Accepted take_zone_usage(wire::ZoneUsage& u, const Clock& now, std::string* why = nullptr,
                             Early* early = nullptr);
    Accepted take_region_usage(wire::RegionUsage& u, const Clock& now, std::string* why = nullptr);

    // Replaces the limits file's content (the loader validated it). `file` is for status.
    void set_limits(Limits l, const Clock& now);
    const Limits& limits() const { return limits_; }
    const std::string& limits_digest() const { return limits_digest_; }

    // Admin operations; each returns an error message (empty on success) and leaves the table
    // unchanged on error. Changes are replicated to peers in region_usage.
    std::string set_override(const std::string& bucket, std::optional<std::uint64_t> limit_mrps,
                             std::optional<Mode> mode, std::uint64_t for_ms, const Clock& now);
    std::string clear_override(const std::string& bucket, bool clear_limit, bool clear_mode,
                               const Clock& now);
    std::string add_runtime(const std::string& bucket, const wire::RuntimeMatch& match,
                            std::uint64_t limit_mrps, std::optional<Mode> mode,
                            std::uint64_t for_ms, const Clock& now);
    std::string remove_runtime(const std::string& bucket, const Clock& now);
    const std::map<std::string, wire::Override>& overrides() const { return overrides_; }
    // Merges saved entries (the daemon's state file, at start) as if a peer had sent them:
    // last writer wins per bucket, stamps from the future refused. Returns how many merged.
    std::size_t restore_overrides(const std::vector<wire::Override>& entries, const Clock& now);
    // The quota use the state file saved (QuotaLedger::restore), at start.
    void restore_quotas(const std::vector<wire::QuotaUse>& saved) { quotas_.restore(saved); }
    // The use of every quota instance (docs/design/008-quotas.md).
    const QuotaLedger& quotas() const { return quotas_; }

    // Recomputes every instance and returns what to publish. Call once per interval (and after
    // an admin change, so that a new run-time bucket reaches nginx at once).
    TickOutput tick(const Clock& now);
    // The same into `out`, whatever it held replaced: passed the same TickOutput every tick (as
    // the daemon does), the messages' vectors and strings keep their storage from tick to tick.
    void tick(const Clock& now, TickOutput& out);

    // State after the last tick.
    using Instances = std::map<InstanceKey, Instance, InstanceKeyLess>;
    const Instances& instances() const { return instances_; }
    std::vector<wire::BucketStatus> status(const std::string& filter, bool with_hosts) const;
    std::vector<wire::ZoneStatus> zones(const Clock& now) const;
    std::vector<wire::PeerStatus> peers(const Clock& now) const;
    // Admin op keys: the `top` busiest keys of each instance of the keyed bucket `bucket`, and
    // with quota= the `top` keys of the most use in the window in force at `wall_ms` (each
    // key's use in KeyStatus::key.used). Returns an error (nothing in `out`) when no instance
    // of that name is keyed.
    std::string keys(const std::string& bucket, std::uint32_t top,
                     std::vector<wire::KeyStatus>& out, std::uint64_t wall_ms = 0) const;

    // Loop health.
    std::uint64_t fresh_hosts() const { return fresh_hosts_; }
    std::uint64_t stale_hosts() const { return stale_hosts_; }
    std::uint64_t fresh_zones() const { return fresh_zones_; }
    // Whether a zone (by name) or a peer (by source) is still kept: false once forgotten.
    bool knows_zone(const std::string& zone) const { return zones_.count(zone) != 0; }
    bool knows_peer(const std::string& source) const { return peers_.count(source) != 0; }
    // Other regions whose last usage is held in the global sums (all their peers silent,
    // within peer_hold_ms), and how many times a region was lost (held, then dropped).
    std::uint64_t held_regions() const { return held_regions_.size(); }
    std::uint64_t regions_lost() const { return regions_lost_; }
    std::uint64_t overrides_rejected() const { return overrides_rejected_; }
    // Removed overrides (tombstones, expired entries) dropped before tombstone_ms to make room
    // for a live one.
    std::uint64_t tombstones_dropped() const { return tombstones_dropped_; }
    // Keys of keyed buckets refused because an instance's key table was full.
    std::uint64_t keys_refused() const { return keys_refused_; }
    // Distinct bucket names in the usage held (at most max_bucket_names).
    std::uint64_t bucket_names() const { return ids_.size(); }
    // Buckets the last tick summed entry by entry, the running sums not saying enough of them
    // (docs/control-plane.md "Running sums"): 0 in a steady fleet.
    std::uint64_t buckets_walked() const { return buckets_walked_; }

  private:
    // 56 bytes, its name apart (ZoneEntry::last_rated): the intake reads and writes one per
    // usage entry, and 88 bytes with the name were 1.4 cold cache lines an entry.
    struct LastRated {
        std::uint64_t offered_mrps = 0;
        std::uint64_t admitted_mrps = 0;
        std::uint64_t dropped_mrps = 0;
        std::uint64_t shadow_dropped_mrps = 0;
        std::uint64_t rated_hosts = 0;
        std::uint64_t mono = 0;  // when it was received
        bool kept = false;       // false: a place beside a usage entry without one
    };
    // The one definition a SumEntry or a Run holds inline (def_scope, def_mode, ...).
    template <class T>
    static wire::Definition inline_def(const T& x) {
        wire::Definition d;
        d.scope = x.def_scope;
        d.mode = x.def_mode;
        d.limit_mrps = x.def_limit_mrps;
        d.keyed = x.def_keyed;
        return d;
    }
    // A usage entry as the running sums (count_in(), count_out()) and aggregate()'s walk read
    // it, written by the stand-in pass while the entry is in cache: 72 bytes in one array
    // instead of a 152-byte wire::UsageBucket plus its definitions on the heap. The entry's
    // one definition is held inline; with none or several, the walk reads the entry's list.
    struct SumEntry {
        std::uint64_t offered_mrps = 0;
        std::uint64_t admitted_mrps = 0;
        std::uint64_t dropped_mrps = 0;
        std::uint64_t shadow_dropped_mrps = 0;
        std::uint64_t hosts = 0;
        std::uint64_t rated_hosts = 0;
        std::uint64_t def_limit_mrps = 0;  // the one definition (definitions == 1)
        std::uint64_t def_hosts = 0;
        Scope def_scope = Scope::Global;
        Mode def_mode = Mode::Deny;
        bool def_keyed = false;
        std::uint8_t definitions = 0;  // in the entry: 0, 1, or 2 for more than one
        bool keys = false;             // the entry carries keys
        // How the entry was counted into the running sums (count_in()), so that count_out()
        // takes out exactly that whatever changed since: kIncomplete, kOdd, kSimple or kOther.
        std::uint8_t counted = 0;
        wire::Definition def() const { return inline_def(*this); }
    };
    static constexpr std::uint8_t kIncomplete = 1;  // SumEntry::counted
    static constexpr std::uint8_t kSimple = 2;      // its one definition is the Run's `def`
    static constexpr std::uint8_t kOther = 4;       // several definitions, or another one
    static constexpr std::uint8_t kOdd = 8;         // a value of 2^48 or more, or rates unrated
    // Running sums of one bucket id over the entries of the inputs in the sums (a zone or peer
    // whose `in_run` is set): what aggregate() would sum, kept as usages come and go, so that
    // a tick costs per bucket rather than per entry (docs/control-plane.md "Running sums").
    // Two cache lines, touched once per entry taken in or out: the sums are 64 bits and
    // wrap, so taking an entry out is exact modulo 2^64; they are the true sums while no entry
    // is `odd` (every summed value below 2^48, fewer than 2^15 entries) and an unrated entry
    // carries no rates (then the rated entries' rates are the sums of all entries').
    struct alignas(64) Run {
        std::uint64_t offered = 0, admitted = 0, dropped = 0, shadow_dropped = 0;
        std::uint64_t hosts = 0, rated_hosts = 0;
        std::uint64_t def_hosts = 0;       // of the kSimple entries
        std::uint64_t def_limit_mrps = 0;  // the kSimple entries' definition
        std::uint32_t n = 0;               // entries
        std::uint32_t missing = 0, incomplete = 0, keys = 0;
        std::uint32_t simple = 0, other = 0;  // entries counted kSimple, kOther
        std::uint32_t odd = 0;                // entries counted kOdd
        Scope def_scope = Scope::Global;
        Mode def_mode = Mode::Deny;
        bool def_keyed = false;
        bool is_def(const SumEntry& c) const {
            return c.def_limit_mrps == def_limit_mrps && c.def_scope == def_scope &&
                   c.def_mode == def_mode && c.def_keyed == def_keyed;
        }
        wire::Definition def() const { return inline_def(*this); }
    };
    static_assert(sizeof(Run) == 128);
    struct ZoneEntry {
        std::string_view name;  // the table's key: stays put while the entry lives
        bool in_run = false;    // its usage's entries are in the running sums (gather())
        bool repeats = false;   // its usage names a bucket twice (API only: decoders refuse)
        wire::ZoneUsage usage;
        std::vector<SumEntry> sums;  // of usage.buckets, by place (stand_in() writes them)
        std::uint64_t recv_mono = 0;
        std::uint64_t gen = 0;  // usage_gen_ when this usage was taken in
        // The last rated entry of each bucket: stands in for a bucket none of whose hosts has
        // a rate yet (a restarted collector needs two reports per host), for a while. The
        // first usage.buckets.size() stand beside usage.buckets (same place, same name; kept
        // false for a bucket without one), then those of buckets no longer in the usage, by
        // name. A usage naming the same buckets at the same places (intern()) is matched by
        // place; else merged by name (stand_in()).
        std::vector<LastRated> last_rated;
        std::vector<std::string> gone_names;  // of last_rated's entries past usage.buckets'
        std::vector<std::uint32_t> order;     // of usage.buckets by name; empty when in order
        std::vector<std::uint32_t> ids;       // of usage.buckets' names (retained in ids_)
        // A zone back from silence or from a collector's restart awaits the hosts it had: the
        // restarted collector's first usages may lack hosts that reconnect later (slower under
        // load), and a sum of part of the hosts must not count as the whole. Until they are
        // back, for at most --stale-intervals, its entries are partial (short_of_hosts).
        std::uint64_t awaited_hosts = 0;  // usage.hosts before the silence or restart
        std::uint64_t returned_mono = 0;  // when it came back
        bool short_of_hosts = false;      // the usage held lacks some of the awaited hosts
    };
    // What the last tick left of each bucket id's instances: whether a usage brings new rates
    // (Early::new_rates) is judged by id, not by a lookup of each entry's name among the
    // instances. Valid for an id while ids_.binds(id) == binds (the id has not changed hands).
    struct IdInstances {
        std::uint32_t binds = 0;
        bool any = false;               // the bucket has an instance
        bool wide_provisional = false;  // a global or region instance's newest sample was
        bool zone_provisional = false;  // so was some zone instance's (which: by name)
    };
    struct PeerEntry {
        wire::RegionUsage usage;
        std::uint64_t recv_mono = 0;
        std::uint64_t gen = 0;           // as in ZoneEntry
        std::vector<std::uint32_t> ids;  // as in ZoneEntry
        std::vector<SumEntry> sums;      // as in ZoneEntry (keep_region_usage() writes them)
        bool in_run = false;             // as in ZoneEntry
        bool repeats = false;
    };

    // The steps of tick(), in the order it runs them, and the state passed between them.
    struct Inputs {                                      // gather()
        std::vector<const ZoneEntry*> zones;             // this region's fresh zones, by name
        std::map<std::string, const PeerEntry*> remote;  // other regions: the freshest peer
    };
    struct BucketUsage {                      // aggregate(): one bucket's entries among the inputs
        std::string_view name;                // into ids_ or the override and limits tables
        std::uint32_t id = BucketIds::kNone;  // its place in by_id_; kNone: runtime_usage_'s
        std::uint64_t tick = 0;  // the tick that last summed into it (by_id_: cleared at first)
        // The entries, listed only when the running sums do not say enough (walk_).
        std::vector<std::pair<const ZoneEntry*, const wire::UsageBucket*>> own;
        std::size_t own_zones = 0;  // distinct zones in `own` (zones hold a name once)
        std::vector<const wire::UsageBucket*> remote;
        std::size_t own_n = 0, remote_n = 0;  // entries, listed or not
        bool own_all = false;                 // one entry of each fresh zone (own_zones_all)
        std::vector<wire::DefinitionCount> own_defs;    // this region's hosts
        std::vector<wire::DefinitionCount> fleet_defs;  // every region's hosts
        // Sums taken while merging, so that the tick reads each entry once (at 50 zones x
        // 10,000 buckets the entries do not fit the cache). Of this region's zones (own) and
        // of the other regions (remote):
        struct Sums {
            Rates rated;                 // the entries whose hosts have rates (sample_wide)
            std::size_t rated_n = 0;     // such entries
            std::size_t missing = 0;     // entries none of whose hosts has a rate yet
            std::size_t incomplete = 0;  // entries some of whose hosts have no rate yet
            std::uint64_t hosts = 0;     // saturating
            std::uint64_t offered = 0;   // every entry, saturating (region_usage)
            std::uint64_t admitted = 0;
            std::uint64_t dropped = 0;
            std::uint64_t shadow_dropped = 0;
            std::uint64_t rated_hosts = 0;
            bool keys = false;  // some entry carries keys
        };
        Sums own_sums, remote_sums;
        std::uint64_t basis_ms = 0;    // the oldest ts_ms of this region's zone usages in it
        std::uint64_t inputs_gen = 0;  // the newest gen of the usages in it (zones and peers)
    };
    using Usage = std::vector<const BucketUsage*>;  // sorted by bucket name
    struct BucketRule {  // bucket_rule(): what applies to every instance of a bucket
        Scope scope = Scope::Global;
        const wire::Override* active_override = nullptr;  // in force
        const FileLimit* file = nullptr;                  // the limits file's entry
        const wire::RuntimeMatch* match = nullptr;        // a run-time bucket's (override or file)
    };
    struct Sample {  // sample_zones(), sample_wide(): one instance's sums this tick
        Rates sum;
        bool has_usage = false;        // some fresh usage was summed
        bool hold = false;             // part of the usage is unknown: keep the last samples
        bool provisional = false;      // some hosts have no rate yet
        std::uint64_t basis_ms = 0;    // wall clock of the oldest of this region's zone usages
        std::uint64_t inputs_gen = 0;  // the newest gen of the usages summed (Instance's)
        std::uint32_t bucket_id = BucketIds::kNone;  // BucketUsage::id (Instance's)
        std::uint64_t hosts = 0;
        std::uint64_t own_hosts = 0;
        // The hosts that vote on the definition: into the inputs or aggregate()'s sums.
        const std::vector<wire::DefinitionCount>* domain = nullptr;
        // The zones summed: all of a region or global bucket's (sample_wide), or the one zone
        // of a zone bucket's instance (sample_zones). Into the zone table.
        const std::vector<std::pair<const ZoneEntry*, const wire::UsageBucket*>>* own = nullptr;
        bool own_all = false;  // `own` holds each zone of the inputs once (own_zones_all)
        const ZoneEntry* zone = nullptr;
        std::vector<wire::KeyRate> keys;  // a keyed bucket's keys summed over the instance
    };
    struct Before {  // an instance's state before this tick, for announce()
        bool is_new = true;
        std::uint32_t ratio_ppm = 0;
        std::uint64_t disagreeing_hosts = 0;
    };

    static void fill(SumEntry& s, const wire::UsageBucket& b);
    // The entries of a zone's (zone != nullptr, or true) or peer's usage into or out of the
    // running sums; run_replace(): a zone's usage at the same places, `old` its predecessor's.
    void run_add(const std::vector<std::uint32_t>& ids, std::vector<SumEntry>& sums,
                 const ZoneEntry* zone);
    void run_sub(const std::vector<std::uint32_t>& ids, const std::vector<SumEntry>& sums,
                 bool zone);
    void run_replace(const std::vector<std::uint32_t>& ids, const std::vector<SumEntry>& old,
                     ZoneEntry& zone);
    static void count_in(Run& r, SumEntry& c, bool short_of);
    static void count_out(Run& r, const SumEntry& c);
    bool repeats(const std::vector<std::uint32_t>& ids);  // an id twice in `ids`
    // One bucket's sums from its running sums; false when they do not say enough (walk).
    bool from_run(BucketUsage& u, const Run& own, const Run& remote) const;
    void size_runs();  // own_runs_, remote_runs_ to ids_.span()
    Inputs gather(const Clock& now, std::vector<Event>& events);
    void gather_zones(Inputs& in, const Clock& now, std::vector<Event>& events);
    void gather_peers(Inputs& in, const Clock& now, std::vector<Event>& events);
    void hold_regions(Inputs& in, const std::map<std::string, const PeerEntry*>& held,
                      std::vector<Event>& events);
    void expire_overrides(const Clock& now, std::vector<Event>& events);
    const Usage& aggregate(const Inputs& in, const Clock& now);
    bool plan_walk(const Inputs& in, const Clock& now);  // aggregate()'s steps
    void start_usage(BucketUsage& u, std::string_view name) const;
    static void merge_entry(std::vector<wire::DefinitionCount>& into, const SumEntry& c,
                            const wire::UsageBucket& b);
    void walk_entry(const SumEntry& b, const wire::UsageBucket& entry, std::uint32_t id,
                    const ZoneEntry* zone, std::uint64_t gen);
    void walk_inputs(const Inputs& in);
    void list_usage(const Clock& now);
    std::optional<BucketRule> bucket_rule(std::string_view name, const BucketUsage& u,
                                          const Clock& now) const;
    void sample_zones(std::string_view name, const BucketUsage& u, const BucketRule& rule,
                      const Inputs& in, const Clock& now, std::vector<Event>& events);
    void sample_wide(std::string_view name, const BucketUsage& u, const BucketRule& rule,
                     const Clock& now, std::vector<Event>& events);
    void update_instance(std::string_view name, const std::string& zone, const BucketRule& rule,
                         Sample&& s, const Clock& now, std::vector<Event>& events);
    // How long hosts may go on reporting a removed run-time bucket: nginx drops it one TTL
    // after its last instruction, then a report, a collector and a controller interval pass.
    std::uint64_t removed_grace_ms() const { return opt_.ttl_ms + 3 * opt_.interval_ms; }
    std::optional<wire::Definition> resolve_definition(
        Instance& inst, const BucketRule& rule,
        const std::vector<wire::DefinitionCount>& domain) const;
    void smooth(Instance& inst, const Sample& s) const;
    void update_keys(Instance& inst, const Sample& s, const Clock& now, std::vector<Event>& events);
    void evaluate_candidate(Instance& inst, const BucketRule& rule) const;
    void announce(const Instance& inst, const Before& before,
                  const std::optional<wire::Definition>& conf, std::vector<Event>& events) const;
    struct Noting {  // note_instance()'s bucket in progress
        std::string_view bucket;
        IdInstances* f = nullptr;
        bool first = true;
    };
    void reset_id_instances();                         // then note_instance() for each kept
    void note_instance(Noting& n, const Instance& i);  // into id_instances_
    void instructions(const Inputs& in, const Clock& now, std::vector<wire::Instructions>& out);
    static void write_instruction(wire::Instruction& e, const Instance& inst);
    void cut_into_parts(std::vector<wire::Instructions>& msgs,
                        std::vector<wire::Instructions>& out);
    void region_usage(const Inputs& in, const Usage& usage, const Clock& now,
                      wire::RegionUsage& ru);

    const Instance* find_instance(std::string_view bucket, Scope scope,
                                  std::string_view zone) const;
    ZoneEntry& zone_entry(const std::string& zone);  // found or added, its name set
    // Early::new_rates of `u`, whose ids are in ids_scratch_; `z`: the zone's entry, if any.
    bool brings_new_rates(const wire::ZoneUsage& u, const ZoneEntry* z, const Clock& now) const;
    // The same for one entry whose id changed hands since the last tick: by name.
    bool new_rates_by_name(std::string_view bucket, std::string_view zone, bool complete) const;
    // Keeps the zone's last rated entries and stands them in; `same_places`: the usage names
    // the buckets of the one it replaced at the same places (intern()). When `change` is
    // given, Early::change is judged into it.
    // `prev`: the buckets of the usage e.usage replaced (the names of e.last_rated's first).
    void stand_in(ZoneEntry& e, const std::vector<wire::UsageBucket>& prev, const Clock& now,
                  bool same_places, Change* change);
    struct StandIn {                    // stand_in()'s: what every entry is judged by
        std::uint64_t mono_ms = 0;      // now
        std::uint64_t keep_ms = 0;      // how long a last rated entry stands in
        std::uint64_t interval_ms = 0;  // the zone's
        Change* change = nullptr;       // Early::change, when judged
        bool live(const LastRated& l) const { return mono_ms <= l.mono + keep_ms; }
    };
    static void stand_in_entry(wire::UsageBucket& b, LastRated& l, const StandIn& si);
    void stand_in_by_name(ZoneEntry& e, const std::vector<wire::UsageBucket>& prev,
                          const StandIn& si);
    Accepted check_zone_usage(const wire::ZoneUsage& u, const Clock& now, std::string* why) const;
    Accepted check_region_usage(const wire::RegionUsage& u, const Clock& now, std::string* why);
    Accepted keep_region_usage(wire::RegionUsage& u, const Clock& now,
                               std::string* why);  // swapped into the table
    // The ids of `buckets`' names, retained, into ids_scratch_ (by position); `held` are the
    // ids of the usage it replaces, whose names most often stand at the same places. False,
    // with nothing retained, when a name is beyond max_bucket_names (too_many_buckets() says
    // why). `same_places`: every name stands at its place in `held`, no more, no fewer; the
    // ids are then `held`'s and are not retained again (keep_or_release()).
    bool intern(const std::vector<wire::UsageBucket>& buckets,
                const std::vector<std::uint32_t>* held, bool& same_places);
    std::string too_many_buckets(std::string_view kind, const std::string& source,
                                 const std::string& place) const;
    void release(std::vector<std::uint32_t>& ids);
    // The ids of a replaced usage: released, unless the new usage holds the same (intern()).
    void keep_or_release(std::vector<std::uint32_t>& replaced, bool same_places);
    bool zone_fresh(const ZoneEntry& z, const Clock& now) const;
    // Whether a usage of `hosts` hosts for zone z lacks hosts z awaits since it came back.
    bool short_of_hosts(const ZoneEntry& z, std::uint64_t hosts, const Clock& now) const;
    bool peer_fresh(const PeerEntry& p, const Clock& now) const;
    bool override_active(const wire::Override& o, const Clock& now) const;
    bool merge_override(const wire::Override& o, const Clock& now);
    bool room_for_override(bool live, const Clock& now);
    bool from_the_future(std::uint64_t ts_ms, const Clock& now) const;
    std::string ahead(std::uint64_t ts_ms, const Clock& now) const;
    std::uint64_t stamp(const std::string& bucket, const Clock& now) const;
    std::uint64_t hosts_reporting(const std::string& bucket) const;

    Options opt_;
    std::map<std::string, ZoneEntry> zones_;  // by zone name
    std::map<std::string, PeerEntry> peers_;  // by peer source
    Limits limits_;
    std::string limits_digest_;
    std::map<std::string, wire::Override> overrides_;
    QuotaLedger quotas_;
    // Sets the quota fields of a quota instance and, when its quota is used up, its ratio.
    void apply_quota(Instance& inst, const InstanceKey& key, const Clock& now) const;
    static void write_keys(wire::Instruction& e, const Instance& inst);
    wire::KeyStatus key_status_of(const Instance& inst) const;
    void most_used_keys(const InstanceKey& key, const Instance& inst, std::uint32_t top,
                        std::uint64_t wall_ms, std::size_t from,
                        std::vector<wire::KeyStatus>& out) const;
    std::set<std::string> announced_expired_;
    std::set<std::string> digest_mismatch_;  // peers whose limits digest differs from ours
    std::vector<Event> pending_;             // events of inputs and admin ops, for the next tick
    Instances instances_;
    Instances::iterator next_instance_;            // update_instance()'s guess, within a tick
    std::vector<LastRated> last_rated_scratch_;    // stand_in()'s, kept for its capacity
    std::vector<std::uint32_t> last_sorted_;       // stand_in()'s merge by name, the same
    std::vector<std::string> gone_names_scratch_;  // the same
    std::vector<IdInstances> id_instances_;        // by bucket id, as of the last tick
    BucketIds ids_;                                // the names of the usage held
    std::vector<std::uint32_t> ids_scratch_;       // intern()'s, kept for its capacity
    // aggregate()'s, kept for their capacity: sums by bucket id, those of run-time buckets
    // without usage, and the tick's list of both in name order.
    std::vector<BucketUsage> by_id_;
    // Running sums by bucket id: of this region's zones, of the other regions' peers. Apart,
    // so that a zone usage's pass reads one array in order (2.5 MB of both at 10,000 ids).
    std::vector<Run> own_runs_, remote_runs_;
    std::vector<SumEntry> sums_scratch_;  // take_zone_usage()'s: the replaced usage's column
    std::vector<std::uint8_t> walk_;      // aggregate()'s: ids summed entry by entry this tick
    std::vector<std::uint64_t> seen_;     // repeats()': the check that last saw each id
    std::uint64_t seen_check_ = 0;
    std::uint64_t run_basis_ms_ = 0;   // aggregate()'s: basis_ms of a bucket in every zone
    std::uint64_t run_zones_gen_ = 0;  // ...and the newest gen of the zones, of the peers
    std::uint64_t run_peers_gen_ = 0;
    std::size_t run_peers_ = 0;  // chosen peers with entries
    std::uint64_t buckets_walked_ = 0;
    bool walking_ = false;  // some bucket was walked at the last tick (logged on change)
    std::vector<BucketUsage> runtime_usage_;
    // instructions()': one message per scope instance of this region, and the entries written
    // into each this tick; kept for their storage (entries are written over, not built).
    std::vector<wire::Instructions> by_scope_;
    std::vector<std::size_t> by_scope_n_;
    Usage usage_;
    std::uint64_t seq_ = 0;
    std::uint64_t tick_ = 0;
    std::uint64_t usage_gen_ = 0;  // zone and region usages taken in so far (their gen)
    std::uint64_t fresh_hosts_ = 0;
    std::uint64_t stale_hosts_ = 0;
    std::uint64_t fresh_zones_ = 0;
    // The last tick's fresh zones with entries, in name order (own_zones_all).
    std::vector<std::string_view> tick_zones_;
    std::set<std::string> held_regions_;  // regions whose last usage stands in (announced)
    std::uint64_t regions_lost_ = 0;
    std::uint64_t overrides_rejected_ = 0;
    std::uint64_t tombstones_dropped_ = 0;
    std::uint64_t keys_refused_ = 0;
};

// Resolves the definition in force among hosts' definitions: the one reported by the most
// hosts; ties go to the lowest limit, then to deny over shadow (the stricter reading).
// Only definitions of `scope` are considered when there are any. Empty input: nullopt.
std::optional<wire::Definition> resolve(const std::vector<wire::DefinitionCount>& defs,
                                        std::optional<Scope> scope);

// The scope a bucket is aggregated at: the scope reported by the most hosts; ties go to the
// wider scope (global, then region, then zone).
std::optional<Scope> resolve_scope(const std::vector<wire::DefinitionCount>& defs);

// Adds `add` into `into` (same definitions merged), sorted by hosts desc then definition.
void merge_definitions(std::vector<wire::DefinitionCount>& into,
                       const std::vector<wire::DefinitionCount>& add);

}  // namespace grl::control
