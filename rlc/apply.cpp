#include "apply.h"

#include "grl/daemon/limits_file.h"

namespace grl::rlc {

namespace {

constexpr const char* kHeader =
    "Written by grl-rlc: a version of its config store (grl-rlc versions); edits outside grl-rlc "
    "are kept "
    "only for buckets it does not manage";

bool counted(Action a) {
    return a == Action::Raise || a == Action::Shadow || a == Action::Promote || a == Action::Hold;
}

// The new content, checked by the parser the controllers use: a version that the
// controllers would reject is never written.
std::string checked_text(const control::Limits& l, const std::string& path) {
    std::string text = render_limits(l, kHeader);
    auto check = daemon::parse_limits(text, path);
    if (!check.ok)
        throw ConfigError(
            "the new limits file would be rejected by the controllers, nothing applied: " +
            check.error);
    return text;
}

void record_baseline(VersionStore& store, const std::string& path, const std::string& author,
                     std::int64_t now_s) {
    if (store.latest()) return;
    auto text = read_text_file(path);
    if (!text) return;
    auto parsed = daemon::parse_limits(*text, path);
    if (!parsed.ok) return;  // the controllers reject it too: nothing to roll back to
    Commit c;
    c.version = Version{0,
                        0,
                        author,
                        "limits file as found before grl-rlc's first version",
                        control::digest(parsed.limits),
                        render_diff(diff_limits({}, parsed.limits)),
                        *text};
    store.commit(c, now_s, nullptr);
}

}  // namespace

control::Limits read_limits(const std::string& path) {
    auto text = read_text_file(path);
    if (!text) return {};
    auto r = daemon::parse_limits(*text, path);
    if (!r.ok) throw ConfigError("the current limits file does not parse: " + r.error);
    return r.limits;
}

Applied apply_plan(const Config& cfg, VersionStore& store, const Plan& plan,
                   const std::string& author, const std::string& reason) {
    Applied out;
    Commit c;
    for (const auto& r : plan.rows) {
        // A dropped candidate changes the state without an action (the bucket is enforced
        // again at the limit it never left).
        const bool changed =
            r.before && r.step.next &&
            (r.step.next->stage != r.before->stage || r.step.next->beside != r.before->beside);
        if (r.step.next && (!r.before || r.step.action != Action::None || changed))
            c.states.push_back(*r.step.next);
        if (counted(r.step.action)) {
            c.events.push_back(RolloutEvent{plan.now_s, r.proposal.bucket, to_string(r.step.action),
                                            r.step.next ? r.step.next->limit_mrps : 0, r.step.why,
                                            0});
        }
    }
    out.events = c.events.size();
    bool file_changes = !plan.changes.empty();
    std::string text;
    if (file_changes) {
        text = checked_text(plan.after, cfg.limits_file);
        record_baseline(store, cfg.limits_file, author, plan.now_s);
        c.version = Version{
            0, 0, author, reason, control::digest(plan.after), render_diff(plan.changes), text};
    }
    if (!file_changes && c.states.empty() && c.events.empty()) return out;
    out.version = store.commit(c, plan.now_s, [&] {
        // Inside the store's write transaction: a file changed since the plan read it (an
        // operator's edit, another grl-rlc) is not overwritten; the cycle is computed again.
        if (control::digest(read_limits(cfg.limits_file)) != control::digest(plan.before)) {
            throw ConfigError(
                cfg.limits_file +
                ": changed since this cycle read it, nothing applied: run the cycle again");
        }
        if (file_changes) write_atomically(cfg.limits_file, text);
    });
    return out;
}

Applied rollback(const std::string& limits_file, VersionStore& store, std::int64_t id,
                 const std::string& author, std::int64_t now_s) {
    auto v = store.get(id);
    if (!v)
        throw ConfigError(store.path() + ": no version " + std::to_string(id) +
                          " (see grl-rlc versions)");
    auto parsed = daemon::parse_limits(v->content, limits_file);
    if (!parsed.ok)
        throw ConfigError("version " + std::to_string(id) +
                          " does not parse, nothing applied: " + parsed.error);
    control::Limits now = read_limits(limits_file);
    Commit c;
    c.version = Version{0,
                        0,
                        author,
                        "rollback to " + std::to_string(id),
                        control::digest(parsed.limits),
                        render_diff(diff_limits(now, parsed.limits)),
                        v->content};
    c.clear_states = true;
    c.events.push_back(
        RolloutEvent{now_s, "", "rollback", 0, "to version " + std::to_string(id), 0});
    Applied out;
    out.events = 1;
    out.version = store.commit(c, now_s, [&] { write_atomically(limits_file, v->content); });
    return out;
}

}  // namespace grl::rlc
