// grl_fleet_sim: plays N nginx hosts x B buckets reporting to a real grl-collector, and
// measures how fast the collector relays the controller's instructions (benchmark only; see
// bench/control_plane/scale.py, which starts the daemons and measures their CPU and memory).
//
// Every host sends one report per interval, at its own fixed offset in the interval (hosts
// spread evenly), with cumulative counters that grow at --rate requests per second per
// bucket. Reports go out over --connections PUSH sockets (each one TCP connection). A SUB
// socket on the collector's publish endpoint timestamps every instruction message on receipt:
// propagation = receipt wall clock - the message's ts_ms (set by the controller when it
// publishes), so it covers controller -> collector -> relay -> subscriber.
//
// Output: one JSON object on stdout.
#include <sys/time.h>
#include <time.h>
#include <zmq.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "grl/wire/wire.h"
#include "sim_common.h"

namespace {

std::uint64_t wall_ms() {
    struct timeval tv;
    gettimeofday(&tv, nullptr);
    return static_cast<std::uint64_t>(tv.tv_sec) * 1000 +
           static_cast<std::uint64_t>(tv.tv_usec) / 1000;
}

using grl::sim::die;
using grl::sim::mono_s;
using grl::sim::wall_s;

struct Options {
    std::size_t hosts = 1000;
    std::size_t buckets = 100;
    double interval_s = 1.0;
    double duration_s = 30;
    double warmup_s = 5;
    double rate = 10;  // r/s per host and bucket
    std::size_t connections = 64;
    std::string report_ep;
    std::string publish_ep;
    std::string zone = "z1";
    std::string region = "r1";
    // `recent` counts: "connect" like nginx (reports 2 and 3 of a host, after it connects),
    // "never", or "always" (every report but the first): to measure what they cost.
    std::string recent = "connect";
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "--hosts")
            o.hosts = std::strtoul(val().c_str(), nullptr, 10);
        else if (a == "--buckets")
            o.buckets = std::strtoul(val().c_str(), nullptr, 10);
        else if (a == "--interval")
            o.interval_s = std::atof(val().c_str());
        else if (a == "--duration")
            o.duration_s = std::atof(val().c_str());
        else if (a == "--warmup")
            o.warmup_s = std::atof(val().c_str());
        else if (a == "--rate")
            o.rate = std::atof(val().c_str());
        else if (a == "--connections")
            o.connections = std::strtoul(val().c_str(), nullptr, 10);
        else if (a == "--report")
            o.report_ep = val();
        else if (a == "--publish")
            o.publish_ep = val();
        else if (a == "--zone")
            o.zone = val();
        else if (a == "--region")
            o.region = val();
        else if (a == "--recent")
            o.recent = val();
        else
            die("unknown option " + a +
                " (--hosts N --buckets B --interval S --duration S --warmup S --rate R "
                "--connections C --report EP --publish EP --zone Z --region R "
                "--recent connect|never|always)");
    }
    if (o.report_ep.empty() || o.publish_ep.empty()) die("--report and --publish are required");
    if (o.recent != "connect" && o.recent != "never" && o.recent != "always")
        die("--recent: expected connect, never or always, not " + o.recent);
    if (o.hosts == 0 || o.buckets == 0 || o.connections == 0) die("counts must be positive");
    return o;
}

struct Host {
    std::string name;
    std::uint64_t epoch;
    std::uint64_t seq = 0;
    double offset;  // within the interval
    double next;    // monotonic time of the next report
};

}  // namespace

int main(int argc, char** argv) {
    Options o = parse(argc, argv);
    void* ctx = zmq_ctx_new();
    int io = 2;
    zmq_ctx_set(ctx, ZMQ_IO_THREADS, io);
    std::vector<void*> push(o.connections);
    for (auto& s : push) s = grl::sim::push(ctx, o.report_ep);
    void* sub = grl::sim::subscriber(ctx, o.publish_ep,
                                     {grl::wire::topic(grl::Scope::Global, "", ""),
                                      grl::wire::topic(grl::Scope::Region, o.region, ""),
                                      grl::wire::topic(grl::Scope::Zone, o.region, o.zone)});

    std::mt19937_64 rng(42);
    std::vector<Host> hosts(o.hosts);
    const double start = mono_s() + 0.5;
    for (std::size_t i = 0; i < o.hosts; ++i) {
        hosts[i].name = "sim-" + std::to_string(i);
        hosts[i].epoch = rng() | 1;
        hosts[i].offset = o.interval_s * static_cast<double>(i) / static_cast<double>(o.hosts);
        hosts[i].next = start + hosts[i].offset;
    }
    // Every host reports the same configuration (one nginx.conf across the fleet); one bucket
    // in ten is zone-scoped, one in ten shadow.
    grl::wire::Report r;
    r.zone = o.zone;
    r.region = o.region;
    r.interval_ms = static_cast<std::uint64_t>(o.interval_s * 1000);
    r.buckets.resize(o.buckets);
    for (std::size_t b = 0; b < o.buckets; ++b) {
        auto& e = r.buckets[b];
        e.name = "bucket-" + std::to_string(b);
        e.scope = b % 10 == 3 ? grl::Scope::Zone : grl::Scope::Global;
        e.mode = b % 10 == 7 ? grl::Mode::Shadow : grl::Mode::Deny;
        e.limit_mrps = 1000000 + 1000 * b;
    }

    std::string buf;
    std::uint64_t sent = 0, send_fail = 0, bytes = 0;
    std::vector<double> lat;  // ms, after the warm-up
    std::uint64_t instr = 0, instr_bytes = 0;
    std::size_t conn = 0;
    const double measure_from = start + o.warmup_s;
    const double end = start + o.warmup_s + o.duration_s;
    std::size_t next_host = 0;  // hosts are sorted by next send time (round-robin order)
    for (;;) {
        double now = mono_s();
        if (now >= end) break;
        // Send every report that is due.
        while (hosts[next_host].next <= now) {
            Host& h = hosts[next_host];
            double elapsed = h.next - start;
            ++h.seq;
            r.host = h.name;
            r.epoch = h.epoch;
            r.seq = h.seq;
            r.ts_ms = wall_ms();
            const bool recent = o.recent == "always"    ? h.seq > 1
                                : o.recent == "connect" ? h.seq == 2 || h.seq == 3
                                                        : false;
            r.recent_ms = recent ? r.interval_ms : 0;
            const std::uint64_t step = static_cast<std::uint64_t>(o.interval_s * o.rate);
            for (std::size_t b = 0; b < o.buckets; ++b) {
                auto& e = r.buckets[b];
                std::uint64_t total = static_cast<std::uint64_t>(elapsed * o.rate);
                e.offered = total;
                e.dropped = total / 4;
                e.admitted = total - e.dropped;
                e.shadow_dropped = e.mode == grl::Mode::Shadow ? total / 3 : 0;
                e.has_recent = r.recent_ms > 0;
                e.recent = {step, step - step / 4, step / 4,
                            e.mode == grl::Mode::Shadow ? step / 3 : 0};
            }
            buf.clear();
            grl::wire::encode(r, buf);
            if (zmq_send(push[conn], buf.data(), buf.size(), ZMQ_DONTWAIT) < 0) {
                ++send_fail;
            } else {
                ++sent;
                bytes += buf.size();
            }
            conn = (conn + 1) % push.size();
            h.next += o.interval_s;
            next_host = (next_host + 1) % hosts.size();
        }
        // Receive instructions until the next report is due.
        double wait = hosts[next_host].next - mono_s();
        zmq_pollitem_t item = {sub, 0, ZMQ_POLLIN, 0};
        // Round up: a busy loop here would make the simulator, not the collector, the limit.
        int rc = zmq_poll(&item, 1, wait > 0 ? static_cast<long>(std::ceil(wait * 1000)) : 0);
        if (rc <= 0) continue;
        for (;;) {
            zmq_msg_t topic, body;
            zmq_msg_init(&topic);
            if (zmq_msg_recv(&topic, sub, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&topic);
                break;
            }
            double t_recv = wall_s();
            zmq_msg_init(&body);
            zmq_msg_recv(&body, sub, 0);
            grl::wire::Instructions m;
            std::string err;
            std::string_view bv(static_cast<const char*>(zmq_msg_data(&body)), zmq_msg_size(&body));
            if (grl::wire::decode(bv, m, err) && mono_s() >= measure_from) {
                lat.push_back(t_recv * 1000.0 - static_cast<double>(m.ts_ms));
                ++instr;
                instr_bytes += bv.size();
            }
            zmq_msg_close(&topic);
            zmq_msg_close(&body);
        }
    }
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double p) {
        if (lat.empty()) return -1.0;
        std::size_t k =
            std::min(lat.size() - 1, static_cast<std::size_t>(p * static_cast<double>(lat.size())));
        return lat[k];
    };
    std::printf("{\"hosts\":%zu,\"buckets\":%zu,\"interval_s\":%g,\"reports_sent\":%" PRIu64
                ",\"reports_failed\":%" PRIu64
                ",\"report_bytes_avg\":%.1f,\"report_rate\":%.1f,"
                "\"instructions\":%" PRIu64
                ",\"instruction_bytes_avg\":%.1f,"
                "\"propagation_ms\":{\"p50\":%.2f,\"p90\":%.2f,\"p99\":%.2f,\"max\":%.2f}}\n",
                o.hosts, o.buckets, o.interval_s, sent, send_fail,
                sent ? static_cast<double>(bytes) / static_cast<double>(sent) : 0.0,
                static_cast<double>(sent) / (o.warmup_s + o.duration_s), instr,
                instr ? static_cast<double>(instr_bytes) / static_cast<double>(instr) : 0.0,
                pct(0.5), pct(0.9), pct(0.99), lat.empty() ? -1.0 : lat.back());
    for (auto* s : push) zmq_close(s);
    zmq_close(sub);
    zmq_ctx_term(ctx);
    return 0;
}
