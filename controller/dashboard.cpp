#include "dashboard.h"

#include <cmath>
#include <cstdio>

#include "grl/daemon/json.h"
#include "grl/daemon/loop.h"
#include "status_json.h"

namespace grl::controller {

namespace {

// The page keeps asking for the history while it is open (after a gap, or a missed point);
// nobody has asked for this long: stop rendering it.
constexpr std::uint64_t kHistoryWatchedMs = 60000;

float rps(std::uint64_t mrps) {
    return static_cast<float>(static_cast<double>(mrps) / 1000.0);
}

void key_fields(daemon::Json& j, const control::InstanceKey& k) {
    j.key("bucket").str(k.bucket).key("scope").str(to_string(k.scope)).key("zone").str(k.zone);
}

std::string match_text(const wire::RuntimeMatch& m) {
    auto kind = [](MatchKind k) {
        return k == MatchKind::Prefix ? "_prefix" : k == MatchKind::Regex ? "_regex" : "";
    };
    std::string s;
    if (!m.caller.empty()) s += std::string("caller") + kind(m.caller_kind) + "=" + m.caller;
    if (!m.procedure.empty()) {
        if (!s.empty()) s += " ";
        s += std::string("procedure") + kind(m.procedure_kind) + "=" + m.procedure;
    }
    return s;
}

// Arrays of floats are most of /api/history: written directly, 7 significant digits (a
// float's), null where absent.
void float_array(std::string& out, const std::vector<control::HistoryPoint>& points,
                 float control::HistoryPoint::*field) {
    out += '[';
    char buf[32];
    for (std::size_t i = 0; i < points.size(); ++i) {
        if (i) out += ',';
        const float v = points[i].*field;
        if (std::isfinite(v)) {
            std::snprintf(buf, sizeof(buf), "%.7g", static_cast<double>(v));
            out += buf;
        } else {
            out += "null";
        }
    }
    out += ']';
}

std::string quoted(std::string_view s) {
    daemon::Json j;
    j.str(s);
    return j.text();
}

void write_optional(daemon::Json& j, std::optional<double> v) {
    if (v) {
        j.num(*v);
    } else {
        j.null();
    }
}

void write_accuracy(daemon::Json& j, const std::optional<control::AccuracyResult>& a,
                    const DashboardSnapshot& s) {
    const control::AccuracyResult r = a.value_or(control::AccuracyResult{});
    j.begin_object();
    j.key("held");
    write_optional(j, r.held);
    j.key("settle_s");
    write_optional(j, r.settle_seconds);
    j.key("settling_s");
    std::optional<double> settling;
    if (r.settling_since_ms)
        settling = static_cast<double>(s.mono_ms - *r.settling_since_ms) / 1000;
    write_optional(j, settling);
    j.end_object();
}

std::shared_ptr<const std::string> text(std::string s) {
    return std::make_shared<const std::string>(std::move(s));
}

}  // namespace

std::vector<std::pair<control::InstanceKey, control::HistoryPoint>> history_points(
    const DashboardSnapshot& s) {
    std::vector<std::pair<control::InstanceKey, control::HistoryPoint>> out;
    out.reserve(s.buckets.size());
    for (const wire::BucketStatus& b : s.buckets) {
        control::HistoryPoint p;
        p.offered_rps = rps(b.offered_mrps);
        p.admitted_rps = rps(b.admitted_mrps);
        p.limit_rps = rps(b.limit_mrps);
        p.ratio = static_cast<float>(b.ratio_ppm / 1e6);
        p.shadow_dropped_rps = rps(b.shadow_dropped_mrps);
        out.emplace_back(control::InstanceKey{b.name, b.scope, "", b.zone}, p);
    }
    return out;
}

std::string render_state(
    const DashboardSnapshot& s, const control::History& h,
    const std::vector<std::pair<control::InstanceKey, control::HistoryPoint>>& last_point) {
    daemon::Json j;
    j.begin_object();
    j.key("controller").str(s.controller).key("region").str(s.region);
    j.key("time_ms").uint(s.wall_ms);
    j.key("interval_ms").uint(s.interval_ms).key("ttl_ms").uint(s.ttl_ms);
    j.key("hosts").begin_object();
    j.key("fresh").uint(s.hosts_fresh).key("stale").uint(s.hosts_stale);
    j.end_object();
    j.key("instruction_age_ms");
    if (s.instruction_age_ms) {
        j.uint(*s.instruction_age_ms);
    } else {
        j.null();
    }
    j.key("held_regions").uint(s.held_regions);
    j.key("zones").begin_array();
    for (const wire::ZoneStatus& z : s.zones) write_zone_status(j, z);
    j.end_array();
    j.key("peers").begin_array();
    for (const wire::PeerStatus& p : s.peers) {
        j.begin_object();
        j.key("controller").str(p.source).key("region").str(p.region).key("age_ms").uint(p.age_ms);
        j.key("fresh").boolean(p.fresh);
        j.key("same_limits").boolean(p.limits_digest == s.limits.digest);
        j.end_object();
    }
    j.end_array();
    j.key("limits").begin_object();
    j.key("source").str(s.limits.file).key("ok").boolean(s.limits.ok);
    j.key("error").str(s.limits.error).key("version").str(s.limits.version);
    j.key("digest").str(s.limits.digest).key("loaded_ms").uint(s.limits.loaded_ms);
    j.key("buckets").uint(s.limits.buckets).key("store_error").str(s.limits.store_error);
    j.end_object();
    j.key("buckets").begin_array();
    for (const wire::BucketStatus& b : s.buckets) write_bucket_status(j, b);
    j.end_array();
    j.key("accuracy").begin_array();  // as buckets: how well each held its limit
    for (const std::optional<control::AccuracyResult>& a : s.accuracy) write_accuracy(j, a, s);
    j.end_array();
    j.key("overrides").begin_array();
    for (const wire::Override& o : s.overrides) {
        j.begin_object();
        j.key("bucket").str(o.name).key("runtime").boolean(o.has_match);
        j.key("limit_rps");
        if (o.limit_mrps) {
            j.num(*o.limit_mrps / 1000.0);
        } else {
            j.null();
        }
        j.key("mode");
        if (o.mode) {
            j.str(to_string(*o.mode));
        } else {
            j.null();
        }
        if (o.has_match) {
            j.key("match").str(match_text(o.match)).key("scope").str(to_string(o.match.scope));
        }
        j.key("expires_ms").uint(o.expires_ms).key("set_ms").uint(o.set_ms);
        j.key("origin").str(o.origin);
        j.end_object();
    }
    j.end_array();
    j.key("history").begin_object();
    j.key("recorded").uint(h.recorded()).key("points").uint(h.points());
    j.key("capacity").uint(h.capacity()).key("series").uint(h.series());
    j.key("series_refused").uint(h.series_refused()).key("max_bytes").uint(h.max_bytes());
    const std::vector<std::uint64_t> times = h.times();
    j.key("last_ms").uint(times.empty() ? 0 : times.back());
    j.key("last").begin_array();
    for (const auto& [key, p] : last_point) {
        j.begin_object();
        key_fields(j, key);
        j.key("offered").num(p.offered_rps).key("admitted").num(p.admitted_rps);
        j.key("limit").num(p.limit_rps).key("ratio").num(p.ratio);
        j.key("shadow_dropped").num(p.shadow_dropped_rps);
        j.end_object();
    }
    j.end_array();
    j.end_object();
    j.end_object();
    return j.text();
}

std::string render_history(const control::History& h) {
    std::string out = "{\"recorded\":" + std::to_string(h.recorded()) + ",\"times\":[";
    const std::vector<std::uint64_t> times = h.times();
    for (std::size_t i = 0; i < times.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(times[i]);
    }
    out += "],\"series\":[";
    bool first = true;
    for (const control::History::Series& s : h.all()) {
        if (!first) out += ',';
        first = false;
        out += "{\"bucket\":" + quoted(s.key->bucket) +
               ",\"scope\":" + quoted(to_string(s.key->scope)) + ",\"zone\":" + quoted(s.key->zone);
        using P = control::HistoryPoint;
        const std::pair<const char*, float P::*> fields[] = {
            {"offered", &P::offered_rps},
            {"admitted", &P::admitted_rps},
            {"limit", &P::limit_rps},
            {"ratio", &P::ratio},
            {"shadow_dropped", &P::shadow_dropped_rps}};
        for (const auto& [name, field] : fields) {
            out += ",\"";
            out += name;
            out += "\":";
            float_array(out, s.points, field);
        }
        out += '}';
    }
    out += "]}";
    return out;
}

Dashboard::Dashboard(control::History::Options o)
    : step_ms_(o.step_ms), history_(o), max_bytes_(history_.max_bytes()) {
    thread_ = std::thread([this] { run(); });
}

Dashboard::~Dashboard() {
    {
        std::lock_guard<std::mutex> l(mu_);
        stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
}

bool Dashboard::point_due(std::uint64_t mono_ms) const {
    return snapshots_ == 0 || mono_ms + step_ms_ / 10 >= last_point_mono_ + step_ms_;
}

bool Dashboard::wants_snapshot(std::uint64_t mono_ms) const {
    if (state_wanted_ != 0 && mono_ms < state_wanted_ + kStateWatchedMs) return true;
    return point_due(mono_ms);
}

void Dashboard::publish(DashboardSnapshot s) {
    // A step from the last point, not from the last snapshot: while /api/state is read, most
    // snapshots are not points, and the point due after the reads stop was skipped.
    if (point_due(s.mono_ms)) last_point_mono_ = s.mono_ms;
    ++snapshots_;
    const bool watched = state_wanted_ != 0 && s.mono_ms < state_wanted_ + kStateWatchedMs;
    {
        std::lock_guard<std::mutex> l(mu_);
        if (pending_) ++skipped_;
        pending_ = std::move(s);
        pending_watched_ = watched;
    }
    cv_.notify_one();
}

void Dashboard::run() {
    std::vector<std::pair<control::InstanceKey, control::HistoryPoint>> last_point;
    bool history_current = false;  // history_json_ holds the newest point
    // The newest snapshot, kept unrendered while nobody reads /api/state.
    std::optional<DashboardSnapshot> held;
    for (;;) {
        std::optional<DashboardSnapshot> snap;
        bool asked = false;          // the page asked for a history not rendered: render it now
        bool state_watched = false;  // the snapshot's tick saw /api/state read recently
        bool state_asked = false;    // /api/state was read while none was rendered
        {
            std::unique_lock<std::mutex> l(mu_);
            cv_.wait(l, [this] {
                return stop_ || pending_.has_value() || history_asked_ || state_asked_;
            });
            if (stop_) return;
            snap = std::move(pending_);
            pending_.reset();
            state_watched = pending_watched_;
            asked = history_asked_;
            history_asked_ = false;
            state_asked = state_asked_;
            state_asked_ = false;
        }
        std::shared_ptr<const std::string> state;
        bool state_dropped = false;  // state_ is older than the newest snapshot
        bool took = false;
        if (snap) {
            auto points = history_points(*snap);
            took = history_.record(snap->mono_ms, snap->wall_ms, points);
            if (took) last_point = std::move(points);
            series_refused_.store(history_.series_refused());
            held = std::move(snap);
            state_dropped = true;
        }
        // Rendered only for a reader: at 10,000 instances a render costs more than a tick.
        if (held && (state_watched || state_asked)) {
            state = text(render_state(*held, history_, last_point));
            held.reset();
        }
        std::shared_ptr<const std::string> hist;
        const std::uint64_t wanted = history_wanted_.load();
        const bool watched = wanted != 0 && daemon::mono_ms() < wanted + kHistoryWatchedMs;
        if (asked || (watched && (took || !history_current))) {
            hist = text(render_history(history_));
            history_current = true;
        } else if (took) {
            history_current = false;
        }
        std::lock_guard<std::mutex> l(mu_);
        if (state) {
            state_ = std::move(state);
        } else if (state_dropped) {
            state_.reset();  // never serve a state older than the newest snapshot
        }
        if (hist) {
            history_json_ = std::move(hist);
        } else if (!history_current) {
            history_json_.reset();  // never serve a history that misses points
        }
    }
}

std::optional<daemon::HttpResponse> Dashboard::route(const daemon::RequestHead& h) {
    static const std::string kNoStore = "Cache-Control: no-store\r\n";
    const std::string path = h.path == "/dashboard" ? "/" : h.path;
    // The files, copied once into shared bodies.
    static const std::vector<std::pair<const DashboardAsset*, std::shared_ptr<const std::string>>>
        files = [] {
            std::vector<std::pair<const DashboardAsset*, std::shared_ptr<const std::string>>> f;
            for (const DashboardAsset& a : dashboard_assets()) f.emplace_back(&a, text(a.body));
            return f;
        }();
    for (const auto& [a, b] : files) {
        if (path == a->path) {
            daemon::HttpResponse r;
            r.type = a->type;
            r.body = b;
            r.headers = kNoStore;
            return r;
        }
    }
    std::shared_ptr<const std::string> body;
    if (path == "/api/state") {
        state_wanted_ = daemon::mono_ms();
        std::lock_guard<std::mutex> l(mu_);
        body = state_;
        if (!body) {
            state_asked_ = true;  // the newest snapshot rendered at once, not at the next tick
            cv_.notify_one();
        }
    } else if (path == "/api/history") {
        history_wanted_.store(daemon::mono_ms());
        std::lock_guard<std::mutex> l(mu_);
        body = history_json_;
        if (!body) {
            history_asked_ = true;  // rendered at once, not at the next tick
            cv_.notify_one();
        }
    } else {
        return std::nullopt;
    }
    daemon::HttpResponse r;
    if (!body) {
        // Before the first tick, or the state or the history was not rendered while nobody
        // read it: the dashboard's thread renders it now.
        r.status = 503;
        r.body = text("not ready yet: retry in a second\n");
        r.headers = "Retry-After: 1\r\n" + kNoStore;
        return r;
    }
    r.type = "application/json";
    r.body = std::move(body);
    r.headers = kNoStore;
    return r;
}

}  // namespace grl::controller
