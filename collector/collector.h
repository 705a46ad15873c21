// grl-collector: one per zone. Receives nginx reports (PULL), derives per-host rates
// (grl::rates), sends the zone's usage to every controller of its region (one PUSH each) once
// per interval, and relays the controllers' instructions for its zone, its region and the
// global scope to the zone's nginx (SUB -> PUB). See docs/control-plane.md.
// collector.cpp: start-up, reports in, usage out; collector_metrics.cpp and
// collector_counters.h: /metrics; relay.{h,cpp}: the relay's thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "grl/daemon/connections.h"
#include "grl/daemon/curve.h"
#include "grl/daemon/http.h"
#include "grl/daemon/log.h"
#include "grl/daemon/loop.h"
#include "grl/daemon/metrics.h"
#include "grl/daemon/zmq.h"
#include "grl/control/curve_key_bindings.h"
#include "grl/control/early.h"
#include "grl/control/pending_use.h"
#include "grl/control/rates.h"
#include "grl/wire/report_reader.h"
#include "grl/wire/wire.h"
#include "grl/wire/wire_control.h"
#include "collector_counters.h"
#include "config.h"
#include "relay.h"

namespace grl::collector {

class Collector {
  public:
    Collector(Config cfg, ::zmq::context_t& ctx, daemon::Loop& loop);
    std::vector<std::pair<std::string, std::string>> endpoints() const;
    // SIGHUP: reads --curve-clients again; a bad file is refused whole (the old list stays).
    void reload_keys(const char* why);

  private:
    // A controller this collector pushes its zone usage to (one per --controller-usage).
    struct Upstream {
        std::string endpoint;
        ::zmq::socket_t push;
        std::unique_ptr<daemon::HandshakeWatch> watch;  // CURVE handshakes; whether connected
        std::uint64_t sent = 0;
        std::uint64_t dropped = 0;      // usage messages (whole sets or parts of them) not queued
        std::uint64_t unreachable = 0;  // of those, while no connection was up
        std::uint64_t queue_full = 0;   // of those, while connected (the controller lags)
    };
    // Start-up: the nginx side (reports in, instructions out), the controllers' side.
    void serve_nginx(::zmq::context_t& ctx, ::zmq::socket_t& pub);
    std::unique_ptr<daemon::HandshakeWatch> subscribe(::zmq::context_t& ctx, ::zmq::socket_t& sub,
                                                      bool curve_up);
    void push_to_controllers(::zmq::context_t& ctx, bool curve_up);
    void log_start(bool curve_up) const;
    void on_reports();
    // One report, `n` frames in frames_: true when the rate table took it as news.
    bool take_report(std::size_t n, std::uint64_t now, std::string& error);
    void take_quota_use(std::uint64_t now);
    bool refused_key(std::uint64_t now);
    bool wrong_zone();
    void log_verdict(rates::Verdict v, std::uint64_t now);
    void tick();
    void send_usage();
    void encode_cut(wire::ZoneUsage& u);
    bool push_usage();  // false: no controller took it
    void maybe_send_early();
    // collector_metrics.cpp
    std::string metrics();
    struct Scrape;  // what a scrape reads
    static const daemon::Family<Scrape> kBucketFamilies[];
    static const daemon::Family<Scrape> kCollectorFamilies[];
    static const daemon::Family<Scrape> kRelayFamilies[];

    Config cfg_;
    daemon::Loop& loop_;
    // Always: ZAP admits nginx's CURVE keys (curve_) and enforces --max-connections.
    std::unique_ptr<daemon::ZapHandler> zap_;
    bool curve_ = false;  // CURVE for nginx (--curve-clients)
    std::unique_ptr<daemon::EndpointLimit> report_limit_, publish_limit_;
    ::zmq::socket_t pull_;
    std::unique_ptr<Relay> relay_;
    std::vector<std::unique_ptr<Upstream>> upstreams_;
    std::unique_ptr<daemon::MetricsServer> http_;
    std::string report_ep_, publish_ep_;
    std::string topics_[3];

    rates::Table table_;
    // Per-key quota use of the reports accepted, until a zone usage carries it.
    rates::PendingUse pending_use_{rates::kMaxPendingKeys};
    wire::ReportView report_;  // zero-copy view into the frame being handled
    wire::ZoneUsage usage_;    // the last one sent
    std::vector<zmq::Frame> frames_;
    std::vector<std::string> parts_;  // the last zone usage, encoded (one message, or parts)
    std::uint64_t seq_ = 0;

    Counters stats_;                    // for /metrics
    std::uint64_t usage_bytes_ = 0;     // size of the last zone usage, all parts
    std::uint64_t usage_build_us_ = 0;  // time to build and encode it
    std::uint64_t last_report_mono_ = 0;
    std::uint64_t start_mono_ = 0;
    bool instructions_flowing_ = false;
    EarlyUsage early_{cfg_.interval_ms, start_mono_};  // usage before the tick when warming
    std::size_t last_fresh_ = 0;

    daemon::LogLimiter malformed_log_;
    daemon::LogLimiter send_log_;
    daemon::LogLimiter batch_log_;  // batches cut short: reports come faster than handled
    daemon::LogLimiter epoch_conflict_log_;
    daemon::LogLimiter full_log_;
    daemon::LogLimiter pending_log_;  // per-key quota use refused
    // With CURVE for nginx: which host each client key reports for (first come, one to
    // one); a report for another host is refused and counted by reason.
    CurveKeyBindings host_keys_;
    daemon::KeyListReloads client_list_{"--curve-clients", cfg_.nginx_clients_file};
    daemon::LogLimiter identity_log_;
    std::set<std::string> wrong_zone_hosts_;  // logged once each (bounded)
};

}  // namespace grl::collector
