#include "controller_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>

#include "units.h"

namespace grl::rlc {

namespace {

// The labels of one line. Reused from line to line so that a scrape of 10,000 instances
// allocates almost nothing: grl-rlc record reads every controller every second.
class Labels {
  public:
    void clear() { n_ = 0; }
    std::string& add(std::string_view key) {
        if (n_ == items_.size()) items_.emplace_back();
        items_[n_].first = key;
        items_[n_].second.clear();
        return items_[n_++].second;
    }
    std::string_view get(std::string_view key) const {
        for (std::size_t i = 0; i < n_; ++i)
            if (items_[i].first == key) return items_[i].second;
        return {};
    }
    bool has(std::string_view key) const {
        for (std::size_t i = 0; i < n_; ++i)
            if (items_[i].first == key) return true;
        return false;
    }

  private:
    std::vector<std::pair<std::string_view, std::string>> items_;
    std::size_t n_ = 0;
};

// The families read, by their place in Fields.
enum Family {
    kOffered,
    kAdmitted,
    kShadowDropped,
    kLimit,
    kRatio,
    kShadow,
    kCandidateLimit,
    kCandidateWouldDrop,
    kInfo,
    kPublished,
    kNone
};

Family family(std::string_view name) {
    if (name.substr(0, 11) == "grl_bucket_") {
        std::string_view f = name.substr(11);
        if (f == "offered_rps") return kOffered;
        if (f == "admitted_rps") return kAdmitted;
        if (f == "shadow_dropped_rps") return kShadowDropped;
        if (f == "limit_rps") return kLimit;
        if (f == "ratio") return kRatio;
        if (f == "shadow") return kShadow;
        if (f == "candidate_limit_rps") return kCandidateLimit;
        if (f == "candidate_would_drop_rps") return kCandidateWouldDrop;
        return kNone;
    }
    if (name == "grl_controller_info") return kInfo;
    if (name == "grl_controller_instructions_published_total") return kPublished;
    return kNone;
}

// `{a="x",b="y"}` from line[i] (at the '{'); returns the index after '}', or npos.
std::size_t parse_labels(std::string_view line, std::size_t i, Labels& labels) {
    ++i;
    while (i < line.size() && line[i] != '}') {
        std::size_t eq = line.find('=', i);
        if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
            return std::string_view::npos;
        std::string& val = labels.add(line.substr(i, eq - i));
        std::size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
            if (line[j] == '\\' && j + 1 < line.size()) {
                ++j;
                val += line[j] == 'n' ? '\n' : line[j];
            } else {
                val += line[j];
            }
        }
        if (j >= line.size()) return std::string_view::npos;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
    }
    return i < line.size() ? i + 1 : std::string_view::npos;
}

// The sample value after the labels (an optional timestamp after it is ignored); NaN and
// infinities are valid text without a usable value.
bool parse_value(std::string_view rest, double& value) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    std::string_view num = rest.substr(0, rest.find(' '));
    if (num == "NaN" || num == "+Inf" || num == "-Inf") {
        value = std::numeric_limits<double>::quiet_NaN();
        return true;
    }
    Parsed<double> v = parse_number(num);
    value = v.value;
    return static_cast<bool>(v);
}

struct Fields {
    std::string bucket, scope, zone;
    std::optional<double> v[kCandidateWouldDrop + 1];
};

}  // namespace

Parsed<ControllerScrape> parse_controller_metrics(std::string_view text,
                                                  const std::string& source) {
    Parsed<ControllerScrape> out;
    ControllerScrape& s = out.value;
    s.report.source = source;
    // Instances in the order they first appear; the index finds them by bucket, scope, zone.
    std::vector<Fields> inst;
    std::unordered_map<std::string, std::size_t> index;
    std::string id;
    Labels labels;
    std::size_t line_no = 0, pos = 0;
    while (pos < text.size()) {
        std::size_t nl = text.find('\n', pos);
        std::string_view line =
            text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
        ++line_no;
        if (line.empty() || line[0] == '#') continue;
        std::size_t i = 0;
        while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
        labels.clear();
        std::size_t after = i;
        if (i < line.size() && line[i] == '{') after = parse_labels(line, i, labels);
        double value = 0;
        if (i == 0 || after == std::string_view::npos || !parse_value(line.substr(after), value)) {
            out.error = source + " /metrics line " + std::to_string(line_no) +
                        ": not Prometheus text: \"" + std::string(line.substr(0, 80)) + "\"";
            return out;
        }
        Family fam = family(line.substr(0, i));
        if (fam == kNone || std::isnan(value)) continue;
        if (fam == kInfo) {
            s.region = labels.get("region");
            s.name = labels.get("name");
            continue;
        }
        if (fam == kPublished) {
            s.report.has_tick_marker = true;
            s.report.tick_marker = value;
            continue;
        }
        if (!labels.has("bucket") || !labels.has("scope")) continue;
        id.assign(labels.get("bucket"));
        id += '\0';
        id += labels.get("scope");
        id += '\0';
        id += labels.get("zone");
        auto [it, fresh] = index.try_emplace(id, inst.size());
        if (fresh) {
            inst.emplace_back();
            inst.back().bucket = labels.get("bucket");
            inst.back().scope = labels.get("scope");
            inst.back().zone = labels.get("zone");
        }
        inst[it->second].v[fam] = value;
    }
    s.report.observations.reserve(inst.size());
    for (const Fields& f : inst) {
        std::optional<Scope> scope = parse_scope(f.scope);
        if (!scope || !f.v[kOffered] || !f.v[kAdmitted]) continue;
        Observation o;
        o.key.bucket = f.bucket;
        o.key.scope = *scope;
        if (*scope != Scope::Global) {
            if (s.region.empty()) {
                ++s.skipped_no_region;
                continue;
            }
            o.key.region = s.region;
        }
        if (*scope == Scope::Zone) o.key.zone = f.zone;
        o.offered = *f.v[kOffered];
        o.admitted = *f.v[kAdmitted];
        // The controller exports no dropped rate: what a bucket offers and does not admit
        // is what it dropped (nginx counts offered = admitted + dropped per host, and the
        // controller smooths both over the same window).
        o.dropped = std::max(0.0, o.offered - o.admitted);
        o.shadow_dropped = f.v[kShadowDropped].value_or(0);
        o.limit_rps = f.v[kLimit].value_or(-1);
        o.ratio = f.v[kRatio].value_or(0);
        o.mode = f.v[kShadow].value_or(0) != 0 ? Mode::Shadow : Mode::Deny;
        // Exported only while the limits file gives the bucket a candidate.
        o.candidate_limit_rps = f.v[kCandidateLimit].value_or(-1);
        o.candidate_would_drop = f.v[kCandidateWouldDrop].value_or(0);
        s.report.observations.push_back(std::move(o));
    }
    return out;
}

}  // namespace grl::rlc
