#include "apply.h"

#include <stdexcept>

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

void record_baseline(VersionStore& store, const std::string& path,
                     const daemon::etcd::Access& access, const std::string& author,
                     std::int64_t now_s) {
    if (store.latest()) return;
    auto text = read_limits_text(path, access);
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

// The id the next version will get: written into the content (`version:`) before the
// commit, and checked inside the commit's transaction (next_version_is).
std::int64_t next_version(const VersionStore& store) {
    auto v = store.latest();
    return v ? v->id + 1 : 1;
}

void next_version_is(const VersionStore& store, std::int64_t id) {
    auto v = store.latest();  // inside the transaction: the version just inserted
    if (!v || v->id != id)
        throw ConfigError(
            "another grl-rlc recorded a version meanwhile, nothing applied: run "
            "again");
}

// Pushes to every target: etcd first when there is an additional one (the remote target is
// the likelier to fail, and a failure there leaves the file and the store as they were).
void push_all(const std::string& limits_file, const std::string& etcd,
              const daemon::etcd::Access& access, const std::string& text) {
    if (etcd.empty()) return push_limits(limits_file, text, access);
    push_limits(etcd, text, access);
    try {
        push_limits(limits_file, text, access);
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string(e.what()) + " (nothing recorded, but " + etcd +
                                 " already holds the new limits: apply again or roll back)");
    }
}

}  // namespace

control::Limits read_limits(const std::string& path, const daemon::etcd::Access& access) {
    auto text = read_limits_text(path, access);
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
    std::int64_t id = 0;
    if (file_changes) {
        checked_text(plan.after, cfg.limits_file);  // refused before anything is recorded
        record_baseline(store, cfg.limits_file, cfg.etcd_access, author, plan.now_s);
        id = next_version(store);
        control::Limits after = plan.after;
        after.version = std::to_string(id);
        text = checked_text(after, cfg.limits_file);
        c.version =
            Version{0, 0, author, reason, control::digest(after), render_diff(plan.changes), text};
    }
    if (!file_changes && c.states.empty() && c.events.empty()) return out;
    out.version = store.commit(c, plan.now_s, [&] {
        // Inside the store's write transaction: a file changed since the plan read it (an
        // operator's edit, another grl-rlc) is not overwritten; the cycle is computed again.
        if (control::digest(read_limits(cfg.limits_file, cfg.etcd_access)) !=
            control::digest(plan.before)) {
            throw ConfigError(
                cfg.limits_file +
                ": changed since this cycle read it, nothing applied: run the cycle again");
        }
        if (file_changes) {
            next_version_is(store, id);
            push_all(cfg.limits_file, cfg.etcd, cfg.etcd_access, text);
        }
    });
    return out;
}

Applied rollback(const std::string& limits_file, const std::string& etcd,
                 const daemon::etcd::Access& access, VersionStore& store, std::int64_t id,
                 const std::string& author, std::int64_t now_s) {
    auto v = store.get(id);
    if (!v)
        throw ConfigError(store.path() + ": no version " + std::to_string(id) +
                          " (see grl-rlc versions)");
    auto parsed = daemon::parse_limits(v->content, limits_file);
    if (!parsed.ok)
        throw ConfigError("version " + std::to_string(id) +
                          " does not parse, nothing applied: " + parsed.error);
    control::Limits now = read_limits(limits_file, access);
    // Version id's text under the new version's label (the controllers then report the
    // version number they run), comments and layout kept; rendered afresh only if the
    // relabelled text would not read back as the same limits.
    const std::int64_t new_id = next_version(store);
    parsed.limits.version = std::to_string(new_id);
    std::string text = relabel(v->content, parsed.limits.version);
    auto again = daemon::parse_limits(text, limits_file);
    if (!again.ok || again.limits.version != parsed.limits.version ||
        control::digest(again.limits) != control::digest(parsed.limits))
        text = checked_text(parsed.limits, limits_file);
    Commit c;
    c.version = Version{0,
                        0,
                        author,
                        "rollback to " + std::to_string(id),
                        control::digest(parsed.limits),
                        render_diff(diff_limits(now, parsed.limits)),
                        text};
    c.clear_states = true;
    c.events.push_back(
        RolloutEvent{now_s, "", "rollback", 0, "to version " + std::to_string(id), 0});
    Applied out;
    out.events = 1;
    out.version = store.commit(c, now_s, [&] {
        next_version_is(store, new_id);
        push_all(limits_file, etcd, access, text);
    });
    return out;
}

}  // namespace grl::rlc
