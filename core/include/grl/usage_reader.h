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

#include <string>
#include <string_view>

#include "grl/wire_control.h"

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

}  // namespace grl::wire
