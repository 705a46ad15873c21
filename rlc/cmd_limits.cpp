// grl-rlc's limits commands: run, serve, whatif, versions, diff, rollback (docs/rlc.md,
// "Operating it"). Each only wires rlc.yaml, the history, the config store and the pure
// parts (cycle.h, rollout.h, whatif.h) together.
#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "apply.h"
#include "commands.h"
#include "config.h"
#include "cycle.h"
#include "grl/daemon/http.h"
#include "grl/daemon/limits_file.h"
#include "grl/daemon/log.h"
#include "grl/daemon/loop.h"
#include "limits_out.h"
#include "serve_metrics.h"
#include "store.h"
#include "versions.h"
#include "whatif.h"

namespace grl::rlc {

namespace {

struct Options {
    std::string config;
    std::string store;
    std::string author;
    std::string reason;
    std::int64_t at_s = 0;  // 0: now
    std::int64_t show = 0;  // versions --show N
    bool apply = false;
    bool force = false;
    std::size_t slice = kSliceBuckets;  // buckets per history read (run, serve, whatif)
    // whatif
    std::string limits;
    std::string since = "14d";
    bool json = false;
    std::string html;
    // serve
    std::string every = "1h";
    std::string poll = "1m";
    std::string metrics;  // HOST:PORT of /metrics; empty: none
    RecordArgs rec;       // serve --controller ...: record the fleet too
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

// Memory follows one slice's history (history.h, kSliceBuckets).
void add_slice(CLI::App* sub, Options& o) {
    sub->add_option("--slice", o.slice,
                    "buckets whose history is read at a time (default: " +
                        std::to_string(kSliceBuckets) + "; fewer for buckets with many zones)")
        ->check(CLI::Range(std::size_t{1}, std::size_t{100000}));
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

// Sample blocks that could not be written (a read-only store, a full disk) leave every cycle
// reading rows, several times slower (docs/rlc-history.md, "Sample blocks"): said once per cycle.
void warn_if_blocks_failed(HistorySource& history) {
    if (auto* st = dynamic_cast<Store*>(&history)) {
        std::string why = st->block_write_error();
        if (!why.empty())
            daemon::log_warn("sample blocks not written, cycles read the rows (slower): " + why);
    }
}

void cmd_run(const Options& o) {
    guarded([&] {
        Config cfg = load_config(o.config);
        std::int64_t now = now_of(o);
        // History first: it checks that the file is a history store before our tables go in.
        auto history = open_history(store_path(o, &cfg));
        VersionStore store(store_path(o, &cfg));
        Plan plan = plan_cycle(cfg, *history, read_limits(cfg.limits_file, cfg.etcd_access),
                               store.states(), now, o.force, o.slice);
        warn_if_blocks_failed(*history);
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
        if (o.show > 0) {
            auto v = store.get(o.show);
            if (!v)
                fail(store.path() + ": no version " + std::to_string(o.show) +
                     " (see grl-rlc versions)");
            std::cout << v->content;
            return;
        }
        auto all = store.list();
        if (all.empty()) {
            std::cout << "no versions in " << store.path() << "\n";
            return;
        }
        std::printf("%-8s %-21s %-16s %-16s %s\n", "VERSION", "TIME", "DIGEST", "AUTHOR", "REASON");
        for (const auto& v : all) {
            std::printf("%-8lld %-21s %-16s %-16s %s\n", static_cast<long long>(v.id),
                        format_utc(v.created_s).c_str(), v.digest.c_str(), v.author.c_str(),
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
        for (auto [which, out] : {std::pair{a, &la}, std::pair{b, &lb}}) {
            const auto id = which;  // a plain variable: lambdas cannot capture bindings (C++17)
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
        Applied a = rollback(cfg.limits_file, cfg.etcd, cfg.etcd_access, store, id, author_of(o),
                             now_of(o));
        std::cout << "rolled back to version " << id << ": version " << a.version << " written to "
                  << cfg.limits_file << "\n"
                  << store.get(a.version)->diff;
    });
}

void cmd_whatif(const Options& o) {
    guarded([&] {
        Config cfg = load_config(o.config);
        auto since = parse_duration_s(o.since);
        if (!since || *since <= 0)
            fail("--since: invalid duration \"" + o.since + "\", expected e.g. 14d, 2w or 12h");
        auto proposed = daemon::load_limits_file(o.limits);
        if (!proposed.ok) fail(proposed.error);
        std::int64_t now = now_of(o);
        auto history = open_history(store_path(o, &cfg));
        WhatIf w = what_if(*history, read_limits(cfg.limits_file, cfg.etcd_access), proposed.limits,
                           now - *since, now, o.slice);
        std::cout << (o.json ? render_whatif_json(w) : render_whatif_table(w));
        if (!o.html.empty()) {
            write_atomically(o.html, render_whatif_html(w));
            if (!o.json) std::cout << "chart: " << o.html << "\n";
        }
    });
}

std::atomic<bool> g_stop{false};

std::int64_t mtime_of(const std::string& path) {
    struct stat st;
    if (path.empty() || ::stat(path.c_str(), &st) != 0) return -1;
    return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// One cycle of serve: plan, apply, and one log line per rollout event. `stats` receives the
// store's event counts and newest version.
void serve_cycle(const Config& cfg, const Options& o, const std::string& why,
                 std::set<std::string>& known, ServeStats& stats) {
    std::int64_t now = now_of(o);
    auto history = open_history(store_path(o, &cfg));
    VersionStore store(store_path(o, &cfg));
    known.clear();
    for (auto& b : history->buckets(now - cfg.window_s, now)) known.insert(std::move(b));
    Plan plan = plan_cycle(cfg, *history, read_limits(cfg.limits_file, cfg.etcd_access),
                           store.states(), now, false, o.slice);
    warn_if_blocks_failed(*history);
    Applied a = apply_plan(cfg, store, plan, author_of(o), "grl-rlc serve: " + why);
    std::size_t proposals = 0, declined = 0;
    for (const auto& r : plan.rows) {
        (r.proposal.new_mrps ? proposals : declined)++;
        switch (r.step.action) {
            case Action::Raise:
            case Action::Shadow:
            case Action::Promote:
                daemon::log(daemon::LogLevel::Info, r.proposal.bucket,
                            to_string(r.step.action) + " " + format_limit(r.step.next->limit_mrps) +
                                ": " + r.step.why);
                break;
            case Action::Hold:
            case Action::Still: {
                const BucketState& next = *r.step.next;
                const std::string where =
                    next.beside ? "candidate " + format_limit(next.limit_mrps) +
                                      " beside the enforced " + format_limit(next.published_mrps())
                                : "in shadow at " + format_limit(next.limit_mrps);
                daemon::log(daemon::LogLevel::Warn, r.proposal.bucket,
                            to_string(r.step.action) + " " + where + ": " + r.step.why);
                break;
            }
            default: break;
        }
    }
    std::string counts;
    stats.events = store.counters();
    if (auto v = store.latest()) stats.version = v->id;
    for (const auto& [k, n] : stats.events) counts += " " + k + "=" + std::to_string(n);
    daemon::log_info(
        "cycle (" + why + "): " + std::to_string(proposals) + " proposals, " +
        std::to_string(declined) + " declined, " +
        (a.version ? "version " + std::to_string(a.version) + " written to " + cfg.limits_file
                   : std::string("limits file unchanged")) +
        "; events so far:" + (counts.empty() ? " none" : counts));
}

// /metrics of grl-rlc serve: the daemons' HTTP server on a Loop of its own thread (cycles
// block for seconds to minutes), rendering a copy of the stats the serving loop updates.
class ServeMetrics {
  public:
    explicit ServeMetrics(const std::string& address) {
        std::signal(SIGPIPE, SIG_IGN);  // a scraper that hangs up must not end the process
        server_ = std::make_unique<daemon::MetricsServer>(loop_, address, [this] {
            std::lock_guard<std::mutex> g(mu_);
            return render_serve_metrics(stats_);
        });
        loop_.every(100, [this] {
            if (stop_) loop_.stop();
        });
        // The Loop's signalfd may read a SIGINT/SIGTERM before the process's handler runs:
        // whichever thread takes it, serving stops.
        for (int sig : {SIGINT, SIGTERM}) loop_.on_signal(sig, [] { g_stop = true; });
        thread_ = std::thread([this] { loop_.run(); });
    }
    ~ServeMetrics() {
        stop_ = true;
        thread_.join();
    }
    ServeMetrics(const ServeMetrics&) = delete;
    ServeMetrics& operator=(const ServeMetrics&) = delete;

    std::string address() const { return server_->address(); }
    template <typename F>
    void update(F&& f) {
        std::lock_guard<std::mutex> g(mu_);
        f(stats_);
    }

  private:
    daemon::Loop loop_;
    std::unique_ptr<daemon::MetricsServer> server_;
    std::mutex mu_;
    ServeStats stats_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

double wall_s() {
    return static_cast<double>(daemon::wall_ms()) / 1000.0;
}

std::unique_ptr<ServeMetrics> serve_metrics(const Options& o) {
    if (o.metrics.empty()) return nullptr;
    std::unique_ptr<ServeMetrics> metrics;
    try {
        metrics = std::make_unique<ServeMetrics>(o.metrics);
    } catch (const std::exception& e) {
        fail(std::string("--metrics: ") + e.what());
    }
    daemon::log_info("metrics on http://" + metrics->address() + "/metrics");
    return metrics;
}

// With --controller, serve is the whole configurator in one process: a thread records the
// controllers into the same store (its own SQLite connection; WAL lets the cycles read
// meanwhile) while this one runs the cycles.
std::thread start_recorder(const Options& o, const Config& cfg, std::atomic<int>& status) {
    if (o.rec.controllers.empty()) return {};
    RecordOptions r = to_record_options("serve", o.rec, "record-");
    r.store = store_path(o, &cfg);
    r.stop = &g_stop;
    // Created here, before the first cycle reads it; a store that cannot be opened is
    // an error now rather than a thread's.
    guarded([&] { Store created(r.store); });
    return std::thread([r, &status] {
        try {
            status = run_record(r);
        } catch (const std::exception& e) {
            daemon::log_error(std::string("recording stopped: ") + e.what());
            status = 1;
        }
        if (status != 0) g_stop = true;  // no history, no cycles worth running
    });
}

// What serve watches between cycles: rlc.yaml and the quota file by their mtime.
struct ServeWatch {
    std::int64_t cfg_mtime = 0, quota_mtime = 0;

    // Loads rlc.yaml again when it or the quota file changed; true when the new one is in
    // force. A bad one is logged and counted, and the last good one stays.
    bool reload(const Options& o, std::unique_ptr<Config>& cfg, ServeMetrics* metrics) {
        std::int64_t m1 = mtime_of(o.config), m2 = mtime_of(cfg->quota_file);
        if (m1 == cfg_mtime && m2 == quota_mtime) return false;
        cfg_mtime = m1;
        quota_mtime = m2;
        try {
            cfg = std::make_unique<Config>(load_config(o.config));
            quota_mtime = mtime_of(cfg->quota_file);
            return true;
        } catch (const std::exception& e) {
            daemon::log_error(std::string("configuration rejected, the last good one stays: ") +
                              e.what());
            if (metrics) metrics->update([](ServeStats& st) { ++st.config_rejected; });
            return false;
        }
    }
};

// A new bucket in the fleet: seen in the recent history, not in the last cycle's ("" if none).
std::string new_bucket(const Options& o, const Config& cfg, const std::set<std::string>& known,
                       std::int64_t poll_s) {
    std::string why;
    try {
        std::int64_t now = now_of(o);
        auto recent = open_history(store_path(o, &cfg))->buckets(now - poll_s - 300, now);
        for (const auto& b : recent)
            if (!known.count(b)) why = "new bucket " + b;
    } catch (const std::exception& e) {
        daemon::log_error(std::string("cannot read history: ") + e.what());
    }
    return why;
}

// One cycle, counted in the metrics; a failed one applies nothing.
void run_cycle(const Config& cfg, const Options& o, const std::string& why,
               std::set<std::string>& known, ServeMetrics* metrics) {
    const auto t = std::chrono::steady_clock::now();
    ServeStats after;
    bool ok = false;
    try {
        serve_cycle(cfg, o, why, known, after);
        ok = true;
    } catch (const std::exception& e) {
        daemon::log_error(std::string("cycle failed, nothing applied: ") + e.what());
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    if (!metrics) return;
    metrics->update([&](ServeStats& st) {
        st.last_cycle_s = wall_s();
        st.last_cycle_duration_s = took;
        if (!ok) {
            ++st.cycles_failed;
            return;
        }
        ++st.cycles_ok;
        st.last_ok_cycle_s = st.last_cycle_s;
        st.events = std::move(after.events);
        st.version = after.version;
    });
}

void cmd_serve(const Options& o) {
    daemon::log_init("grl-rlc", daemon::LogLevel::Info);
    auto every = parse_duration_s(o.every);
    if (!every || *every <= 0)
        fail("--every: invalid duration \"" + o.every + "\", expected e.g. 1h or 30m");
    auto poll = parse_duration_s(o.poll);
    if (!poll || *poll <= 0)
        fail("--poll: invalid duration \"" + o.poll + "\", expected e.g. 1m or 30s");
    std::unique_ptr<Config> cfg;
    guarded([&] { cfg = std::make_unique<Config>(load_config(o.config)); });
    std::unique_ptr<ServeMetrics> metrics = serve_metrics(o);
    std::signal(SIGINT, [](int) { g_stop = true; });
    std::signal(SIGTERM, [](int) { g_stop = true; });
    std::atomic<int> record_status{0};
    std::thread recorder = start_recorder(o, *cfg, record_status);
    ServeWatch watch{mtime_of(o.config), mtime_of(cfg->quota_file)};
    std::set<std::string> known;
    std::string why = "start";
    auto last_cycle = std::chrono::steady_clock::now() - std::chrono::hours(24 * 365);
    auto last_poll = last_cycle;
    daemon::log_info("serving " + o.config + ": a cycle every " + o.every +
                     ", and when rlc.yaml, the quota file or "
                     "the set of buckets changes");
    while (!g_stop) {
        auto t = std::chrono::steady_clock::now();
        if (watch.reload(o, cfg, metrics.get())) why = "configuration changed";
        if (why.empty() && t - last_poll >= std::chrono::seconds(*poll)) {
            last_poll = t;
            why = new_bucket(o, *cfg, known, *poll);
        }
        if (why.empty() && t - last_cycle >= std::chrono::seconds(*every)) why = "schedule";
        if (!why.empty()) {
            last_cycle = last_poll = t;
            run_cycle(*cfg, o, why, known, metrics.get());
            why.clear();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (recorder.joinable()) recorder.join();
    daemon::log_info("stopped");
    if (record_status != 0) throw CLI::RuntimeError(record_status);
}

}  // namespace

void add_limits_commands(CLI::App& app) {
    auto o = std::make_shared<Options>();

    auto* run = app.add_subcommand(
        "run", "Compute one cycle and print the reviewable diff; --apply to apply it");
    add_common(run, *o, true);
    run->add_flag("--apply", o->apply, "write the limits file and record a version");
    run->add_flag("--force", o->force,
                  "ignore the step guard and restart soaks with the new proposals");
    run->add_option("--reason", o->reason, "why (recorded with the version)");
    run->add_option("--author", o->author, "who (recorded with the version; default: $USER)");
    run->add_option("--at", o->at_s, "compute as of this time (unix seconds) instead of now");
    add_slice(run, *o);
    run->callback([o] { cmd_run(*o); });

    auto* whatif = app.add_subcommand("whatif", "Replay recorded history against proposed limits");
    add_common(whatif, *o, true);
    whatif->add_option("--limits", o->limits, "proposed limits file (the controllers' format)")
        ->required();
    whatif->add_option("--since", o->since, "how far back to replay (default: 14d)");
    whatif->add_flag("--json", o->json, "JSON instead of the table");
    whatif->add_option("--html", o->html,
                       "also write a chart of history against old and new limits (HTML, SVG)");
    whatif->add_option("--at", o->at_s, "replay up to this time (unix seconds) instead of now");
    add_slice(whatif, *o);
    whatif->callback([o] { cmd_whatif(*o); });

    auto* serve = app.add_subcommand(
        "serve", "Run cycles on a schedule and on change, driving the shadow-first rollout");
    add_common(serve, *o, true);
    serve->add_option("--every", o->every, "cycle period (default: 1h)");
    serve->add_option("--poll", o->poll,
                      "how often to look for new buckets in the history (default: 1m)");
    serve->add_option("--author", o->author, "recorded with each version (default: $USER)");
    serve->add_option("--metrics", o->metrics,
                      "serve Prometheus /metrics on HOST:PORT (cycles, rollout events)");
    add_record_args(serve, o->rec, false, "record-");
    add_slice(serve, *o);
    serve->callback([o] { cmd_serve(*o); });

    auto* versions = app.add_subcommand(
        "versions", "List the applied limits sets (versions) and the rollout event counts");
    add_common(versions, *o, false);
    versions->add_option("--show", o->show, "print version N's limits file instead of the list");
    versions->callback([o] { cmd_versions(*o); });

    auto diff_ids = std::make_shared<std::pair<std::int64_t, std::int64_t>>();
    auto* diff = app.add_subcommand("diff", "What changed between two versions");
    add_common(diff, *o, false);
    diff->add_option("A", diff_ids->first, "version")->required();
    diff->add_option("B", diff_ids->second, "version")->required();
    diff->callback([o, diff_ids] { cmd_diff(*o, diff_ids->first, diff_ids->second); });

    auto rb_id = std::make_shared<std::int64_t>(0);
    auto* rb = app.add_subcommand("rollback", "Write version N again, as a new version");
    add_common(rb, *o, true);
    rb->add_option("N", *rb_id, "version")->required();
    rb->add_option("--author", o->author, "who (default: $USER)");
    rb->callback([o, rb_id] { cmd_rollback(*o, *rb_id); });
}

}  // namespace grl::rlc
