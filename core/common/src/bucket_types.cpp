#include "grl/common/bucket_types.h"

#include <array>

namespace grl {

std::string_view to_string(Scope s) {
    switch (s) {
        case Scope::Global: return "global";
        case Scope::Region: return "region";
        case Scope::Zone: return "zone";
    }
    return "?";
}

std::string_view to_string(Mode m) {
    switch (m) {
        case Mode::Deny: return "deny";
        case Mode::Shadow: return "shadow";
    }
    return "?";
}

std::optional<Scope> parse_scope(std::string_view s) {
    if (s == "global") return Scope::Global;
    if (s == "region") return Scope::Region;
    if (s == "zone") return Scope::Zone;
    return std::nullopt;
}

std::optional<Mode> parse_mode(std::string_view s) {
    if (s == "deny") return Mode::Deny;
    if (s == "shadow") return Mode::Shadow;
    return std::nullopt;
}

namespace {

// The characters a name may hold, as a table: one load per character. valid_name() runs for
// every name of every usage message the controller reads (2 million a second at fleet scale,
// bench/control_plane/README.md); the chain of range tests cost three times as many
// instructions.
constexpr std::array<bool, 256> kNameChars = [] {
    std::array<bool, 256> t{};
    for (int c = 'a'; c <= 'z'; ++c) t[static_cast<std::size_t>(c)] = true;
    for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<std::size_t>(c)] = true;
    for (int c = '0'; c <= '9'; ++c) t[static_cast<std::size_t>(c)] = true;
    for (char c : {'_', '.', ':', '-'}) t[static_cast<unsigned char>(c)] = true;
    return t;
}();

}  // namespace

// Without a branch per character: names are short (at most kMaxNameLen) and nearly always
// valid, so stopping at the first bad character saves nothing (72 -> 55 instructions for a
// 9-character name, bench/control_plane/README.md "Reading and taking usage in one process").
bool valid_name(std::string_view s) {
    if (s.empty() || s.size() > kMaxNameLen) return false;
    bool ok = true;
    for (char c : s) ok &= kNameChars[static_cast<unsigned char>(c)];
    return ok;
}

}  // namespace grl
