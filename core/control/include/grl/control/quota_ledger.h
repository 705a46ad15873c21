// The use of each quota instance in its current window (docs/design/008-quotas.md): what the
// instance's hosts admitted since the window began, integrated from the admitted rates of the
// usage messages taken in. Pure logic: time comes from the messages' own stamps, so two
// controllers that take the same usages hold the same use (active-active), whatever their tick.
//
// Rules a caller keeps: take_zone() once per accepted zone_usage (the controller refuses
// repeats and older ones, so no usage is integrated twice); take_peer() once per accepted
// region_usage; restore() before the first usage.
//
// Bounded by what this controller's own zones define: an instance is created only by a zone
// usage's definition of one of the usage's own buckets (whose names the controller bounds,
// --max-bucket-names) or by the state file; a peer only adds its use to instances held here,
// never defines one, sets N or ends the window in force early (windows follow this controller's
// clock); one instance holds at most max_regions other regions, and a peer speaks for the
// region it first named. At most wire::kMaxQuotas instances (all fit one region_usage).
// Every entry refused is counted by reason, the last one described (refused(), last_refused()).
//
// A keyed bucket's quota is per key (docs/design/009-per-key-quotas.md): each zone usage's keys
// carry the units admitted since the previous usage (`used`), added to the key's use in the
// window in force; peers and the state file carry each key's use as for the instance. A key with
// use in the window is never dropped (no key gets a fresh quota by being forgotten); a new key
// while max_keys are held over all instances is refused with its units (counted).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "grl/common/quota.h"
#include "grl/control/instance_key.h"
#include "grl/wire/wire_control.h"

namespace grl::control {

// The longest span one zone usage may stand for: its zone's previous usage (or the state
// file's save) further back than this counts only this far back at the usage's rate.
inline constexpr std::uint64_t kMaxQuotaSpanMs = 60000;
// After an instance's first usage here, how long every zone has to send its definition before
// the one in force may switch (QuotaLedger::settle); many report intervals.
inline constexpr std::uint64_t kQuotaVoteHoldMs = 10000;
// A zone silent this long no longer has a place in an instance's entry.
inline constexpr std::uint64_t kForgetZoneMs = 10 * kMaxQuotaSpanMs;

class QuotaLedger {
  public:
    QuotaLedger(std::string region, std::size_t max_regions,
                std::size_t max_keys = wire::kMaxQuotaKeys)
        : region_(std::move(region)),
          max_regions_(max_regions),
          max_keys_(std::min(max_keys, wire::kMaxQuotaKeys)) {}

    // Integrates each quota bucket of `u` over [its zone's previous usage, u.ts_ms), split at
    // the window's start; the first usage of a zone counts its interval. The definition in
    // force (N, period, offset) is the one most zones send (settle(): a change rolling out
    // switches once, when most zones have it).
    // `now_wall_ms`: this controller's clock, which decides the window in force.
    void take_zone(const wire::ZoneUsage& u, std::uint64_t now_wall_ms);
    // A peer's use: another region's part of a global quota, or the use an active-active twin
    // of this region holds (the larger of the two stands: both integrate the same usages).
    // Only for instances held here with the same window (period and offset).
    void take_peer(const wire::RegionUsage& u, std::uint64_t now_wall_ms);
    // The state file's entries (this controller's last published use).
    void restore(const std::vector<wire::QuotaUse>& saved);

    struct Answer {
        QuotaSpec spec;
        Window window;           // the window in force at `wall_ms`
        std::uint64_t used = 0;  // units, fleet-wide for the instance
    };
    // The instance's quota at `wall_ms`, or false when it has none. A window no usage has
    // reached yet has used 0.
    bool at(const InstanceKey& k, std::uint64_t wall_ms, Answer& out) const;
    // A keyed instance's keys whose use in the window in force at `wall_ms` reached N, the
    // most used first (they are rejected until the window ends).
    void used_up(const InstanceKey& k, std::uint64_t wall_ms,
                 std::vector<std::uint64_t>& out) const;
    // One key's use in the window in force at `wall_ms` (0: none, or not held).
    std::uint64_t key_used(const InstanceKey& k, std::uint64_t hash, std::uint64_t wall_ms) const;
    // The `n` keys of the most use in the window in force at `wall_ms`, most first.
    struct KeyAnswer {
        std::uint64_t hash = 0;
        std::uint64_t used = 0;
        std::string text;  // "" when the hosts send hashes only
    };
    std::vector<KeyAnswer> most_used(const InstanceKey& k, std::uint64_t wall_ms,
                                     std::size_t n) const;
    std::size_t keys() const { return keys_; }  // keys held over all instances
    // This region's own use of every instance, for region_usage and the state file.
    void own_use(std::vector<wire::QuotaUse>& out) const;
    // Instances whose window ended more than a window ago and that no usage names any more,
    // and zones silent for kForgetZoneMs (so an instance holds as many zones as are alive).
    void forget(std::uint64_t wall_ms);
    std::size_t size() const { return entries_.size(); }

    // Entries refused, by reason: a zone's definition of a bucket its usage does not list
    // (unlisted); a new instance while kMaxQuotas are held (full); a peer's entries for a
    // region other than the one it first named (other_region); a peer's entry for an
    // instance not held here (not_ours) or with another
    // window (other_window: a period or offset change rolling out, or a window start that is
    // not one of ours or has not begun by the message's stamp); a peer region beyond
    // max_regions for one instance (too_many_regions).
    struct Refused {
        std::uint64_t unlisted = 0, full = 0, other_region = 0, not_ours = 0, other_window = 0,
                      too_many_regions = 0;
        // Keys of keyed quotas refused while max_keys are held, and the units they carried.
        std::uint64_t keys = 0, key_units = 0;
        std::uint64_t total() const {
            return unlisted + full + other_region + not_ours + other_window + too_many_regions +
                   keys;
        }
    };
    const Refused& refused() const { return refused_; }
    const std::string& last_refused() const { return last_refused_; }

  private:
    struct Entry {
        QuotaSpec spec;
        std::uint64_t window_ms = 0;    // start of the window the use is of
        double own_mu = 0;              // this region's use, milli-units
        std::uint64_t at_ms = 0;        // the newest usage stamp integrated
        std::uint64_t restored_ms = 0;  // the state file's stamp: where a zone's first usage starts
        std::uint64_t first_ms = 0;     // this controller's clock at the first usage taken
        struct ZoneSeen {
            std::uint64_t ms = 0;  // the zone's last usage stamp
            QuotaSpec spec;        // the definition it sent
        };
        std::map<std::string, ZoneSeen> zones;
        std::map<std::string, std::uint64_t> peer_mu;  // other regions' use (global only)
        // A keyed quota: each key's use in the window, this region's and by other region
        // (indices into key_regions).
        struct KeyUse {
            std::uint64_t own = 0;
            std::vector<std::uint64_t> peer;
            std::string text;  // from a zone usage; "" with hash_keys=on or from peers only
            std::uint64_t total() const;
        };
        std::unordered_map<std::uint64_t, KeyUse> keys;
        std::vector<std::string> key_regions;
    };
    Entry* entry(const InstanceKey& k, const QuotaSpec& spec);
    void settle(Entry& e, std::uint64_t now_wall_ms);
    void roll(Entry& e, std::uint64_t window_ms);
    // The key's use in `e`, made when absent and there is room (else nullptr, counted with
    // `units`).
    Entry::KeyUse* key_use(Entry& e, std::uint64_t hash, std::uint64_t units);
    void take_keys(Entry& e, const wire::UsageBucket& b, const std::string& what,
                   const std::string& zone);
    void take_peer_keys(Entry& e, const wire::QuotaUse& q, bool twin, const std::string& region,
                        const std::string& from);
    void refuse(std::uint64_t& reason, const std::string& what, const std::string& from,
                const std::string& why);

    std::string region_;
    std::size_t max_regions_;
    std::size_t max_keys_;
    std::size_t keys_ = 0;
    std::map<InstanceKey, Entry> entries_;
    struct Pin {
        std::string region;
        std::uint64_t heard_ms = 0;
    };
    std::map<std::string, Pin> region_of_;  // peer controller -> the region it speaks for
    Refused refused_;
    std::string last_refused_;
};

}  // namespace grl::control
