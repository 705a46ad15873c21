// Overrides, run-time buckets and the limits file: the admin operations and the replicated
// override table (docs/control-plane.md "Limits").
#include "grl/control/control.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <tuple>
#include <utility>

#include "controller_detail.h"
#include "grl/common/bucket.h"
#include "grl/common/ratio.h"
#include "grl/common/saturating.h"

namespace grl::control {

using namespace detail;  // NOLINT(google-build-using-namespace): this library's own helpers

void Controller::set_limits(Limits l, const Clock&) {
    limits_ = std::move(l);
    limits_digest_ = digest(limits_);
    digest_mismatch_.clear();  // re-evaluated on the next message of each peer
}

bool Controller::override_active(const wire::Override& o, const Clock& now) const {
    return !o.tombstone() && (o.expires_ms == 0 || now.wall_ms < o.expires_ms);
}

// False when the entry is refused: stamped beyond max_skew_ms, it would win over every later
// change (set_ms near UINT64_MAX: for ever), so no operator could clear it.
bool Controller::merge_override(const wire::Override& o, const Clock& now) {
    if (from_the_future(o.set_ms, now)) return false;
    auto it = overrides_.find(o.name);
    if (it == overrides_.end()) {
        if (!room_for_override(override_active(o, now), now)) return true;
        overrides_.emplace(o.name, o);
        return true;
    }
    const wire::Override& held = it->second;
    if (std::tie(o.set_ms, o.origin) > std::tie(held.set_ms, held.origin)) it->second = o;
    return true;
}

// Whether a new entry fits: live overrides count against max_overrides; removed ones
// (tombstones, expired entries) are kept for tombstone_ms only while there is room, so the oldest
// makes way for a live one (counted). A tombstone dropped early can let a peer's stale copy of
// the entry back in; a table full of them would refuse every new override for a day.
bool Controller::room_for_override(bool live, const Clock& now) {
    if (overrides_.size() < opt_.max_overrides) return true;
    if (!live) return false;
    auto oldest = overrides_.end();
    std::uint64_t oldest_ms = UINT64_MAX;
    for (auto it = overrides_.begin(); it != overrides_.end(); ++it) {
        const wire::Override& held = it->second;
        if (override_active(held, now)) continue;
        const std::uint64_t dead_since = held.tombstone() ? held.set_ms : held.expires_ms;
        if (dead_since < oldest_ms) {
            oldest_ms = dead_since;
            oldest = it;
        }
    }
    if (oldest == overrides_.end()) return false;
    announced_expired_.erase(oldest->first);
    overrides_.erase(oldest);
    ++tombstones_dropped_;
    return true;
}

std::size_t Controller::restore_overrides(const std::vector<wire::Override>& entries,
                                          const Clock& now) {
    std::size_t n = 0;
    for (const wire::Override& o : entries) n += merge_override(o, now) ? 1 : 0;
    return n;
}

// A local change's stamp: our clock, or just after the held entry's when that is ahead (a peer
// whose clock runs ahead, within max_skew_ms), so that the change wins.
std::uint64_t Controller::stamp(const std::string& bucket, const Clock& now) const {
    auto it = overrides_.find(bucket);
    std::uint64_t s = now.wall_ms;
    if (it != overrides_.end() && it->second.set_ms >= s) s = sat_add(it->second.set_ms, 1);
    return s;
}

std::uint64_t Controller::hosts_reporting(const std::string& bucket) const {
    std::uint64_t n = 0;
    for (const auto& [key, inst] : instances_) {
        if (inst.bucket == bucket) n = sat_add(n, inst.hosts);
    }
    return n;
}

namespace {
std::string describe(const wire::Override& o) {
    std::string s;
    if (o.has_match) s += match_text(o.match) + ", ";
    s += "limit ";
    s += o.limit_mrps ? rps(*o.limit_mrps) : std::string("unchanged");
    s += ", mode ";
    s += o.mode ? std::string(to_string(*o.mode)) : std::string("unchanged");
    if (o.expires_ms) s += ", expires at " + std::to_string(o.expires_ms) + " ms";
    return s;
}
}  // namespace

std::string Controller::set_override(const std::string& bucket,
                                     std::optional<std::uint64_t> limit_mrps,
                                     std::optional<Mode> mode, std::uint64_t for_ms,
                                     const Clock& now) {
    if (!valid_name(bucket)) return "invalid bucket name \"" + bucket + "\"";
    if (!limit_mrps && !mode) return "nothing to set: give a limit and/or a mode";
    auto it = overrides_.find(bucket);
    if (it == overrides_.end() && !room_for_override(true, now)) {
        return "too many overrides (" + std::to_string(opt_.max_overrides) + ")";
    }
    wire::Override o;
    if (it != overrides_.end() && override_active(it->second, now)) o = it->second;
    o.name = bucket;
    if (limit_mrps) o.limit_mrps = limit_mrps;
    if (mode) o.mode = mode;
    o.expires_ms = for_ms ? sat_add(now.wall_ms, for_ms) : 0;  // "for ever" rather than wrap
    o.set_ms = stamp(bucket, now);
    o.origin = opt_.name;
    overrides_[bucket] = o;
    announced_expired_.erase(bucket);
    pending_.push_back({Event::Level::Info, bucket, "override set: " + describe(o)});
    return {};
}

std::string Controller::clear_override(const std::string& bucket, bool clear_limit, bool clear_mode,
                                       const Clock& now) {
    if (!clear_limit && !clear_mode) clear_limit = clear_mode = true;
    auto it = overrides_.find(bucket);
    if (it == overrides_.end() || !override_active(it->second, now)) {
        return "no override for bucket \"" + bucket + "\"";
    }
    if (it->second.has_match) {
        return "bucket \"" + bucket + "\" is a run-time bucket: use remove";
    }
    wire::Override o = it->second;
    if (clear_limit) o.limit_mrps.reset();
    if (clear_mode) o.mode.reset();
    if (o.tombstone()) o.expires_ms = 0;
    o.set_ms = stamp(bucket, now);
    o.origin = opt_.name;
    it->second = o;
    pending_.push_back({Event::Level::Info, bucket,
                        o.tombstone() ? std::string("override cleared")
                                      : "override partly cleared: " + describe(o)});
    return {};
}

std::string Controller::add_runtime(const std::string& bucket, const wire::RuntimeMatch& match,
                                    std::uint64_t limit_mrps, std::optional<Mode> mode,
                                    std::uint64_t for_ms, const Clock& now) {
    if (!valid_name(bucket)) return "invalid bucket name \"" + bucket + "\"";
    std::string bad = wire::check_match(match);
    if (!bad.empty()) return "bucket \"" + bucket + "\": " + bad;
    auto it = overrides_.find(bucket);
    if (it != overrides_.end() && override_active(it->second, now)) {
        return it->second.has_match
                   ? "run-time bucket \"" + bucket + "\" already exists (remove it first)"
                   : "bucket \"" + bucket + "\" has an override (a configured bucket)";
    }
    auto f = limits_.buckets.find(bucket);
    if (f != limits_.buckets.end() && f->second.has_match) {
        return "bucket \"" + bucket + "\" is a run-time bucket of the limits file";
    }
    if (std::uint64_t n = hosts_reporting(bucket)) {
        return "bucket \"" + bucket + "\" is reported by " + std::to_string(n) +
               " host(s): it is defined in nginx.conf, or a removed run-time bucket has not "
               "expired yet";
    }
    if (it == overrides_.end() && !room_for_override(true, now)) {
        return "too many overrides (" + std::to_string(opt_.max_overrides) + ")";
    }
    std::size_t runtime = 0;
    for (const auto& [name, o] : overrides_) runtime += o.has_match && override_active(o, now);
    for (const auto& [name, f] : limits_.buckets) runtime += f.has_match;
    if (runtime >= wire::kMaxRuntimeBuckets) {
        return "too many run-time buckets (nginx has room for " +
               std::to_string(wire::kMaxRuntimeBuckets) + ")";
    }
    wire::Override o;
    o.name = bucket;
    o.limit_mrps = limit_mrps;
    o.mode = mode.value_or(Mode::Deny);
    o.has_match = true;
    o.match = match;
    o.expires_ms = for_ms ? sat_add(now.wall_ms, for_ms) : 0;  // "for ever" rather than wrap
    o.set_ms = stamp(bucket, now);
    o.origin = opt_.name;
    overrides_[bucket] = o;
    announced_expired_.erase(bucket);
    pending_.push_back({Event::Level::Info, bucket, "run-time bucket added: " + describe(o)});
    return {};
}

std::string Controller::remove_runtime(const std::string& bucket, const Clock& now) {
    auto it = overrides_.find(bucket);
    if (it == overrides_.end() || !override_active(it->second, now) || !it->second.has_match) {
        auto f = limits_.buckets.find(bucket);
        if (f != limits_.buckets.end() && f->second.has_match) {
            return "bucket \"" + bucket + "\" is defined in the limits file: edit the file";
        }
        return "no run-time bucket \"" + bucket + "\"";
    }
    wire::Override o;
    o.name = bucket;
    o.set_ms = stamp(bucket, now);
    o.origin = opt_.name;
    it->second = o;
    pending_.push_back({Event::Level::Info, bucket, "run-time bucket removed"});
    return {};
}

// Expiry is by wall clock and evaluated by every controller on its own, so it is announced
// here, once per expiry. Tombstones and expired entries are dropped after tombstone_ms: long
// enough for every peer to have merged them, so a removal cannot come back from a stale copy.
void Controller::expire_overrides(const Clock& now, std::vector<Event>& events) {
    for (auto it = overrides_.begin(); it != overrides_.end();) {
        const wire::Override& o = it->second;
        bool expired = !o.tombstone() && o.expires_ms && now.wall_ms >= o.expires_ms;
        if (expired && announced_expired_.insert(it->first).second) {
            events.push_back({Event::Level::Info, it->first,
                              o.has_match ? "run-time bucket expired" : "override expired"});
        }
        std::uint64_t dead_since = o.tombstone() ? o.set_ms : (expired ? o.expires_ms : 0);
        if (dead_since && now.wall_ms > sat_add(dead_since, opt_.tombstone_ms)) {
            announced_expired_.erase(it->first);
            it = overrides_.erase(it);
            continue;
        }
        ++it;
    }
}

}  // namespace grl::control
