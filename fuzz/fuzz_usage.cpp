// libFuzzer harness, differential: the controller's usage reader (grl/usage_reader.h) must
// accept exactly what wire::decode accepts, read the same message, and refuse with the same
// reason. Input: a selector byte (even: zone_usage, odd: region_usage) and the body.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "grl/usage_reader.h"
#include "grl/wire_control.h"
#include "../t/unit/usage_equal.h"

namespace {

using namespace grl::wire;

using grl::wire::usage_equal::same;

// `reused` has read a previous input: what it held must not leak into this one.
template <class Usage>
void check(std::string_view bytes, Usage& reused) {
    Usage want;
    std::string e1, e2;
    const bool a = decode(bytes, want, e1);
    const bool b = read_usage(bytes, reused, e2);
    if (a != b) std::abort();
    if (a && !same(want, reused)) std::abort();
    if (!a && e1 != e2) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    static ZoneUsage zone;
    static RegionUsage region;
    std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] % 2 == 0) {
        check(bytes, zone);
    } else {
        check(bytes, region);
    }
    return 0;
}
