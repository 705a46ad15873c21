// libFuzzer harness: every control-plane decoder of docs/protocol.md. The first byte picks
// the message kind; the rest is the body. A body that decodes must encode to bytes that
// decode again to the same encoding (no decoder accepts what the encoder cannot say).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "grl/wire/wire.h"
#include "grl/wire/wire_control.h"

namespace {

template <typename Msg>
void round_trip(std::string_view body) {
    Msg m;
    std::string error;
    if (!grl::wire::decode(body, m, error)) return;
    std::string once, twice;
    grl::wire::encode(m, once);
    Msg again;
    if (!grl::wire::decode(once, again, error)) std::abort();  // encoder wrote what decode refuses
    grl::wire::encode(again, twice);
    if (once != twice) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
    (void)grl::wire::peek_type(body);
    switch (data[0] % 6) {
        case 0: round_trip<grl::wire::Report>(body); break;
        case 1: round_trip<grl::wire::Instructions>(body); break;
        case 2: round_trip<grl::wire::ZoneUsage>(body); break;
        case 3: round_trip<grl::wire::RegionUsage>(body); break;
        case 4: round_trip<grl::wire::AdminRequest>(body); break;
        case 5: round_trip<grl::wire::AdminReply>(body); break;
    }
    return 0;
}
