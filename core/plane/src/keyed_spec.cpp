#include "grl/plane/keyed_spec.h"

#include "grl/common/parse.h"
#include "grl/wire/wire.h"

namespace grl {

bool take_keyed_param(std::string_view arg, KeyedSpec& spec, std::string& error) {
    const std::size_t eq = arg.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view name = arg.substr(0, eq), value = arg.substr(eq + 1);
    const std::uint8_t bit = name == "keys"          ? kKeysGiven
                             : name == "report_keys" ? kReportKeysGiven
                             : name == "hash_keys"   ? kHashKeysGiven
                                                     : 0;
    if (bit == 0) return false;
    if (spec.given & bit) {
        error = "duplicate \"" + std::string(arg) + "\"";
        return true;
    }
    spec.given |= bit;
    std::uint64_t n = 0;
    if (bit == kHashKeysGiven) {
        if (value != "on" && value != "off") {
            error = "invalid hash_keys \"" + std::string(value) + "\", expected on or off";
        }
        spec.hash_keys = value == "on";
    } else if (bit == kKeysGiven) {
        if (!parse_uint(value, n) || n < 8 || n > kMaxKeys) {
            error = "invalid keys \"" + std::string(value) + "\", expected 8.." +
                    std::to_string(kMaxKeys) + " (table entries)";
        }
        spec.keys = static_cast<std::uint32_t>(n);
    } else {
        if (!parse_uint(value, n) || n < 1 || n > wire::kMaxReportKeys) {
            error = "invalid report_keys \"" + std::string(value) + "\", expected 1.." +
                    std::to_string(wire::kMaxReportKeys);
        }
        spec.report_keys = static_cast<std::uint32_t>(n);
    }
    return true;
}

}  // namespace grl
