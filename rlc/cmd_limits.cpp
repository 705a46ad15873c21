// grl-rlc's limits commands: run, serve, whatif, versions, diff, rollback (docs/rlc.md,
// "Operating it"). Each only wires rlc.yaml, the history, the config store and the pure
// parts (cycle.h, rollout.h, whatif.h) together.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>

#include "apply.h"
#include "commands.h"
#include "config.h"
#include "cycle.h"
#include "grl/daemon/limits_file.h"
#include "open_history.h"
#include "versions.h"

namespace grl::rlc {

namespace {

struct Options {
    std::string config;
    std::string store;
    std::string author;
    std::string reason;
    std::int64_t at_s = 0;  // 0: now
    bool apply = false;
    bool force = false;
};

// An error already explained on stderr: the command exits with `code`.
[[noreturn]] void fail(const std::string& message, int code = 1) {
    std::cerr << "grl-rlc: " << message << "\n";
    throw CLI::RuntimeError(code);
}

std::int64_t now_of(const Options& o) {
    return o.at_s > 0 ? o.at_s : static_cast<std::int64_t>(std::time(nullptr));
}

std::string author_of(const Options& o) {
    if (!o.author.empty()) return o.author;
    const char* u = std::getenv("USER");
    return u && *u ? u : "grl-rlc";
}

std::string store_path(const Options& o, const Config* cfg) {
    if (!o.store.empty()) return o.store;
    if (cfg && !cfg->store.empty()) return cfg->store;
    fail("no store: give --store FILE or \"store\" in rlc.yaml");
}

void add_common(CLI::App* sub, Options& o, bool config_required) {
    auto* c = sub->add_option("--config", o.config, "rlc.yaml");
    if (config_required) c->required();
    sub->add_option("--store", o.store,
                    "SQLite store (history and versions); default: rlc.yaml's store");
}

// Runs `body`, turning the errors a user can fix into one line and exit status 1.
template <typename F>
void guarded(F&& body) {
    try {
        body();
    } catch (const CLI::RuntimeError&) {
        throw;
    } catch (const std::exception& e) {
        fail(e.what());
    }
}

Plan compute(const Config& cfg, const Options& o, VersionStore& store, std::int64_t now) {
    auto history = open_history(store_path(o, &cfg));
    auto series = history->read(now - cfg.window_s, now);
    return plan_cycle(cfg, series, read_limits(cfg.limits_file), store.states(), now, o.force);
}

void cmd_run(const Options& o) {
    guarded([&] {
        Config cfg = load_config(o.config);
        VersionStore store(store_path(o, &cfg));
        std::int64_t now = now_of(o);
        Plan plan = compute(cfg, o, store, now);
        std::cout << render_plan(plan);
        if (!o.apply) {
            std::cout << "\n(not applied: --apply writes " << cfg.limits_file << ")\n";
            return;
        }
        Applied a =
            apply_plan(cfg, store, plan, author_of(o), o.reason.empty() ? "grl-rlc run" : o.reason);
        if (a.version)
            std::cout << "\napplied: version " << a.version << " written to " << cfg.limits_file
                      << "\n";
        else
            std::cout << "\napplied: the limits file is unchanged\n";
    });
}

void cmd_versions(const Options& o) {
    guarded([&] {
        std::unique_ptr<Config> cfg;
        if (!o.config.empty()) cfg = std::make_unique<Config>(load_config(o.config));
        VersionStore store(store_path(o, cfg.get()));
        auto all = store.list();
        if (all.empty()) {
            std::cout << "no versions in " << store.path() << "\n";
            return;
        }
        std::printf("%-8s %-21s %-16s %-16s %s\n", "VERSION", "TIME", "DIGEST", "AUTHOR", "REASON");
        for (const auto& v : all) {
            std::printf("%-8lld %-21s %-16s %-16s %s\n", static_cast<long long>(v.id),
                        format_time(v.created_s).c_str(), v.digest.c_str(), v.author.c_str(),
                        v.reason.c_str());
        }
        auto counts = store.counters();
        if (!counts.empty()) {
            std::cout << "\nrollout events:";
            for (const auto& [k, n] : counts) std::cout << " " << k << "=" << n;
            std::cout << "\n";
        }
    });
}

void cmd_diff(const Options& o, std::int64_t a, std::int64_t b) {
    guarded([&] {
        std::unique_ptr<Config> cfg;
        if (!o.config.empty()) cfg = std::make_unique<Config>(load_config(o.config));
        VersionStore store(store_path(o, cfg.get()));
        control::Limits la, lb;
        for (auto [id, out] : {std::pair{a, &la}, std::pair{b, &lb}}) {
            auto v = store.get(id);
            if (!v)
                fail(store.path() + ": no version " + std::to_string(id) +
                     " (see grl-rlc versions)");
            *out = [&] {
                auto r = daemon::parse_limits(v->content, "version " + std::to_string(id));
                if (!r.ok) fail(r.error);
                return r.limits;
            }();
        }
        std::cout << "version " << a << " -> " << b << ":\n" << render_diff(diff_limits(la, lb));
    });
}

void cmd_rollback(const Options& o, std::int64_t id) {
    guarded([&] {
        Config cfg = load_config(o.config);
        VersionStore store(store_path(o, &cfg));
        Applied a = rollback(cfg.limits_file, store, id, author_of(o), now_of(o));
        std::cout << "rolled back to version " << id << ": version " << a.version << " written to "
                  << cfg.limits_file << "\n"
                  << store.get(a.version)->diff;
    });
}

}  // namespace

void add_limits_commands(CLI::App& app) {
    auto o = std::make_shared<Options>();

    auto* run = app.add_subcommand(
        "run", "compute one cycle and print the reviewable diff; --apply to apply it");
    add_common(run, *o, true);
    run->add_flag("--apply", o->apply, "write the limits file and record a version");
    run->add_flag("--force", o->force,
                  "ignore the step guard and restart soaks with the new proposals");
    run->add_option("--reason", o->reason, "why (recorded with the version)");
    run->add_option("--author", o->author, "who (recorded with the version; default: $USER)");
    run->add_option("--at", o->at_s, "compute as of this time (unix seconds) instead of now");
    run->callback([o] { cmd_run(*o); });

    auto* versions = app.add_subcommand("versions", "list the applied limits sets");
    add_common(versions, *o, false);
    versions->callback([o] { cmd_versions(*o); });

    auto diff_ids = std::make_shared<std::pair<std::int64_t, std::int64_t>>();
    auto* diff = app.add_subcommand("diff", "what changed between two versions");
    add_common(diff, *o, false);
    diff->add_option("A", diff_ids->first, "version")->required();
    diff->add_option("B", diff_ids->second, "version")->required();
    diff->callback([o, diff_ids] { cmd_diff(*o, diff_ids->first, diff_ids->second); });

    auto rb_id = std::make_shared<std::int64_t>(0);
    auto* rb = app.add_subcommand("rollback", "write version N again, as a new version");
    add_common(rb, *o, true);
    rb->add_option("N", *rb_id, "version")->required();
    rb->add_option("--author", o->author, "who (default: $USER)");
    rb->callback([o, rb_id] { cmd_rollback(*o, *rb_id); });
}

}  // namespace grl::rlc
