// A zone's per-key quota use not sent yet (docs/design/009-per-key-quotas.md): the collector
// adds the `used` units of each report it accepts as new, per bucket and key, and each zone
// usage carries them (`used` of the entry's keys) and clears what it carried. Pure logic.
//
// Bounded: at most max_keys keys over all buckets; a key beyond it is refused with its units
// (counted: refused()). A usage carries at most wire::kMaxUsageKeys keys a bucket, the most
// used first; the rest wait for the next usage, so use arrives late rather than never.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grl/control/rates.h"
#include "grl/wire/report_reader.h"
#include "grl/wire/wire_control.h"

namespace grl::rates {

// Keys a collector holds pending over all its buckets: a few MB at most.
inline constexpr std::size_t kMaxPendingKeys = 65536;

// Whether Table::add took `v`'s report as a new one of the host (its use then counts once).
inline bool is_new(Verdict v) {
    return v == Verdict::First || v == Verdict::Accepted || v == Verdict::Restarted ||
           v == Verdict::NoTime || v == Verdict::TooSoon || v == Verdict::Reclaimed;
}

class PendingUse {
  public:
    explicit PendingUse(std::size_t max_keys) : max_keys_(max_keys) {}

    // The `used` units of `r`'s keys; call once per report accepted as new (never for a
    // duplicate, an old epoch's or a held-aside one's).
    void add(const wire::ReportView& r);
    // Puts the pending use into `u`'s entries of keyed buckets: `used` on the keys listed
    // there, and the keys not listed added after them (rates 0, hosts 0), the most used first,
    // at most wire::kMaxUsageKeys keys an entry. What `u` carries is no longer pending. A
    // bucket `u` has no keyed entry for (no fresh host reports it) loses its pending use
    // (counted: refused().units).
    void take(wire::ZoneUsage& u);
    // The use `u` carried (take() put it there) when `u` reached no controller: pending again.
    void give_back(const wire::ZoneUsage& u);

    struct Refused {
        std::uint64_t keys = 0;   // keys refused for want of room
        std::uint64_t units = 0;  // their units, and those of buckets no usage had room for
    };
    const Refused& refused() const { return refused_; }
    std::size_t keys() const { return keys_; }

  private:
    struct Key {
        std::uint64_t units = 0;
        std::string text;
    };
    using Keys = std::unordered_map<std::uint64_t, Key>;
    static void make_room(std::vector<wire::KeyRate>& listed, const Keys& pending);
    void add_key(std::string_view bucket, std::uint64_t hash, std::string_view text,
                 std::uint64_t units);
    std::size_t max_keys_;
    std::size_t keys_ = 0;
    std::unordered_map<std::string, Keys> buckets_;
    Refused refused_;
};

}  // namespace grl::rates
