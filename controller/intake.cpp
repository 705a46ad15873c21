#include "controller_daemon.h"

#include <malloc.h>

#include <string>

#include "grl/control/batch_budget.h"
#include "grl/wire/usage_reader.h"
#include "clock.h"

namespace grl::controller {

using daemon::LogLevel;
using daemon::mono_ms;

namespace {

// Hands the memory of dropped usage sets back to the system (glibc keeps freed memory in its
// arenas otherwise): rare, after a set expired or was dropped as too large.
void release_memory() {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

}  // namespace

void Daemon::on_usage() {
    std::string error;
    BatchBudget batch(kMaxPerWakeup, batch_budget_ms(cfg_.opts.interval_ms));
    batch.start(mono_ms());
    while (batch.more(mono_ms())) {
        std::size_t n = net_.usage_limit_->recv_frames(frames_, 1);
        if (n == 0) return;
        const control::Clock t = now();
        if (n != 1 || !intake_.read_zone(frames_[0].view(), error)) {
            ++stats_.malformed[kZoneUsage];
            malformed_log_.hit(LogLevel::Warn, {},
                               "dropped malformed zone usage: " +
                                   (n != 1 ? std::string("more than one frame") : error),
                               t.mono_ms);
            continue;
        }
        ++stats_.received[kZoneUsage];
        const wire::ZoneUsage& zone_usage = intake_.zone();
        ++usage_versions_[{"zone_usage", zone_usage.v}];
        if (net_.curve_ && zone_key_refused(zone_usage, t)) continue;
        const std::uint64_t v = zone_usage.v;
        const std::string zone = zone_usage.zone, source = zone_usage.source,
                          region = zone_usage.region;
        const std::uint64_t quotas_refused = ctl_.quotas().refused().total();
        const control::UsageIntake::Taken taken = intake_.take_zone(t, &why_);
        log_quota_refusals(quotas_refused, t);
        if (!assembled(taken, "zone_usage", t)) continue;
        const control::Accepted a = taken.accepted;
        const bool new_rates = taken.early.new_rates;
        const Change change = taken.early.change;
        const bool early = new_rates || change != Change::None;
        if (a == control::Accepted::Yes) {
            note_usage_version(zone_usage_v_, zone, "zone " + zone + " (" + source + ")",
                               "zone usage", v);
        }
        if (a == control::Accepted::Yes && early) tick_early(new_rates, change, t);
        if (a != control::Accepted::Yes) zone_usage_refused(a, source, region, t);
    }
    count_cut(batch, net_.pull_, kZoneUsage);
}

// Quota entries a usage brought that the ledger refused (counted there by reason): one line,
// rate-limited, naming the last one.
void Daemon::log_quota_refusals(std::uint64_t before, const control::Clock& t) {
    const std::uint64_t now = ctl_.quotas().refused().total();
    if (now == before) return;
    quota_log_.hit(
        LogLevel::Warn, {},
        ctl_.quotas().last_refused() +
            (now - before > 1 ? " (" + std::to_string(now - before - 1) + " more in that message)"
                              : std::string()),
        t.mono_ms);
}

// CURVE: a collector's key may speak for one zone only.
bool Daemon::zone_key_refused(const wire::ZoneUsage& zone_usage, const control::Clock& t) {
    const std::string key = frames_[0].meta("User-Id");
    CurveKeyBindings::Result b = net_.zone_keys_.check(key, zone_usage.zone, t.mono_ms);
    if (b == CurveKeyBindings::Result::Ok) return false;
    ++ignored_[std::string("zone_usage/") + std::string(to_string(b))];
    ignored_log_.hit(
        LogLevel::Warn, {},
        "zone usage for zone " + zone_usage.zone + " from key " + key +
            " ignored: " + std::string(to_string(b)) +
            (b == CurveKeyBindings::Result::NotListed
                 ? " (removed from --curve-clients by a reload; its "
                   "connection predates it)"
                 : " (the key sends for zone \"" + net_.zone_keys_.name_of(key) + "\")"),
        t.mono_ms);
    return true;
}

void Daemon::tick_early(bool new_rates, Change change, const control::Clock& t) {
    // First rates of a bucket (after a start or a restart), or a bucket's rate well
    // above or below its last (a step, a surge, its end): publish now, not at the
    // next tick. Rate-limited to four extra ticks per interval, and to a 40th of the
    // time (a tick of a large fleet is long: EarlyTick).
    const bool was_deferring = early_tick_.deferring();
    if (early_tick_.due(t.mono_ms, tick_last_us_)) {
        if (was_deferring) {
            daemon::log_info("early ticks again: the last tick took " +
                             std::to_string(tick_last_us_ / 1000) + " ms");
        }
        ++stats_.early_ticks[new_rates ? kNewRates : change == Change::Rise ? kRise : kFall];
        tick();
    } else if (early_tick_.deferring() && !was_deferring) {
        daemon::log_warn("early ticks deferred: the last tick took " +
                         std::to_string(tick_last_us_ / 1000) +
                         " ms, and early ticks may take at most a 40th of the time "
                         "(new rates and changes wait for the next tick)");
    }
}

void Daemon::zone_usage_refused(control::Accepted a, const std::string& source,
                                const std::string& region, const control::Clock& t) {
    ++ignored_[std::string("zone_usage/").append(to_string(a))];
    log_refusal(a, t);
    if (a == control::Accepted::WrongRegion) {
        ignored_log_.hit(LogLevel::Warn, {},
                         "zone usage from " + source + " for region " + region +
                             " ignored: this controller serves " + cfg_.opts.region,
                         t.mono_ms);
    }
}

// A batch stopped at its time budget with messages still queued: messages come faster than
// they are handled (a flood). The rest waits in the queue (at most 64 per connection) while
// the loop ticks and serves /metrics and its other sockets.
void Daemon::count_cut(const BatchBudget& b, ::zmq::socket_ref s, Kind kind) {
    if (!b.cut() || !daemon::readable(s)) return;
    ++stats_.batches_cut[kind];
    batch_log_.hit(LogLevel::Warn, {},
                   std::string(kKinds[kind]) +
                       " arrives faster than it is handled: a batch stopped after " +
                       std::to_string(b.max_ms()) + " ms (" + std::to_string(b.taken()) +
                       " messages) so that the tick is not delayed; each connection queues at "
                       "most 64 here, then its sender waits or drops",
                   mono_ms());
}

void Daemon::on_peers(Peer& p) {
    std::string error;
    BatchBudget batch(kMaxPerWakeup, batch_budget_ms(cfg_.opts.interval_ms));
    batch.start(mono_ms());
    while (batch.more(mono_ms())) {
        std::size_t n = zmq::recv_frames(p.sock.handle(), frames_, 2);
        if (n == 0) return;
        control::Clock t = now();
        bool ok = n == 2 && frames_[0].view() == wire::kPeerTopic;
        if (!ok) error = "expected two frames, topic \"grl/p/\" and body";
        if (ok) ok = intake_.read_region(frames_[1].view(), error);
        if (!ok) {
            ++stats_.malformed[kRegionUsage];
            malformed_log_.hit(LogLevel::Warn, {}, "dropped malformed region usage: " + error,
                               t.mono_ms);
            continue;
        }
        ++stats_.received[kRegionUsage];
        const wire::RegionUsage& region_usage = intake_.region();
        ++usage_versions_[{"region_usage", region_usage.v}];
        // A connection speaks for one controller: a message naming another (a peer speaking
        // for someone else), or naming a controller another connection speaks for, is
        // refused whole, overrides included.
        CurveKeyBindings::Result b =
            net_.peer_sources_.check(p.endpoint, region_usage.source, t.mono_ms);
        if (b != CurveKeyBindings::Result::Ok) {
            ++ignored_[std::string("region_usage/") + std::string(to_string(b))];
            std::string why;
            switch (b) {
                case CurveKeyBindings::Result::KeyTaken:
                    why = "that connection speaks for \"" + net_.peer_sources_.name_of(p.endpoint) +
                          "\"";
                    break;
                case CurveKeyBindings::Result::NameTaken:
                    why = region_usage.source + " speaks on another connection";
                    break;
                default: why = "--max-peers connections bound"; break;
            }
            ignored_log_.hit(LogLevel::Warn, {},
                             "region usage from " + region_usage.source + " (region " +
                                 region_usage.region + ") on the connection to " + p.endpoint +
                                 " ignored: " + std::string(to_string(b)) + " (" + why + ")",
                             t.mono_ms);
            continue;
        }
        const std::uint64_t refused_before = ctl_.overrides_rejected();
        const std::uint64_t quotas_refused = ctl_.quotas().refused().total();
        const std::uint64_t v = region_usage.v;
        const std::string source = region_usage.source, region = region_usage.region;
        const control::UsageIntake::Taken taken = intake_.take_region(t, &why_);
        log_quota_refusals(quotas_refused, t);
        if (!assembled(taken, "region_usage", t)) continue;
        const control::Accepted a = taken.accepted;
        if (a == control::Accepted::Yes) {
            note_usage_version(peer_usage_v_, source, "peer " + source + " (region " + region + ")",
                               "region usage", v);
        } else {
            ++ignored_[std::string("region_usage/").append(to_string(a))];
        }
        log_refusal(a, t);
        if (ctl_.overrides_rejected() != refused_before) {
            overrides_log_.hit(LogLevel::Warn, {}, why_, t.mono_ms);
        }
    }
    count_cut(batch, p.sock, kRegionUsage);
}

// One line when a zone or peer starts sending usage of an older protocol version, and when it
// sends the current one again; and when the last sender of an older version is gone (a rolling
// upgrade's end, docs/operations.md "Upgrading").
void Daemon::note_usage_version(std::map<std::string, std::uint64_t>& last, const std::string& key,
                                const std::string& who, const char* what, std::uint64_t v) {
    auto [it, added] = last.try_emplace(key, v);
    if (!added && it->second == v) return;
    const std::uint64_t before = added ? wire::kUsageVersion : it->second;
    it->second = v;
    if (v < wire::kUsageVersion) {
        daemon::log_warn(who + " sends " + what + " of protocol version " + std::to_string(v) +
                         " (its sender is older, or runs with --usage-version " +
                         std::to_string(v) + "): read as such until it sends version " +
                         std::to_string(wire::kUsageVersion));
        return;
    }
    if (before == v) return;
    daemon::log_info(who + " sends " + what + " of protocol version " + std::to_string(v) +
                     " again (was " + std::to_string(before) + ")");
    log_if_no_older_usage();
}

void Daemon::log_if_no_older_usage() const {
    auto older = [](const std::map<std::string, std::uint64_t>& m) {
        for (const auto& [k, kv] : m) {
            if (kv < wire::kUsageVersion) return true;
        }
        return false;
    };
    if (!older(zone_usage_v_) && !older(peer_usage_v_)) {
        daemon::log_info("no zone or peer sends usage of a protocol version older than " +
                         std::to_string(wire::kUsageVersion) +
                         " any more: --usage-version 1 may go from collectors and controllers");
    }
}

// The versions of zones and peers the controller has forgotten (silent for its forget
// interval) go with them: a zone retired while it still sent version 1 must not hold back
// the line that says the upgrade is done, nor stay in memory for ever.
void Daemon::forget_usage_versions() {
    bool older_gone = false;
    auto prune = [&](std::map<std::string, std::uint64_t>& m, auto&& known) {
        for (auto it = m.begin(); it != m.end();) {
            if (known(it->first)) {
                ++it;
                continue;
            }
            older_gone = older_gone || it->second < wire::kUsageVersion;
            it = m.erase(it);
        }
    };
    prune(zone_usage_v_, [&](const std::string& zone) { return ctl_.knows_zone(zone); });
    prune(peer_usage_v_, [&](const std::string& source) { return ctl_.knows_peer(source); });
    if (older_gone) log_if_no_older_usage();
}

// Refused messages are counted in /metrics; their log lines are rate-limited per reason, so
// that a flood of one kind neither floods the log nor hides another kind.
void Daemon::log_refusal(control::Accepted a, const control::Clock& t) {
    switch (a) {
        case control::Accepted::Future: future_log_.hit(LogLevel::Warn, {}, why_, t.mono_ms); break;
        case control::Accepted::TooManyHosts:
            hosts_log_.hit(LogLevel::Warn, {}, why_, t.mono_ms);
            break;
        case control::Accepted::Full:
        case control::Accepted::TooManyBuckets:
            full_log_.hit(LogLevel::Warn, {}, why_, t.mono_ms);
            break;
        default: break;
    }
}

// A usage message that is one part of several is held until its set is complete; the whole
// usage then goes on as if it had come in one message. Counted per result; what cannot be
// assembled is logged, rate-limited.
bool Daemon::assembled(const control::UsageIntake::Taken& taken, const char* kind,
                       const control::Clock& t) {
    const wire::PartResult r = taken.part;
    if (r == wire::PartResult::Whole) return true;
    ++parts_[std::string(kind) + "/" + std::string(to_string(r))];
    if (r == wire::PartResult::TooLarge) release_memory();
    if (r == wire::PartResult::Inconsistent || r == wire::PartResult::Stale ||
        r == wire::PartResult::Full || r == wire::PartResult::TooLarge) {
        parts_log_.hit(LogLevel::Warn, {}, std::string(kind) + " parts: " + why_, t.mono_ms);
    }
    return taken.taken();
}

// An incomplete set older than --stale-intervals x --interval will not complete (the sender
// sends its parts back to back): the source's last whole usage stays in force until it goes
// stale.
void Daemon::expire_parts(const control::Clock& t) {
    const auto [z, p] = intake_.expire(t.mono_ms);
    if (z + p > 0) {
        release_memory();
        incomplete_log_.hit(LogLevel::Warn, {},
                            "usage in parts dropped incomplete after " +
                                std::to_string(parts_timeout_ms()) + " ms: " + std::to_string(z) +
                                " zone usage, " + std::to_string(p) + " region usage",
                            t.mono_ms);
    }
}

}  // namespace grl::controller
