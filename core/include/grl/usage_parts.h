// Usage in parts (docs/protocol.md "Usage in parts"): a zone_usage or region_usage that does
// not fit one message (kMaxBucketsPerMessage buckets, kMaxMessageBytes bytes) is sent as up to
// kMaxParts messages sharing one `seq`; the receiver assembles them into the whole usage
// before using any of it, so that a zone or region is never summed from half its buckets.
// Pure logic: the receiver's clock is a parameter.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "grl/wire_control.h"

namespace grl::wire {

// Encodes `m` into `out` (cleared first): one message, byte-identical to encode(m), when it
// fits; else as few parts as fit, each with at most kMaxBucketsPerMessage buckets and at most
// `max_bytes` bytes, buckets in order and split into contiguous runs, host names (zone_usage)
// or overrides (region_usage) in part 0 only. Returns false, with `out` empty, when
// kMaxParts parts cannot hold it (more than kMaxUsageBuckets buckets, or too many bytes).
bool encode_parts(const ZoneUsage& m, std::vector<std::string>& out,
                  std::size_t max_bytes = kMaxMessageBytes);
bool encode_parts(const RegionUsage& m, std::vector<std::string>& out,
                  std::size_t max_bytes = kMaxMessageBytes);

// What PartAssembler::add did with a message.
enum class PartResult : std::uint8_t {
    // The message was whole (parts = 1): use it as it is.
    Whole,
    // It completed a set: the message now holds the whole usage (part 0 of 1).
    Complete,
    // Held until the set's other parts arrive.
    Pending,
    // A part of a set older than the one held for its source: ignored.
    Stale,
    // The set cannot be assembled (its parts disagree on the header or on `parts`, or a
    // bucket name is in two parts): the set is dropped whole.
    Inconsistent,
    // A part of a new source while max_sources sets are pending: ignored.
    Full,
};
std::string_view to_string(PartResult r);

// Assembles the parts of ZoneUsage or RegionUsage messages, one pending set per source.
// A set is complete when all of its parts arrived; a set is dropped incomplete when a part
// of a newer set of its source arrives, or when it is older than `timeout_ms` at expire().
template <class Usage>
class PartAssembler {
  public:
    PartAssembler(std::size_t max_sources, std::uint64_t timeout_ms)
        : max_sources_(max_sources), timeout_ms_(timeout_ms) {}

    // `m` is a decoded message; on Complete it is replaced by the assembled usage, on Pending
    // it is moved from. `why` gets the reason of Inconsistent and Stale.
    PartResult add(Usage& m, std::uint64_t now_ms, std::string* why = nullptr);
    // Drops the sets whose first part arrived more than timeout_ms before now_ms; returns how
    // many (they also count in incomplete()).
    std::size_t expire(std::uint64_t now_ms);

    std::size_t pending() const { return sets_.size(); }
    // Sets dropped before all of their parts arrived (superseded or expired).
    std::uint64_t incomplete() const { return incomplete_; }

  private:
    struct Set {
        Usage head;  // part 0's fields (all parts must agree), buckets of no part
        std::uint64_t first_ms = 0;
        std::size_t received = 0;
        std::vector<bool> have;
        std::vector<std::vector<UsageBucket>> buckets;  // per part
    };
    void take(Set& s, Usage& m);
    bool assemble(Set& s, Usage& out, std::string* why);

    std::size_t max_sources_;
    std::uint64_t timeout_ms_;
    std::map<std::string, Set, std::less<>> sets_;  // by source
    std::uint64_t incomplete_ = 0;
};

extern template class PartAssembler<ZoneUsage>;
extern template class PartAssembler<RegionUsage>;

}  // namespace grl::wire
