#include "whatif.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "cycle.h"
#include "grl/daemon/json.h"
#include "policy.h"

namespace grl::rlc {

namespace {

std::string fmt(double v, int digits = 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

std::string pct(double f) {
    return fmt(f * 100, 3) + "%";
}

std::string lim(const std::optional<std::uint64_t>& m) {
    return m ? format_limit(*m) : "-";
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '&': out += "&amp;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

nlohmann::ordered_json replay_json(const std::optional<Replay>& r) {
    using daemon::json_number;
    if (!r) return nullptr;
    return {{"drop_fraction", json_number(r->drop_fraction)},
            {"would_drop_requests", json_number(r->would_drop)},
            {"offered_requests", json_number(r->offered)},
            {"minutes_over", json_number(r->minutes_over)},
            // a limit of 0: any request is an infinite overshoot (json_number: null)
            {"worst_overshoot", json_number(r->worst_overshoot)},
            {"worst_rps", json_number(r->worst_rps)},
            {"worst_at", r->worst_at_s ? format_utc(r->worst_at_s) : ""},
            {"worst_instance", r->worst_instance}};
}

std::string summary(const std::optional<Replay>& r) {
    if (!r) return "-";
    return pct(r->drop_fraction);
}

// One chart: the busiest instance's peak (and mean) offered rate per time step, at most
// kChartSteps steps, against the old (grey, dashed) and the new (red) limit.
std::string chart(const WhatIfRow& r, std::int64_t since_s, std::int64_t until_s) {
    constexpr int kW = 900, kH = 220, kPad = 40;
    constexpr std::size_t kBins = kChartSteps;
    const std::vector<double>& peak = r.chart_peak;
    const std::vector<double>& mean = r.chart_mean;
    double ymax = 1;
    for (double v : peak) ymax = std::max(ymax, v);
    for (const auto& m : {r.old_mrps, r.new_mrps})
        if (m) ymax = std::max(ymax, static_cast<double>(*m) / 1000);
    ymax *= 1.1;
    auto x = [&](std::size_t b) { return kPad + static_cast<double>(b) * (kW - 2 * kPad) / kBins; };
    auto y = [&](double v) { return kH - kPad / 2.0 - v / ymax * (kH - kPad); };
    auto line = [&](const std::vector<double>& v) {
        std::string pts;
        for (std::size_t b = 0; b < v.size(); ++b)
            if (v[b] >= 0) pts += fmt(x(b), 1) + "," + fmt(y(v[b]), 1) + " ";
        return pts;
    };
    std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(kW) +
                      "\" height=\"" + std::to_string(kH) + "\" role=\"img\">\n";
    svg += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(kW) + "\" height=\"" +
           std::to_string(kH) + "\" fill=\"#fff\" stroke=\"#ccc\"/>\n";
    svg += "<text x=\"4\" y=\"12\" font-size=\"11\">" + fmt(ymax / 1.1) + " r/s</text>\n";
    svg += "<text x=\"" + std::to_string(kPad) + "\" y=\"" + std::to_string(kH - 4) +
           "\" font-size=\"11\">" + format_utc(since_s) + "</text>\n";
    svg += "<text x=\"" + std::to_string(kW - kPad - 130) + "\" y=\"" + std::to_string(kH - 4) +
           "\" font-size=\"11\">" + format_utc(until_s) + "</text>\n";
    svg += "<polyline fill=\"none\" stroke=\"#9ecae1\" stroke-width=\"1\" points=\"" + line(mean) +
           "\"/>\n";
    svg += "<polyline fill=\"none\" stroke=\"#08519c\" stroke-width=\"1\" points=\"" + line(peak) +
           "\"/>\n";
    auto hline = [&](std::uint64_t mrps, const char* color, const char* dash, const char* label) {
        double yy = y(static_cast<double>(mrps) / 1000);
        return "<line x1=\"" + std::to_string(kPad) + "\" x2=\"" + std::to_string(kW - kPad) +
               "\" y1=\"" + fmt(yy) + "\" y2=\"" + fmt(yy) + "\" stroke=\"" + color +
               "\" stroke-dasharray=\"" + dash + "\" stroke-width=\"1.5\"/>\n<text x=\"" +
               std::to_string(kW - kPad + 2) + "\" y=\"" + fmt(yy + 4) +
               "\" font-size=\"10\" fill=\"" + color + "\">" + label + "</text>\n";
    };
    if (r.old_mrps) svg += hline(*r.old_mrps, "#666", "6,4", "old");
    if (r.new_mrps) svg += hline(*r.new_mrps, "#d62728", "none", "new");
    svg += "</svg>\n";
    return svg;
}

}  // namespace

Replay replay(const std::vector<const Series*>& instances, std::uint64_t limit_mrps,
              std::int64_t since_s, std::int64_t until_s) {
    Replay r;
    const double limit = static_cast<double>(limit_mrps) / 1000;
    std::map<std::int64_t, std::int32_t> over;  // interval start -> length, any instance over
    for (const Series* s : instances) {
        for (const Sample& smp : s->samples) {
            if (smp.ticks <= 0 || smp.start_s < since_s || smp.start_s >= until_s) continue;
            double len = smp.length_s;
            r.offered += smp.offered.mean * len;
            r.would_drop += std::max(0.0, smp.offered.mean - limit) * len;
            if (smp.offered.peak > limit) {
                auto& l = over[smp.start_s];
                l = std::max(l, smp.length_s);
                double o = limit > 0 ? (smp.offered.peak - limit) / limit : INFINITY;
                if (o > r.worst_overshoot) {
                    r.worst_overshoot = o;
                    r.worst_rps = smp.offered.peak;
                    r.worst_at_s = smp.start_s;
                    r.worst_instance = describe(s->key);
                }
            }
        }
    }
    r.drop_fraction = r.offered > 0 ? r.would_drop / r.offered : 0;
    for (const auto& [_, len] : over) r.minutes_over += len / 60.0;
    return r;
}

namespace {

// Appends a row per bucket of `history` (one slice or all of it), in name order.
void add_rows(WhatIf& w, const std::vector<Series>& history, const control::Limits& current,
              const control::Limits& proposed) {
    const std::int64_t since_s = w.since_s, until_s = w.until_s;
    std::map<std::string, std::vector<const Series*>> by_bucket;
    for (const auto& s : history) by_bucket[s.key.bucket].push_back(&s);
    const double span = static_cast<double>(std::max<std::int64_t>(1, until_s - since_s));
    for (const auto& [name, instances] : by_bucket) {
        WhatIfRow row;
        row.bucket = name;
        row.scope = instances.front()->key.scope;
        row.old_mrps = current_limit(name, instances, current).limit_mrps;
        row.new_mrps = row.old_mrps;
        auto p = proposed.buckets.find(name);
        if (p != proposed.buckets.end() && p->second.limit_mrps)
            row.new_mrps = p->second.limit_mrps;
        if (row.old_mrps) row.old_replay = replay(instances, *row.old_mrps, since_s, until_s);
        if (row.new_mrps) row.new_replay = replay(instances, *row.new_mrps, since_s, until_s);
        row.chart_peak.assign(kChartSteps, -1);
        row.chart_mean.assign(kChartSteps, -1);
        for (const Series* s : instances) {
            for (const Sample& smp : s->samples) {
                if (smp.ticks <= 0 || smp.start_s < since_s || smp.start_s >= until_s) continue;
                auto b = static_cast<std::size_t>(static_cast<double>(smp.start_s - since_s) /
                                                  span * kChartSteps);
                b = std::min<std::size_t>(b, kChartSteps - 1);
                row.chart_peak[b] = std::max(row.chart_peak[b], smp.offered.peak);
                row.chart_mean[b] = std::max(row.chart_mean[b], smp.offered.mean);
            }
        }
        w.rows.push_back(std::move(row));
    }
}

}  // namespace

WhatIf what_if(const std::vector<Series>& history, const control::Limits& current,
               const control::Limits& proposed, std::int64_t since_s, std::int64_t until_s) {
    WhatIf w;
    w.since_s = since_s;
    w.until_s = until_s;
    add_rows(w, history, current, proposed);
    return w;
}

WhatIf what_if(HistorySource& history, const control::Limits& current,
               const control::Limits& proposed, std::int64_t since_s, std::int64_t until_s,
               std::size_t slice) {
    WhatIf w;
    w.since_s = since_s;
    w.until_s = until_s;
    // Slices in name order, each's rows in name order: the rows come out as from one read.
    for (const auto& part : slices(history.buckets(since_s, until_s), slice))
        add_rows(w, history.read(since_s, until_s, part), current, proposed);
    return w;
}

std::string render_whatif_table(const WhatIf& w) {
    std::vector<std::vector<std::string>> t = {
        {"BUCKET", "SCOPE", "OLD", "NEW", "DROP(OLD)", "DROP(NEW)", "MIN-OVER(NEW)", "WORST(NEW)"}};
    for (const auto& r : w.rows) {
        std::string worst = "-";
        if (r.new_replay && r.new_replay->worst_at_s) {
            worst = std::isinf(r.new_replay->worst_overshoot)
                        ? std::string("limit 0")
                        : "+" + fmt(r.new_replay->worst_overshoot * 100) + "%";
            worst +=
                " (" + fmt(r.new_replay->worst_rps) + " r/s at " +
                format_utc(r.new_replay->worst_at_s) +
                (r.new_replay->worst_instance == "global" ? ""
                                                          : ", " + r.new_replay->worst_instance) +
                ")";
        }
        t.push_back({r.bucket, r.scope ? std::string(to_string(*r.scope)) : "-", lim(r.old_mrps),
                     lim(r.new_mrps), summary(r.old_replay), summary(r.new_replay),
                     r.new_replay ? fmt(r.new_replay->minutes_over) : "-", worst});
    }
    std::vector<std::size_t> wd(t[0].size(), 0);
    for (const auto& row : t)
        for (std::size_t i = 0; i < row.size(); ++i) wd[i] = std::max(wd[i], row[i].size());
    std::string out =
        "what-if over " + format_utc(w.since_s) + " .. " + format_utc(w.until_s) + "\n";
    for (const auto& row : t) {
        std::string line;
        for (std::size_t i = 0; i < row.size(); ++i)
            line +=
                i + 1 < row.size() ? row[i] + std::string(wd[i] + 2 - row[i].size(), ' ') : row[i];
        out += line + "\n";
    }
    if (w.rows.empty()) out += "(no history in the window)\n";
    return out;
}

std::string render_whatif_json(const WhatIf& w) {
    using Json = nlohmann::ordered_json;
    auto limit = [](const std::optional<std::uint64_t>& m) {
        return m ? Json(format_limit(*m)) : Json();
    };
    Json buckets = Json::array();
    for (const auto& r : w.rows) {
        buckets.push_back({{"bucket", r.bucket},
                           {"scope", r.scope ? std::string(to_string(*r.scope)) : ""},
                           {"old_limit", limit(r.old_mrps)},
                           {"new_limit", limit(r.new_mrps)},
                           {"old", replay_json(r.old_replay)},
                           {"new", replay_json(r.new_replay)}});
    }
    Json j{{"since", format_utc(w.since_s)}, {"until", format_utc(w.until_s)}};
    j["buckets"] = std::move(buckets);
    return daemon::json_text(j) + "\n";
}

std::string render_whatif_html(const WhatIf& w) {
    std::string h =
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>grl-rlc what-if</title>\n"
        "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px "
        "8px;text-align:right}td:first-child{text-align:left}"
        "h2{font-size:1.1em;margin-top:1.5em}</style></head><body>\n";
    h += "<h1>grl-rlc what-if</h1>\n<p>History " + format_utc(w.since_s) + " .. " +
         format_utc(w.until_s) +
         ". Blue: peak offered rate per step (light: mean), busiest instance; grey dashed: old "
         "limit; red: new "
         "limit. Would-drop fraction: volume above the limit (means) over the offered volume; "
         "minutes over: "
         "intervals whose peak exceeded the limit (docs/rlc.md).</p>\n";
    h += "<table><tr><th>bucket</th><th>scope</th><th>old</th><th>new</th><th>drop "
         "(old)</th><th>drop "
         "(new)</th><th>minutes over (new)</th><th>worst overshoot (new)</th></tr>\n";
    for (const auto& r : w.rows) {
        std::string worst = r.new_replay && r.new_replay->worst_at_s
                                ? (std::isinf(r.new_replay->worst_overshoot)
                                       ? std::string("limit 0")
                                       : "+" + fmt(r.new_replay->worst_overshoot * 100) + "%")
                                : "-";
        h += "<tr><td><a href=\"#" + html_escape(r.bucket) + "\">" + html_escape(r.bucket) +
             "</a></td><td>" + (r.scope ? std::string(to_string(*r.scope)) : "-") + "</td><td>" +
             lim(r.old_mrps) + "</td><td>" + lim(r.new_mrps) + "</td><td>" + summary(r.old_replay) +
             "</td><td>" + summary(r.new_replay) + "</td><td>" +
             (r.new_replay ? fmt(r.new_replay->minutes_over) : "-") + "</td><td>" + worst +
             "</td></tr>\n";
    }
    h += "</table>\n";
    for (const auto& r : w.rows) {
        h += "<h2 id=\"" + html_escape(r.bucket) + "\">" + html_escape(r.bucket) + ": " +
             lim(r.old_mrps) + " &rarr; " + lim(r.new_mrps) + "</h2>\n" +
             chart(r, w.since_s, w.until_s);
    }
    h += "</body></html>\n";
    return h;
}

}  // namespace grl::rlc
