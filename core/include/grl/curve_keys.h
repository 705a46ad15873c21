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
// character, so there are no comments at the end of a line).
#pragma once

#include <set>
#include <string>
#include <string_view>

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

}  // namespace grl::curve
