// grl_controller_sim: plays a region's collectors and its peer regions' controllers against
// one real grl-controller, and times the instructions it publishes (benchmark only; see
// bench/control_plane/controller_scale.py, which starts the controller and measures its CPU,
// memory and tick time).
//
// --zones collectors (one PUSH socket each, like a collector) each send a zone_usage of
// --buckets buckets every interval, at their own offset in the interval (spread evenly), in
// parts when it does not fit one message (wire::encode_parts, as grl-collector does).
// --peers peer controllers, each of its own region, send their region_usage the same way on
// one PUB socket the controller connects to (--peer). Every bucket is global, limit --limit
// r/s; a share --over of them is offered 1.5x its limit fleet-wide, the rest 0.5x, split evenly
// over all zones of all regions. Messages are encoded once and only their `ts_ms` and `seq`
// are patched each interval (fixed-width msgpack uint64), so that the simulator costs little
// beside the controller.
//
// SUB sockets on the controller's publish endpoint (and, with --relay, on a real collector's
// relay) timestamp every instruction message on receipt, before decoding any: propagation =
// receipt wall clock - the message's ts_ms (set by the controller when its tick starts).
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
#include <string>
#include <string_view>
#include <vector>

#include "grl/wire/usage_parts.h"
#include "grl/wire/wire.h"
#include "grl/wire/wire_control.h"
#include "sim_common.h"
#include "sim_usage.h"

namespace {

using grl::sim::die;
using grl::sim::mono_s;
using grl::sim::wall_s;

struct Options {
    std::size_t zones = 50;
    std::size_t peers = 4;
    std::size_t buckets = 10000;
    std::size_t hosts_per_zone = 20;
    double interval_s = 0.25;
    double duration_s = 30;
    double warmup_s = 5;
    double limit_rps = 100;
    double over = 0.01;
    std::string region = "r1";
    std::string usage_ep;    // the controller's --usage-bind
    std::string publish_ep;  // the controller's --publish-bind
    std::string peer_bind;   // bound here; the controller's --peer
    std::string relay_ep;    // optional: a collector's --publish-bind
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "--zones")
            o.zones = std::stoul(val());
        else if (a == "--peers")
            o.peers = std::stoul(val());
        else if (a == "--buckets")
            o.buckets = std::stoul(val());
        else if (a == "--hosts-per-zone")
            o.hosts_per_zone = std::stoul(val());
        else if (a == "--interval")
            o.interval_s = std::stod(val());
        else if (a == "--duration")
            o.duration_s = std::stod(val());
        else if (a == "--warmup")
            o.warmup_s = std::stod(val());
        else if (a == "--limit")
            o.limit_rps = std::stod(val());
        else if (a == "--over")
            o.over = std::stod(val());
        else if (a == "--region")
            o.region = val();
        else if (a == "--usage")
            o.usage_ep = val();
        else if (a == "--publish")
            o.publish_ep = val();
        else if (a == "--peer-bind")
            o.peer_bind = val();
        else if (a == "--relay")
            o.relay_ep = val();
        else
            die("unknown option " + a);
    }
    if (o.usage_ep.empty() || o.publish_ep.empty()) die("--usage and --publish are required");
    if (o.peers > 0 && o.peer_bind.empty()) die("--peers needs --peer-bind");
    return o;
}

// A big value that msgpack packs as uint64 (0xcf + 8 bytes), so that it can be patched.
constexpr std::uint64_t kPlaceholder = 0xfedcba9876543210ULL;

// One encoded message whose ts_ms and seq are patched in place before each send.
struct Template {
    std::string bytes;
    std::size_t ts_at = 0, seq_at = 0;  // offsets of the 8 value bytes

    static std::size_t find_u64(const std::string& b, std::string_view key) {
        std::string pat;
        pat += static_cast<char>(0xa0 | key.size());  // fixstr
        pat += key;
        pat += static_cast<char>(0xcf);
        std::size_t at = b.find(pat);
        if (at == std::string::npos) die("no fixed-width " + std::string(key) + " in a message");
        return at + pat.size();
    }
    explicit Template(std::string b) : bytes(std::move(b)) {
        ts_at = find_u64(bytes, "ts_ms");
        seq_at = find_u64(bytes, "seq");
    }
    static void put(std::string& b, std::size_t at, std::uint64_t v) {
        for (int i = 7; i >= 0; --i) {
            b[at + static_cast<std::size_t>(i)] = static_cast<char>(v & 0xff);
            v >>= 8;
        }
    }
    void stamp(std::uint64_t ts_ms, std::uint64_t seq) {
        put(bytes, ts_at, ts_ms);
        put(bytes, seq_at, seq);
    }
};

struct Sender {
    std::vector<Template> parts;
    double offset_s = 0;  // in the interval
    std::uint64_t seq = 0;
    double next_s = 0;
    bool peer = false;
    void* sock = nullptr;
};

using grl::sim::bucket_names;
using grl::sim::usage_bucket;

struct Stats {
    std::vector<double> prop_ms;
    std::uint64_t messages = 0, bytes = 0, max_bytes = 0, entries = 0, region_parts = 0,
                  region_bytes = 0, region_max_bytes = 0, malformed = 0;
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return -1;
    std::sort(v.begin(), v.end());
    std::size_t i = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
    return v[std::min(i, v.size() - 1)];
}

void* subscriber(void* ctx, const std::string& ep, bool peers_too) {
    std::vector<std::string> topics = {"grl/g/", "grl/r/", "grl/z/"};
    if (peers_too) topics.emplace_back(grl::wire::kPeerTopic);
    // Unbounded and a large buffer: the simulator must not drop what it times.
    return grl::sim::subscriber(ctx, ep, topics, {{ZMQ_RCVHWM, 0}, {ZMQ_RCVBUF, 64 << 20}});
}

// A message taken off a subscriber, stamped on receipt.
struct Received {
    double at_s;
    bool peer;
    std::string body;
};

// Takes every message pending on `sub` without decoding any: decoding an instruction message
// of 4096 entries takes milliseconds, and a message stamped after the previous one was decoded
// would count that time as propagation.
void take(void* sub, std::vector<Received>& out) {
    for (;;) {
        zmq_msg_t topic, body;
        zmq_msg_init(&topic);
        if (zmq_msg_recv(&topic, sub, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&topic);
            return;
        }
        const double now = wall_s();
        zmq_msg_init(&body);
        zmq_msg_recv(&body, sub, 0);
        std::string_view tv(static_cast<const char*>(zmq_msg_data(&topic)), zmq_msg_size(&topic));
        out.push_back(
            {now, tv == grl::wire::kPeerTopic,
             std::string(static_cast<const char*>(zmq_msg_data(&body)), zmq_msg_size(&body))});
        zmq_msg_close(&topic);
        zmq_msg_close(&body);
    }
}

// Counts what `take` received when `measure` (after the warm-up), and forgets it.
void count(std::vector<Received>& got, Stats& st, bool measure, grl::wire::Instructions& ins) {
    for (const Received& r : got) {
        if (!measure) continue;
        std::string error;
        if (r.peer) {
            ++st.region_parts;
            st.region_bytes += r.body.size();
            st.region_max_bytes = std::max<std::uint64_t>(st.region_max_bytes, r.body.size());
        } else if (grl::wire::decode(r.body, ins, error)) {
            ++st.messages;
            st.bytes += r.body.size();
            st.max_bytes = std::max<std::uint64_t>(st.max_bytes, r.body.size());
            st.entries += ins.buckets.size();
            st.prop_ms.push_back(r.at_s * 1000.0 - static_cast<double>(ins.ts_ms));
        } else {
            ++st.malformed;
        }
    }
    got.clear();
}

void print_stats(const char* name, const Stats& s, double seconds) {
    std::printf("\"%s\":{\"messages\":%" PRIu64
                ",\"messages_per_s\":%.2f,\"mean_bytes\":%.0f,"
                "\"max_bytes\":%" PRIu64 ",\"entries_per_s\":%.1f,\"malformed\":%" PRIu64
                ",\"region_usage_parts_per_s\":%.2f,\"region_usage_mean_part_bytes\":%.0f,"
                "\"region_usage_max_part_bytes\":%" PRIu64
                ",\"propagation_ms\":{\"p50\":%.2f,\"p99\":%.2f,\"max\":%.2f}}",
                name, s.messages, static_cast<double>(s.messages) / seconds,
                s.messages ? static_cast<double>(s.bytes) / static_cast<double>(s.messages) : 0.0,
                s.max_bytes, static_cast<double>(s.entries) / seconds, s.malformed,
                static_cast<double>(s.region_parts) / seconds,
                s.region_parts
                    ? static_cast<double>(s.region_bytes) / static_cast<double>(s.region_parts)
                    : 0.0,
                s.region_max_bytes, percentile(s.prop_ms, 0.5), percentile(s.prop_ms, 0.99),
                percentile(s.prop_ms, 1.0));
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    const std::vector<std::string> names = bucket_names(o.buckets);
    const std::uint64_t limit_mrps = static_cast<std::uint64_t>(o.limit_rps * 1000);
    const std::size_t regions = o.peers + 1;
    const grl::sim::ZoneOffered zone_offered{limit_mrps, o.buckets, o.zones, regions, o.over};

    void* ctx = zmq_ctx_new();
    zmq_ctx_set(ctx, ZMQ_IO_THREADS, 1);
    std::vector<Sender> senders;
    std::uint64_t zone_usage_bytes = 0, zone_usage_parts = 0;
    std::uint64_t region_usage_bytes = 0, region_usage_parts = 0;
    const double t_encode = mono_s();
    for (std::size_t z = 0; z < o.zones; ++z) {
        grl::wire::ZoneUsage u;
        u.source = "col-z" + std::to_string(z);
        u.region = o.region;
        u.zone = "z" + std::to_string(z);
        u.seq = kPlaceholder;
        u.ts_ms = kPlaceholder;
        u.interval_ms = static_cast<std::uint64_t>(o.interval_s * 1000);
        u.hosts = o.hosts_per_zone;
        for (std::size_t h = 0; h < o.hosts_per_zone; ++h)
            u.host_names.push_back(u.zone + "-h" + std::to_string(h));
        for (std::size_t i = 0; i < o.buckets; ++i)
            u.buckets.push_back(
                usage_bucket(names[i], zone_offered(i), limit_mrps, o.hosts_per_zone));
        std::vector<std::string> parts;
        if (!grl::wire::encode_parts(u, parts)) die("zone usage does not fit 16 parts");
        Sender s;
        for (std::string& p : parts) {
            if (z == 0) {
                zone_usage_bytes += p.size();
                ++zone_usage_parts;
            }
            s.parts.emplace_back(std::move(p));
        }
        s.offset_s = o.interval_s * static_cast<double>(z) / static_cast<double>(o.zones);
        s.sock = grl::sim::push(ctx, o.usage_ep);
        senders.push_back(std::move(s));
    }
    void* peer_pub = nullptr;
    if (o.peers > 0) {
        peer_pub = grl::sim::socket(ctx, ZMQ_PUB);
        if (zmq_bind(peer_pub, o.peer_bind.c_str()) != 0) die("bind " + o.peer_bind);
    }
    for (std::size_t p = 0; p < o.peers; ++p) {
        grl::wire::RegionUsage u;
        u.source = "ctl-peer" + std::to_string(p);
        u.region = "peer" + std::to_string(p);
        u.seq = kPlaceholder;
        u.ts_ms = kPlaceholder;
        u.interval_ms = static_cast<std::uint64_t>(o.interval_s * 1000);
        u.zones = o.zones;
        u.hosts = o.zones * o.hosts_per_zone;
        for (std::size_t i = 0; i < o.buckets; ++i)
            u.buckets.push_back(
                usage_bucket(names[i], zone_offered(i) * o.zones, limit_mrps, u.hosts));
        std::vector<std::string> parts;
        if (!grl::wire::encode_parts(u, parts)) die("region usage does not fit 16 parts");
        Sender s;
        for (std::string& b : parts) {
            if (p == 0) {
                region_usage_bytes += b.size();
                ++region_usage_parts;
            }
            s.parts.emplace_back(std::move(b));
        }
        s.offset_s = o.interval_s * (static_cast<double>(p) + 0.5) / static_cast<double>(o.peers);
        s.peer = true;
        s.sock = peer_pub;
        senders.push_back(std::move(s));
    }
    const double encode_s = mono_s() - t_encode;

    void* direct = subscriber(ctx, o.publish_ep, true);
    void* relay = o.relay_ep.empty() ? nullptr : subscriber(ctx, o.relay_ep, false);

    const double start = mono_s();
    const double measure_from = start + o.warmup_s;
    const double end = measure_from + o.duration_s;
    for (Sender& s : senders) s.next_s = start + s.offset_s;
    Stats st_direct, st_relay;
    grl::wire::Instructions ins;
    std::vector<Received> got_direct, got_relay;
    std::uint64_t sent = 0, send_failed = 0;
    for (;;) {
        const double now = mono_s();
        if (now >= end) break;
        double next = end;
        for (Sender& s : senders) {
            if (s.next_s <= now) {
                ++s.seq;
                const std::uint64_t ts = static_cast<std::uint64_t>(wall_s() * 1000);
                for (Template& t : s.parts) {
                    t.stamp(ts, s.seq);
                    int rc = 0;
                    if (s.peer) {
                        rc = zmq_send(s.sock, grl::wire::kPeerTopic.data(),
                                      grl::wire::kPeerTopic.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
                        if (rc >= 0)
                            rc = zmq_send(s.sock, t.bytes.data(), t.bytes.size(), ZMQ_DONTWAIT);
                    } else {
                        rc = zmq_send(s.sock, t.bytes.data(), t.bytes.size(), ZMQ_DONTWAIT);
                    }
                    ++(rc < 0 ? send_failed : sent);
                }
                s.next_s += o.interval_s;
                if (s.next_s < now) s.next_s = now + o.interval_s;  // skip, do not burst
            }
            next = std::min(next, s.next_s);
        }
        zmq_pollitem_t items[2] = {{direct, 0, ZMQ_POLLIN, 0}, {relay, 0, ZMQ_POLLIN, 0}};
        const double wait = next - mono_s();
        zmq_poll(items, relay ? 2 : 1, wait > 0 ? static_cast<long>(std::ceil(wait * 1000)) : 0);
        const bool measure = mono_s() >= measure_from;
        take(direct, got_direct);
        if (relay) take(relay, got_relay);
        count(got_direct, st_direct, measure, ins);
        count(got_relay, st_relay, measure, ins);
    }

    std::printf(
        "{\"zones\":%zu,\"peers\":%zu,\"buckets\":%zu,\"interval_s\":%g,"
        "\"over\":%g,\"encode_s\":%.2f,\"zone_usage_bytes\":%" PRIu64
        ",\"zone_usage_parts\":%" PRIu64 ",\"region_usage_in_bytes\":%" PRIu64
        ",\"region_usage_in_parts\":%" PRIu64 ",\"usage_messages_sent\":%" PRIu64
        ",\"usage_send_failed\":%" PRIu64 ",",
        o.zones, o.peers, o.buckets, o.interval_s, o.over, encode_s, zone_usage_bytes,
        zone_usage_parts, region_usage_bytes, region_usage_parts, sent, send_failed);
    print_stats("direct", st_direct, o.duration_s);
    if (relay) {
        std::printf(",");
        print_stats("relay", st_relay, o.duration_s);
    }
    std::printf("}\n");
    for (Sender& s : senders)
        if (!s.peer) zmq_close(s.sock);
    if (peer_pub) zmq_close(peer_pub);
    zmq_close(direct);
    if (relay) zmq_close(relay);
    zmq_ctx_term(ctx);
    return 0;
}
