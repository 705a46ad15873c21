#include "grlctl_explain.h"

#include "grl/common/quota.h"
#include "grlctl_format.h"

namespace grl::grlctl {
namespace {

std::string rate(std::uint64_t mrps) {
    return rps(mrps) + " r/s";
}

// A span of seconds to the minute or hour: "1m 12s", "3h 5m".
std::string span(std::uint64_t s) {
    return s >= 3600 ? std::to_string(s / 3600) + "h " + std::to_string(s % 3600 / 60) + "m"
                     : std::to_string(s / 60) + "m " + std::to_string(s % 60) + "s";
}

// "2026-12-05T22:40:29Z (1m 12s ago)"
std::string since(std::uint64_t wall_ms, std::uint64_t now_ms) {
    return utc(wall_ms) + " (" + span(now_ms > wall_ms ? (now_ms - wall_ms) / 1000 : 0) + " ago)";
}

// "2026-12-06T03:00:00Z (in 4m 10s)"
std::string until(std::uint64_t wall_ms, std::uint64_t now_ms) {
    return utc(wall_ms) + " (in " + span(wall_ms > now_ms ? (wall_ms - now_ms + 999) / 1000 : 0) +
           ")";
}

std::string instance(const wire::BucketStatus& b) {
    std::string s = b.name + " (" + std::string(to_string(b.scope));
    if (b.scope == Scope::Region) s += " " + b.region;
    if (b.scope == Scope::Zone) s += " " + b.zone;
    return s + ", " + std::string(to_string(b.mode)) + ")";
}

// A quota instance (quota=): what is left of the window, or that it is used up.
std::string quota_line(const wire::BucketStatus& b, std::uint64_t now_ms) {
    const std::string window = "the window ends at " + until(b.quota_reset_ms, now_ms);
    if (b.quota_used >= b.quota) {
        return std::string(b.mode == Mode::Shadow ? "  WOULD REJECT (shadow mode)"
                                                  : "  REJECTING") +
               " every request: the quota of " + std::to_string(b.quota) + " is used up (" +
               std::to_string(b.quota_used) + " used); " + window + "\n";
    }
    return "  quota " + std::to_string(b.quota) + ": " + std::to_string(b.quota_used) + " used, " +
           std::to_string(b.quota - b.quota_used) + " left; " + window + "\n";
}

// A keyed bucket's quota (quota= with key=): each key's, and how many keys used theirs up.
std::string key_quota_line(const wire::BucketStatus& b, std::uint64_t now_ms) {
    std::string out =
        "  quota per key: " + std::to_string(b.key_quota) + " each; " +
        std::to_string(b.keys_used_up) + " key(s) used theirs up and " +
        (b.mode == Mode::Shadow ? "would be rejected (shadow mode)" : "are rejected") +
        " until the window ends at " + until(b.key_quota_reset_ms, now_ms) + "\n";
    if (b.keys_used_up > wire::kMaxInstructionKeys) {
        out += "  (only the " + std::to_string(wire::kMaxInstructionKeys) +
               " most used are sent to nginx: the others are held by rate= alone)\n";
    }
    return out;
}

// Why the instance drops what it drops: the verdict and the numbers behind it.
std::string verdict(const wire::BucketStatus& b, std::uint64_t now_ms) {
    if (b.quota && b.quota_used >= b.quota) return quota_line(b, now_ms);
    const std::string q = b.quota       ? quota_line(b, now_ms)
                          : b.key_quota ? key_quota_line(b, now_ms)
                                        : std::string();
    if (b.limit_mrps == kNoRateMrps) {
        return q + "  no rate limit (quota only): offered " + rate(b.offered_mrps) + "\n";
    }
    const std::string limit =
        rate(b.limit_mrps) + (b.keyed ? " per key" : "") + " (from " + b.limit_source + ")";
    if (b.keyed) {
        return q + "  keyed: each key is limited to " + limit + "; " +
               std::to_string(b.keys_limited) +
               " key(s) over it have a drop ratio; all keys "
               "together offer " +
               rate(b.offered_mrps) + "\n";
    }
    if (b.ratio_ppm == 0) {
        return q + "  not dropping: offered " + rate(b.offered_mrps) + " is within the limit " +
               limit + "\n";
    }
    std::string out = q;
    out += b.mode == Mode::Shadow
               ? "  WOULD DROP " + percent(b.ratio_ppm) + " (shadow mode, from " + b.mode_source +
                     ": every request is admitted, " + rate(b.shadow_dropped_mrps) +
                     " counted as would-drops)"
               : "  DROPPING " + percent(b.ratio_ppm) + " of requests";
    if (b.dropping_since_ms) out += " since " + since(b.dropping_since_ms, now_ms);
    out += "\n  offered " + rate(b.offered_mrps) + " exceeds the limit " + limit +
           ": each nginx drops a request with that probability; admitted " + rate(b.admitted_mrps) +
           "\n";
    return out;
}

std::string load(const wire::BucketStatus& b) {
    std::string out;
    if (!b.zone_load.empty()) {
        out += "  load by zone (this region):";
        for (const wire::ZoneLoad& z : b.zone_load) {
            out += " " + z.zone + " " + rate(z.offered_mrps) + " from " + std::to_string(z.hosts) +
                   " host(s);";
        }
        out.back() = '\n';
    }
    out += "  " + std::to_string(b.hosts) + " host(s) report it";
    if (!b.host_names.empty()) {
        out += ", of this region:";
        for (const std::string& h : b.host_names) out += " " + h;
    }
    return out + "\n";
}

std::string key_line(const wire::BucketStatus& b, const wire::AdminReply& keys,
                     const std::string& key) {
    std::size_t listed = 0;
    for (const wire::KeyStatus& k : keys.keys) {
        if (k.scope != b.scope || k.zone != b.zone || k.region != b.region) continue;
        ++listed;
        if (k.key.text != key) continue;
        if (b.key_quota) {
            const std::string use = "used " + std::to_string(k.key.used) + " of its quota of " +
                                    std::to_string(b.key_quota) + " in the window";
            if (k.key.used >= b.key_quota) {
                return "  key \"" + key + "\": " +
                       (b.mode == Mode::Shadow ? "WOULD BE REJECTED (shadow mode)" : "REJECTED") +
                       " until the window ends: " + use + "\n";
            }
            if (k.ratio_ppm == 0) {
                return "  key \"" + key + "\": " + use + ", " +
                       std::to_string(b.key_quota - k.key.used) + " left; offered " +
                       rate(k.key.offered_mrps) + ": not dropped\n";
            }
        }
        if (k.ratio_ppm == 0) {
            return "  key \"" + key + "\": offered " + rate(k.key.offered_mrps) +
                   ", within its limit " + rate(k.limit_mrps) + ": not dropped\n";
        }
        return "  key \"" + key + "\": DROPPING " + percent(k.ratio_ppm) + ": offered " +
               rate(k.key.offered_mrps) + " over its limit " + rate(k.limit_mrps) + " from " +
               std::to_string(k.key.hosts) + " host(s)\n";
    }
    if (b.key_quota) {
        return "  key \"" + key + "\": not among the " + std::to_string(listed) +
               " busiest or most used keys the controller holds for this instance: not dropped "
               "(a key gets a ratio only over its limit or its quota; hashed keys show no "
               "text)\n";
    }
    return "  key \"" + key + "\": not among the " + std::to_string(listed) +
           " busiest keys the controller holds for this instance: not dropped (a key gets a "
           "ratio only over its limit; hashed keys show no text)\n";
}

}  // namespace

std::string render_explain(const std::string& bucket, const wire::AdminReply& buckets,
                           const wire::AdminReply* keys, const std::string& key,
                           std::uint64_t now_ms) {
    if (buckets.buckets.empty()) {
        return "no host reports bucket \"" + bucket +
               "\": nothing is dropped by it (is it defined in nginx.conf, and do the hosts "
               "reach this controller? grlctl status)\n";
    }
    std::string out;
    for (const wire::BucketStatus& b : buckets.buckets) {
        out += instance(b) + "\n" + verdict(b, now_ms) + load(b);
        if (b.keyed && !key.empty() && keys) out += key_line(b, *keys, key);
    }
    // The controller cut its list of keys to fit one reply: a key not found may be left out.
    if (!key.empty() && keys && !keys->error.empty()) out += "  note: " + keys->error + "\n";
    return out;
}

}  // namespace grl::grlctl
