// Wire messages of protocol version 1 and their msgpack encoding.
// The specification is docs/protocol.md; keep the two in step.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grl/common/bucket.h"
#include "grl/common/bucket_types.h"
#include "grl/common/quota.h"

namespace grl::wire {

inline constexpr std::uint64_t kVersion = 1;
inline constexpr std::size_t kMaxMessageBytes = 1 << 20;
inline constexpr std::size_t kMaxBucketsPerMessage = 4096;
// Run-time buckets an nginx holds at once (its zone reserves a slot for each); the control
// plane refuses more.
inline constexpr std::uint32_t kMaxRuntimeBuckets = 16;

// Keyed buckets (`grl_bucket NAME key=VALUE ...`, docs/per-key.md): bounds of the key lists.
inline constexpr std::size_t kMaxReportKeys = 256;        // per report bucket entry
inline constexpr std::size_t kMaxUsageKeys = 1024;        // per usage entry
inline constexpr std::size_t kMaxInstructionKeys = 1024;  // per instruction entry
inline constexpr std::size_t kMaxKeyTextLen = 47;         // a key's text, as kept by nginx

// One key of a keyed bucket with its rates (report, zone_usage, region_usage, admin_reply).
// The hash identifies the key fleet-wide: grl::keyed::hash_key of the key's bytes, the same
// on every host; never 0 or 1.
struct KeyRate {
    std::uint64_t hash = 0;
    std::string text;  // the key (at most kMaxKeyTextLen bytes); empty when sent hashed
    std::uint64_t offered_mrps = 0;
    std::uint64_t dropped_mrps = 0;
    std::uint64_t hosts = 0;  // usage: hosts whose reports named the key; report: 1
    // A keyed bucket with quota= (docs/design/009-per-key-quotas.md): the units admitted for
    // the key since the last message that listed it (report: on this host). Optional key
    // "used", written when not 0.
    std::uint64_t used = 0;
    bool operator==(const KeyRate& o) const {
        return hash == o.hash && text == o.text && offered_mrps == o.offered_mrps &&
               dropped_mrps == o.dropped_mrps && hosts == o.hosts && used == o.used;
    }
};

// The control plane's drop ratio for one key of a keyed bucket (instructions).
struct KeyRatio {
    std::uint64_t hash = 0;
    std::uint32_t ratio_ppm = 0;  // 0 clears a ratio sent earlier
    bool operator==(const KeyRatio& o) const { return hash == o.hash && ratio_ppm == o.ratio_ppm; }
};

// A report's bucket entry but its name, and a report's fields but its names and buckets:
// shared by Report and the collector's zero-copy ReportView (report_reader.h).
struct ReportCounts {
    Scope scope = Scope::Global;
    Mode mode = Mode::Deny;
    std::uint64_t limit_mrps = 0;
    std::uint64_t offered = 0;
    std::uint64_t admitted = 0;
    std::uint64_t dropped = 0;
    std::uint64_t shadow_dropped = 0;
    // The counters' increase since an earlier report, over ReportFields::recent_ms:
    // offered, admitted, dropped, shadow_dropped. Lets a collector that has no
    // baseline for the host (it just started) derive rates from one report.
    bool has_recent = false;
    std::array<std::uint64_t, 4> recent{};
    // The bucket's quota= (docs/directives.md), n == 0 without: optional keys "quota",
    // "quota_period", "quota_offset_ms" of the entry.
    QuotaSpec quota;
};

struct ReportFields {
    std::uint64_t epoch = 0;
    std::uint64_t seq = 0;
    std::uint64_t ts_ms = 0;
    std::uint64_t interval_ms = 0;
    std::uint64_t reports_dropped = 0;
    std::uint64_t recent_ms = 0;  // span of the buckets' `recent` counts; 0: none sent
};

struct ReportBucket : ReportCounts {
    std::string name;
    bool keyed = false;           // a keyed bucket: limit_mrps is each key's limit
    std::vector<KeyRate> keys{};  // keyed: this host's heavy hitters (at most kMaxReportKeys)
};

struct Report : ReportFields {
    std::string host;
    std::string zone;
    std::string region;
    std::vector<ReportBucket> buckets;
};

// The match of a run-time (emergency) bucket defined by the control plane.
struct RuntimeMatch {
    std::string caller;  // empty: any caller
    MatchKind caller_kind = MatchKind::Exact;
    std::string procedure;  // empty: any procedure
    MatchKind procedure_kind = MatchKind::Exact;
    Scope scope = Scope::Global;
    bool operator==(const RuntimeMatch& o) const {
        return caller == o.caller && caller_kind == o.caller_kind && procedure == o.procedure &&
               procedure_kind == o.procedure_kind && scope == o.scope;
    }
};
inline constexpr std::size_t kMaxMatchValueLen = 127;

struct Instruction {
    std::string name;
    std::uint32_t ratio_ppm = 0;  // 0..1'000'000
    std::uint64_t limit_mrps = 0;
    Mode mode = Mode::Deny;
    bool has_match = false;  // a run-time bucket: `match` is meaningful
    RuntimeMatch match;
    // Surge-damping basis (docs/design.md "Surge damping"): the instance's offered rate in
    // the newest sample the ratio was computed from, and the wall-clock time of that sample
    // (the oldest zone usage in it). Absent from older controllers' messages.
    bool has_basis = false;
    std::uint64_t basis_offered_mrps = 0;
    std::uint64_t basis_ms = 0;
    // A keyed bucket: ratio_ppm is 0 and limit_mrps is each key's limit; `keys` holds the
    // ratios of the keys over their limit (at most kMaxInstructionKeys).
    bool keyed = false;
    std::vector<KeyRatio> keys{};
    // A bucket with quota= (docs/protocol.md "Quotas"): N, the use of the window so far
    // (units, fleet-wide for the instance) and when the window ends (wall clock, Unix ms).
    // quota == 0: absent. ratio_ppm is 1'000'000 while quota_used >= quota.
    std::uint64_t quota = 0;
    std::uint64_t quota_used = 0;
    std::uint64_t quota_reset_ms = 0;
    // A keyed bucket with quota= (docs/design/009-per-key-quotas.md): each key's N and when the
    // window ends; the keys that used theirs up are in `keys` with ratio_ppm 1'000'000, first.
    // key_quota == 0: absent (optional keys "key_quota", "key_quota_reset_ms").
    std::uint64_t key_quota = 0;
    std::uint64_t key_quota_reset_ms = 0;
};

struct Instructions {
    std::string source;
    std::uint64_t seq = 0;
    std::uint64_t ts_ms = 0;
    std::uint64_t ttl_ms = 0;
    Scope scope = Scope::Global;
    std::string region;  // empty for Global
    std::string zone;    // empty unless Zone
    std::vector<Instruction> buckets;
};

// Encoders never fail for valid input; `out` holds the message and nothing else afterwards
// (whatever it held is replaced, so a reused buffer needs no clear()).
void encode(const Report& m, std::string& out);
void encode(const Instructions& m, std::string& out);

// Decoders validate everything (version, type, key types, name syntax,
// ratio range, counts, sizes). On failure they return false and put a short
// reason naming the offending key/value into `error`; `m` is then unspecified.
bool decode(std::string_view bytes, Report& m, std::string& error);
bool decode(std::string_view bytes, Instructions& m, std::string& error);

// The message type of a body ("report", "instructions") without a full
// decode, or empty if the body is not a v1 map with a string `type`.
std::string peek_type(std::string_view bytes);

// Topic (first frame) for an instruction message of the given scope.
std::string topic(Scope scope, std::string_view region, std::string_view zone);

}  // namespace grl::wire
