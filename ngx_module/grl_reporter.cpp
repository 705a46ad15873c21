// The reporter: one per nginx instance, a process of its own that worker 0 of
// the current generation starts ("nginx: grl reporter"). Every
// grl_report_interval it sends the cumulative counters to the collector
// (ZMQ_PUSH, never blocking) and logs control-plane state changes; whenever
// the SUB socket is readable it applies instructions to the shm. It needs
// nothing of the worker but the shm, so ZeroMQ and its I/O thread live
// there and no worker that serves requests is ever multi-threaded (docs/design.md
// "The reporter process"). With grl_curve_keypair both sockets are CURVE
// clients of the collector, and a socket monitor reports refused handshakes.

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "grl/common/ratio.h"
#include "grl/plane/surge.h"
#include "grl/wire/wire.h"
#include "grl/zmq/monitor.h"
#include "grl/zmq/socket.h"
#include "grl_module.h"

namespace grl::ngx {
namespace {

struct Reporter {
    void* ctx = nullptr;
    std::uint64_t sent_wall_ms = 0;  // the stamp of the last report sent (wall ms; 0: none)
    void* push = nullptr;
    void* sub = nullptr;
    // The loop's timers (ngx_current_msec; 0: not armed): the next report, and the next
    // surge check.
    ngx_msec_t tick_at = 0;
    // While reports cannot be sent (collector away), the handshake monitors are also read
    // every kReconnectPollMs, so that endpoints whose handshake failed are dialled again on
    // time (Handshakes::due) and not only at the next tick.
    ngx_msec_t reconnect_at = 0;
    bool report_failing = false;  // the last report could not be sent
    // Surge damping (docs/design.md): one damper per configured bucket (table order), then
    // one per run-time definition (shm::kRuntimeSlots, definition order), checked every
    // kSurgeCheckMs while one of them holds a basis; the ratio it applies is the one
    // decide() reads. None (empty) with grl_surge_damping off.
    ngx_msec_t surge_at = 0;
    std::vector<surge::Damper> dampers;
    std::vector<surge::State> damper_logged;
    // Per configured bucket (table order): a keyed bucket's instruction limits keys (one log
    // line when it starts and one when it stops: log_key_limiting).
    std::vector<bool> keys_limiting;
    // The run-time bucket each run-time damper follows ("": none), as of runtime_gen.
    std::vector<std::string> runtime_names;
    std::uint64_t runtime_gen = ~std::uint64_t{0};
    MainConf* conf = nullptr;
    ngx_log_t* log = nullptr;
    std::string buf;      // reused encode buffer
    wire::Report report;  // reused report
    // The two reports before it (tick reports), for the `recent` counts.
    wire::Report prev, prev2;
    ngx_msec_t prev_ms = 0, prev2_ms = 0;
    // Reports still to carry `recent` counts: set when the collector (re)connects, which is
    // when it may lack a baseline for this host; steady-state reports go without them.
    int recent_left = 0;
    std::string topics[3];           // the three topics this host subscribes to
    std::vector<zmq::Frame> frames;  // reused by drain()
    ngx_msec_t last_malformed_log = 0;
    std::uint64_t malformed_since_log = 0;
    // Handshake monitors (PAIR sockets fed by zmq_socket_monitor, polled in the
    // loop): [0] the report socket, always, so that a report goes out as
    // soon as a (restarted) collector is connected; [1] the instruction socket,
    // with CURVE. Endpoints whose handshake failed are connected again (see
    // grl/zmq/handshake.h), so fixing the collector's key list needs nothing here.
    struct Monitor {
        void* pair = nullptr;
        void* socket = nullptr;
        const char* role = "";
        Handshakes handshakes{{}};
        std::vector<zmq::Frame> frames;
    } monitors[2];
};

// Often enough that a 15x surge is held within a few checks; each check only sums the
// counters of the configured buckets (no allocation, no syscall).
constexpr ngx_msec_t kSurgeCheckMs = 10;
constexpr ngx_msec_t kReconnectPollMs = 10;

std::uint64_t wall_ms() {
    struct timeval tv;
    gettimeofday(&tv, nullptr);
    return static_cast<std::uint64_t>(tv.tv_sec) * 1000 +
           static_cast<std::uint64_t>(tv.tv_usec) / 1000;
}

void malformed(Reporter& rep, const std::string& why) {
    shm::View(rep.conf->shm_base).header().instructions_malformed.fetch_add(1);
    ++rep.malformed_since_log;
    // At most one line per 10 s, however fast bad messages arrive.
    if (rep.last_malformed_log == 0 || ngx_current_msec - rep.last_malformed_log >= 10000) {
        ngx_log_error(NGX_LOG_WARN, rep.log, 0,
                      "grl: dropped malformed instruction message: %s (%uL in the last period)",
                      why.c_str(), rep.malformed_since_log);
        rep.last_malformed_log = ngx_current_msec;
        rep.malformed_since_log = 0;
    }
}

// Damper i's bucket: a configured one (table order), then run-time definition i - defs.
std::uint32_t damper_slot(const Reporter& rep, const shm::View& shm, std::size_t i) {
    const BucketTable& t = rep.conf->cpp->table;
    return i < t.defs.size() ? t.slots[i]
                             : shm.runtime_slot(static_cast<std::uint32_t>(i - t.defs.size()));
}

const std::string& damper_name(const Reporter& rep, std::size_t i) {
    const BucketTable& t = rep.conf->cpp->table;
    return i < t.defs.size() ? t.defs[i].name : rep.runtime_names[i - t.defs.size()];
}

// Follows the shm's run-time definitions (reloaded only when their generation changed): a
// definition that now names another bucket, or none, starts its damper afresh. A run-time
// definition whose name a configured bucket has is not that bucket's (the configured one
// wins) and gets no damper.
void sync_runtime(Reporter& rep, const shm::View& shm) {
    if (rep.runtime_names.empty()) return;  // damping off
    const std::uint64_t gen = shm.header().runtime_gen.load(std::memory_order_acquire);
    if (gen == rep.runtime_gen) return;
    const BucketTable& t = rep.conf->cpp->table;
    std::vector<std::string> names(rep.runtime_names.size());
    for (const RuntimeBucket& rb : load_runtime(shm, rep.runtime_gen)) {
        const std::size_t i = rb.slot - shm.runtime_slot(0);
        if (i < names.size() && t.find(rb.def.name) < 0) names[i] = rb.def.name;
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
        if (names[i] == rep.runtime_names[i]) continue;
        rep.dampers[t.defs.size() + i] = surge::Damper{};
        rep.damper_logged[t.defs.size() + i] = surge::State::NoBasis;
        rep.runtime_names[i] = std::move(names[i]);
    }
}

// Damper of the bucket `name` (configured or run-time), or -1.
int damper_of(const Reporter& rep, const std::string& name) {
    const BucketTable& t = rep.conf->cpp->table;
    const int i = t.find(name);
    if (i >= 0) return static_cast<std::size_t>(i) < rep.dampers.size() ? i : -1;
    for (std::size_t k = 0; k < rep.runtime_names.size(); ++k) {
        if (rep.runtime_names[k] == name) return static_cast<int>(t.defs.size() + k);
    }
    return -1;
}

// Writes damper i's ratio for its bucket, while the bucket's instruction is active.
void surge_check(Reporter& rep, const shm::View& shm, std::size_t i) {
    const std::string& name = damper_name(rep, i);
    if (name.empty()) return;  // a free run-time definition
    const std::uint32_t slot = damper_slot(rep, shm, i);
    shm::BucketSlot& s = shm.slot(slot);
    surge::Damper& d = rep.dampers[i];
    const ngx_msec_t now = ngx_current_msec;
    if (now >= s.expires_ms.load(std::memory_order_relaxed)) {
        d.clear();
        return;
    }
    const std::uint32_t ppm = d.check(now, shm.offered(slot));
    if (d.state() == surge::State::NoBasis) return;  // the control plane's ratio stands
    s.threshold.store(ppm_to_threshold(ppm), std::memory_order_relaxed);
    const surge::State st = d.state();
    const surge::State was = rep.damper_logged[i];
    rep.damper_logged[i] = st;
    if (st == was || (st == surge::State::Following && was == surge::State::NoBasis)) return;
    if (st == surge::State::Tightened)
        shm.header().surge_tightened.fetch_add(1, std::memory_order_relaxed);
    if (st == surge::State::Eased) shm.header().surge_eased.fetch_add(1, std::memory_order_relaxed);
    ngx_log_error(NGX_LOG_NOTICE, rep.log, 0,
                  "grl: bucket \"%s\" surge damping %s: offered %.1f r/s here against %.1f r/s "
                  "in the control plane's basis, this host's share %.1f r/s, ratio %.4f",
                  name.c_str(), std::string(surge::to_string(st)).c_str(), d.current_rps(),
                  d.basis_rps(), d.budget_rps(), static_cast<double>(ppm) / 1e6);
}

// The periodic check runs only while some damper holds a basis: without one (a controller
// that sends none, no report history yet, every instruction expired) a check could change
// nothing, and a 10 ms timer would wake the worker 100 times a second for nothing.
bool any_basis(const Reporter& rep) {
    for (const surge::Damper& d : rep.dampers) {
        if (d.has_basis()) return true;
    }
    return false;
}

void arm_surge_tick(Reporter& rep) {
    if (rep.dampers.empty() || rep.surge_at != 0 || !any_basis(rep)) return;
    rep.surge_at = ngx_current_msec + kSurgeCheckMs;
}

// Gives each bucket's damper (configured or run-time) the instruction just applied (an entry
// that lost to a fresher one held is not).
void feed_dampers(Reporter& rep, const shm::View& shm, const wire::Instructions& m) {
    sync_runtime(rep, shm);  // the message may have defined run-time buckets
    for (const wire::Instruction& in : m.buckets) {
        const int i = damper_of(rep, in.name);
        if (i < 0) continue;
        const auto k = static_cast<std::size_t>(i);
        const shm::BucketSlot& s = shm.slot(damper_slot(rep, shm, k));
        if (s.received_ms.load(std::memory_order_relaxed) != ngx_current_msec ||
            s.issued_ts_ms.load(std::memory_order_relaxed) != m.ts_ms) {
            continue;
        }
        rep.dampers[k].on_instruction({in.ratio_ppm, in.limit_mrps,
                                       in.has_basis ? in.basis_offered_mrps : 0,
                                       in.has_basis ? in.basis_ms : 0});
        surge_check(rep, shm, k);  // at once, not at the next check
    }
    arm_surge_tick(rep);
}

void log_keys_stopped(const Reporter& rep, std::size_t i, const char* why) {
    ngx_log_error(NGX_LOG_NOTICE, rep.log, 0, "grl: bucket \"%s\" stopped limiting keys (%s)",
                  rep.conf->cpp->table.defs[i].name.c_str(), why);
}

// One line when a keyed bucket's instruction starts naming keys over their limit, and one when
// it names none any more (docs/per-key.md): operators see a bucket begin and end limiting
// keys without a line per request or per message. Entries that lost to a fresher instruction
// held are not looked at.
void log_key_limiting(Reporter& rep, const shm::View& shm, const wire::Instructions& m) {
    const BucketTable& t = rep.conf->cpp->table;
    for (const wire::Instruction& in : m.buckets) {
        const int i = t.find(in.name);
        if (i < 0 || static_cast<std::size_t>(i) >= rep.keys_limiting.size()) continue;
        const auto k = static_cast<std::size_t>(i);
        const shm::BucketSlot& s = shm.slot(t.slots[k]);
        if (s.received_ms.load(std::memory_order_relaxed) != ngx_current_msec ||
            s.issued_ts_ms.load(std::memory_order_relaxed) != m.ts_ms) {
            continue;
        }
        bool limiting = rep.keys_limiting[k];
        const KeyLimiting change = key_limiting(limiting, in);
        rep.keys_limiting[k] = limiting;
        if (change == KeyLimiting::Started) {
            ngx_log_error(NGX_LOG_NOTICE, rep.log, 0,
                          "grl: bucket \"%s\" started limiting keys: %uz key(s) over its limit "
                          "of %.3f r/s for each key",
                          t.defs[k].name.c_str(), limited_keys(in),
                          static_cast<double>(in.limit_mrps) / 1000.0);
        } else if (change == KeyLimiting::Stopped) {
            log_keys_stopped(rep, k, "no key over its limit");
        }
    }
}

// Receives every pending instruction message without blocking.
void drain(Reporter& rep) {
    if (rep.sub == nullptr) return;
    shm::View shm(rep.conf->shm_base);
    wire::Instructions msg;
    std::string error;
    for (int guard = 0; guard < 10000; ++guard) {
        const std::size_t n = zmq::recv_frames(rep.sub, rep.frames, 2);
        if (n == 0) {
            if (zmq_errno() != EAGAIN && zmq_errno() != EINTR) {
                ngx_log_error(NGX_LOG_ERR, rep.log, 0, "grl: zmq recv: %s",
                              zmq_strerror(zmq_errno()));
            }
            return;
        }
        const bool ok = zmq::read_instruction(n, rep.frames[0].view(),
                                              n >= 2 ? rep.frames[1].view() : "", msg, error);
        if (!ok) {
            malformed(rep, error);
            continue;
        }
        // During a reload the old reporter keeps draining its socket but leaves
        // the shm to the new one: one writer of instructions at a time.
        if (shm.header().reporter_pid.load(std::memory_order_relaxed) !=
            static_cast<std::uint32_t>(ngx_pid)) {
            continue;
        }
        apply_instructions(shm, rep.conf->cpp->table, msg, ngx_current_msec,
                           rep.conf->instruction_ttl);
        feed_dampers(rep, shm, msg);
        log_key_limiting(rep, shm, msg);
    }
}

void log_state_changes(Reporter& rep) {
    shm::View shm(rep.conf->shm_base);
    ngx_msec_t now = ngx_current_msec;
    shm::PlaneState ps = plane_state(shm, now, rep.conf->instruction_ttl);
    auto old = static_cast<shm::PlaneState>(
        shm.header().plane_state.exchange(static_cast<std::uint32_t>(ps)));
    if (old != ps) {
        ngx_uint_t level = ps == shm::PlaneState::Expired ? NGX_LOG_WARN : NGX_LOG_NOTICE;
        ngx_log_error(
            level, rep.log, 0, "grl: control plane %s%s", std::string(shm::to_string(ps)).c_str(),
            ps == shm::PlaneState::Expired ? ", no instruction within the TTL: failing open" : "");
    }
    bool writer = shm.header().reporter_pid.load(std::memory_order_relaxed) ==
                  static_cast<std::uint32_t>(ngx_pid);
    for (const std::string& name : writer ? expire_runtime(shm, now) : std::vector<std::string>{}) {
        ngx_log_error(NGX_LOG_NOTICE, rep.log, 0,
                      "grl: run-time bucket \"%s\" expired and was removed, failing open",
                      name.c_str());
    }
    const BucketTable& t = rep.conf->cpp->table;
    for (std::size_t i = 0; i < t.defs.size(); ++i) {
        shm::BucketSlot& s = shm.slot(t.slots[i]);
        shm::PlaneState bs = bucket_state(s, now);
        auto prev = static_cast<shm::PlaneState>(s.state.exchange(static_cast<std::uint32_t>(bs)));
        if (prev != bs && bs != shm::PlaneState::Waiting) {
            ngx_log_error(NGX_LOG_NOTICE, rep.log, 0, "grl: bucket \"%s\" ratio %s",
                          t.defs[i].name.c_str(),
                          bs == shm::PlaneState::Active ? "active" : "expired, failing open");
        }
        if (bs == shm::PlaneState::Expired && i < rep.keys_limiting.size() &&
            rep.keys_limiting[i]) {
            rep.keys_limiting[i] = false;  // the keys' ratios expire with the instruction
            log_keys_stopped(rep, i, "instruction expired");
        }
    }
}

void redial(Reporter& rep, Reporter::Monitor& mon) {
    for (const std::string& e : mon.handshakes.due(ngx_current_msec)) {
        zmq_disconnect(mon.socket, e.c_str());  // ENOENT when libzmq already dropped it
        if (zmq_connect(mon.socket, e.c_str()) != 0) {
            ngx_log_error(NGX_LOG_ERR, rep.log, 0, "grl: connect \"%s\": %s", e.c_str(),
                          zmq_strerror(errno));
        }
    }
}

// Reads the queued handshake events: with CURVE, counts them, logs one line
// when a socket's handshakes go from working to failing or back, and connects
// failed endpoints again. True when the report socket completed a handshake.
bool check_handshakes(Reporter& rep) {
    shm::Header& h = shm::View(rep.conf->shm_base).header();
    const bool curve = rep.conf->cpp->curve();
    bool report_connected = false;
    for (Reporter::Monitor& mon : rep.monitors) {
        if (mon.pair == nullptr) continue;
        zmq::HandshakeEvent e;
        for (int guard = 0; guard < 1000 && zmq::next_handshake_event(mon.pair, mon.frames, e);
             ++guard) {
            const bool ok = e.ok;
            report_connected = report_connected || (ok && &mon == &rep.monitors[0]);
            if (!curve) continue;
            (ok ? h.curve_handshakes_ok : h.curve_handshakes_failed)
                .fetch_add(1, std::memory_order_relaxed);
            if (!mon.handshakes.record(ok, e.address, ngx_current_msec)) continue;
            if (ok) {
                ngx_log_error(NGX_LOG_NOTICE, rep.log, 0,
                              "grl: CURVE handshake of the %s socket with \"%s\" succeeded",
                              mon.role, e.address.c_str());
            } else {
                std::string why =
                    zmq::describe(e, {"collector", "this host", "grl_curve_server_key"});
                ngx_log_error(NGX_LOG_ERR, rep.log, 0,
                              "grl: CURVE handshake of the %s socket with \"%s\" %s; "
                              "retrying with backoff",
                              mon.role, e.address.c_str(), why.c_str());
            }
        }
        redial(rep, mon);
    }
    return report_connected;
}

// Sends a report. After the collector (re)connects, an extra report goes out
// at once, carrying the counts since the last tick at least half an interval
// old (`recent`), and the next two ticks' reports carry theirs since the
// previous tick: a collector that just started rates this host from one
// report over a representative span. Other reports go without them (in every
// report they cost the collector a sixth more CPU: docs/protocol.md).
void send_report(Reporter& rep, bool extra) {
    if (rep.push == nullptr) return;
    shm::View shm(rep.conf->shm_base);
    build_report(shm, rep.conf->cpp->table, rep.conf->cpp->id, rep.conf->report_interval, wall_ms(),
                 rep.report);
    const ngx_msec_t now = ngx_current_msec;
    if (rep.conf->cpp->any_keyed) {
        add_key_rates(shm, rep.conf->cpp->table, now, rep.report, rep.sent_wall_ms);
    }
    bool older = extra && now - rep.prev_ms < rep.conf->report_interval / 2;
    const wire::Report& base = older ? rep.prev2 : rep.prev;
    add_recent(rep.report, base,
               rep.recent_left > 0 ? now - (older ? rep.prev2_ms : rep.prev_ms) : 0);
    if (rep.recent_left > 0) --rep.recent_left;
    wire::encode(rep.report, rep.buf);
    // The report's first buckets are the configured ones, in table order; the run-time ones
    // follow, found by name.
    sync_runtime(rep, shm);
    const std::size_t ndefs = rep.conf->cpp->table.defs.size();
    for (std::size_t i = 0; i < rep.report.buckets.size() && !rep.dampers.empty(); ++i) {
        const wire::ReportBucket& b = rep.report.buckets[i];
        const int k = i < ndefs ? static_cast<int>(i) : damper_of(rep, b.name);
        if (k >= 0) rep.dampers[static_cast<std::size_t>(k)].on_report(rep.report.ts_ms, b.offered);
    }
    if (!extra) {  // rotate, keeping all three buffers allocated
        std::swap(rep.prev2, rep.prev);
        std::swap(rep.prev, rep.report);
        rep.prev2_ms = rep.prev_ms;
        rep.prev_ms = now;
    }
    if (zmq_send(rep.push, rep.buf.data(), rep.buf.size(), ZMQ_DONTWAIT) < 0) {
        // Collector absent or slow: drop it; the next cumulative report covers it, and the
        // per-key quota use it listed is listed again.
        if (rep.conf->cpp->any_keyed) {
            unlist_key_use(shm, rep.conf->cpp->table, extra ? rep.report : rep.prev);
        }
        shm.header().reports_dropped.fetch_add(1, std::memory_order_relaxed);
        rep.report_failing = true;
        if (rep.reconnect_at == 0) rep.reconnect_at = ngx_current_msec + kReconnectPollMs;
    } else {
        shm.header().reports_sent.fetch_add(1, std::memory_order_relaxed);
        rep.report_failing = false;
        rep.sent_wall_ms = extra ? rep.report.ts_ms : rep.prev.ts_ms;
    }
}

// Handles the queued handshake events; when the report socket (re)connected,
// the next three reports carry `recent` (one may come too soon after the
// collector's baseline, one may be lost). True in that case.
bool on_handshakes(Reporter& rep) {
    if (!check_handshakes(rep)) return false;
    rep.recent_left = 3;
    return true;
}

void on_tick(Reporter& rep) {
    drain(rep);
    on_handshakes(rep);  // events the loop has not looked at yet
    send_report(rep, false);
    log_state_changes(rep);
}

void on_surge_tick(Reporter& rep) {
    shm::View shm(rep.conf->shm_base);
    if (shm.header().reporter_pid.load(std::memory_order_relaxed) ==
        static_cast<std::uint32_t>(ngx_pid)) {
        sync_runtime(rep, shm);
        for (std::size_t i = 0; i < rep.dampers.size(); ++i) surge_check(rep, shm, i);
    }
}

// A socket with linger 0; with CURVE configured, a CURVE client of the
// collector. Its handshakes are watched by monitor `index` when it is the
// report socket or CURVE is on.
void* make_socket(Reporter& rep, int type, int index, const char* role,
                  const std::vector<std::string>& endpoints) {
    void* s = zmq_socket(rep.ctx, type);
    if (s == nullptr) throw std::runtime_error(std::string("zmq_socket: ") + zmq_strerror(errno));
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    // libzmq waits 1-2x this between attempts: a restarted collector has every host back
    // within 100 ms, before its first usage (sent half an interval after it starts).
    int reconnect_ms = 50;
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &reconnect_ms, sizeof(reconnect_ms));
    const Config& c = *rep.conf->cpp;
    const bool curve = c.curve();
    if (curve) {
        zmq::make_curve_client(s, c.curve_keypair, c.curve_server_key);
    } else if (index != 0) {
        return s;
    }
    std::string endpoint = "inproc://grl-monitor-" + std::to_string(index);
    zmq::monitor_handshakes(s, endpoint, curve);
    Reporter::Monitor& mon = rep.monitors[index];
    mon.role = role;
    mon.socket = s;
    mon.handshakes = Handshakes(endpoints);
    mon.pair = zmq_socket(rep.ctx, ZMQ_PAIR);
    if (mon.pair == nullptr || zmq_setsockopt(mon.pair, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_connect(mon.pair, endpoint.c_str()) != 0) {
        throw std::runtime_error(std::string("socket monitor: ") + zmq_strerror(errno));
    }
    return s;
}

// ZeroMQ's context and sockets, connected; the first report is due in one interval.
void open_sockets(Reporter& rep) {
    const Config& c = *rep.conf->cpp;
    rep.ctx = zmq_ctx_new();
    if (rep.ctx == nullptr) throw std::runtime_error(zmq_strerror(errno));
    if (!c.collector_endpoint.empty()) {
        rep.push = make_socket(rep, ZMQ_PUSH, 0, "report", {c.collector_endpoint});
        int one = 1, hwm = 4;
        zmq_setsockopt(rep.push, ZMQ_IMMEDIATE, &one, sizeof(one));
        zmq_setsockopt(rep.push, ZMQ_SNDHWM, &hwm, sizeof(hwm));
        if (zmq_connect(rep.push, c.collector_endpoint.c_str()) != 0) {
            throw std::runtime_error("connect " + c.collector_endpoint + ": " +
                                     zmq_strerror(errno));
        }
    }
    if (!c.instruction_endpoints.empty()) {
        rep.sub = make_socket(rep, ZMQ_SUB, 1, "instruction", c.instruction_endpoints);
        std::int64_t max = static_cast<std::int64_t>(wire::kMaxMessageBytes);
        zmq_setsockopt(rep.sub, ZMQ_MAXMSGSIZE, &max, sizeof(max));
        rep.topics[0] = wire::topic(Scope::Global, "", "");
        rep.topics[1] = wire::topic(Scope::Region, c.id.region, "");
        rep.topics[2] = wire::topic(Scope::Zone, c.id.region, c.id.zone);
        for (const std::string& t : rep.topics) {
            zmq_setsockopt(rep.sub, ZMQ_SUBSCRIBE, t.data(), t.size());
        }
        for (const std::string& e : c.instruction_endpoints) {
            if (zmq_connect(rep.sub, e.c_str()) != 0) {
                throw std::runtime_error("connect " + e + ": " + zmq_strerror(errno));
            }
        }
    }
    rep.keys_limiting.assign(c.table.defs.size(), false);
    // Damping needs both the instructions' basis and this host's own reports to find its
    // rate in it; the check is armed when a basis arrives (arm_surge_tick).
    if (rep.conf->surge_damping && !c.instruction_endpoints.empty() && rep.push != nullptr) {
        rep.dampers.resize(c.table.defs.size() + shm::kRuntimeSlots);
        rep.damper_logged.assign(rep.dampers.size(), surge::State::NoBasis);
        rep.runtime_names.assign(shm::kRuntimeSlots, std::string());
    }
    rep.tick_at = ngx_current_msec + rep.conf->report_interval;
}

void close_sockets(Reporter& rep) {
    if (rep.push) zmq_close(rep.push);
    if (rep.sub) zmq_close(rep.sub);
    for (Reporter::Monitor& mon : rep.monitors) {
        if (mon.pair) zmq_close(mon.pair);
    }
    if (rep.ctx) zmq_ctx_term(rep.ctx);
    rep.push = rep.sub = rep.ctx = nullptr;
    for (Reporter::Monitor& mon : rep.monitors) mon.pair = nullptr;
}

// logrotate moves the error log away and has the master reopen it (USR1); the master tells
// its workers, not this process, which keeps its own copy of the file descriptors. Once a
// second it checks whether a log's name still leads to the file it writes, and if not,
// opens the name again onto the same descriptor.
void follow_rotated_logs(ngx_log_t* log) {
    for (int guard = 0; log != nullptr && guard < 64; log = log->next, ++guard) {
        ngx_open_file_t* f = log->file;
        if (f == nullptr || f->fd == NGX_INVALID_FILE || f->name.len == 0) continue;
        const std::string name(reinterpret_cast<const char*>(f->name.data), f->name.len);
        struct stat now, ours;
        if (stat(name.c_str(), &now) != 0 || fstat(f->fd, &ours) != 0) continue;
        if (now.st_dev == ours.st_dev && now.st_ino == ours.st_ino) continue;
        const int fd = open(name.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
        if (fd < 0) continue;
        dup2(fd, f->fd);
        close(fd);
    }
}

// Closes every descriptor the worker had but stdin/out/err, the error logs' (files, and the
// socket of an `error_log syslog:` once the worker has opened it) and `ctl`: the listening
// sockets, the master's channel, the event loop's, and above all the connections the worker
// serves when it starts a reporter again, which would otherwise stay open here after the
// worker closed them (the client would never see them end). A log's descriptor closed here
// would stay in nginx's structures, and its number, reused by ZeroMQ, would get log lines.
void keep_only_logs(ngx_log_t* log, int ctl) {
    std::vector<int> keep = {ctl};
    for (int guard = 0; log != nullptr && guard < 64; log = log->next, ++guard) {
        if (log->file != nullptr && log->file->fd != NGX_INVALID_FILE)
            keep.push_back(log->file->fd);
        if (log->writer == ngx_syslog_writer && log->wdata != nullptr) {
            const auto* peer = static_cast<const ngx_syslog_peer_t*>(log->wdata);
            if (peer->conn.fd != static_cast<ngx_socket_t>(-1)) keep.push_back(peer->conn.fd);
        }
    }
    std::vector<int> open_fds;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (const dirent* e = readdir(d)) {
            if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
                open_fds.push_back(std::atoi(e->d_name));
        }
        closedir(d);
    }
    for (int fd : open_fds) {
        if (fd > 2 && std::find(keep.begin(), keep.end(), fd) == keep.end()) close(fd);
    }
}

// The reporter process's loop, until worker 0 says it shuts down (a byte on `ctl`) or exits
// (end of file on `ctl`).
void run(Reporter& rep, int ctl) {
    ngx_msec_t logs_at = ngx_current_msec + 1000;
    std::vector<zmq_pollitem_t> items;
    items.push_back({nullptr, ctl, ZMQ_POLLIN, 0});
    if (rep.sub) items.push_back({rep.sub, -1, ZMQ_POLLIN, 0});
    const std::size_t mon0 = items.size();
    for (Reporter::Monitor& mon : rep.monitors) {
        if (mon.pair) items.push_back({mon.pair, -1, ZMQ_POLLIN, 0});
    }
    for (;;) {
        ngx_time_update();
        ngx_msec_t now = ngx_current_msec;
        ngx_msec_t next = std::min(rep.tick_at, logs_at);
        if (rep.surge_at != 0) next = std::min(next, rep.surge_at);
        if (rep.reconnect_at != 0) next = std::min(next, rep.reconnect_at);
        const long timeout = next > now ? static_cast<long>(next - now) : 0;
        if (zmq_poll(items.data(), static_cast<int>(items.size()), timeout) < 0 &&
            zmq_errno() != EINTR) {
            throw std::runtime_error(std::string("zmq_poll: ") + zmq_strerror(zmq_errno()));
        }
        ngx_time_update();
        now = ngx_current_msec;
        if (items[0].revents != 0) return;  // worker 0 shuts down or is gone
        try {
            if (rep.sub && items[1].revents != 0) drain(rep);
            bool handshakes = false;
            for (std::size_t i = mon0; i < items.size(); ++i) handshakes |= items[i].revents != 0;
            if (handshakes && on_handshakes(rep)) send_report(rep, true);
            if (rep.reconnect_at != 0 && now >= rep.reconnect_at) {
                rep.reconnect_at = 0;
                if (on_handshakes(rep)) {
                    send_report(rep, true);  // re-arms the poll if it fails again
                } else if (rep.report_failing) {
                    rep.reconnect_at = now + kReconnectPollMs;
                }
            }
            if (now >= rep.tick_at) {
                rep.tick_at = now + rep.conf->report_interval;
                on_tick(rep);
            }
            if (rep.surge_at != 0 && now >= rep.surge_at) {
                on_surge_tick(rep);
                // Without a basis no check could change anything: feed_dampers re-arms it.
                rep.surge_at = any_basis(rep) ? now + kSurgeCheckMs : 0;
            }
        } catch (const std::exception& e) {
            ngx_log_error(NGX_LOG_ERR, rep.log, 0, "grl: reporter: %s", e.what());
        }
        if (now >= logs_at) {
            logs_at = now + 1000;
            follow_rotated_logs(rep.log);
        }
    }
}

// The reporter process, forked by worker 0 (still single-threaded): it leaves what the worker
// serves with, runs the loop, and exits when worker 0 does. It never returns.
[[noreturn]] void reporter_main(ngx_cycle_t* cycle, MainConf* m, int ctl) {
    ngx_pid = ngx_getpid();  // this process's own, in its log lines and the shm
    // nginx's signal handlers only raise flags its loop would read; this loop reads none.
    for (int sig :
         {SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH, SIGTERM, SIGQUIT, SIGINT, SIGALRM, SIGIO, SIGCHLD}) {
        signal(sig, SIG_DFL);
    }
    signal(SIGPIPE, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    keep_only_logs(cycle->log, ctl);
    ngx_setproctitle(const_cast<char*>("grl reporter"));
    int code = 0;
    auto rep = std::make_unique<Reporter>();
    rep->conf = m;
    rep->log = cycle->log;
    try {
        ngx_time_update();
        shm::View(m->shm_base).header().reporter_pid.store(static_cast<std::uint32_t>(ngx_pid));
        open_sockets(*rep);
        const Config& c = *m->cpp;
        ngx_log_error(NGX_LOG_NOTICE, rep->log, 0,
                      "grl: reporter started as host \"%s\" (zone \"%s\", region \"%s\"), "
                      "collector \"%s\", %uz instruction endpoint(s)%s%s",
                      c.id.host.c_str(), c.id.zone.c_str(), c.id.region.c_str(),
                      c.collector_endpoint.empty() ? "none" : c.collector_endpoint.c_str(),
                      c.instruction_endpoints.size(), c.curve() ? ", CURVE on" : "",
                      m->surge_damping ? "" : ", surge damping off");
        run(*rep, ctl);
    } catch (const std::exception& e) {
        // Fail open: the workers serve traffic without a control plane.
        ngx_log_error(NGX_LOG_ERR, rep->log, 0, "grl: reporter stopped: %s", e.what());
        code = 1;
    }
    // Worker 0 shuts down (a reload, or nginx stops): leave the collector at once, as the
    // worker's own timers used to, and stay until the worker exits, so that the worker never
    // sees this process end (nginx would log it as an unknown process).
    close_sockets(*rep);
    for (;;) {
        char byte;
        const ssize_t n = read(ctl, &byte, 1);
        if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
    _exit(code);
}

// ---- worker 0's side ------------------------------------------------------------------

// The reporter process as worker 0 sees it: one end of a socket pair, watched in the event
// loop. The reporter holds the other end; each sees the other exit as the end of the file.
struct Spawner {
    ngx_cycle_t* cycle = nullptr;
    MainConf* conf = nullptr;
    ngx_connection_t* conn = nullptr;
    ngx_pid_t pid = -1;
    ngx_msec_t started_ms = 0;
    ngx_event_t respawn;  // armed only when a reporter process ended less than 1 s after it began
};

Spawner* g_spawner = nullptr;

constexpr ngx_msec_t kRespawnMs = 1000;

void spawn(Spawner& sp);

void on_reporter_event(ngx_event_t* ev) noexcept {
    auto* c = static_cast<ngx_connection_t*>(ev->data);
    Spawner& sp = *g_spawner;
    if (c->close) {
        // Graceful shutdown began (ngx_close_idle_connections): the reporter leaves the
        // collector now and exits with this worker.
        c->close = 0;
        c->idle = 0;
        const char quit = 'q';
        if (write(c->fd, &quit, 1) < 0) {
            ngx_log_error(NGX_LOG_WARN, ev->log, ngx_errno, "grl: telling the reporter to stop");
        }
        return;
    }
    char buf[64];
    const ssize_t n = read(c->fd, buf, sizeof(buf));
    if (n > 0 || (n < 0 && (ngx_errno == NGX_EAGAIN || ngx_errno == NGX_EINTR))) return;
    ngx_close_connection(c);
    sp.conn = nullptr;
    if (ngx_exiting || ngx_quit || ngx_terminate) return;
    const ngx_msec_t ran = ngx_current_msec - sp.started_ms;
    ngx_log_error(NGX_LOG_ALERT, ev->log, 0,
                  "grl: reporter process %P ended after %M ms; starting another%s", sp.pid, ran,
                  ran < kRespawnMs ? " in 1 s" : "");
    if (ran < kRespawnMs) {
        ngx_add_timer(&sp.respawn, kRespawnMs);
    } else {
        spawn(sp);
    }
}

void on_respawn(ngx_event_t*) noexcept {
    if (g_spawner != nullptr && g_spawner->conn == nullptr) spawn(*g_spawner);
}

void spawn(Spawner& sp) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        ngx_log_error(NGX_LOG_ERR, sp.cycle->log, ngx_errno,
                      "grl: reporter not started: socketpair() failed");
        return;
    }
    const ngx_pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        reporter_main(sp.cycle, sp.conf, sv[1]);
    }
    close(sv[1]);
    if (pid < 0) {
        ngx_log_error(NGX_LOG_ERR, sp.cycle->log, ngx_errno,
                      "grl: reporter not started: fork() failed; serving without a control "
                      "plane");
        close(sv[0]);
        return;
    }
    sp.pid = pid;
    sp.started_ms = ngx_current_msec;
    ngx_connection_t* c = ngx_get_connection(sv[0], sp.cycle->log);
    if (c == nullptr || ngx_nonblocking(sv[0]) == -1) {
        ngx_log_error(NGX_LOG_ERR, sp.cycle->log, 0,
                      "grl: cannot watch the reporter process %P (no free connection)", pid);
        if (c != nullptr) ngx_free_connection(c);
        close(sv[0]);  // the reporter sees the end of the file and exits
        return;
    }
    c->read->handler = on_reporter_event;
    c->read->log = sp.cycle->log;
    c->log = sp.cycle->log;
    c->idle = 1;  // so that a graceful shutdown calls on_reporter_event with c->close
    if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
        ngx_close_connection(c);
        return;
    }
    sp.conn = c;
}

}  // namespace

ngx_int_t reporter_start(ngx_cycle_t* cycle) noexcept {
    if (ngx_worker != 0) return NGX_OK;
    auto* m =
        static_cast<MainConf*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_grl_module));
    if (m == nullptr || m->shm_base == nullptr) return NGX_OK;
    const Config& c = *m->cpp;
    if (c.collector_endpoint.empty() && c.instruction_endpoints.empty()) return NGX_OK;
    auto* sp = new (std::nothrow) Spawner();
    if (sp == nullptr) {
        ngx_log_error(NGX_LOG_ERR, cycle->log, 0, "grl: reporter not started: out of memory");
        return NGX_OK;  // fail open: the workers serve without a control plane
    }
    g_spawner = sp;
    sp->cycle = cycle;
    sp->conf = m;
    sp->respawn.handler = on_respawn;
    sp->respawn.log = cycle->log;
    sp->respawn.data = sp;
    sp->respawn.cancelable = 1;  // never delays a graceful shutdown
    spawn(*sp);
    return NGX_OK;
}

void reporter_stop(ngx_cycle_t*) noexcept {
    Spawner* sp = g_spawner;
    if (sp == nullptr) return;
    g_spawner = nullptr;
    if (sp->respawn.timer_set) ngx_del_timer(&sp->respawn);
    // This worker exits now. Its end of the socket pair stays open until it has (the kernel
    // closes it): the reporter then sees the end of the file and exits after the worker, which
    // never sees it end (nginx would log "unknown process ... exited").
    if (sp->conn != nullptr) {
        if (sp->conn->read->active) ngx_del_event(sp->conn->read, NGX_READ_EVENT, 0);
        sp->conn->fd = static_cast<ngx_socket_t>(-1);
        ngx_free_connection(sp->conn);
    }
    delete sp;
}

}  // namespace grl::ngx
