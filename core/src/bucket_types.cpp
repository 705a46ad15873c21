#include "grl/bucket_types.h"

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

bool valid_name(std::string_view s) {
    if (s.empty() || s.size() > kMaxNameLen) return false;
    for (char c : s) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == ':' || c == '-';
        if (!ok) return false;
    }
    return true;
}

}  // namespace grl
