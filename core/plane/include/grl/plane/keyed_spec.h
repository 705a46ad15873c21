// The per-key options of a keyed bucket (`grl_bucket NAME key=VALUE ...`, docs/per-key.md);
// `key=` itself is an nginx complex value, compiled by the module.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace grl {

inline constexpr std::uint32_t kDefaultKeys = 10000;
inline constexpr std::uint32_t kMaxKeys = 16u << 20;  // 16 Mi entries, 1.9 GiB of shm
inline constexpr std::uint32_t kDefaultReportKeys = 64;
// KeyedSpec::given's bits.
inline constexpr std::uint8_t kKeysGiven = 1, kReportKeysGiven = 2, kHashKeysGiven = 4;

struct KeyedSpec {
    bool keyed = false;
    std::string key;  // the VALUE as written, e.g. "$http_x_api_key"
    std::uint32_t keys = kDefaultKeys;
    std::uint32_t report_keys = kDefaultReportKeys;  // at most wire::kMaxReportKeys
    bool hash_keys = false;
    std::uint8_t given = 0;  // parameters taken so far (bits), to refuse a repeated one
};

// Takes one `keys=`, `report_keys=` or `hash_keys=` parameter into `spec`. Returns false when
// `arg` is none of them; else true, with `error` set (naming the value and what is expected)
// when the value is invalid or the parameter repeated.
bool take_keyed_param(std::string_view arg, KeyedSpec& spec, std::string& error);

}  // namespace grl
