#include "csv_import.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <optional>

#include "units.h"

namespace grl::rlc {

namespace {

enum Col {
    kBucket,
    kScope,
    kRegion,
    kZone,
    kStart,
    kLength,
    kTicks,
    kOfferedMean,
    kOfferedPeak,
    kAdmittedMean,
    kAdmittedPeak,
    kDroppedMean,
    kDroppedPeak,
    kShadowMean,
    kShadowPeak,
    kLimit,
    kMode,
    kRatio,
    kCandidate,
    kCandidateMean,
    kCandidatePeak,
    kNumCols
};

// The store keeps rates to 0.001 r/s: differences below that are rounding, not data.
constexpr double kTolerance = 0.001;

struct Error {
    std::string message;
};

// Splits one line into fields: commas, optional double quotes ("" inside is a quote),
// spaces around unquoted fields ignored.
std::optional<std::vector<std::string>> split_csv(std::string_view line, std::string& error) {
    std::vector<std::string> out;
    std::size_t i = 0;
    for (;;) {
        std::string f;
        while (i < line.size() && line[i] == ' ') ++i;
        if (i < line.size() && line[i] == '"') {
            ++i;
            for (;;) {
                if (i >= line.size()) {
                    error = "unterminated quoted field " + std::to_string(out.size() + 1);
                    return std::nullopt;
                }
                if (line[i] == '"') {
                    if (i + 1 < line.size() && line[i + 1] == '"') {
                        f += '"';
                        i += 2;
                        continue;
                    }
                    ++i;
                    break;
                }
                f += line[i++];
            }
            while (i < line.size() && line[i] == ' ') ++i;
            if (i < line.size() && line[i] != ',') {
                error = "text after the closing quote of field " + std::to_string(out.size() + 1);
                return std::nullopt;
            }
        } else {
            std::size_t end = line.find(',', i);
            if (end == std::string_view::npos) end = line.size();
            f = std::string(line.substr(i, end - i));
            while (!f.empty() && f.back() == ' ') f.pop_back();
            i = end;
        }
        out.push_back(std::move(f));
        if (i >= line.size()) return out;
        ++i;  // the comma
    }
}

// One data row being read: field access by column with the file and line for errors.
class Row {
  public:
    Row(const std::string& where, const std::vector<std::string>& fields,
        const std::vector<int>& index_of)
        : where_(where), fields_(fields), index_of_(index_of) {}

    const std::string& name(Col c) const { return history_csv_columns()[c]; }
    // The cell, or nullopt when the column is absent or the cell empty.
    std::optional<std::string> cell(Col c) const {
        int i = index_of_[c];
        if (i < 0 || fields_[static_cast<std::size_t>(i)].empty()) return std::nullopt;
        return fields_[static_cast<std::size_t>(i)];
    }
    [[noreturn]] void fail(Col c, const std::string& what) const {
        throw Error{where_ + ": field \"" + name(c) + "\": " + what};
    }
    [[noreturn]] void fail(const std::string& what) const { throw Error{where_ + ": " + what}; }

    double number(Col c, double dflt) const {
        std::optional<std::string> v = cell(c);
        if (!v) return dflt;
        Parsed<double> p = parse_number(*v);
        if (!p) fail(c, p.error);
        if (p.value < 0) fail(c, "\"" + *v + "\" is negative");
        return p.value;
    }
    std::int64_t integer(Col c, std::int64_t dflt, std::int64_t lo, std::int64_t hi) const {
        std::optional<std::string> v = cell(c);
        if (!v) return dflt;
        std::int64_t n = 0;
        auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
        if (ec != std::errc() || p != v->data() + v->size())
            fail(c, "\"" + *v + "\" is not a whole number");
        if (n < lo || n > hi)
            fail(c, "\"" + *v + "\" is not in " + std::to_string(lo) + ".." + std::to_string(hi));
        return n;
    }
    std::string name_field(Col c, bool required) const {
        std::optional<std::string> v = cell(c);
        if (!v) {
            if (required) fail(c, "missing");
            return "";
        }
        if (!valid_name(*v)) fail(c, "\"" + *v + "\" is not a valid name ([A-Za-z0-9_.:-]{1,63})");
        return *v;
    }

  private:
    const std::string& where_;
    const std::vector<std::string>& fields_;
    const std::vector<int>& index_of_;
};

std::string format_number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

Rate rate(const Row& r, Col mean_col, Col peak_col, double mean_dflt, double peak_dflt) {
    Rate x;
    x.mean = r.number(mean_col, mean_dflt);
    x.peak = r.number(peak_col, r.cell(mean_col) && !r.cell(peak_col) ? x.mean : peak_dflt);
    if (x.peak + kTolerance < x.mean)
        r.fail(peak_col, format_number(x.peak) + " is below " + r.name(mean_col) + " " +
                             format_number(x.mean));
    return x;
}

Sample parse_sample(const Row& r, InstanceKey& key) {
    key.bucket = r.name_field(kBucket, true);
    key.scope = Scope::Global;
    if (std::optional<std::string> s = r.cell(kScope)) {
        std::optional<Scope> sc = parse_scope(*s);
        if (!sc) r.fail(kScope, "\"" + *s + "\" is not global, region or zone");
        key.scope = *sc;
    }
    key.region = r.name_field(kRegion, key.scope != Scope::Global);
    key.zone = r.name_field(kZone, key.scope == Scope::Zone);
    if (key.scope == Scope::Global && !key.region.empty())
        r.fail(kRegion, "must be empty for a global bucket (it is summed over every region)");
    if (key.scope != Scope::Zone && !key.zone.empty())
        r.fail(kZone, "must be empty unless scope is zone");

    Sample s;
    std::optional<std::string> start = r.cell(kStart);
    if (!start) r.fail(kStart, "missing");
    Parsed<std::int64_t> t = parse_time_s(*start);
    if (!t) r.fail(kStart, t.error);
    s.start_s = t.value;
    s.length_s = static_cast<std::int32_t>(r.integer(kLength, 60, 1, 86400));
    s.ticks = static_cast<std::int32_t>(r.integer(kTicks, s.length_s, 1, 86400LL * 1000));
    if (!r.cell(kOfferedMean)) r.fail(kOfferedMean, "missing");
    s.offered = rate(r, kOfferedMean, kOfferedPeak, 0, 0);
    s.dropped = rate(r, kDroppedMean, kDroppedPeak, 0, 0);
    if (s.dropped.mean > s.offered.mean + kTolerance)
        r.fail(kDroppedMean, format_number(s.dropped.mean) + " is above offered_mean " +
                                 format_number(s.offered.mean));
    s.admitted =
        rate(r, kAdmittedMean, kAdmittedPeak, std::max(0.0, s.offered.mean - s.dropped.mean),
             std::max(0.0, s.offered.peak - s.dropped.peak));
    s.shadow_dropped = rate(r, kShadowMean, kShadowPeak, 0, 0);
    if (s.admitted.mean > s.offered.mean + kTolerance)
        r.fail(kAdmittedMean, format_number(s.admitted.mean) + " is above offered_mean " +
                                  format_number(s.offered.mean));
    if (s.admitted.peak > s.offered.peak + kTolerance)
        r.fail(kAdmittedPeak, format_number(s.admitted.peak) + " is above offered_peak " +
                                  format_number(s.offered.peak));
    if (std::optional<std::string> l = r.cell(kLimit)) {
        Parsed<double> p = parse_rps(*l);
        if (!p) r.fail(kLimit, p.error);
        s.limit_rps = p.value;
    }
    if (std::optional<std::string> m = r.cell(kMode)) {
        std::optional<Mode> mode = parse_mode(*m);
        if (!mode) r.fail(kMode, "\"" + *m + "\" is not deny or shadow");
        s.mode = *mode;
    }
    s.ratio = r.number(kRatio, 0);
    if (s.ratio > 1) r.fail(kRatio, "\"" + *r.cell(kRatio) + "\" is above 1");
    // A candidate limit evaluated beside the one in force, and what it would have dropped.
    if (std::optional<std::string> c = r.cell(kCandidate)) {
        Parsed<double> p = parse_rps(*c);
        if (!p) r.fail(kCandidate, p.error);
        s.candidate_limit_rps = p.value;
    }
    s.candidate_would_drop = rate(r, kCandidateMean, kCandidatePeak, 0, 0);
    if (s.candidate_limit_rps < 0 && (r.cell(kCandidateMean) || r.cell(kCandidatePeak)))
        r.fail(kCandidateMean, "would-drops without a candidate limit (the \"candidate\" column)");
    if (s.candidate_would_drop.mean > s.offered.mean + kTolerance)
        r.fail(kCandidateMean, format_number(s.candidate_would_drop.mean) +
                                   " is above offered_mean " + format_number(s.offered.mean));
    return s;
}

}  // namespace

const std::vector<std::string>& history_csv_columns() {
    static const std::vector<std::string> cols = {"bucket",
                                                  "scope",
                                                  "region",
                                                  "zone",
                                                  "start",
                                                  "length_s",
                                                  "ticks",
                                                  "offered_mean",
                                                  "offered_peak",
                                                  "admitted_mean",
                                                  "admitted_peak",
                                                  "dropped_mean",
                                                  "dropped_peak",
                                                  "shadow_mean",
                                                  "shadow_peak",
                                                  "limit",
                                                  "mode",
                                                  "ratio",
                                                  "candidate",
                                                  "candidate_would_drop_mean",
                                                  "candidate_would_drop_peak"};
    return cols;
}

Parsed<std::vector<Series>> parse_history_csv(std::string_view text, const std::string& file) {
    Parsed<std::vector<Series>> out;
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a spreadsheet's BOM
    std::map<InstanceKey, std::map<std::int64_t, std::pair<Sample, std::size_t>>> rows;
    std::vector<int> index_of(kNumCols, -1);
    std::size_t header_fields = 0;
    bool have_header = false;
    std::size_t line_no = 0;
    try {
        std::size_t pos = 0;
        while (pos < text.size()) {
            std::size_t nl = text.find('\n', pos);
            std::string_view line =
                text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
            pos = nl == std::string_view::npos ? text.size() : nl + 1;
            ++line_no;
            if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
            if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
            const std::string where = file + ":" + std::to_string(line_no);
            std::string split_error;
            std::optional<std::vector<std::string>> fields = split_csv(line, split_error);
            if (!fields) throw Error{where + ": " + split_error};
            if (!have_header) {
                const auto& cols = history_csv_columns();
                for (std::size_t i = 0; i < fields->size(); ++i) {
                    const std::string& name = (*fields)[i];
                    auto it = std::find(cols.begin(), cols.end(), name);
                    if (it == cols.end()) {
                        std::string known;
                        for (const auto& c : cols) known += (known.empty() ? "" : ", ") + c;
                        throw Error{where + ": unknown column \"" + name +
                                    "\" (the header must name columns among: " + known + ")"};
                    }
                    int& idx = index_of[static_cast<std::size_t>(it - cols.begin())];
                    if (idx >= 0) throw Error{where + ": column \"" + name + "\" appears twice"};
                    idx = static_cast<int>(i);
                }
                for (Col c : {kBucket, kStart, kOfferedMean}) {
                    if (index_of[c] < 0)
                        throw Error{where + ": the header has no column \"" + cols[c] +
                                    "\" (bucket, start and offered_mean are required)"};
                }
                header_fields = fields->size();
                have_header = true;
                continue;
            }
            if (fields->size() != header_fields)
                throw Error{where + ": " + std::to_string(fields->size()) +
                            " fields, the header has " + std::to_string(header_fields)};
            Row row(where, *fields, index_of);
            InstanceKey key;
            Sample s = parse_sample(row, key);
            auto& per_key = rows[key];
            auto [it, fresh] = per_key.try_emplace(s.start_s, s, line_no);
            if (!fresh)
                row.fail("bucket \"" + key.bucket + "\" (" + std::string(to_string(key.scope)) +
                         (key.region.empty() ? "" : " " + key.region) +
                         (key.zone.empty() ? "" : "/" + key.zone) + ") at " +
                         format_time(s.start_s) + " is already on line " +
                         std::to_string(it->second.second));
        }
        if (!have_header)
            throw Error{file + ": empty file, expected a header line naming the columns"};
    } catch (const Error& e) {
        out.error = e.message;
        return out;
    }
    for (auto& [key, samples] : rows) {
        Series s;
        s.key = key;
        for (auto& [start, sl] : samples) s.samples.push_back(sl.first);
        out.value.push_back(std::move(s));
    }
    return out;
}

}  // namespace grl::rlc
