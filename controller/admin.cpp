#include "controller_daemon.h"

#include <cstdio>
#include <string>

#include "grl/control/batch_budget.h"
#include "clock.h"

namespace grl::controller {

using daemon::LogLevel;
using daemon::mono_ms;
using daemon::wall_ms;

namespace {

// An admin change in words, for the audit line.
std::string describe(const wire::AdminRequest& q) {
    std::string s = std::string(to_string(q.op));
    if (q.limit_mrps) {
        char rate[48];
        std::snprintf(rate, sizeof(rate), " limit %g r/s",
                      static_cast<double>(*q.limit_mrps) / 1000);
        s += rate;
    }
    if (q.mode) s += " mode " + std::string(to_string(*q.mode));
    if (q.op == wire::AdminOp::Clear) {
        s += q.clear_limit && !q.clear_mode   ? " limit"
             : q.clear_mode && !q.clear_limit ? " mode"
                                              : "";
    }
    if (q.for_ms) s += " for " + std::to_string(q.for_ms / 1000) + "s";
    if (q.has_match) {
        s += " match caller " + (q.match.caller.empty() ? std::string("*") : q.match.caller) +
             " procedure " + (q.match.procedure.empty() ? std::string("*") : q.match.procedure);
    }
    return s;
}

}  // namespace

void Daemon::on_admin() {
    std::string error;
    BatchBudget batch(kMaxPerWakeup, batch_budget_ms(cfg_.opts.interval_ms));
    batch.start(mono_ms());
    while (batch.more(mono_ms())) {
        std::size_t n = net_.admin_limit_->recv_frames(frames_, 3);
        if (n == 0) return;
        // REQ clients send [identity, "", body]; DEALER clients [identity, body].
        std::size_t body = n == 3 && frames_[1].view().empty() ? 2 : 1;
        if (n < 2 || n > 3 || (n == 3 && body != 2)) {
            ++stats_.malformed[kAdminRequest];
            continue;  // no reply possible for a message we cannot frame
        }
        std::string identity(frames_[0].view());
        // Who asked, for the audit line of every change: the CURVE key, else the address.
        std::string key = frames_[body].meta("User-Id");
        std::string addr = frames_[body].meta("Peer-Address");
        std::string who = key.empty() ? (addr.empty() ? "an unknown peer" : addr)
                                      : "key " + key + (addr.empty() ? "" : " from " + addr);
        wire::AdminRequest q;
        wire::AdminReply r;
        if (net_.curve_ && !key.empty() && cfg_.admin_clients.count(key) == 0) {
            // ZAP admitted the key at the handshake; a reload has removed it since.
            ++ignored_["admin_request/key_not_listed"];
            ignored_log_.hit(LogLevel::Warn, {},
                             "admin request from " + who +
                                 " refused: key_not_listed (removed from --curve-admin-clients "
                                 "by a reload; its connection predates it)",
                             mono_ms());
            r.ok = false;
            r.error = "key not listed in --curve-admin-clients (removed by a reload)";
        } else if (!wire::decode(frames_[body].view(), q, error)) {
            ++stats_.malformed[kAdminRequest];
            r.ok = false;
            r.error = "malformed request: " + error;
        } else {
            ++stats_.received[kAdminRequest];
            ++stats_.admin_requests[kAllRequests];
            r = handle(q, who);
            r.seq = q.seq;
        }
        r.ts_ms = wall_ms();
        r.source = cfg_.opts.name;
        r.region = cfg_.opts.region;
        r.interval_ms = cfg_.opts.interval_ms;
        r.ttl_ms = cfg_.opts.ttl_ms;
        wire::encode(r, buf_);
        if (buf_.size() > wire::kMaxMessageBytes) {
            for (auto& b : r.buckets) b.host_names.clear();
            r.error = "host names left out: the reply would exceed " +
                      std::to_string(wire::kMaxMessageBytes) + " bytes";
            wire::encode(r, buf_);
        }
        // grlctl keys over many instances (--top up to 1024 each): the first instances' keys.
        while (buf_.size() > wire::kMaxMessageBytes && r.keys.size() > 1) {
            r.keys.resize(r.keys.size() / 2);
            r.error = "keys cut to " + std::to_string(r.keys.size()) + ": the reply would exceed " +
                      std::to_string(wire::kMaxMessageBytes) + " bytes (ask with a smaller --top)";
            wire::encode(r, buf_);
        }
        std::vector<std::string_view> out = {identity};
        if (body == 2) out.emplace_back();
        out.emplace_back(buf_);
        if (!daemon::send_frames(net_.admin_, out)) ++stats_.messages_dropped;
    }
    count_cut(batch, net_.admin_, kAdminRequest);
}

wire::AdminReply Daemon::handle(const wire::AdminRequest& q, const std::string& who) {
    wire::AdminReply r;
    control::Clock t = now();
    std::string err;
    bool change = false;
    switch (q.op) {
        case wire::AdminOp::Status:
            r.zones = ctl_.zones(t);
            r.peers = ctl_.peers(t);
            r.limits = limits_.status();
            return r;
        case wire::AdminOp::Buckets: r.buckets = ctl_.status(q.bucket, q.hosts); return r;
        case wire::AdminOp::Set:
            err = ctl_.set_override(q.bucket, q.limit_mrps, q.mode, q.for_ms, t);
            change = true;
            break;
        case wire::AdminOp::Clear:
            err = ctl_.clear_override(q.bucket, q.clear_limit, q.clear_mode, t);
            change = true;
            break;
        case wire::AdminOp::Add:
            if (!q.limit_mrps) {
                err = "a run-time bucket needs a limit";
            } else {
                err = ctl_.add_runtime(q.bucket, q.match, *q.limit_mrps, q.mode, q.for_ms, t);
            }
            change = true;
            break;
        case wire::AdminOp::Remove:
            err = ctl_.remove_runtime(q.bucket, t);
            change = true;
            break;
        case wire::AdminOp::Keys:
            err = ctl_.keys(q.bucket, q.top, r.keys, t.wall_ms);
            if (err.empty()) return r;
            break;
    }
    if (!err.empty()) {
        r.ok = false;
        r.error = err;
        daemon::log(LogLevel::Info, q.bucket,
                    "admin " + std::string(to_string(q.op)) + " by " + who + " refused: " + err);
        return r;
    }
    if (change) {
        ++stats_.admin_requests[kChanges];
        daemon::log(LogLevel::Info, q.bucket, "admin " + describe(q) + " by " + who);
        state_.save(t.mono_ms);  // durable before the operator hears "done"
        admin_tick();
    }
    r.buckets = ctl_.status(q.bucket, false);
    // An override of a name no host reports is kept (the bucket may be deployed later), but a
    // typo must not pass for done: say so in the reply's note.
    if (q.op == wire::AdminOp::Set && r.buckets.empty()) {
        r.error = "no host reports bucket \"" + q.bucket +
                  "\": the override waits until one does (a typo? see grlctl buckets)";
    }
    return r;
}

// Publish at once: a new run-time bucket or limit reaches nginx now, not at the next tick
// (the extra sample in the smoothing window is of the same usage). A change within the
// minimum gap of the previous admin tick waits for the gap's end (maybe_admin_tick), so a
// flood of admin requests cannot make the controller tick (and publish) per request.
void Daemon::admin_tick() {
    const std::uint64_t gap =
        std::max<std::uint64_t>(cfg_.opts.interval_ms / kAdminTickGapDivisor, 1);
    const std::uint64_t t = mono_ms();
    if (last_admin_tick_ != 0 && t < last_admin_tick_ + gap) {
        if (!admin_tick_pending_) ++stats_.admin_ticks_deferred;
        admin_tick_pending_ = true;
        return;
    }
    last_admin_tick_ = t;
    tick();
}

}  // namespace grl::controller
