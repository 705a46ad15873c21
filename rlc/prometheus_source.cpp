#include "prometheus_source.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "units.h"

namespace grl::rlc {

namespace {

// Prometheus refuses a range query of more than 11,000 points per series.
constexpr std::int64_t kMaxPoints = 10000;

std::string window(std::int32_t s) {
    return "[" + std::to_string(s) + "s]";
}

}  // namespace

std::string prom_query(PromField f, std::int32_t w, std::int32_t scrape_s,
                       const std::string& selector) {
    const std::string& sel = selector;
    std::string q;
    switch (f) {
        case PromField::OfferedMean:
            q = "avg_over_time(grl_bucket_offered_rps" + sel + window(w) + ")";
            break;
        case PromField::OfferedPeak:
            q = "max_over_time(grl_bucket_offered_rps" + sel + window(w) + ")";
            break;
        case PromField::AdmittedMean:
            q = "avg_over_time(grl_bucket_admitted_rps" + sel + window(w) + ")";
            break;
        case PromField::AdmittedPeak:
            q = "max_over_time(grl_bucket_admitted_rps" + sel + window(w) + ")";
            break;
        case PromField::DroppedPeak:
            // Dropped is offered - admitted (the controller exports no dropped rate); its
            // peak needs a subquery at the scrape resolution.
            q = "max_over_time((grl_bucket_offered_rps" + sel + " - grl_bucket_admitted_rps" + sel +
                ")[" + std::to_string(w) + "s:" + std::to_string(scrape_s) + "s])";
            break;
        case PromField::ShadowMean:
            q = "avg_over_time(grl_bucket_shadow_dropped_rps" + sel + window(w) + ")";
            break;
        case PromField::ShadowPeak:
            q = "max_over_time(grl_bucket_shadow_dropped_rps" + sel + window(w) + ")";
            break;
        case PromField::Limit:
            q = "last_over_time(grl_bucket_limit_rps" + sel + window(w) + ")";
            break;
        case PromField::Shadow:
            q = "last_over_time(grl_bucket_shadow" + sel + window(w) + ")";
            break;
        case PromField::Ratio: q = "avg_over_time(grl_bucket_ratio" + sel + window(w) + ")"; break;
        case PromField::Ticks:
            q = "count_over_time(grl_bucket_offered_rps" + sel + window(w) + ")";
            break;
        case PromField::CandidateLimit:
            q = "last_over_time(grl_bucket_candidate_limit_rps" + sel + window(w) + ")";
            break;
        case PromField::CandidateMean:
            q = "avg_over_time(grl_bucket_candidate_would_drop_rps" + sel + window(w) + ")";
            break;
        case PromField::CandidatePeak:
            q = "max_over_time(grl_bucket_candidate_would_drop_rps" + sel + window(w) + ")";
            break;
    }
    // The controller's region, for region and zone instances, from its info metric (always
    // 1, so the product is the left side's value).
    return q + " * on(instance, job) group_left(region) grl_controller_info";
}

std::string prom_selector(const std::vector<std::string>& buckets) {
    if (buckets.empty()) return "";
    // First the regex (metacharacters escaped: names match literally), then the regex as
    // the text of a PromQL string literal, whose own escape is the backslash too.
    std::string re;
    for (const std::string& b : buckets) {
        if (!re.empty()) re += '|';
        for (char c : b) {
            if (std::string_view("\\.+*?()|[]{}^$").find(c) != std::string_view::npos) re += '\\';
            re += c;
        }
    }
    std::string lit;
    for (char c : re) {
        if (c == '\\' || c == '"') lit += '\\';
        lit += c;
    }
    return "{bucket=~\"" + lit + "\"}";
}

std::vector<std::string> prom_label_values(std::string_view body, const std::string& what) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(body);
    } catch (const std::exception& e) {
        throw std::runtime_error(what + ": answer is not JSON: " + e.what());
    }
    if (j.value("status", "") != "success" || !j.contains("data") || !j["data"].is_array())
        throw std::runtime_error(what + ": " + j.value("errorType", "error") + ": " +
                                 j.value("error", body.size() > 200
                                                      ? std::string(body.substr(0, 200))
                                                      : std::string(body)));
    std::vector<std::string> out;
    for (const auto& v : j["data"]) {
        if (!v.is_string()) throw std::runtime_error(what + ": a label value is not a string");
        out.push_back(v.get<std::string>());
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

void PromAssembler::add(PromField f, std::string_view body, const std::string& what) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(body);
    } catch (const std::exception& e) {
        throw std::runtime_error(what + ": answer is not JSON: " + e.what());
    }
    if (j.value("status", "") != "success")
        throw std::runtime_error(what + ": " + j.value("errorType", "error") + ": " +
                                 j.value("error", body.size() > 200
                                                      ? std::string(body.substr(0, 200))
                                                      : std::string(body)));
    const auto& data = j.at("data");
    if (data.value("resultType", "") != "matrix")
        throw std::runtime_error(what + ": expected a matrix, got " +
                                 data.value("resultType", "?"));
    const int fi = static_cast<int>(f);
    for (const auto& series : data.at("result")) {
        const auto& m = series.at("metric");
        std::optional<Scope> scope = parse_scope(m.value("scope", ""));
        if (!scope || !m.contains("bucket")) continue;
        InstanceKey k;
        k.bucket = m.value("bucket", "");
        k.scope = *scope;
        if (*scope != Scope::Global) k.region = m.value("region", "");
        if (*scope == Scope::Zone) k.zone = m.value("zone", "");
        auto& by_ts = points_[k];
        for (const auto& pv : series.at("values")) {
            std::int64_t ts = static_cast<std::int64_t>(std::llround(pv.at(0).get<double>()));
            Parsed<double> v = parse_number(pv.at(1).get<std::string>());
            if (!v) continue;  // NaN: no data in that window
            Point& p = by_ts[ts];
            // A global instance comes through every controller: the first answer counts.
            if (p.has[fi]) continue;
            p.v[fi] = v.value;
            p.has[fi] = true;
        }
    }
}

std::vector<Series> PromAssembler::series() const {
    std::vector<Series> out;
    auto at = [](const Point& p, PromField f, double dflt) {
        int i = static_cast<int>(f);
        return p.has[i] ? p.v[i] : dflt;
    };
    for (const auto& [key, by_ts] : points_) {
        Series s;
        s.key = key;
        for (const auto& [ts, p] : by_ts) {
            if (!p.has[static_cast<int>(PromField::OfferedMean)]) continue;
            Sample x;
            x.start_s = ts - interval_s_;
            x.length_s = interval_s_;
            x.ticks = static_cast<std::int32_t>(at(p, PromField::Ticks, 1));
            x.offered.mean = at(p, PromField::OfferedMean, 0);
            x.offered.peak =
                std::max(x.offered.mean, at(p, PromField::OfferedPeak, x.offered.mean));
            x.admitted.mean = at(p, PromField::AdmittedMean, x.offered.mean);
            x.admitted.peak = at(p, PromField::AdmittedPeak, x.admitted.mean);
            x.dropped.mean = std::max(0.0, x.offered.mean - x.admitted.mean);
            x.dropped.peak = std::max(x.dropped.mean, at(p, PromField::DroppedPeak, 0));
            x.shadow_dropped.mean = at(p, PromField::ShadowMean, 0);
            x.shadow_dropped.peak =
                std::max(x.shadow_dropped.mean, at(p, PromField::ShadowPeak, 0));
            x.limit_rps = at(p, PromField::Limit, -1);
            x.mode = at(p, PromField::Shadow, 0) != 0 ? Mode::Shadow : Mode::Deny;
            x.ratio = at(p, PromField::Ratio, 0);
            x.candidate_limit_rps = at(p, PromField::CandidateLimit, -1);
            x.candidate_would_drop.mean = at(p, PromField::CandidateMean, 0);
            x.candidate_would_drop.peak =
                std::max(x.candidate_would_drop.mean, at(p, PromField::CandidatePeak, 0));
            s.samples.push_back(x);
        }
        if (!s.samples.empty()) out.push_back(std::move(s));
    }
    return out;
}

PrometheusSource::PrometheusSource(PrometheusOptions o) : opt_(std::move(o)) {
    std::string rest = opt_.url;
    if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    std::size_t colon = rest.rfind(':');
    try {
        if (colon == std::string::npos) throw std::invalid_argument("no port");
        port_ = std::stoi(rest.substr(colon + 1));
    } catch (const std::exception&) {
        throw std::runtime_error("Prometheus URL \"" + opt_.url +
                                 "\": expected http://HOST:PORT (https is not supported)");
    }
    host_ = rest.substr(0, colon);
    if (opt_.interval_s < 1) throw std::runtime_error("Prometheus source: interval must be >= 1 s");
}

std::vector<std::string> PrometheusSource::buckets(std::int64_t since_s, std::int64_t until_s) {
    httplib::Client http(host_, port_);
    http.set_connection_timeout(std::chrono::milliseconds(opt_.timeout_ms));
    http.set_read_timeout(std::chrono::milliseconds(opt_.timeout_ms));
    // Windows end up to interval_s after their start: ask up to then. GET only (a POST is
    // 405 for this endpoint).
    const std::string query =
        "/api/v1/label/bucket/values?match%5B%5D=grl_bucket_offered_rps"
        "&start=" +
        std::to_string(since_s) + "&end=" + std::to_string(until_s + opt_.interval_s);
    const std::string what = opt_.url + " label values of bucket";
    httplib::Result res = http.Get(query);
    if (!res)
        throw std::runtime_error(what + ": no answer (" + httplib::to_string(res.error()) + ")");
    if (res->status != 200 && res->status != 400 && res->status != 422)
        throw std::runtime_error(what + ": HTTP status " + std::to_string(res->status));
    return prom_label_values(res->body, what);
}

std::vector<Series> PrometheusSource::read(std::int64_t since_s, std::int64_t until_s,
                                           const std::vector<std::string>& buckets) {
    const std::int64_t w = opt_.interval_s;
    const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    // Window ends T, multiples of w: its start T - w in [since, until), and T not after now
    // (a window still open has no final figures).
    std::int64_t first_start = (since_s + w - 1) / w * w;
    std::int64_t last_end = std::min((until_s - 1) / w * w + w, now / w * w);
    PromAssembler acc(opt_.interval_s);
    if (buckets.empty() || last_end < first_start + w) return acc.series();

    const std::string selector = prom_selector(buckets);
    httplib::Client http(host_, port_);
    http.set_connection_timeout(std::chrono::milliseconds(opt_.timeout_ms));
    http.set_read_timeout(std::chrono::milliseconds(opt_.timeout_ms));
    for (std::int64_t from = first_start + w; from <= last_end; from += kMaxPoints * w) {
        std::int64_t to = std::min(last_end, from + (kMaxPoints - 1) * w);
        for (int fi = 0; fi < kPromFields; ++fi) {
            PromField f = static_cast<PromField>(fi);
            httplib::Params params{
                {"query", prom_query(f, opt_.interval_s, opt_.scrape_s, selector)},
                {"start", std::to_string(from)},
                {"end", std::to_string(to)},
                {"step", std::to_string(w)}};
            const std::string what = opt_.url + " query_range " + params.find("query")->second;
            httplib::Result res = http.Post("/api/v1/query_range", params);
            if (!res)
                throw std::runtime_error(what + ": no answer (" + httplib::to_string(res.error()) +
                                         ")");
            if (res->status != 200 && res->status != 400 && res->status != 422)
                throw std::runtime_error(what + ": HTTP status " + std::to_string(res->status));
            acc.add(f, res->body, what);
        }
    }
    return acc.series();
}

}  // namespace grl::rlc
