// Reads of the state after the last tick: status, keys, zones and peers (admin and dashboard).
#include "grl/control/control.h"

#include <algorithm>
#include <unordered_set>
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

const Instance* Controller::find_instance(std::string_view bucket, Scope scope,
                                          std::string_view zone) const {
    auto it = instances_.find(InstanceKeyRef{bucket, scope, "", zone});
    return it == instances_.end() ? nullptr : &it->second;
}

std::vector<wire::BucketStatus> Controller::status(const std::string& filter,
                                                   bool with_hosts) const {
    std::vector<wire::BucketStatus> out;
    // Every instance for the dashboard's snapshot: grown one at a time, 10,000 entries of ~400
    // bytes were moved 14 times (29% of the copy's instructions, grl_tick_bench).
    if (filter.empty()) out.reserve(instances_.size());
    for (const auto& [key, inst] : instances_) {
        if (!filter.empty() && inst.bucket != filter) continue;
        wire::BucketStatus s;
        s.name = inst.bucket;
        s.scope = inst.scope;
        s.region = inst.scope == Scope::Global ? "" : opt_.region;
        s.zone = inst.zone;
        s.offered_mrps = round_mrps(inst.offered_mrps);
        s.admitted_mrps = round_mrps(inst.admitted_mrps);
        s.shadow_dropped_mrps = round_mrps(inst.shadow_dropped_mrps);
        s.limit_mrps = inst.limit_mrps;
        s.ratio_ppm = inst.ratio_ppm;
        s.candidate_limit_mrps = inst.candidate_mrps;
        s.candidate_would_drop_mrps = round_mrps(inst.candidate_would_drop_mrps);
        s.mode = inst.mode;
        s.limit_source = to_string(inst.limit_source);
        s.mode_source = to_string(inst.mode_source);
        s.expires_ms = inst.expires_ms;
        s.hosts = inst.hosts;
        s.definitions = inst.definitions;
        s.has_match = inst.runtime;
        s.match = inst.match;
        s.keyed = inst.keyed;
        s.keys_limited = inst.keys.limited();
        s.dropping_since_ms = inst.dropping_since_ms;
        s.quota = inst.quota;
        s.quota_used = inst.quota_used;
        s.quota_reset_ms = inst.quota_reset_ms;
        s.key_quota = inst.key_quota;
        s.key_quota_reset_ms = inst.key_quota_reset_ms;
        s.keys_used_up = inst.used_up_keys.size();
        if (with_hosts) {
            for (const std::string_view zname : inst.own_zones_all ? tick_zones_ : inst.own_zones) {
                auto z = zones_.find(std::string(zname));
                if (z == zones_.end()) continue;
                const wire::ZoneUsage& u = z->second.usage;
                const std::vector<std::string>* names = &u.host_names;
                for (const wire::UsageBucket& b : u.buckets) {
                    if (b.name != inst.bucket) continue;
                    if (!b.host_names.empty()) names = &b.host_names;
                    s.zone_load.push_back({u.zone, b.offered_mrps, b.hosts});
                }
                for (const std::string& h : *names) {
                    if (s.host_names.size() < wire::kMaxHostNames) s.host_names.push_back(h);
                }
            }
            std::sort(s.host_names.begin(), s.host_names.end());
        }
        out.push_back(std::move(s));
    }
    return out;
}

std::string Controller::keys(const std::string& bucket, std::uint32_t top,
                             std::vector<wire::KeyStatus>& out, std::uint64_t wall_ms) const {
    out.clear();
    if (top == 0) top = wire::kDefaultAdminTopKeys;
    bool found = false, keyed = false;
    for (auto it = instances_.lower_bound(InstanceKeyRef{bucket, Scope::Global, "", ""});
         it != instances_.end() && it->second.bucket == bucket; ++it) {
        const Instance& inst = it->second;
        found = true;
        if (!inst.keyed) continue;
        keyed = true;
        const std::size_t from = out.size();
        for (const KeyState* k : inst.keys.busiest(top)) {
            if (out.size() == wire::kMaxStatusEntries) break;  // the reply's array bound
            wire::KeyStatus ks = key_status_of(inst);
            ks.ratio_ppm = k->ratio_ppm;
            ks.key.hash = k->hash;
            ks.key.text = k->text;
            ks.key.offered_mrps = round_mrps(k->offered_mrps);
            // The last sum's drops beside a smoothed offered rate: shown at most offered.
            ks.key.dropped_mrps = std::min(k->dropped_mrps, ks.key.offered_mrps);
            ks.key.hosts = k->hosts;
            if (inst.key_quota) {
                ks.key.used = quotas_.key_used(it->first, k->hash, wall_ms);
                if (ks.key.used >= inst.key_quota) ks.ratio_ppm = kPpmOne;  // as published
            }
            out.push_back(std::move(ks));
        }
        if (inst.key_quota) most_used_keys(it->first, inst, top, wall_ms, from, out);
    }
    if (!found) return "no host reports bucket \"" + bucket + "\"";
    if (!keyed) return "bucket \"" + bucket + "\" is not keyed (no key= in its definition)";
    return {};
}

// A key status's instance fields.
wire::KeyStatus Controller::key_status_of(const Instance& inst) const {
    wire::KeyStatus ks;
    ks.name = inst.bucket;
    ks.scope = inst.scope;
    ks.region = inst.scope == Scope::Global ? "" : opt_.region;
    ks.zone = inst.zone;
    ks.limit_mrps = inst.limit_mrps;
    return ks;
}

// A keyed quota instance's keys of the most use in the window that the rates did not list
// (a key used up is rejected: ratio 1).
void Controller::most_used_keys(const InstanceKey& key, const Instance& inst, std::uint32_t top,
                                std::uint64_t wall_ms, std::size_t from,
                                std::vector<wire::KeyStatus>& out) const {
    std::unordered_set<std::uint64_t> listed;  // this instance's keys listed for their rates
    for (std::size_t i = from; i < out.size(); ++i) listed.insert(out[i].key.hash);
    for (const QuotaLedger::KeyAnswer& k : quotas_.most_used(key, wall_ms, top)) {
        if (out.size() == wire::kMaxStatusEntries) break;
        if (listed.count(k.hash) != 0) continue;
        wire::KeyStatus ks = key_status_of(inst);
        ks.ratio_ppm = k.used >= inst.key_quota ? kPpmOne : 0;
        ks.key.hash = k.hash;
        ks.key.text = k.text;
        ks.key.used = k.used;
        out.push_back(std::move(ks));
    }
}

std::vector<wire::ZoneStatus> Controller::zones(const Clock& now) const {
    std::vector<wire::ZoneStatus> out;
    for (const auto& [name, z] : zones_) {
        wire::ZoneStatus s;
        s.zone = name;
        s.source = z.usage.source;
        s.hosts = z.usage.hosts;
        s.stale_hosts = z.usage.stale_hosts;
        s.age_ms = now.mono_ms > z.recv_mono ? now.mono_ms - z.recv_mono : 0;
        s.fresh = zone_fresh(z, now);
        s.usage_v = z.usage.v;
        out.push_back(std::move(s));
    }
    return out;
}

std::vector<wire::PeerStatus> Controller::peers(const Clock& now) const {
    std::vector<wire::PeerStatus> out;
    for (const auto& [name, p] : peers_) {
        wire::PeerStatus s;
        s.source = name;
        s.region = p.usage.region;
        s.age_ms = now.mono_ms > p.recv_mono ? now.mono_ms - p.recv_mono : 0;
        s.limits_digest = p.usage.limits_digest;
        s.fresh = peer_fresh(p, now);
        s.usage_v = p.usage.v;
        out.push_back(std::move(s));
    }
    return out;
}

}  // namespace grl::control
