// libFuzzer harness, differential: the controller's usage reader (grl/usage_reader.h) must
// accept exactly what wire::decode accepts, read the same message, and refuse with the same
// reason; and so must PartAssembler::read, which reads the parts of a source it holds a set for
// into the set's vector (the parts it reads are added, so that later inputs of the same source
// are read that way). Input: a selector byte (even: zone_usage, odd: region_usage) and the body.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "grl/wire/usage_parts.h"
#include "grl/wire/usage_reader.h"
#include "grl/wire/wire_control.h"
#include "../t/unit/usage_equal.h"

namespace {

using namespace grl::wire;

using grl::wire::usage_equal::same;

// `reused` has read a previous input: what it held must not leak into this one.
template <class Usage>
void check(std::string_view bytes, Usage& reused, PartAssembler<Usage>& assembler,
           Usage& in_parts) {
    Usage want;
    std::string e1, e2, e3;
    const bool a = decode(bytes, want, e1);
    const bool b = read_usage(bytes, reused, e2);
    if (a != b) std::abort();
    if (a && !same(want, reused)) std::abort();
    if (!a && e1 != e2) std::abort();
    const bool c = assembler.read(bytes, in_parts, e3);
    if (a != c) std::abort();
    if (!a) {
        if (e1 != e3) std::abort();
        return;
    }
    if (in_parts.parts <= 1) {
        if (!same(want, in_parts)) std::abort();
        return;
    }
    // A part's buckets may be in the assembler: the fields around them must be decode's.
    Usage head = in_parts;
    head.buckets.clear();
    want.buckets.clear();
    if (!same(want, head)) std::abort();
    if (assembler.add(in_parts, 0) == PartResult::Complete) assembler.recycle(in_parts);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    static ZoneUsage zone, zone_parts;
    static RegionUsage region, region_parts;
    static PartAssembler<ZoneUsage> zone_assembler(4, 1000);
    static PartAssembler<RegionUsage> region_assembler(4, 1000);
    std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] % 2 == 0) {
        check(bytes, zone, zone_assembler, zone_parts);
    } else {
        check(bytes, region, region_assembler, region_parts);
    }
    return 0;
}
