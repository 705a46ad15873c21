// CURVE key files, parsed from their text (pure logic; callers read the file).
// Shared by the daemons (--curve-* options) and the nginx module
// (grl_curve_keypair, grl_curve_server_key), so both accept the same files and
// report the same errors.
//
// Key files use the ZeroMQ certificate layout (as zcert/`grlctl keygen` write it):
//     curve
//         public-key = "<40 Z85 characters>"
//         secret-key = "<40 Z85 characters>"     (key-pair files only)
// A list of authorised clients has one public key per line, either bare Z85 or as a
// `public-key = "..."` line; a line starting with `#` is a comment (`#` is also a Z85
// character, so there are no comments at the end of a line). A bare key may be followed by
// the names it may speak for (the hosts of an nginx key, the zones of a collector key),
// comma-separated, each a name or a glob with `*` (any run of characters):
//     <40 Z85 characters> web-1,web-2
//     <40 Z85 characters> web-eu-*
// A key without names is bound to the first name it speaks for (grl/control/curve_key_bindings.h).
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace grl::curve {

struct KeyPair {
    std::string public_key;  // Z85, 40 characters
    std::string secret_key;
};

// True for 40 Z85 characters that decode to a 32-byte key.
bool valid_key(std::string_view z85);

// Each throws std::runtime_error naming `path` and, where one is at fault, the line.
KeyPair parse_keypair(std::string_view text, const std::string& path);
std::string parse_public_key(std::string_view text, const std::string& path);
std::set<std::string> parse_authorized(std::string_view text, const std::string& path);

// An authorised key -> the names (or globs) it may speak for; empty: first come. A key on
// several lines may speak for the names of all of them.
using KeyList = std::map<std::string, std::vector<std::string>>;
KeyList parse_key_list(std::string_view text, const std::string& path);
std::set<std::string> keys_of(const KeyList& list);

// True when `name` matches `pattern`, where `*` stands for any run of characters (none too).
bool name_matches(std::string_view pattern, std::string_view name);

}  // namespace grl::curve
