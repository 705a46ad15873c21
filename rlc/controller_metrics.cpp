#include "controller_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "units.h"

namespace grl::rlc {

namespace {

using Labels = std::map<std::string, std::string, std::less<>>;

// `name{a="x",b="y"} value` (labels optional; an optional timestamp after the value is
// ignored). false on anything else.
bool parse_line(std::string_view line, std::string& name, Labels& labels, double& value) {
    std::size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    name.assign(line.substr(0, i));
    labels.clear();
    if (name.empty()) return false;
    if (i < line.size() && line[i] == '{') {
        ++i;
        while (i < line.size() && line[i] != '}') {
            std::size_t eq = line.find('=', i);
            if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
                return false;
            std::string key(line.substr(i, eq - i));
            std::string val;
            std::size_t j = eq + 2;
            for (; j < line.size() && line[j] != '"'; ++j) {
                if (line[j] == '\\' && j + 1 < line.size()) {
                    ++j;
                    val += line[j] == 'n' ? '\n' : line[j];
                } else {
                    val += line[j];
                }
            }
            if (j >= line.size()) return false;
            labels[key] = std::move(val);
            i = j + 1;
            if (i < line.size() && line[i] == ',') ++i;
        }
        if (i >= line.size()) return false;
        ++i;  // '}'
    }
    while (i < line.size() && line[i] == ' ') ++i;
    std::string_view rest = line.substr(i);
    std::string_view num = rest.substr(0, rest.find(' '));
    if (num == "NaN" || num == "+Inf" || num == "-Inf") {
        value = std::numeric_limits<double>::quiet_NaN();  // valid text, no usable value
        return true;
    }
    Parsed<double> v = parse_number(num);
    if (!v) return false;
    value = v.value;
    return true;
}

struct Fields {
    std::optional<double> offered, admitted, shadow_dropped, limit, ratio, shadow;
};

}  // namespace

Parsed<ControllerScrape> parse_controller_metrics(std::string_view text,
                                                  const std::string& source) {
    Parsed<ControllerScrape> out;
    ControllerScrape& s = out.value;
    s.report.source = source;
    // (bucket, scope, zone) -> fields, in the order of first appearance.
    std::map<std::tuple<std::string, std::string, std::string>, Fields> inst;
    std::string name;
    Labels labels;
    double value = 0;
    std::size_t line_no = 0, pos = 0;
    while (pos < text.size()) {
        std::size_t nl = text.find('\n', pos);
        std::string_view line =
            text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
        ++line_no;
        if (line.empty() || line[0] == '#') continue;
        if (!parse_line(line, name, labels, value)) {
            out.error = source + " /metrics line " + std::to_string(line_no) +
                        ": not Prometheus text: \"" + std::string(line.substr(0, 80)) + "\"";
            return out;
        }
        if (std::isnan(value)) continue;
        if (name == "grl_controller_info") {
            s.region = labels["region"];
            s.name = labels["name"];
            continue;
        }
        if (name == "grl_controller_instructions_published_total") {
            s.report.has_tick_marker = true;
            s.report.tick_marker = value;
            continue;
        }
        if (name.rfind("grl_bucket_", 0) != 0) continue;
        auto b = labels.find("bucket");
        auto sc = labels.find("scope");
        if (b == labels.end() || sc == labels.end()) continue;
        Fields& f = inst[{b->second, sc->second, labels["zone"]}];
        if (name == "grl_bucket_offered_rps")
            f.offered = value;
        else if (name == "grl_bucket_admitted_rps")
            f.admitted = value;
        else if (name == "grl_bucket_shadow_dropped_rps")
            f.shadow_dropped = value;
        else if (name == "grl_bucket_limit_rps")
            f.limit = value;
        else if (name == "grl_bucket_ratio")
            f.ratio = value;
        else if (name == "grl_bucket_shadow")
            f.shadow = value;
    }
    for (const auto& [id, f] : inst) {
        const auto& [bucket, scope_s, zone] = id;
        std::optional<Scope> scope = parse_scope(scope_s);
        if (!scope || !f.offered || !f.admitted) continue;
        Observation o;
        o.key.bucket = bucket;
        o.key.scope = *scope;
        if (*scope != Scope::Global) {
            if (s.region.empty()) {
                ++s.skipped_no_region;
                continue;
            }
            o.key.region = s.region;
        }
        if (*scope == Scope::Zone) o.key.zone = zone;
        o.offered = *f.offered;
        o.admitted = *f.admitted;
        // The controller exports no dropped rate: what a bucket offers and does not admit
        // is what it dropped (nginx counts offered = admitted + dropped per host, and the
        // controller smooths both over the same window).
        o.dropped = std::max(0.0, o.offered - o.admitted);
        o.shadow_dropped = f.shadow_dropped.value_or(0);
        o.limit_rps = f.limit.value_or(-1);
        o.ratio = f.ratio.value_or(0);
        o.mode = f.shadow.value_or(0) != 0 ? Mode::Shadow : Mode::Deny;
        s.report.observations.push_back(std::move(o));
    }
    return out;
}

}  // namespace grl::rlc
