// Files the daemons write: whole, durable and never half-written.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace grl::daemon {

// Writes `text` to `path` through a temporary file that mkstemp creates in the same directory
// (O_EXCL, mode 0600 until chmod to `mode`, a name nobody can predict), fsyncs it, renames it
// into place and fsyncs the directory: a crash leaves the old file or the new one, and a
// secret is never readable by others, not even briefly. Throws std::runtime_error naming
// the path.
void write_file_atomically(const std::string& path, const std::string& text, mode_t mode);

// The whole file, or nothing when it does not exist; throws std::runtime_error naming the
// path when it exists but cannot be read.
std::optional<std::string> read_file_if_exists(const std::string& path);

// Writes {"name": "endpoint", ...} to `path` (write_file_atomically, mode 0644): what a daemon
// bound, for whoever started it with --endpoints-file.
void write_endpoints_file(const std::string& path,
                          const std::vector<std::pair<std::string, std::string>>& endpoints);

}  // namespace grl::daemon
