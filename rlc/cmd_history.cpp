// grl-rlc's history commands: record, synth, import, prune (docs/rlc-history.md). Only
// wiring: options are parsed here and handed to the store, synth, CSV reader and recorder.
#include <CLI/CLI.hpp>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "csv_import.h"
#include "grl/daemon/log.h"
#include "prometheus_source.h"
#include "record.h"
#include "store.h"
#include "synth.h"
#include "units.h"

namespace grl::rlc {

namespace {

// Exit statuses: 1 the command failed (bad input data, store error), 2 a bad option value.
[[noreturn]] void fail(const std::string& command, int status, const std::string& message) {
    std::cerr << "grl-rlc " << command << ": error: " << message << "\n";
    throw CLI::RuntimeError(status);
}

// Runs `body`, turning any exception into an error line and exit status 1.
template <typename F>
void guarded(const std::string& command, F body) {
    try {
        body();
    } catch (const CLI::RuntimeError&) {
        throw;
    } catch (const std::exception& e) {
        fail(command, 1, e.what());
    }
}

template <typename T>
T value_or_fail(const std::string& command, const std::string& option, Parsed<T> p) {
    if (!p) fail(command, 2, option + ": " + p.error);
    return p.value;
}

std::int64_t now_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void add_synth(CLI::App& app) {
    struct Opts {
        std::string store, scope = "global", region, zone, interval = "60s", limit, candidate,
                           mode = "deny", end;
        std::vector<std::string> buckets, spikes, gaps;
        SynthSpec spec;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand(
        "synth", "Write weeks of synthetic history (seasonality, trend, noise, spikes, gaps)");
    c->add_option("--store", o->store, "History store (SQLite file, created if missing)")
        ->required();
    c->add_option("--bucket", o->buckets, "Bucket name (repeatable: one instance each)")
        ->required();
    c->add_option("--scope", o->scope, "global, region or zone")->capture_default_str();
    c->add_option("--region", o->region, "Region (region and zone scope)");
    c->add_option("--zone", o->zone, "Zone (zone scope)");
    c->add_option("--weeks", o->spec.weeks, "Weeks of history")->capture_default_str();
    c->add_option("--base", o->spec.base, "Mean offered r/s at the start, before seasonality")
        ->capture_default_str();
    c->add_option("--interval", o->interval, "Recording interval")->capture_default_str();
    c->add_option("--seed", o->spec.seed, "Seed: the same seed gives the same history")
        ->capture_default_str();
    c->add_option("--daily", o->spec.daily, "Daily swing (highest 15:00 UTC)")
        ->capture_default_str();
    c->add_option("--weekly", o->spec.weekly, "Weekly swing (highest Wednesday)")
        ->capture_default_str();
    c->add_option("--trend", o->spec.trend, "Growth per week")->capture_default_str();
    c->add_option("--noise", o->spec.noise, "Relative noise of each interval's mean")
        ->capture_default_str();
    c->add_option("--burst", o->spec.burst, "How far the peak tick is above the mean")
        ->capture_default_str();
    c->add_option("--spike", o->spikes, "DAY:HOUR:FACTOR, a one-hour spike (repeatable)");
    c->add_option("--gap", o->gaps, "DAY:HOURS or DAY:HOUR:HOURS without data (repeatable)");
    c->add_option("--limit", o->limit, "Limit in force (e.g. 500 or 500r/s; default: none)");
    c->add_option("--mode", o->mode, "deny or shadow")->capture_default_str();
    c->add_option("--candidate", o->candidate,
                  "A candidate limit evaluated beside it: its would-drops are recorded");
    c->add_option("--end", o->end,
                  "End of the history (unix seconds or ISO-8601 UTC; default: now)");
    c->callback([o] {
        const std::string cmd = "synth";
        SynthSpec spec = o->spec;
        spec.end_s = o->end.empty() ? now_s() : value_or_fail(cmd, "--end", parse_time_s(o->end));
        spec.interval_s =
            static_cast<std::int32_t>(value_or_fail(cmd, "--interval", parse_span_s(o->interval)));
        for (const auto& s : o->spikes)
            spec.spikes.push_back(value_or_fail(cmd, "--spike", parse_spike(s)));
        for (const auto& g : o->gaps)
            spec.gaps.push_back(value_or_fail(cmd, "--gap", parse_gap(g)));
        if (!o->limit.empty()) spec.limit_rps = value_or_fail(cmd, "--limit", parse_rps(o->limit));
        if (!o->candidate.empty())
            spec.candidate_rps = value_or_fail(cmd, "--candidate", parse_rps(o->candidate));
        std::optional<Mode> mode = parse_mode(o->mode);
        if (!mode) fail(cmd, 2, "--mode \"" + o->mode + "\": expected deny or shadow");
        spec.mode = *mode;
        std::string bad = validate(spec);
        if (!bad.empty()) fail(cmd, 2, bad);
        std::optional<Scope> scope = parse_scope(o->scope);
        if (!scope) fail(cmd, 2, "--scope \"" + o->scope + "\": expected global, region or zone");
        InstanceKey key;
        key.scope = *scope;
        if (*scope != Scope::Global && !valid_name(o->region))
            fail(cmd, 2,
                 "--region \"" + o->region + "\": a valid region name is required for " + o->scope +
                     " scope");
        if (*scope == Scope::Zone && !valid_name(o->zone))
            fail(cmd, 2,
                 "--zone \"" + o->zone + "\": a valid zone name is required for zone scope");
        if (*scope != Scope::Zone && !o->zone.empty())
            fail(cmd, 2, "--zone is only for zone scope");
        if (*scope == Scope::Global && !o->region.empty())
            fail(cmd, 2, "--region is not for global scope (summed over every region)");
        key.region = o->region;
        key.zone = o->zone;
        guarded(cmd, [&] {
            Store store(o->store);
            std::size_t samples = 0;
            for (const std::string& b : o->buckets) {
                if (!valid_name(b)) fail(cmd, 2, "--bucket \"" + b + "\": not a valid name");
                key.bucket = b;
                SynthSpec one = spec;
                one.seed = instance_seed(spec.seed, key);
                Series s{key, synthesize(one)};
                samples += s.samples.size();
                store.write({s}, WriteMode::Replace);  // one bucket per transaction: bounded memory
            }
            std::int64_t start = synth_start_s(spec);
            std::cout << "synth: " << o->buckets.size() << " bucket(s), " << samples
                      << " samples from " << format_time(start) << " to "
                      << format_time(start + std::int64_t{spec.weeks} * 7 * 86400) << " written to "
                      << o->store << "\n";
        });
    });
}

void add_import(CLI::App& app) {
    struct Opts {
        std::string store, prometheus, since = "35d", until, interval = "60s", scrape = "15s";
        std::vector<std::string> files;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand(
        "import",
        "Bring history in from CSV files (all checked before anything is written) or "
        "from a Prometheus server scraping the controllers");
    c->add_option("--store", o->store, "History store (SQLite file, created if missing)")
        ->required();
    c->add_option("files", o->files, "CSV files (columns: docs/rlc-history.md)");
    c->add_option("--prometheus", o->prometheus,
                  "http://HOST:PORT of a Prometheus server scraping the controllers");
    c->add_option("--since", o->since, "With --prometheus: from this long ago, or a time")
        ->capture_default_str();
    c->add_option("--until", o->until, "With --prometheus: up to this time (default: now)");
    c->add_option("--interval", o->interval, "With --prometheus: recording interval")
        ->capture_default_str();
    c->add_option("--scrape", o->scrape, "With --prometheus: its scrape interval")
        ->capture_default_str();
    c->callback([o] {
        const std::string cmd = "import";
        if (o->files.empty() == o->prometheus.empty())
            fail(cmd, 2, "give CSV files or --prometheus URL (one of the two)");
        std::vector<Series> all;
        std::size_t samples = 0;
        if (!o->prometheus.empty()) {
            PrometheusOptions p;
            p.url = o->prometheus;
            p.interval_s = static_cast<std::int32_t>(
                value_or_fail(cmd, "--interval", parse_span_s(o->interval)));
            p.scrape_s =
                static_cast<std::int32_t>(value_or_fail(cmd, "--scrape", parse_span_s(o->scrape)));
            std::int64_t until =
                o->until.empty() ? now_s() : value_or_fail(cmd, "--until", parse_time_s(o->until));
            // "35d" is a span back from --until; "1796040000" or an ISO time is a time.
            bool is_span =
                !o->since.empty() && !std::isdigit(static_cast<unsigned char>(o->since.back()));
            std::int64_t since = is_span
                                     ? until - value_or_fail(cmd, "--since", parse_span_s(o->since))
                                     : value_or_fail(cmd, "--since", parse_time_s(o->since));
            guarded(cmd, [&] { all = PrometheusSource(p).read(since, until); });
        }
        guarded(cmd, [&] {
            for (const std::string& f : o->files) {
                Parsed<std::vector<Series>> p = parse_history_csv(read_file(f), f);
                if (!p) fail(cmd, 1, p.error + " (nothing imported)");
                for (Series& s : p.value) all.push_back(std::move(s));
            }
            for (const Series& s : all) samples += s.samples.size();
            Store store(o->store);
            store.write(all, WriteMode::Replace);
            std::cout << "import: " << samples << " samples of " << all.size()
                      << " instance(s) written to " << o->store << "\n";
        });
    });
}

void add_prune(CLI::App& app) {
    struct Opts {
        std::string store, retention = "35d", rollup_after;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand("prune", "Delete history older than the retention");
    c->add_option("--store", o->store, "History store")->required();
    c->add_option("--retention", o->retention, "Keep this much history (e.g. 35d, 12h)")
        ->capture_default_str();
    c->add_option("--rollup-after", o->rollup_after,
                  "Fold samples older than this into hourly rows (default: never)");
    c->callback([o] {
        const std::string cmd = "prune";
        std::int64_t keep = value_or_fail(cmd, "--retention", parse_span_s(o->retention));
        std::int64_t rollup =
            o->rollup_after.empty()
                ? 0
                : value_or_fail(cmd, "--rollup-after", parse_span_s(o->rollup_after));
        guarded(cmd, [&] {
            Store store(o->store, false);
            std::int64_t before = now_s() - keep;
            std::int64_t n = store.prune(before);
            std::cout << "prune: " << n << " samples older than " << format_time(before)
                      << " deleted from " << o->store << "\n";
            if (rollup > 0) {
                std::int64_t r = store.rollup(now_s() - rollup);
                std::cout << "prune: " << r << " samples older than "
                          << format_time(now_s() - rollup) << " folded into hourly rows\n";
            }
        });
    });
}

void add_record(CLI::App& app) {
    struct Opts {
        std::string store, duration = "0", log_level = "info";
        RecordArgs rec;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand(
        "record", "Record every bucket instance's traffic from the controllers' /metrics");
    c->add_option("--store", o->store, "History store (SQLite file, created if missing)")
        ->required();
    add_record_args(c, o->rec, true, "");
    c->add_option("--duration", o->duration, "Stop after this long (0: at SIGTERM/SIGINT)")
        ->capture_default_str();
    c->add_option("--log-level", o->log_level, "debug, info, warn or error")->capture_default_str();
    c->callback([o] {
        const std::string cmd = "record";
        RecordOptions r = to_record_options(cmd, o->rec, "");
        r.store = o->store;
        if (o->duration != "0") {
            Parsed<std::uint64_t> d = parse_duration_ms(o->duration);
            if (!d) fail(cmd, 2, "--duration: " + d.error);
            r.duration_ms = static_cast<std::int64_t>(d.value);
        }
        std::optional<daemon::LogLevel> level = daemon::parse_log_level(o->log_level);
        if (!level)
            fail(cmd, 2, "--log-level \"" + o->log_level + "\": debug, info, warn or error");
        daemon::log_init("grl-rlc[record]", *level);
        int status = 0;
        guarded(cmd, [&] { status = run_record(r); });
        if (status != 0) throw CLI::RuntimeError(status);
    });
}

}  // namespace

void add_record_args(CLI::App* c, RecordArgs& a, bool controllers_required,
                     const std::string& prefix) {
    CLI::Option* ctl = c->add_option("--controller", a.controllers,
                                     "HOST:PORT of a controller's --metrics-bind (repeatable: "
                                     "every controller of every region)");
    if (controllers_required) ctl->required();
    c->add_option("--" + prefix + "interval", a.interval, "Recording interval (1s to 5m)")
        ->capture_default_str();
    c->add_option("--" + prefix + "poll", a.poll, "How often the controllers are polled")
        ->capture_default_str();
    c->add_option("--retention", a.retention, "Delete history older than this (hourly)")
        ->capture_default_str();
    c->add_option("--rollup-after", a.rollup_after,
                  "Fold samples older than this into hourly rows, hourly (default: never)");
}

RecordOptions to_record_options(const std::string& cmd, const RecordArgs& a,
                                const std::string& prefix) {
    RecordOptions r;
    r.controllers = a.controllers;
    const std::string interval = "--" + prefix + "interval", poll_name = "--" + prefix + "poll";
    std::int64_t iv = value_or_fail(cmd, interval, parse_span_s(a.interval));
    if (iv < 1 || iv > 300)
        fail(cmd, 2, interval + " \"" + a.interval + "\": 1s to 5m (peaks need short intervals)");
    r.interval_s = static_cast<std::int32_t>(iv);
    Parsed<std::uint64_t> poll = parse_duration_ms(a.poll);
    if (!poll || poll.value < 10 || static_cast<std::int64_t>(poll.value) > iv * 1000)
        fail(cmd, 2, poll_name + " \"" + a.poll + "\": 10ms up to the interval");
    r.poll_ms = static_cast<std::int64_t>(poll.value);
    r.retention_s = value_or_fail(cmd, "--retention", parse_span_s(a.retention));
    if (!a.rollup_after.empty())
        r.rollup_after_s = value_or_fail(cmd, "--rollup-after", parse_span_s(a.rollup_after));
    return r;
}

void add_history_commands(CLI::App& app) {
    add_record(app);
    add_synth(app);
    add_import(app);
    add_prune(app);
}

}  // namespace grl::rlc
