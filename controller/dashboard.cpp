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

std::string json_string(std::string_view s) {
    return daemon::json_text(s);
}

using Json = nlohmann::ordered_json;
using daemon::json_number;

Json peers_json(const DashboardSnapshot& s) {
    Json out = Json::array();
    for (const wire::PeerStatus& p : s.peers) {
        out.push_back({{"controller", p.source},
                       {"region", p.region},
                       {"age_ms", p.age_ms},
                       {"fresh", p.fresh},
                       {"same_limits", p.limits_digest == s.limits.digest}});
    }
    return out;
}

Json limits_json(const wire::LimitsStatus& l) {
    return Json{{"source", l.file},     {"ok", l.ok},
                {"error", l.error},     {"version", l.version},
                {"digest", l.digest},   {"loaded_ms", l.loaded_ms},
                {"buckets", l.buckets}, {"store_error", l.store_error}};
}

Json overrides_json(const std::vector<wire::Override>& overrides) {
    Json out = Json::array();
    for (const wire::Override& o : overrides) {
        Json j{{"bucket", o.name}, {"runtime", o.has_match}};
        j["limit_rps"] = o.limit_mrps ? json_number(*o.limit_mrps / 1000.0) : Json();
        j["mode"] = o.mode ? Json(to_string(*o.mode)) : Json();
        if (o.has_match) {
            j["match"] = match_text(o.match);
            j["scope"] = to_string(o.match.scope);
        }
        j["expires_ms"] = o.expires_ms;
        j["set_ms"] = o.set_ms;
        j["origin"] = o.origin;
        out.push_back(std::move(j));
    }
    return out;
}

Json history_json(
    const control::History& h,
    const std::vector<std::pair<control::InstanceKey, control::HistoryPoint>>& last_point) {
    const std::vector<std::uint64_t> times = h.times();
    Json j{{"recorded", h.recorded()},
           {"points", h.points()},
           {"capacity", h.capacity()},
           {"series", h.series()},
           {"series_refused", h.series_refused()},
           {"max_bytes", h.max_bytes()},
           {"last_ms", times.empty() ? 0 : times.back()}};
    Json last = Json::array();
    for (const auto& [key, p] : last_point) {
        last.push_back({{"bucket", key.bucket},
                        {"scope", to_string(key.scope)},
                        {"zone", key.zone},
                        {"offered", json_number(p.offered_rps)},
                        {"admitted", json_number(p.admitted_rps)},
                        {"limit", json_number(p.limit_rps)},
                        {"ratio", json_number(p.ratio)},
                        {"shadow_dropped", json_number(p.shadow_dropped_rps)}});
    }
    j["last"] = std::move(last);
    return j;
}

Json optional_number(std::optional<double> v) {
    return v ? json_number(*v) : Json();
}

Json accuracy_json(const std::optional<control::AccuracyResult>& a, const DashboardSnapshot& s) {
    const control::AccuracyResult r = a.value_or(control::AccuracyResult{});
    std::optional<double> settling;
    if (r.settling_since_ms)
        settling = static_cast<double>(s.mono_ms - *r.settling_since_ms) / 1000;
    return Json{{"held", optional_number(r.held)},
                {"settle_s", optional_number(r.settle_seconds)},
                {"settling_s", optional_number(settling)}};
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
    Json j{{"controller", s.controller},
           {"region", s.region},
           {"time_ms", s.wall_ms},
           {"interval_ms", s.interval_ms},
           {"ttl_ms", s.ttl_ms},
           {"hosts", {{"fresh", s.hosts_fresh}, {"stale", s.hosts_stale}}}};
    j["instruction_age_ms"] = s.instruction_age_ms ? Json(*s.instruction_age_ms) : Json();
    j["held_regions"] = s.held_regions;
    Json zones = Json::array();
    for (const wire::ZoneStatus& z : s.zones) zones.push_back(zone_status_json(z));
    j["zones"] = std::move(zones);
    j["peers"] = peers_json(s);
    j["limits"] = limits_json(s.limits);
    Json buckets = Json::array();
    for (const wire::BucketStatus& b : s.buckets) buckets.push_back(bucket_status_json(b));
    j["buckets"] = std::move(buckets);
    Json accuracy = Json::array();  // as buckets: how well each held its limit
    for (const std::optional<control::AccuracyResult>& a : s.accuracy)
        accuracy.push_back(accuracy_json(a, s));
    j["accuracy"] = std::move(accuracy);
    j["overrides"] = overrides_json(s.overrides);
    j["history"] = history_json(h, last_point);
    return daemon::json_text(j);
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
        out += "{\"bucket\":" + json_string(s.key->bucket) +
               ",\"scope\":" + json_string(to_string(s.key->scope)) +
               ",\"zone\":" + json_string(s.key->zone);
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
