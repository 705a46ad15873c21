// Small vocabulary types shared by the data plane and the control plane.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace grl {

enum class Scope : std::uint8_t { Global = 0, Region = 1, Zone = 2 };
enum class Mode : std::uint8_t { Deny = 0, Shadow = 1 };

std::string_view to_string(Scope s);
std::string_view to_string(Mode m);
std::optional<Scope> parse_scope(std::string_view s);
std::optional<Mode> parse_mode(std::string_view s);

// Names of hosts, zones, regions and buckets: [A-Za-z0-9_.:-]{1,63}.
inline constexpr std::size_t kMaxNameLen = 63;
bool valid_name(std::string_view s);

}  // namespace grl
