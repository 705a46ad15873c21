// The limits file as grl-rlc writes it: rendering a limits set in the controllers' format
// (docs/control-plane.md, "The limits file"), comparing two sets bucket by bucket, and
// writing the file atomically. Reading is grl::daemon::parse_limits, the controllers' own
// parser: one reader for one format.
#pragma once

#include "grl/daemon/etcd.h"

#include <optional>
#include <string>
#include <vector>

#include "grl/control/control.h"

namespace grl::rlc {

// YAML the controllers accept, buckets in name order, after a comment line `header`.
std::string render_limits(const control::Limits& limits, const std::string& header);

// `content` (a limits file as written by hand or by an earlier version) with its top-level
// `version:` label set to `version`, everything else, comments included, kept byte for byte:
// the line replaced where there is one, else added after the leading comment lines.
std::string relabel(const std::string& content, const std::string& version);

// One bucket that differs between two limits sets.
struct LimitChange {
    std::string bucket;
    std::optional<control::FileLimit> before, after;  // none: absent on that side
};
std::vector<LimitChange> diff_limits(const control::Limits& a, const control::Limits& b);
// "api: limit 300r/s -> 360r/s, mode deny -> shadow", "+ bots: limit 10r/s", "- old: ..."
std::string describe(const LimitChange& c);
// One line per change, or "no change\n".
std::string render_diff(const std::vector<LimitChange>& changes);

// Writes `content` to `path` so that a reader sees the old file or the new one, never a
// mix: a temporary file in the same directory, fsync, rename over `path`, fsync of the
// directory. Throws std::runtime_error naming the path and the failing step.
void write_atomically(const std::string& path, const std::string& content);

// The file's text, or none when it does not exist; throws when it exists but cannot be read.
std::optional<std::string> read_text_file(const std::string& path);

// Where a limits set is pushed: a file path (written atomically) or an etcd v3 key
// (etcd://HOST:PORT/KEY, a put). Reading gives none when the file or key does not exist;
// both throw std::runtime_error naming the target when it cannot be reached.
std::optional<std::string> read_limits_text(const std::string& target,
                                            const daemon::etcd::Access& access = {});
void push_limits(const std::string& target, const std::string& content,
                 const daemon::etcd::Access& access = {});

}  // namespace grl::rlc
