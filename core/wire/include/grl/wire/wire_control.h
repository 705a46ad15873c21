// Control-plane messages: collector -> controller zone usage (protocol version 2, or 1),
// controller <-> controller region usage (2, or 1), and the controller's admin request/reply (1).
// The specification is docs/protocol.md (sections "zone_usage", "region_usage", "admin");
// keep the two in step. Decoders are as strict as those of grl/wire/wire.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grl/common/bucket_types.h"
#include "grl/wire/wire.h"

namespace grl::wire {

// zone_usage and region_usage carry "v" 2 since their entries became positional
// (docs/protocol.md "Versions"); every other message carries kVersion. Usage of "v" 1 (map
// entries) is still read, and written on request (`--usage-version 1`), for rolling upgrades
// from the release before: kMinUsageVersion is the oldest usage this release reads.
inline constexpr std::uint64_t kUsageVersion = 2;
inline constexpr std::uint64_t kMinUsageVersion = 1;
inline constexpr std::size_t kMaxHostNames = 8192;         // per zone_usage message
inline constexpr std::size_t kMaxBucketHostNames = 256;    // per bucket entry
inline constexpr std::size_t kMaxDefinitions = 16;         // per bucket entry
inline constexpr std::size_t kMaxOverrides = 4096;         // per region_usage message
inline constexpr std::size_t kMaxStatusEntries = 65536;    // per admin_reply array
inline constexpr std::size_t kMaxErrorLen = 4096;          // admin_reply "error"
inline constexpr std::size_t kMaxLimitsVersionLen = 64;    // admin_reply limits "version"
inline constexpr std::size_t kMaxDigestLen = 64;           // region_usage "limits_digest"
inline constexpr std::size_t kMaxSourceLen = kMaxNameLen;  // "source" names
// A zone_usage or region_usage too large for one message is sent in at most kMaxParts parts
// (docs/protocol.md "Usage in parts"), so one usage holds at most kMaxUsageBuckets buckets.
inline constexpr std::size_t kMaxParts = 16;
inline constexpr std::size_t kMaxUsageBuckets = kMaxParts * kMaxBucketsPerMessage;

// A bucket's definition as configured on a host (nginx.conf `grl_bucket`).
struct Definition {
    Scope scope = Scope::Global;
    Mode mode = Mode::Deny;
    std::uint64_t limit_mrps = 0;
    bool keyed = false;  // limit_mrps is each key's limit (docs/per-key.md)
    bool operator==(const Definition& o) const {
        return scope == o.scope && mode == o.mode && limit_mrps == o.limit_mrps && keyed == o.keyed;
    }
    bool operator!=(const Definition& o) const { return !(*this == o); }
    bool operator<(const Definition& o) const {
        if (scope != o.scope) return scope < o.scope;
        if (mode != o.mode) return mode < o.mode;
        if (limit_mrps != o.limit_mrps) return limit_mrps < o.limit_mrps;
        return keyed < o.keyed;
    }
};

struct DefinitionCount {
    Definition def;
    std::uint64_t hosts = 0;  // hosts reporting this definition
    bool operator==(const DefinitionCount& o) const { return def == o.def && hosts == o.hosts; }
};

// Per-bucket rates (milli-requests per second) summed over hosts.
struct UsageBucket {
    std::string name;
    std::uint64_t offered_mrps = 0;
    std::uint64_t admitted_mrps = 0;
    std::uint64_t dropped_mrps = 0;
    std::uint64_t shadow_dropped_mrps = 0;
    std::uint64_t hosts = 0;                   // hosts reporting the bucket
    std::uint64_t rated_hosts = 0;             // ...of which the rates are in the sums
    std::vector<DefinitionCount> definitions;  // most common first
    std::vector<std::string> host_names;       // zone_usage: set when not all hosts report it
    std::vector<KeyRate> keys{};  // a keyed bucket: its busiest keys summed (at most kMaxUsageKeys)
};

// A quota bucket of a zone (`zone_usage` "quotas", docs/protocol.md "Quotas"): the quota= its
// hosts report, and the scope the quota's instance is summed over.
struct QuotaDef {
    std::string name;
    Scope scope = Scope::Global;
    QuotaSpec spec;
    bool operator==(const QuotaDef& o) const {
        return name == o.name && scope == o.scope && spec == o.spec;
    }
};

// One key's use of a keyed quota instance in its window (docs/design/009-per-key-quotas.md).
struct KeyUse {
    std::uint64_t hash = 0;
    std::uint64_t used = 0;  // units
    bool operator==(const KeyUse& o) const { return hash == o.hash && used == o.used; }
};

// The use of one quota instance in its window (`region_usage` "quotas"): what this region's
// hosts admitted since window_ms (milli-units), as of at_ms (the newest zone usage in it).
struct QuotaUse {
    std::string name;
    Scope scope = Scope::Global;
    std::string zone;  // zone scope only
    QuotaSpec spec;
    std::uint64_t window_ms = 0;  // the window's start (wall clock, Unix ms)
    std::uint64_t use_mu = 0;     // milli-units
    std::uint64_t at_ms = 0;
    // A keyed bucket's quota: this region's use of each key with use in the window (optional
    // key "keys", an array of [h, used], written when not empty; sorted by hash).
    std::vector<KeyUse> keys{};
    bool operator==(const QuotaUse& o) const {
        return name == o.name && scope == o.scope && zone == o.zone && spec == o.spec &&
               window_ms == o.window_ms && use_mu == o.use_mu && at_ms == o.at_ms && keys == o.keys;
    }
};
inline constexpr std::size_t kMaxQuotas = 4096;  // entries of one "quotas" list
// Keys of all the entries of one "quotas" list together: they travel in part 0 of a
// region_usage (and the state file), at most about 20 bytes each.
inline constexpr std::size_t kMaxQuotaKeys = 16384;

// `zone_usage`: one collector's view of its zone, every collector interval.
struct ZoneUsage {
    // The message's "v": encode() writes this version's layout (1: map entries, else 2),
    // decode() sets the version it read.
    std::uint64_t v = kUsageVersion;
    std::string source;  // collector name
    std::string region;
    std::string zone;
    std::uint64_t seq = 0;
    std::uint64_t ts_ms = 0;
    std::uint64_t interval_ms = 0;
    std::uint64_t hosts = 0;              // hosts in the sums
    std::uint64_t stale_hosts = 0;        // silent hosts, no longer in the sums
    std::vector<std::string> host_names;  // the hosts in the sums (at most kMaxHostNames)
    std::vector<UsageBucket> buckets;
    std::vector<QuotaDef> quotas;  // optional key: the zone's quota buckets, sorted by name
    // One part of a usage too large for one message (grl/usage_parts.h): part `part` of
    // `parts`, all parts sharing `seq`. parts = 1: the message is whole (the keys are absent).
    std::uint32_t part = 0;
    std::uint32_t parts = 1;
};

// A control-plane override of one bucket (limit and/or mode), or a run-time bucket (match).
// Replicated between controllers: last writer wins by (set_ms, origin). An entry that sets
// nothing is a tombstone.
struct Override {
    std::string name;
    std::optional<std::uint64_t> limit_mrps;
    std::optional<Mode> mode;
    bool has_match = false;
    RuntimeMatch match;
    std::uint64_t expires_ms = 0;  // wall clock; 0 = never
    std::uint64_t set_ms = 0;      // wall clock of the change
    std::string origin;            // controller that accepted the change
    bool tombstone() const { return !limit_mrps && !mode && !has_match; }
    bool operator==(const Override& o) const {
        return name == o.name && limit_mrps == o.limit_mrps && mode == o.mode &&
               has_match == o.has_match && (!has_match || match == o.match) &&
               expires_ms == o.expires_ms && set_ms == o.set_ms && origin == o.origin;
    }
};

// `region_usage`: what one controller knows of its region, to its peers, every interval.
struct RegionUsage {
    std::uint64_t v = kUsageVersion;  // as in ZoneUsage
    std::string source;               // controller name
    std::string region;
    std::uint64_t seq = 0;
    std::uint64_t ts_ms = 0;
    std::uint64_t interval_ms = 0;
    std::uint64_t zones = 0;
    std::uint64_t hosts = 0;
    std::string limits_digest;         // of the controller's limits file, "" when none
    std::vector<UsageBucket> buckets;  // host_names always empty
    std::vector<Override> overrides;
    std::vector<QuotaUse> quotas;  // optional key: the region's use of each quota instance
    std::uint32_t part = 0;        // as in ZoneUsage
    std::uint32_t parts = 1;
};

enum class AdminOp : std::uint8_t { Status, Buckets, Set, Clear, Add, Remove, Keys };
std::string_view to_string(AdminOp op);
std::optional<AdminOp> parse_admin_op(std::string_view s);

struct AdminRequest {
    std::uint64_t seq = 0;
    std::uint64_t ts_ms = 0;
    AdminOp op = AdminOp::Status;
    std::string bucket;  // buckets: filter ("" = all); set/clear/add/remove: the bucket
    bool hosts = false;  // buckets: include host names
    std::optional<std::uint64_t> limit_mrps;  // set/add
    std::optional<Mode> mode;                 // set/add
    std::uint64_t for_ms = 0;                 // set/add: expiry after this long; 0 = never
    bool clear_limit = false;                 // clear: neither = both
    bool clear_mode = false;
    bool has_match = false;  // add
    RuntimeMatch match;
    std::uint32_t top = 0;  // keys: keys per instance (1..kMaxAdminTopKeys); 0 = the default
};

inline constexpr std::uint32_t kDefaultAdminTopKeys = 20;  // admin_request "top" absent
inline constexpr std::uint32_t kMaxAdminTopKeys = 1024;

// One key of one instance of a keyed bucket (admin_reply "keys", op keys).
struct KeyStatus {
    std::string name;  // the bucket
    Scope scope = Scope::Global;
    std::string region;            // of the instance; "" for global
    std::string zone;              // of the instance; "" unless zone
    std::uint64_t limit_mrps = 0;  // each key's limit
    std::uint32_t ratio_ppm = 0;   // the key's
    KeyRate key;                   // summed over the instance's scope; hosts as usage counts them
    bool operator==(const KeyStatus& o) const {
        return name == o.name && scope == o.scope && region == o.region && zone == o.zone &&
               limit_mrps == o.limit_mrps && ratio_ppm == o.ratio_ppm && key == o.key;
    }
};

// Where a bucket instance's offered load comes from: one zone of the controller's region
// (`grlctl buckets --hosts`, `grlctl explain`).
struct ZoneLoad {
    std::string zone;
    std::uint64_t offered_mrps = 0;  // the zone's last sum
    std::uint64_t hosts = 0;
};

struct BucketStatus {
    std::string name;
    Scope scope = Scope::Global;
    std::string region;  // of the instance; "" for global
    std::string zone;    // of the instance; "" unless zone
    std::uint64_t offered_mrps = 0;
    std::uint64_t admitted_mrps = 0;
    std::uint64_t shadow_dropped_mrps = 0;
    std::uint64_t limit_mrps = 0;
    std::uint32_t ratio_ppm = 0;
    // The limits file's candidate limit and what it would drop (smoothed); absent without a
    // candidate, and in replies of controllers that predate candidates.
    std::optional<std::uint64_t> candidate_limit_mrps;
    std::uint64_t candidate_would_drop_mrps = 0;
    Mode mode = Mode::Deny;
    std::string limit_source;  // conf, file, override
    std::string mode_source;
    std::uint64_t expires_ms = 0;  // of the override; 0 none
    std::uint64_t hosts = 0;
    std::vector<std::string> host_names;  // own region's hosts, when asked
    std::vector<DefinitionCount> definitions;
    bool has_match = false;
    RuntimeMatch match;
    // A keyed bucket: limit_mrps is each key's limit; keys_limited counts its keys with a
    // ratio. Optional: absent (false, 0) for an unkeyed bucket and from older controllers.
    bool keyed = false;
    std::uint64_t keys_limited = 0;
    // Optional, absent from older controllers: when the ratio last became > 0 (wall ms; 0: it
    // is 0), and, when asked with hosts, the load of each of the region's zones.
    std::uint64_t dropping_since_ms = 0;
    std::vector<ZoneLoad> zone_load;
    // Optional, a quota instance only (quota > 0): N, the units used in the window in force
    // (fleet-wide) and its end (wall ms), as the instruction entry carries them.
    std::uint64_t quota = 0;
    std::uint64_t quota_used = 0;
    std::uint64_t quota_reset_ms = 0;
    // Optional, a keyed bucket with quota= (key_quota > 0): each key's N, the window's end,
    // and how many keys used theirs up (docs/design/009-per-key-quotas.md).
    std::uint64_t key_quota = 0;
    std::uint64_t key_quota_reset_ms = 0;
    std::uint64_t keys_used_up = 0;
};

struct ZoneStatus {
    std::string zone;
    std::string source;
    std::uint64_t hosts = 0;
    std::uint64_t stale_hosts = 0;
    std::uint64_t age_ms = 0;
    bool fresh = false;
    std::uint64_t usage_v = 0;  // "v" of the zone's last usage; 0: not sent (an older controller)
};

struct PeerStatus {
    std::string source;
    std::string region;
    std::uint64_t age_ms = 0;
    std::string limits_digest;
    bool fresh = false;
    std::uint64_t usage_v = 0;  // "v" of the peer's last region usage; 0: not sent
};

struct LimitsStatus {
    std::string file;  // "" when no limits file is configured
    bool ok = true;
    std::string error;  // of the last rejected load
    std::string digest;
    std::uint64_t loaded_ms = 0;  // wall clock of the last good load
    std::uint64_t buckets = 0;
    std::string version;      // the limits' `version:` label, "" without one
    std::string store_error;  // --limits etcd://: why etcd is unreachable, "" while it answers
};

struct AdminReply {
    std::uint64_t seq = 0;  // the request's
    std::uint64_t ts_ms = 0;
    std::string source;
    std::string region;
    bool ok = true;
    std::string error;
    std::uint64_t interval_ms = 0;
    std::uint64_t ttl_ms = 0;
    std::vector<BucketStatus> buckets;
    std::vector<ZoneStatus> zones;
    std::vector<PeerStatus> peers;
    LimitsStatus limits;
    std::vector<KeyStatus> keys;  // op keys (absent from the message when empty)
};

void encode(const ZoneUsage& m, std::string& out);
void encode(const RegionUsage& m, std::string& out);
void encode(const AdminRequest& m, std::string& out);
void encode(const AdminReply& m, std::string& out);

bool decode(std::string_view bytes, ZoneUsage& m, std::string& error);
bool decode(std::string_view bytes, RegionUsage& m, std::string& error);
bool decode(std::string_view bytes, AdminRequest& m, std::string& error);
bool decode(std::string_view bytes, AdminReply& m, std::string& error);

// Topic of region_usage messages on a controller's publish socket.
inline constexpr std::string_view kPeerTopic = "grl/p/";

// Error text for a run-time match that nginx would refuse (kinds, lengths, regex), or empty.
std::string check_match(const RuntimeMatch& m);

}  // namespace grl::wire
