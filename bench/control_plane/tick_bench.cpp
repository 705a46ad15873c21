// The controller's work per tick at fleet scale, in one process and without the network
// (issue 11 section 4; bench/control_plane/README.md): grl::control::Controller fed Z zones'
// zone_usage and P peers' region_usage of B buckets every tick (the same fleet as
// controller_sim.cpp), then timed: tick(), the dashboard's snapshot copy (Controller::status())
// and its rendering (render_state()), and the encoding of what the tick publishes (instructions
// and region usage in parts, as Daemon::publish does before sending). Thread CPU time per tick,
// median and min over --ticks.
//
// The intake of the zone usages before each tick is timed too (take_zone_usage with the early
// judgement the daemon asks of each usage), summed over the zones. With --read 1 it is what
// the daemon does with the bytes: each zone's usage, encoded in parts as grl-collector sends it
// (not timed), is read in place and taken by a control::UsageIntake, as in the daemon, so that
// the reading and the entries' first touch of cold memory are in the figure
// as they are in the controller (50 zones x 2 vectors of 10,000 entries are far more than the
// caches hold).
//
// On a shared machine CPU time still varies with the other jobs (caches); instructions do not:
// run it under callgrind with --collect-atstart=no and
// `--collect intake|tick|status|render|encode`, which toggles collection around that step only,
// and divide the total by --ticks:
//   valgrind --tool=callgrind --collect-atstart=no
//       build/bench/control_plane/grl_tick_bench --ticks 3 --collect tick
#include <time.h>
#include <valgrind/callgrind.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dashboard.h"
#include "grl/control/control.h"
#include "grl/control/usage_intake.h"
#include "grl/control/history.h"
#include "grl/wire/usage_parts.h"
#include "grl/wire/wire_control.h"
#include "sim_usage.h"

namespace {

struct Options {
    std::size_t zones = 50;
    std::size_t peers = 4;
    std::size_t buckets = 10000;
    std::size_t hosts_per_zone = 20;
    std::size_t ticks = 8;
    std::size_t warmup = 3;  // ticks before measuring (instances created, windows filled)
    double over = 0.01;      // share of buckets offered 1.5x their limit, the rest 0.5x
    bool read = false;       // the intake reads the zone usages' bytes (see above)
    // "", "intake", "tick", "status", "render", "encode": callgrind collects that step
    std::string collect;
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "grl_tick_bench: %s\nusage: grl_tick_bench [--zones 50] [--peers 4] "
                 "[--buckets 10000] [--hosts-per-zone 20] [--ticks 8] [--warmup 3] [--over 0.01] "
                 "[--read 0|1] [--collect intake|tick|status|render|encode]\n",
                 why);
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) usage(("missing value after " + a).c_str());
        const char* v = argv[++i];
        char* end = nullptr;
        auto count = [&]() {
            const unsigned long long n = std::strtoull(v, &end, 10);
            if (end == v || *end != '\0')
                usage(("invalid number \"" + std::string(v) + "\" for " + a).c_str());
            return static_cast<std::size_t>(n);
        };
        if (a == "--zones") {
            o.zones = count();
        } else if (a == "--peers") {
            o.peers = count();
        } else if (a == "--buckets") {
            o.buckets = count();
        } else if (a == "--hosts-per-zone") {
            o.hosts_per_zone = count();
        } else if (a == "--ticks") {
            o.ticks = std::max<std::size_t>(count(), 1);
        } else if (a == "--warmup") {
            o.warmup = count();
        } else if (a == "--over") {
            o.over = std::strtod(v, &end);
            if (end == v || *end != '\0' || o.over < 0 || o.over > 1)
                usage(("invalid share \"" + std::string(v) + "\" for --over").c_str());
        } else if (a == "--read") {
            if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0)
                usage(("invalid value \"" + std::string(v) + "\" for --read (0 or 1)").c_str());
            o.read = v[0] == '1';
        } else if (a == "--collect") {
            o.collect = v;
            if (o.collect != "intake" && o.collect != "tick" && o.collect != "status" &&
                o.collect != "render" && o.collect != "encode")
                usage(("invalid step \"" + o.collect + "\" for --collect").c_str());
        } else {
            usage(("unknown option " + a).c_str());
        }
    }
    return o;
}

double thread_cpu_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// Times one step of every measured tick; under callgrind, collects it when it is `collect`.
struct Step {
    const char* name;
    bool collected;
    std::vector<double> ms;
    template <class F>
    void run(bool measure, F&& f) {
        if (collected && measure) CALLGRIND_TOGGLE_COLLECT;
        const double t0 = thread_cpu_ms();
        f();
        const double t1 = thread_cpu_ms();
        if (collected && measure) CALLGRIND_TOGGLE_COLLECT;
        if (measure) ms.push_back(t1 - t0);
    }
    void add(double t_ms) {  // one more part of the last run's time
        if (ms.empty()) ms.push_back(0);
        ms.back() += t_ms;
    }
    void print() {
        std::sort(ms.begin(), ms.end());
        std::printf("%-28s median %8.2f ms  min %8.2f ms  (%zu ticks)\n", name, ms[ms.size() / 2],
                    ms.front(), ms.size());
    }
};

// One zone usage taken with the early judgement the daemon asks of it.
int g_early = 0;  // the judgements, so that none is optimised away

grl::control::Accepted take_judged(grl::control::Controller& c, grl::wire::ZoneUsage& u,
                                   const grl::control::Clock& now) {
    grl::control::Early e;
    const grl::control::Accepted a = c.take_zone_usage(u, now, nullptr, &e);
    g_early += e.new_rates + static_cast<int>(e.change);
    return a;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    constexpr std::uint64_t kIntervalMs = 250;
    constexpr std::uint64_t kLimitMrps = 100000;
    const std::size_t regions = o.peers + 1;
    const grl::sim::ZoneOffered zone_offered{kLimitMrps, o.buckets, o.zones, regions, o.over};
    const std::vector<std::string> names = grl::sim::bucket_names(o.buckets);
    std::vector<grl::wire::ZoneUsage> zones(o.zones);
    for (std::size_t z = 0; z < o.zones; ++z) {
        grl::wire::ZoneUsage& u = zones[z];
        u.source = "col-z" + std::to_string(z);
        u.region = "r1";
        u.zone = "z" + std::to_string(z);
        u.interval_ms = kIntervalMs;
        u.hosts = o.hosts_per_zone;
        for (std::size_t h = 0; h < o.hosts_per_zone; ++h)
            u.host_names.push_back(u.zone + "-h" + std::to_string(h));
        for (std::size_t i = 0; i < o.buckets; ++i)
            u.buckets.push_back(
                grl::sim::usage_bucket(names[i], zone_offered(i), kLimitMrps, u.hosts));
    }
    std::vector<grl::wire::RegionUsage> peers(o.peers);
    for (std::size_t p = 0; p < o.peers; ++p) {
        grl::wire::RegionUsage& u = peers[p];
        u.source = "ctl-peer" + std::to_string(p);
        u.region = "peer" + std::to_string(p);
        u.interval_ms = kIntervalMs;
        u.zones = o.zones;
        u.hosts = o.zones * o.hosts_per_zone;
        for (std::size_t i = 0; i < o.buckets; ++i)
            u.buckets.push_back(
                grl::sim::usage_bucket(names[i], zone_offered(i) * o.zones, kLimitMrps, u.hosts));
    }

    grl::control::Options opt;
    opt.name = "ctl";
    opt.region = "r1";
    opt.interval_ms = kIntervalMs;
    opt.ttl_ms = 2000;
    grl::control::Controller ctl(opt);
    grl::control::History history{grl::control::History::Options{}};
    const std::vector<std::pair<grl::control::InstanceKey, grl::control::HistoryPoint>> no_point;

    Step intake{"intake (zone usage, early)", o.collect == "intake", {}};
    Step tick{"tick()", o.collect == "tick", {}};
    Step status{"snapshot copy (status())", o.collect == "status", {}};
    Step render{"snapshot render", o.collect == "render", {}};
    Step encode{"encoding what is published", o.collect == "encode", {}};
    std::string body;
    std::vector<std::string> region_parts;
    std::size_t entries = 0, instances = 0, instruction_entries = 0, state_bytes = 0;
    grl::wire::ZoneUsage zu;
    grl::wire::RegionUsage ru;
    grl::control::UsageIntake usage_in(ctl, 1'000'000);
    std::vector<std::vector<std::string>> zone_parts(o.zones);
    std::string error;
    grl::control::TickOutput out;  // written over at every tick, as the daemon's
    for (std::size_t t = 0; t < o.warmup + o.ticks; ++t) {
        const bool measure = t >= o.warmup;
        const grl::control::Clock now{1000 + t * kIntervalMs, 1'800'000'000'000 + t * kIntervalMs};
        // Every zone and peer once per interval, as the network would bring them (the copy
        // not timed: controller_scale.py measures reading and assembling). Each zone's
        // take_zone_usage() is: the intake.
        auto refused = [](const std::string& source) {
            std::fprintf(stderr, "grl_tick_bench: usage of %s refused\n", source.c_str());
            std::exit(1);
        };
        if (measure) intake.ms.push_back(0);
        if (o.read) {
            for (std::size_t z = 0; z < o.zones; ++z) {
                zones[z].seq = t + 1;
                zones[z].ts_ms = now.wall_ms;
                if (!grl::wire::encode_parts(zones[z], zone_parts[z]))
                    refused(zones[z].source + " (does not fit 16 parts)");
            }
        }
        for (std::size_t z = 0; o.read && z < o.zones; ++z) {
            grl::control::Accepted a = grl::control::Accepted::Yes;
            Step part{intake.name, intake.collected, {}};
            part.run(measure, [&] {
                for (const std::string& bytes : zone_parts[z]) {
                    if (!usage_in.read_zone(bytes, error)) refused(zones[z].source + ": " + error);
                    const grl::control::UsageIntake::Taken got = usage_in.take_zone(now);
                    if (!got.taken()) continue;
                    a = got.accepted;
                    g_early += got.early.new_rates + static_cast<int>(got.early.change);
                }
            });
            if (measure) intake.add(part.ms.back());
            if (a != grl::control::Accepted::Yes) refused(zones[z].source);
        }
        for (const grl::wire::ZoneUsage& u : zones) {
            if (o.read) break;
            zu = u;
            zu.seq = t + 1;
            zu.ts_ms = now.wall_ms;
            grl::control::Accepted a{};
            Step part{intake.name, intake.collected, {}};
            part.run(measure, [&] { a = take_judged(ctl, zu, now); });
            if (measure) intake.add(part.ms.back());
            if (a != grl::control::Accepted::Yes) refused(zu.source);
        }
        for (const grl::wire::RegionUsage& u : peers) {
            ru = u;
            ru.seq = t + 1;
            ru.ts_ms = now.wall_ms;
            if (ctl.take_region_usage(ru, now, nullptr) != grl::control::Accepted::Yes)
                refused(ru.source);
        }
        tick.run(measure, [&] { ctl.tick(now, out); });  // the same output, as the daemon
        encode.run(measure, [&] {
            for (const grl::wire::Instructions& m : out.instructions) {
                body.clear();
                grl::wire::encode(m, body);
            }
            grl::wire::encode_parts(out.region_usage, region_parts);
        });
        grl::controller::DashboardSnapshot s;
        status.run(measure, [&] { s.buckets = ctl.status("", false); });
        std::string state;
        render.run(measure, [&] { state = grl::controller::render_state(s, history, no_point); });
        entries = (o.zones + o.peers) * o.buckets;
        instances = ctl.instances().size();
        instruction_entries = 0;
        for (const auto& m : out.instructions) instruction_entries += m.buckets.size();
        state_bytes = state.size();
    }
    std::printf(
        "%zu zones x %zu buckets + %zu peers: %zu usage entries per tick, %zu instances, "
        "%zu instruction entries, /api/state %zu bytes\n",
        o.zones, o.buckets, o.peers, entries, instances, instruction_entries, state_bytes);
    intake.print();
    tick.print();
    encode.print();
    status.print();
    render.print();
    return 0;
}
