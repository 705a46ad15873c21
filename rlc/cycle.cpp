#include "cycle.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "whatif.h"

namespace grl::rlc {

namespace {

std::string fmt(double v, int digits = 1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

std::string day(std::int64_t unix_s) {
    return format_utc(unix_s).substr(0, 10);
}

std::string pad(const std::string& s, std::size_t w) {
    return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
}

}  // namespace

std::string format_utc(std::int64_t unix_s) {
    std::time_t t = static_cast<std::time_t>(unix_s);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

Current current_limit(const std::string& bucket, const std::vector<const Series*>& instances,
                      const control::Limits& file) {
    Current c;
    // Recorded: the latest sample of any instance says what the controllers had in force.
    const Sample* latest = nullptr;
    for (const Series* s : instances)
        for (auto it = s->samples.rbegin(); it != s->samples.rend(); ++it)
            if (it->ticks > 0) {
                if (!latest || it->start_s > latest->start_s) latest = &*it;
                break;
            }
    if (latest) {
        if (latest->limit_rps >= 0)
            c.limit_mrps = static_cast<std::uint64_t>(std::llround(latest->limit_rps * 1000));
        c.mode = latest->mode;
    }
    auto it = file.buckets.find(bucket);
    if (it != file.buckets.end()) {
        if (it->second.limit_mrps) c.limit_mrps = it->second.limit_mrps;
        if (it->second.mode) c.mode = *it->second.mode;
    }
    return c;
}

namespace {

// The buckets a cycle plans even without history: those with a rollout state, and those of
// the quota file under a fixed rule (a quota is proposed before any traffic is seen).
std::set<std::string> planned_without_history(const Config& cfg,
                                              const std::map<std::string, BucketState>& states) {
    std::set<std::string> names;
    for (const auto& [b, _] : states) names.insert(b);
    if (!cfg.quota_file.empty()) {
        for (const auto& [b, _] : load_quota_file(cfg.quota_file))
            if (cfg.rule_for(b).policy == "fixed") names.insert(b);
    }
    return names;
}

Plan empty_plan(const Config& cfg, const control::Limits& current, std::int64_t now_s) {
    Plan plan;
    plan.now_s = now_s;
    plan.since_s = now_s - cfg.window_s;
    plan.before = current;
    plan.after = current;
    return plan;
}

// One bucket's row (or its "not managed" line): proposal, replay, rollout step, and its
// entry of the limits file after the cycle.
void plan_bucket(const Config& cfg, const std::string& name,
                 const std::vector<const Series*>& instances, const control::Limits& current,
                 const std::map<std::string, BucketState>& states, bool force, Plan& plan) {
    const std::int64_t now_s = plan.now_s;
    auto file_entry = current.buckets.find(name);
    if (file_entry != current.buckets.end() && file_entry->second.has_match) {
        plan.skipped.push_back(name + ": run-time bucket of the limits file, not managed");
        return;
    }
    const Rule& rule = cfg.rule_for(name);
    PolicyInput in;
    in.bucket = name;
    in.instances = instances;
    in.since_s = plan.since_s;
    in.until_s = now_s;
    in.current = current_limit(name, instances, current);
    in.force = force;

    CycleRow row;
    row.proposal = rule.impl->propose(in);
    if (row.proposal.new_mrps && !instances.empty()) {
        // What the proposed limit would have done to the window's traffic (what-if).
        Replay r = replay(instances, *row.proposal.new_mrps, plan.since_s, now_s);
        char buf[96];
        std::snprintf(buf, sizeof buf, "would drop %.3f%%, %.0f min over", r.drop_fraction * 100,
                      r.minutes_over);
        row.proposal.evidence.notes.emplace_back("replayed", buf);
    }
    auto st = states.find(name);
    if (st != states.end()) {
        // Someone changed the bucket's entry by hand since the last cycle: the file is
        // what is in force, so the rollout starts again from it instead of overwriting it.
        const BucketState& b = st->second;
        bool same = file_entry != current.buckets.end() &&
                    file_entry->second.limit_mrps == b.published_mrps() &&
                    file_entry->second.mode.value_or(Mode::Deny) == b.mode() &&
                    file_entry->second.candidate_mrps ==
                        (b.beside ? std::optional<std::uint64_t>(b.limit_mrps) : std::nullopt);
        if (same) {
            row.before = b;
        } else {
            plan.notes.push_back(
                name + ": the limits file no longer says " + format_limit(b.published_mrps()) +
                " " + std::string(to_string(b.mode())) +
                (b.beside ? ", candidate " + format_limit(b.limit_mrps) : "") + " (" +
                to_string(b.stage) + "): changed by hand, the rollout starts again from the file");
        }
    }
    ShadowMeasure m;
    if (row.before && row.before->stage != Stage::Enforced) {
        const std::int64_t since = measure_since(*row.before, now_s, cfg.rollout);
        m = row.before->beside ? measure_candidate(instances, row.before->limit_mrps, since, now_s)
                               : measure_shadow(instances, row.before->limit_mrps, since, now_s);
    }
    row.step = advance(row.before, &row.proposal, m, now_s, cfg.rollout, force);
    if (row.step.next) {
        // The whole entry is written, so that a promotion also removes the candidate.
        const BucketState& next = *row.step.next;
        control::FileLimit f;
        f.limit_mrps = next.published_mrps();
        f.mode = next.mode();
        if (next.beside) f.candidate_mrps = next.limit_mrps;
        plan.after.buckets[name] = f;
    }
    plan.rows.push_back(std::move(row));
}

std::map<std::string, std::vector<const Series*>> by_bucket(const std::vector<Series>& history) {
    std::map<std::string, std::vector<const Series*>> out;
    for (const auto& s : history) out[s.key.bucket].push_back(&s);
    return out;
}

}  // namespace

Plan plan_cycle(const Config& cfg, const std::vector<Series>& history,
                const control::Limits& current, const std::map<std::string, BucketState>& states,
                std::int64_t now_s, bool force) {
    Plan plan = empty_plan(cfg, current, now_s);
    auto instances = by_bucket(history);
    std::set<std::string> names = planned_without_history(cfg, states);
    for (const auto& [b, _] : instances) names.insert(b);
    static const std::vector<const Series*> kNone;
    for (const auto& name : names) {
        auto it = instances.find(name);
        plan_bucket(cfg, name, it == instances.end() ? kNone : it->second, current, states, force,
                    plan);
    }
    plan.changes = diff_limits(plan.before, plan.after);
    return plan;
}

Plan plan_cycle(const Config& cfg, HistorySource& history, const control::Limits& current,
                const std::map<std::string, BucketState>& states, std::int64_t now_s, bool force,
                std::size_t slice) {
    Plan plan = empty_plan(cfg, current, now_s);
    const std::set<std::string> without = planned_without_history(cfg, states);
    std::set<std::string> names = without;
    for (auto& b : history.buckets(plan.since_s, now_s)) names.insert(std::move(b));
    static const std::vector<const Series*> kNone;
    for (const auto& part : slices({names.begin(), names.end()}, slice)) {
        // Only this slice's history is in memory; the rows keep none of it.
        const std::vector<Series> series = history.read(plan.since_s, now_s, part);
        auto instances = by_bucket(series);
        for (const auto& name : part) {
            auto it = instances.find(name);
            // Listed but nothing read (a Prometheus index is coarser than its samples): not
            // planned, as a bucket without history is not.
            if (it == instances.end() && !without.count(name)) continue;
            plan_bucket(cfg, name, it == instances.end() ? kNone : it->second, current, states,
                        force, plan);
        }
    }
    plan.changes = diff_limits(plan.before, plan.after);
    return plan;
}

std::string render_evidence(const Evidence& e) {
    std::string s;
    if (!e.basis.empty()) {
        s = e.basis + " " + fmt(e.basis_rps) + " r/s";
        if (e.buffer != 0) s += " x " + fmt(1 + e.buffer, 2) + " = " + fmt(e.raw_rps) + " r/s";
    }
    if (e.samples) {
        s +=
            "; " + std::to_string(e.samples) + " samples " + day(e.since_s) + ".." + day(e.until_s);
        if (e.coverage > 0 && e.coverage < 0.999) s += " (" + fmt(e.coverage * 100) + "% covered)";
    }
    if (e.resets) s += "; " + std::to_string(e.resets) + " reset samples excluded";
    if (!e.bound_by.empty() && e.bound_by != "global") s += "; bound by " + e.bound_by;
    for (const auto& c : e.clamps) s += "; " + c;
    for (const auto& [k, v] : e.notes) s += "; " + k + ": " + v;
    return s;
}

std::string render_plan(const Plan& p) {
    std::vector<std::vector<std::string>> table = {
        {"BUCKET", "SCOPE", "OLD", "NEW", "CHANGE", "POLICY", "ROLLOUT", "EVIDENCE"}};
    std::vector<std::string> whys = {""};
    std::string declined;
    for (const auto& r : p.rows) {
        const Proposal& pr = r.proposal;
        if (!pr.new_mrps && r.step.action == Action::None) {
            declined += "  " + pr.bucket + " (" + pr.policy + "): " + pr.declined + "\n";
            continue;
        }
        std::string old = pr.old.limit_mrps ? format_limit(*pr.old.limit_mrps) + " " +
                                                  std::string(to_string(pr.old.mode))
                                            : "-";
        std::string nw = pr.new_mrps ? format_limit(*pr.new_mrps) : "(declined)";
        std::string change = "-";
        if (pr.new_mrps && pr.old.limit_mrps) {
            if (*pr.new_mrps == *pr.old.limit_mrps)
                change = "=";
            else if (*pr.old.limit_mrps == 0)
                change = "from 0";
            else
                change = (*pr.new_mrps > *pr.old.limit_mrps ? "+" : "") +
                         fmt((static_cast<double>(*pr.new_mrps) /
                                  static_cast<double>(*pr.old.limit_mrps) -
                              1) *
                             100) +
                         "%";
        } else if (pr.new_mrps) {
            change = "new";
        }
        std::string rollout = to_string(r.step.action);
        if (r.step.next && r.step.action != Action::None) {
            const BucketState& next = *r.step.next;
            rollout += " -> " + format_limit(next.published_mrps()) + " " +
                       std::string(to_string(next.mode()));
            if (next.beside) rollout += ", candidate " + format_limit(next.limit_mrps);
        }
        std::string ev = pr.new_mrps ? render_evidence(pr.evidence) : "declined: " + pr.declined;
        table.push_back({pr.bucket, pr.scope ? std::string(to_string(*pr.scope)) : "-", old, nw,
                         change, pr.policy, rollout, ev});
        whys.push_back(r.step.why);
    }
    std::vector<std::size_t> w(8, 0);
    for (const auto& row : table)
        for (std::size_t i = 0; i < 7; ++i) w[i] = std::max(w[i], row[i].size());
    std::string out = "cycle at " + format_utc(p.now_s) + ", history " + format_utc(p.since_s) +
                      " .. " + format_utc(p.now_s) + "\n";
    for (std::size_t r = 0; r < table.size(); ++r) {
        std::string line;
        for (std::size_t i = 0; i < 7; ++i) line += pad(table[r][i], w[i] + 2);
        out += line + table[r][7] + "\n";
        if (!whys[r].empty()) out += "    rollout: " + whys[r] + "\n";
    }
    if (table.size() == 1) out += "(no proposals)\n";
    if (!declined.empty()) out += "\ndeclined:\n" + declined;
    if (!p.notes.empty()) {
        out += "\nnotes:\n";
        for (const auto& n : p.notes) out += "  " + n + "\n";
    }
    if (!p.skipped.empty()) {
        out += "\nnot managed:\n";
        for (const auto& s : p.skipped) out += "  " + s + "\n";
    }
    out += "\nlimits file changes:\n" + render_diff(p.changes);
    return out;
}

}  // namespace grl::rlc
