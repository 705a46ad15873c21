#include "grl/common/curve_keys.h"

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace grl::curve {
namespace {

constexpr std::string_view kZ85 =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

std::string_view trim(std::string_view s) {
    std::size_t b = s.find_first_not_of(" \t\r");
    if (b == std::string_view::npos) return {};
    std::size_t e = s.find_last_not_of(" \t\r");
    return s.substr(b, e - b + 1);
}

// Parses `name = "value"` (quotes optional); false when the line is not about `name`.
bool keyed_value(std::string_view line, std::string_view name, std::string_view& value) {
    std::string_view t = trim(line);
    if (t.substr(0, name.size()) != name) return false;
    std::string_view rest = trim(t.substr(name.size()));
    if (rest.empty() || rest[0] != '=') return false;
    value = trim(rest.substr(1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
    }
    return true;
}

std::vector<std::string_view> lines_of(std::string_view text) {
    std::vector<std::string_view> lines;
    while (!text.empty()) {
        std::size_t nl = text.find('\n');
        lines.push_back(text.substr(0, nl));
        if (nl == std::string_view::npos) break;
        text.remove_prefix(nl + 1);
    }
    return lines;
}

KeyPair read_keys(std::string_view text, const std::string& path) {
    KeyPair k;
    std::vector<std::string_view> lines = lines_of(text);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        std::string_view v;
        const char* field = nullptr;
        std::string* into = nullptr;
        if (keyed_value(lines[i], "public-key", v)) {
            field = "public-key";
            into = &k.public_key;
        } else if (keyed_value(lines[i], "secret-key", v)) {
            field = "secret-key";
            into = &k.secret_key;
        } else {
            continue;
        }
        if (!valid_key(v)) {
            throw std::runtime_error(path + ":" + std::to_string(i + 1) + ": invalid " + field +
                                     ", expected 40 Z85 characters");
        }
        *into = std::string(v);
    }
    return k;
}

// A name the list may give a key: what grl accepts as a host or zone name (1-63 of
// [A-Za-z0-9_.:-]; a default host name may be longer), with `*` for globs.
bool valid_pattern(std::string_view s) {
    if (s.empty() || s.size() > 255) return false;
    for (char c : s) {
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == ':' || c == '-' || c == '*';
        if (!ok) return false;
    }
    return true;
}

}  // namespace

bool valid_key(std::string_view s) {
    if (s.size() != 40) return false;
    for (std::size_t i = 0; i < s.size(); i += 5) {
        std::uint64_t value = 0;
        for (std::size_t j = i; j < i + 5; ++j) {
            std::size_t digit = kZ85.find(s[j]);
            if (digit == std::string_view::npos) return false;
            value = value * 85 + digit;
        }
        if (value > 0xffffffffULL) return false;  // five digits encode four bytes
    }
    return true;
}

KeyPair parse_keypair(std::string_view text, const std::string& path) {
    KeyPair k = read_keys(text, path);
    if (k.public_key.empty() || k.secret_key.empty()) {
        throw std::runtime_error(path + ": a key pair file needs public-key and secret-key lines");
    }
    return k;
}

std::string parse_public_key(std::string_view text, const std::string& path) {
    KeyPair k = read_keys(text, path);
    if (k.public_key.empty()) throw std::runtime_error(path + ": no public-key line");
    return k.public_key;
}

std::set<std::string> parse_authorized(std::string_view text, const std::string& path) {
    return keys_of(parse_key_list(text, path));
}

KeyList parse_key_list(std::string_view text, const std::string& path) {
    KeyList keys;
    std::vector<std::string_view> lines = lines_of(text);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        // '#' is a Z85 character: only a line starting with it is a comment.
        std::string_view t = trim(lines[i]);
        if (t.empty() || t[0] == '#' || t == "curve" || t == "metadata") continue;
        const std::string where = path + ":" + std::to_string(i + 1);
        std::string_view v, names;
        if (keyed_value(t, "secret-key", v)) continue;  // a key-pair file used as a list
        if (!keyed_value(t, "public-key", v)) {
            // A bare key, then perhaps the names it speaks for. Z85 has no blank or comma.
            std::size_t blank = t.find_first_of(" \t");
            v = t.substr(0, blank);
            if (blank != std::string_view::npos) names = trim(t.substr(blank));
        }
        if (!valid_key(v)) {
            throw std::runtime_error(where + ": invalid public key, expected 40 Z85 characters");
        }
        std::vector<std::string>& allowed = keys[std::string(v)];
        for (bool more = !names.empty(); more;) {
            std::size_t comma = names.find(',');
            std::string_view name = trim(names.substr(0, comma));
            more = comma != std::string_view::npos;  // "a," names an empty second name
            if (more) names.remove_prefix(comma + 1);
            if (!valid_pattern(name)) {
                throw std::runtime_error(where + ": invalid name \"" + std::string(name) +
                                         "\" after the key, expected names or globs of "
                                         "[A-Za-z0-9_.:*-] separated by commas");
            }
            allowed.emplace_back(name);
        }
    }
    return keys;
}

std::set<std::string> keys_of(const KeyList& list) {
    std::set<std::string> keys;
    for (const auto& [key, names] : list) keys.insert(key);
    return keys;
}

bool name_matches(std::string_view pattern, std::string_view name) {
    // Greedy with one backtrack point: the last `*` seen absorbs one more character at a time.
    std::size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
    while (n < name.size()) {
        if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            mark = n;
        } else if (p < pattern.size() && pattern[p] == name[n]) {
            ++p;
            ++n;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            n = ++mark;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}

}  // namespace grl::curve
