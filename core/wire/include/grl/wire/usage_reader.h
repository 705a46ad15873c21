// A one-pass reader of `zone_usage` and `region_usage` messages (docs/protocol.md) for the
// controller's intake: at fleet scale (50 zones x 10,000 buckets, 4 times a second) decoding
// usage is most of the controller's work (bench/control_plane/README.md).
//
// read_usage() accepts exactly what grl::wire::decode accepts and yields the same message. The
// bytes a grl sender writes (wire::encode's key order, a map of exactly its keys, entries of
// either usage version, no keyed buckets, no overrides) are read in one pass straight into `out`,
// reusing the capacity of its strings and vectors, without the msgpack object tree wire::decode
// builds. Anything else (or anything the fast path would refuse, so that the error text is
// wire::decode's) goes to wire::decode: there is one definition of what is valid. Its unit test and
// fuzz/fuzz_usage.cpp check the equivalence on valid, malformed and randomly mutated messages.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "grl/wire/wire_control.h"

namespace grl::wire {

// How read_usage() read a message.
enum class UsageRead : std::uint8_t {
    Fast,     // the one-pass reader
    Decoded,  // wire::decode (another layout, keyed buckets, overrides, or an invalid message)
};

// Returns what wire::decode(bytes, out, error) returns. On success `out` holds the message; on
// failure `error` holds wire::decode's reason and `out` is unspecified. `how` (when given) says
// which reader produced the answer.
bool read_usage(std::string_view bytes, ZoneUsage& out, std::string& error,
                UsageRead* how = nullptr);
bool read_usage(std::string_view bytes, RegionUsage& out, std::string& error,
                UsageRead* how = nullptr);

// The one-pass reader in two steps, for the receiver of usage in parts (PartAssembler::read): the
// fields before the buckets first, so that the caller can choose where the buckets go (a part's
// straight into their place in its set's one vector), then the buckets and the fields after
// them. read_usage() is these two steps with the buckets into out.buckets, then wire::decode
// when either gives up.
struct UsageRest {
    std::string_view bytes;  // the message's: they must outlive step 2
    std::size_t at = 0;      // where the buckets start
    std::uint64_t keys = 0;  // of the message's map: 14 with "part" and "parts", 12 without
    bool in_parts() const { return keys == 14; }
};
// Step 1: the fields before the buckets into `out` (its buckets untouched). False when the
// one-pass reader does not take the message: read it with wire::decode.
bool read_usage_head(std::string_view bytes, ZoneUsage& out, UsageRest& rest);
bool read_usage_head(std::string_view bytes, RegionUsage& out, UsageRest& rest);
// Step 2: the buckets into into[at, at + n), `n` their number (`into` grows to at least at + n;
// it never shrinks, and the entries outside the range keep theirs), and the fields after them
// into `out`. False when the one-pass reader does not take the message (the entries from `at`
// on are then unspecified): read it with wire::decode. `copied_names` (when given) gets how many
// entries' names were copied, those that differed from the name the entry held (0: every
// entry read held its name already; counted whether or not the read succeeds).
bool read_usage_rest(const UsageRest& rest, ZoneUsage& out, std::vector<UsageBucket>& into,
                     std::size_t at, std::size_t& n, std::size_t* copied_names = nullptr);
bool read_usage_rest(const UsageRest& rest, RegionUsage& out, std::vector<UsageBucket>& into,
                     std::size_t at, std::size_t& n, std::size_t* copied_names = nullptr);

}  // namespace grl::wire
