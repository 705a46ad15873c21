// libFuzzer harness: the text parsers that read operator input — the limits file (YAML),
// CURVE key files and key lists, directive and option values (rates, sizes, durations,
// ratios, names, regexes), and the /metrics request head. The first byte picks the parser.
// A parser may reject anything, with an exception of the kind it documents; it must never
// crash, hang or accept a value outside its range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "grl/common/bucket.h"
#include "grl/common/bucket_types.h"
#include "grl/common/curve_keys.h"
#include "grl/daemon/http.h"
#include "grl/daemon/limits_file.h"
#include "grl/common/parse.h"
#include "grl/plane/keyed_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    switch (data[0] % 5) {
        case 0: {
            grl::daemon::LimitsLoad l = grl::daemon::parse_limits(std::string(text), "fuzz.yaml");
            if (!l.ok && l.error.rfind("fuzz.yaml", 0) != 0) std::abort();  // names the file
            break;
        }
        case 1: try { (void)grl::curve::parse_keypair(text, "fuzz.key");
            } catch (const std::runtime_error&) {
            }
            try {
                (void)grl::curve::parse_public_key(text, "fuzz.key");
            } catch (const std::runtime_error&) {
            }
            try {
                for (const auto& [k, names] : grl::curve::parse_key_list(text, "fuzz.list")) {
                    if (!grl::curve::valid_key(k)) std::abort();
                    for (const std::string& n : names) {  // a name a key may speak for
                        if (n.empty() || n.find_first_of(" \t,") != std::string::npos) std::abort();
                    }
                }
            } catch (const std::runtime_error&) {
            }
            break;
        case 2: {
            (void)grl::parse_rate(text);
            (void)grl::parse_size(text);
            (void)grl::parse_duration_ms(text);
            auto r = grl::parse_ratio_ppm(text);
            if (r && r.value > 1000000) std::abort();
            if (grl::valid_name(text) && text.size() > grl::kMaxNameLen) std::abort();
            (void)grl::parse_scope(text);
            (void)grl::parse_mode(text);
            // grl_bucket's per-key parameters: what is taken stays in range.
            grl::KeyedSpec k;
            std::string err;
            if (grl::take_keyed_param(text, k, err) && err.empty() &&
                (k.keys < 8 || k.keys > grl::kMaxKeys || k.report_keys < 1 ||
                 k.report_keys > 256)) {
                std::abort();
            }
            break;
        }
        case 3: (void)grl::check_regex(text); break;
        case 4: {
            grl::daemon::RequestHead h = grl::daemon::parse_request_head(text);
            if (h.path.find('?') != std::string::npos) std::abort();
            break;
        }
    }
    return 0;
}
