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

#include "grl/wire/usage_reader.h"
#include "grl/wire/wire_control.h"

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
    // A part of a new source while max_sources sets are pending, or while its zone holds
    // kMaxSourcesPerZone sets: ignored.
    Full,
    // The set would hold more than max_set_bytes in memory: dropped whole, its memory
    // returned; its other parts are ignored.
    TooLarge,
};
std::string_view to_string(PartResult r);

// The memory one source's set may hold (its entries' strings and vectors, as held_bytes()
// counts them): a zone of 65,536 buckets with a definition each holds about 20 MiB; a set of
// 16 parts full of one-character host names would hold over 250 MiB.
inline constexpr std::size_t kMaxSetBytes = 64u << 20;
// Sources of one zone whose sets are held (a zone's collector, an active-active pair, a
// restarted one under a new name): another zone's sender cannot touch them nor fill the table.
inline constexpr std::size_t kMaxSourcesPerZone = 4;

// The bytes an entry holds in memory: itself, its name, definitions, host names and keys.
std::size_t held_bytes(const UsageBucket& b);

// Assembles the parts of ZoneUsage or RegionUsage messages, one pending set per source (per
// zone and source for ZoneUsage: a zone's sender names its zone, which CURVE binds to its key).
// A set is complete when all of its parts arrived; a set is dropped incomplete when a part
// of a newer set of its source arrives, or when it is older than `timeout_ms` at expire().
//
// A source's set keeps one bucket vector after it completes: the parts of its next set are read
// (read()) straight into their place in it, one after the other (a sender sends its parts in
// order), and the controller hands back the usage that set replaces (recycle()), whose vector
// has the same names at the same places. Reading and assembling a set then moves no entry and,
// in the steady state, allocates nothing (bench/control_plane/README.md "Usage parts read in
// place"). Parts out of order, or read elsewhere (wire::decode, read_usage()), are assembled
// too, on a slower path.
template <class Usage>
class PartAssembler {
  public:
    PartAssembler(std::size_t max_sources, std::uint64_t timeout_ms,
                  std::size_t max_set_bytes = kMaxSetBytes)
        : max_sources_(max_sources), timeout_ms_(timeout_ms), max_set_bytes_(max_set_bytes) {}

    // Reads a message as read_usage() does (the same answer, the same error). A part of a source
    // the assembler holds a set for is read with its buckets in their place in the set's vector,
    // for the add() that follows to take from there: m.buckets is then left as it was. `how`
    // says which reader read it.
    bool read(std::string_view bytes, Usage& m, std::string& error, UsageRead* how = nullptr);
    // `m` is a decoded message (by read(), read_usage() or wire::decode); on Complete it is
    // replaced by the assembled usage, on Pending its buckets are taken (when they are in it)
    // and replaced by a vector of unspecified entries (for the next read to overwrite). `why`
    // gets the reason of Inconsistent and Stale.
    PartResult add(Usage& m, std::uint64_t now_ms, std::string* why = nullptr);
    // Hands the assembler the usage its owner no longer needs (the one a newer one replaced, or
    // one refused) and gives back in m.buckets a vector of unspecified entries: the one of
    // m.source's set when it has one (the next set of that source is read into m's vector), else
    // a spare, or an empty one when it holds none. The entries keep their strings and vectors:
    // reading parts into them, and assembling sets from them, then allocates nothing in the
    // steady state (allocating and freeing 10,000 entries per set was a sixth of the
    // controller's CPU at 50 zones x 10,000 buckets, bench/control_plane/README.md).
    void recycle(Usage& m);
    std::size_t spares() const { return spares_.size(); }
    // Drops the sets whose first part arrived more than timeout_ms before now_ms, returning
    // their memory; returns how many (they also count in incomplete()).
    std::size_t expire(std::uint64_t now_ms);

    std::size_t pending() const { return pending_; }
    // Sets dropped before all of their parts arrived (superseded or expired).
    std::uint64_t incomplete() const { return incomplete_; }

  private:
    // Where a part's buckets are in its set's vector.
    struct Range {
        std::size_t begin = 0, n = 0;
        bool ascending = true;  // names strictly ascending (the one-pass reader checks)
    };
    struct Set {
        Usage head;           // part 0's fields (all parts must agree), buckets of no part
        bool active = false;  // parts of head.seq pending (else the set only keeps `buckets`)
        std::uint64_t first_ms = 0;
        std::size_t received = 0;
        std::vector<bool> have;
        std::vector<Range> ranges;  // per part
        // The parts received, in the order they arrived, at [0, used); then entries kept for
        // the next parts.
        std::vector<UsageBucket> buckets;
        std::size_t used = 0;
        std::size_t bytes = 0;          // held_bytes() of the parts received
        std::uint64_t refused_seq = 0;  // a set dropped as TooLarge: its other parts ignored
        bool refused = false;
    };
    // The part read() read last into a set's vector, for add() to take.
    struct Placed {
        const Set* set = nullptr;
        const Usage* m = nullptr;
        std::uint64_t seq = 0;
        std::uint32_t part = 0;
        std::size_t at = 0, n = 0;
    };
    void start(Set& s, Usage& m, std::uint64_t now_ms);
    void stop(Set& s);
    void take(Set& s, Usage& m, const Placed& placed);
    bool assemble(Set& s, Usage& out, std::string* why);
    // The spare that fits `n` entries best (the smallest of at least n, else the largest), or
    // an empty vector; and a spare handed back (dropped beyond kMaxSpares).
    std::vector<UsageBucket> spare(std::size_t n);
    void keep(std::vector<UsageBucket>&& v);
    // Returns a dropped set's memory (its vector and part 0's lists).
    static void release(Set& s);
    // The key of m's set in sets_ (into key_): zone and source, or source.
    const std::string& key_of(const Usage& m);
    // Room for one more set of m's zone: an idle one of the zone goes, else false.
    bool room_in_zone(const Usage& m);

    // Read buffers and the vectors of sets dropped to make room for another source's.
    static constexpr std::size_t kMaxSpares = 8;

    std::size_t max_sources_;
    std::uint64_t timeout_ms_;
    std::size_t max_set_bytes_;
    std::string key_;
    // By source, at most max_sources_: the pending sets and the sets kept for their vector.
    std::map<std::string, Set, std::less<>> sets_;
    std::size_t pending_ = 0;
    std::uint64_t incomplete_ = 0;
    Placed placed_;
    std::vector<std::vector<UsageBucket>> spares_;
    std::vector<std::size_t> spare_sizes_;  // bytes of each spare
    std::size_t spare_bytes_ = 0;           // their sum, at most max_set_bytes_
};

extern template class PartAssembler<ZoneUsage>;
extern template class PartAssembler<RegionUsage>;

}  // namespace grl::wire
