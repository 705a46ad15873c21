#include "limits_source.h"

#include <stdexcept>

#include "grl/daemon/log.h"
#include "clock.h"

namespace grl::controller {

using daemon::wall_ms;

void LimitsSource::start() {
    if (cfg_.limits_etcd) {
        start_etcd();
    } else if (!cfg_.limits_file.empty()) {
        daemon::LimitsLoad l = daemon::load_limits_file(cfg_.limits_file);
        if (!l.ok) throw std::runtime_error("limits file rejected: " + l.error);
        limits_id_ = limits_file_id();
        ctl_.set_limits(std::move(l.limits), now());
        limits_loaded_wall_ = wall_ms();
        if (cfg_.limits_poll_ms) loop_.every(cfg_.limits_poll_ms, [this] { watch_limits(); });
    }
}

wire::LimitsStatus LimitsSource::status() const {
    wire::LimitsStatus l;
    l.file = cfg_.limits_file;
    l.ok = limits_ok_;
    l.error = limits_error_;
    l.digest = ctl_.limits_digest();
    l.loaded_ms = limits_loaded_wall_;
    l.buckets = ctl_.limits().buckets.size();
    l.version = ctl_.limits().version;
    if (cfg_.limits_etcd && !etcd_up_) l.store_error = etcd_error_;
    return l;
}

LimitsSource::FileId LimitsSource::limits_file_id() const {
    struct stat st;
    FileId id;
    if (stat(cfg_.limits_file.c_str(), &st) == 0) {
        id = {st.st_dev, st.st_ino, st.st_size,
              static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    }
    return id;
}

void LimitsSource::watch_limits() {
    if (limits_file_id() == limits_id_) return;
    reload("file changed");
}

void LimitsSource::reload(const char* why) {
    if (cfg_.limits_file.empty()) {
        daemon::log_info(std::string(why) + ": no limits file configured");
        return;
    }
    if (cfg_.limits_etcd) {
        daemon::log_info(std::string(why) + ": the limits come from " + cfg_.limits_file +
                         ", watched: nothing to reload");
        return;
    }
    limits_id_ =
        limits_file_id();  // read before loading: a write during the load is seen next time
    take_limits(daemon::load_limits_file(cfg_.limits_file), why);
}

bool LimitsSource::take_limits(daemon::LimitsLoad l, const std::string& why) {
    const char* what = cfg_.limits_etcd ? "limits" : "limits file";
    if (!l.ok) {
        ++limits_reloads_rejected_;
        limits_ok_ = false;
        limits_error_ = l.error;
        daemon::log_error(std::string(what) + " rejected (" + why +
                          "), the last good limits stay in force: " + l.error);
        return false;
    }
    std::string old = ctl_.limits_digest();
    std::string old_version = ctl_.limits().version;
    ctl_.set_limits(std::move(l.limits), now());
    ++limits_reloads_ok_;
    limits_ok_ = true;
    limits_error_.clear();
    limits_loaded_wall_ = wall_ms();
    const std::string& version = ctl_.limits().version;
    daemon::log_info(std::string(what) + " loaded (" + why +
                     "): " + std::to_string(ctl_.limits().buckets.size()) + " buckets, digest " +
                     ctl_.limits_digest() + ", version " + (version.empty() ? "-" : version) +
                     (old == ctl_.limits_digest() && old_version == version ? " (unchanged)" : ""));
    return true;
}

// The key is read once here, synchronously: a value that does not parse is fatal (as a bad
// file is: there is no last good one). A missing key or an unreachable etcd is not: the
// controller starts with nginx.conf's limits (and overrides), says so, and the watch takes
// the key when it appears or etcd comes back. A region whose controllers cannot restart
// during an etcd outage would fail open entirely.
void LimitsSource::start_etcd() {
    const daemon::etcd::Url& url = *cfg_.limits_etcd;
    std::optional<daemon::etcd::RangeReply> r;
    try {
        r = daemon::etcd::Client(url, cfg_.etcd_access).get();
    } catch (const std::runtime_error& e) {
        etcd_error_ = e.what();
        ++etcd_losses_;
        daemon::log_warn(
            "limits: etcd unreachable at start, nginx.conf's limits apply until it answers "
            "(retrying): " +
            etcd_error_);
    }
    etcd_up_ = r.has_value();
    if (r && r->kv.exists) {
        daemon::LimitsLoad l = daemon::parse_limits(
            r->kv.value, url.text() + "@" + std::to_string(r->kv.mod_revision));
        if (!l.ok) throw std::runtime_error("limits rejected: " + l.error);
        ctl_.set_limits(std::move(l.limits), now());
        limits_loaded_wall_ = wall_ms();
        etcd_revision_ = r->kv.mod_revision;
    } else if (r) {
        etcd_revision_ = 0;
        daemon::log_warn("limits: no key " + url.key + " in etcd at " + url.host + ":" +
                         std::to_string(url.port) +
                         " yet: nginx.conf's limits apply until it is written");
    }
    etcd_ = std::make_unique<daemon::etcd::KeyWatch>(
        loop_, url, cfg_.etcd_access, r ? r->revision : 0,
        [this](const daemon::etcd::WatchEvent& e) { on_etcd(e); });
}

// Runs in the loop's thread (KeyWatch hands events over). One line when etcd is lost, one
// when it answers again; values already in force (a get after a reconnection) are skipped.
void LimitsSource::on_etcd(const daemon::etcd::WatchEvent& e) {
    const std::string& url = cfg_.limits_file;
    if (e.kind == daemon::etcd::WatchEvent::Kind::Lost) {
        if (etcd_up_) {
            ++etcd_losses_;
            daemon::log_warn("limits: " + url +
                             " unreachable, the last good limits stay in force (version " +
                             (ctl_.limits().version.empty() ? "-" : ctl_.limits().version) +
                             ", digest " + ctl_.limits_digest() + "): " + e.error);
        }
        etcd_up_ = false;
        etcd_error_ = e.error;
        return;
    }
    if (!etcd_up_) {
        etcd_up_ = true;
        etcd_error_.clear();
        daemon::log_info("limits: " + url + " reachable again");
    }
    if (e.kv.exists && e.kv.mod_revision == etcd_revision_) return;  // in force already
    if (!e.kv.exists) {
        if (etcd_revision_ > 0) {
            // A deleted key is more likely a mistake than an intent: keep the last good limits
            // (an empty value or "buckets: {}" clears them).
            daemon::log_warn("limits: key " + cfg_.limits_etcd->key +
                             " deleted in etcd: the last good limits stay in force");
            etcd_revision_ = 0;
        }
        return;
    }
    etcd_revision_ = e.kv.mod_revision;
    take_limits(daemon::parse_limits(e.kv.value, url + "@" + std::to_string(e.kv.mod_revision)),
                "etcd revision " + std::to_string(e.kv.mod_revision));
}

void LimitsSource::write_metrics(daemon::MetricsText& m) const {
    static const daemon::Family<LimitsSource> always[] = {
        {"grl_controller_limits_file_ok", "gauge",
         "0 when the last load of the limits file was rejected (the last good one is in force).",
         [](daemon::Samples& o, const LimitsSource& s) { o(s.limits_ok_ ? 1 : 0); }},
        {"grl_controller_limits_reloads_total", "counter",
         "Loads of the limits file after start-up, by result.",
         [](daemon::Samples& o, const LimitsSource& s) {
             o({{"result", "ok"}}, static_cast<double>(s.limits_reloads_ok_));
             o({{"result", "rejected"}}, static_cast<double>(s.limits_reloads_rejected_));
         }},
        {"grl_controller_limits_info", "gauge",
         "The limits in force: their version label (\"\" without one) and digest (always 1).",
         [](daemon::Samples& o, const LimitsSource& s) {
             o({{"version", s.ctl_.limits().version}, {"digest", s.ctl_.limits_digest()}}, 1);
         }},
    };
    static const daemon::Family<LimitsSource> etcd[] = {
        {"grl_controller_limits_store_up", "gauge",
         "1 while etcd (--limits etcd://...) answers; 0: the last good limits stay in force.",
         [](daemon::Samples& o, const LimitsSource& s) { o(s.etcd_up_ ? 1 : 0); }},
        {"grl_controller_limits_store_losses_total", "counter",
         "Times etcd became unreachable (at start included).",
         [](daemon::Samples& o, const LimitsSource& s) { o(static_cast<double>(s.etcd_losses_)); }},
    };
    daemon::write(m, always, *this);
    if (cfg_.limits_etcd) daemon::write(m, etcd, *this);
}

}  // namespace grl::controller
