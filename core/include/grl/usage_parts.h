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
    // its buckets are taken and replaced by a spare vector of unspecified entries (for the next
    // read to overwrite). `why` gets the reason of Inconsistent and Stale.
    PartResult add(Usage& m, std::uint64_t now_ms, std::string* why = nullptr);
    // Hands the assembler a bucket vector its owner no longer needs (the usage a newer one
    // replaced) and gives back in `v` a spare one, or an empty one when it holds none. The
    // spares' entries keep their strings and vectors: reading parts into them, and assembling
    // sets from them, then allocates nothing in the steady state (allocating and freeing
    // 10,000 entries per set was a sixth of the controller's CPU at 50 zones x 10,000
    // buckets, bench/control_plane/README.md).
    void recycle(std::vector<UsageBucket>& v);
    std::size_t spares() const { return spares_.size(); }
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
    // The spare that fits `n` entries best (the smallest of at least n, else the largest), or
    // an empty vector; and a spare handed back (dropped beyond kMaxSpares).
    std::vector<UsageBucket> spare(std::size_t n);
    void keep(std::vector<UsageBucket>&& v);

    // A set's parts, its whole, the read buffer and the usage it replaced: enough for one
    // set of kMaxParts at a time without holding much more.
    static constexpr std::size_t kMaxSpares = 8;

    std::size_t max_sources_;
    std::uint64_t timeout_ms_;
    std::map<std::string, Set, std::less<>> sets_;  // by source
    std::uint64_t incomplete_ = 0;
    std::vector<std::vector<UsageBucket>> spares_;
};

extern template class PartAssembler<ZoneUsage>;
extern template class PartAssembler<RegionUsage>;

}  // namespace grl::wire
