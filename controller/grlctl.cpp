// grlctl: the operator's tool for a grl-controller's admin endpoint (docs/control-plane.md,
// "grlctl"). One request, one reply (admin_request / admin_reply, docs/protocol.md);
// human-readable tables by default, --json for scripts.
//
// Exit status: 0 done, 1 the controller refused (the reason is printed), 2 usage error,
// 3 no answer from the controller.
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "grl/common/quota.h"
#include "grl/daemon/curve.h"
#include "grl/daemon/json.h"
#include "grl/daemon/zmq.h"
#include "grl/wire/wire_control.h"
#include "grlctl_config.h"
#include "grlctl_explain.h"
#include "grlctl_format.h"
#include "grlctl_top.h"
#include "status_json.h"

using namespace grl;
using grlctl::ratio;
using grlctl::rps;
using grlctl::utc;

namespace {

std::uint64_t now_ms() {
    struct timeval tv;
    gettimeofday(&tv, nullptr);
    return static_cast<std::uint64_t>(tv.tv_sec) * 1000 +
           static_cast<std::uint64_t>(tv.tv_usec) / 1000;
}

std::string kind_suffix(MatchKind k) {
    return k == MatchKind::Prefix ? "_prefix" : k == MatchKind::Regex ? "_regex" : "";
}

std::string match_text(const wire::RuntimeMatch& m) {
    std::string s;
    if (!m.caller.empty()) s += "caller" + kind_suffix(m.caller_kind) + "=" + m.caller;
    if (!m.procedure.empty()) {
        s += s.empty() ? "" : " ";
        s += "procedure" + kind_suffix(m.procedure_kind) + "=" + m.procedure;
    }
    return s;
}

std::string where(const wire::BucketStatus& b) {
    switch (b.scope) {
        case Scope::Global: return "-";
        case Scope::Region: return b.region;
        case Scope::Zone: return b.zone;
    }
    return "-";
}

// A plain-text table: columns sized to their widest cell.
void print_table(const std::vector<std::vector<std::string>>& rows) {
    std::vector<std::size_t> w;
    for (const auto& r : rows) {
        if (w.size() < r.size()) w.resize(r.size(), 0);
        for (std::size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
    }
    for (const auto& r : rows) {
        std::string line;
        for (std::size_t i = 0; i < r.size(); ++i) {
            line += r[i];
            if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
        }
        std::printf("%s\n", line.c_str());
    }
}

// ---------------------------------------------------------------------------------------------
// JSON rendering of a reply

// A key's hash as errors and `grlctl keys` show it (16 hex digits).
std::string key_hash(std::uint64_t h) {
    char b[24];
    std::snprintf(b, sizeof(b), "0x%016" PRIx64, h);
    return b;
}

using Json = nlohmann::ordered_json;
using daemon::json_number;

Json peers_json(const std::vector<wire::PeerStatus>& peers) {
    Json out = Json::array();
    for (const auto& p : peers) {
        Json j{{"controller", p.source},
               {"region", p.region},
               {"age_ms", p.age_ms},
               {"limits_digest", p.limits_digest},
               {"fresh", p.fresh}};
        if (p.usage_v) j["usage_v"] = p.usage_v;
        out.push_back(std::move(j));
    }
    return out;
}

Json keys_json(const std::vector<wire::KeyStatus>& keys) {
    Json out = Json::array();
    for (const auto& k : keys) {
        out.push_back({{"name", k.name},
                       {"scope", to_string(k.scope)},
                       {"region", k.region},
                       {"zone", k.zone},
                       {"limit_rps", json_number(k.limit_mrps / 1000.0)},
                       {"ratio", json_number(k.ratio_ppm / 1e6)},
                       {"hash", key_hash(k.key.hash)},
                       {"key", k.key.text},
                       {"offered_rps", json_number(k.key.offered_mrps / 1000.0)},
                       {"dropped_rps", json_number(k.key.dropped_mrps / 1000.0)},
                       {"hosts", k.key.hosts},
                       {"used", k.key.used}});  // a quota per key's use in the window
    }
    return out;
}

std::string to_json(const wire::AdminReply& r) {
    Json j{{"ok", r.ok},
           {"error", r.error},
           {"controller", r.source},
           {"region", r.region},
           {"interval_ms", r.interval_ms},
           {"ttl_ms", r.ttl_ms}};
    Json buckets = Json::array();
    for (const auto& b : r.buckets) buckets.push_back(controller::bucket_status_json(b));
    j["buckets"] = std::move(buckets);
    Json zones = Json::array();
    for (const auto& z : r.zones) zones.push_back(controller::zone_status_json(z));
    j["zones"] = std::move(zones);
    j["peers"] = peers_json(r.peers);
    j["limits"] = {{"file", r.limits.file},           {"ok", r.limits.ok},
                   {"error", r.limits.error},         {"digest", r.limits.digest},
                   {"loaded_ms", r.limits.loaded_ms}, {"buckets", r.limits.buckets},
                   {"version", r.limits.version},     {"store_error", r.limits.store_error}};
    j["keys"] = keys_json(r.keys);
    return daemon::json_text(j);
}

// ---------------------------------------------------------------------------------------------
// Human-readable output

void print_buckets(const wire::AdminReply& r, bool hosts) {
    if (r.buckets.empty()) {
        std::printf("no buckets (no zone usage yet, or no bucket matches)\n");
        return;
    }
    std::vector<std::vector<std::string>> rows = {{"BUCKET", "SCOPE", "WHERE", "OFFERED",
                                                   "ADMITTED", "LIMIT", "RATIO", "MODE", "HOSTS",
                                                   "FROM", "CANDIDATE"}};
    for (const auto& b : r.buckets) {
        std::string from =
            b.limit_source == b.mode_source ? b.limit_source : b.limit_source + "/" + b.mode_source;
        if (b.has_match) from += ",runtime";
        if (b.expires_ms) from += ",until " + utc(b.expires_ms);
        std::string mode(to_string(b.mode));
        if (b.mode == Mode::Shadow && b.shadow_dropped_mrps)
            mode += " (" + rps(b.shadow_dropped_mrps) + " r/s)";
        // A limit soaking beside the enforced one (grl-rlc's rollout): what it would drop.
        std::string candidate = "-";
        if (b.candidate_limit_mrps)
            candidate = rps(*b.candidate_limit_mrps) + " (would drop " +
                        rps(b.candidate_would_drop_mrps) + ")";
        // A keyed bucket's limit is each key's; its own ratio is 0, its keys' are counted.
        std::string limit = rps(b.limit_mrps) + (b.keyed ? " per key" : "");
        std::string rat =
            b.keyed ? std::to_string(b.keys_limited) + " key(s) limited" : ratio(b.ratio_ppm);
        rows.push_back({b.name, std::string(to_string(b.scope)), where(b), rps(b.offered_mrps),
                        rps(b.admitted_mrps), limit, rat, mode, std::to_string(b.hosts), from,
                        candidate});
    }
    print_table(rows);
    std::printf("(rates in requests per second, averaged over the controller's window)\n");
    if (hosts) {
        for (const auto& b : r.buckets) {
            std::string h;
            for (const auto& n : b.host_names) h += " " + n;
            std::printf("%s [%s]:%s\n", b.name.c_str(), where(b).c_str(),
                        h.empty() ? " -" : h.c_str());
        }
    }
}

void print_keys(const wire::AdminReply& r, const std::string& name) {
    if (r.keys.empty()) {
        std::printf("no keys of bucket \"%s\" yet (none reported over the hosts' threshold)\n",
                    name.c_str());
        return;
    }
    // A quota per key: each key's use in the window too (docs/design/009-per-key-quotas.md).
    const bool quota = std::any_of(r.keys.begin(), r.keys.end(),
                                   [](const wire::KeyStatus& k) { return k.key.used != 0; });
    std::vector<std::vector<std::string>> rows = {
        {"INSTANCE", "KEY", "OFFERED", "DROPPED", "RATIO", "HOSTS", "LIMIT"}};
    if (quota) rows[0].push_back("USED");
    for (const auto& k : r.keys) {
        wire::BucketStatus at;
        at.scope = k.scope;
        at.region = k.region;
        at.zone = k.zone;
        rows.push_back(
            {std::string(to_string(k.scope)) + (k.scope == Scope::Global ? "" : " " + where(at)),
             k.key.text.empty() ? key_hash(k.key.hash) : k.key.text, rps(k.key.offered_mrps),
             rps(k.key.dropped_mrps), ratio(k.ratio_ppm), std::to_string(k.key.hosts),
             k.limit_mrps == kNoRateMrps ? "quota only" : rps(k.limit_mrps) + " per key"});
        if (quota) rows.back().push_back(std::to_string(k.key.used));
    }
    print_table(rows);
    std::printf(
        "(rates in requests per second: offered averaged over the controller's window, "
        "dropped as last reported; keys sent hashed show their hash)\n");
}

void print_show(const wire::AdminReply& r, const std::string& name) {
    if (r.buckets.empty()) {
        std::printf("no bucket \"%s\" known to controller %s\n", name.c_str(), r.source.c_str());
        return;
    }
    for (const auto& b : r.buckets) {
        std::printf("bucket %s (%s%s%s)\n", b.name.c_str(), std::string(to_string(b.scope)).c_str(),
                    b.scope == Scope::Global ? "" : " ",
                    b.scope == Scope::Global ? "" : where(b).c_str());
        std::printf("  offered    %s r/s\n  admitted   %s r/s\n", rps(b.offered_mrps).c_str(),
                    rps(b.admitted_mrps).c_str());
        if (b.mode == Mode::Shadow)
            std::printf("  would drop %s r/s (shadow)\n", rps(b.shadow_dropped_mrps).c_str());
        if (b.candidate_limit_mrps)
            std::printf("  candidate  %s r/s, would drop %s r/s (not enforced)\n",
                        rps(*b.candidate_limit_mrps).c_str(),
                        rps(b.candidate_would_drop_mrps).c_str());
        std::printf("  limit      %s r/s (from %s)\n  mode       %s (from %s)\n  ratio      %s\n",
                    rps(b.limit_mrps).c_str(), b.limit_source.c_str(),
                    std::string(to_string(b.mode)).c_str(), b.mode_source.c_str(),
                    ratio(b.ratio_ppm).c_str());
        if (b.expires_ms) std::printf("  override expires %s\n", utc(b.expires_ms).c_str());
        if (b.limit_source == "removed")
            std::printf(
                "  removed    a run-time bucket no longer published; its hosts drop it "
                "when its ratio expires there\n");
        if (b.has_match) std::printf("  run-time bucket: %s\n", match_text(b.match).c_str());
        std::printf("  hosts      %" PRIu64 "\n", b.hosts);
        for (const auto& d : b.definitions) {
            std::printf("    %" PRIu64 " host(s) define it as %s, %s, %s r/s\n", d.hosts,
                        std::string(to_string(d.def.scope)).c_str(),
                        std::string(to_string(d.def.mode)).c_str(), rps(d.def.limit_mrps).c_str());
        }
        std::string h;
        for (const auto& n : b.host_names) h += " " + n;
        std::printf("  reporting hosts of region %s:%s\n", r.region.c_str(),
                    h.empty() ? " -" : h.c_str());
    }
}

void print_status(const wire::AdminReply& r) {
    std::printf("controller %s, region %s, interval %" PRIu64 " ms, ttl %" PRIu64 " ms\n",
                r.source.c_str(), r.region.c_str(), r.interval_ms, r.ttl_ms);
    if (r.limits.file.empty()) {
        std::printf("limits file: none\n");
    } else {
        std::printf(
            "limits file: %s: %" PRIu64 " buckets, version %s, digest %s, loaded %s%s%s%s%s\n",
            r.limits.file.c_str(), r.limits.buckets,
            r.limits.version.empty() ? "-" : r.limits.version.c_str(), r.limits.digest.c_str(),
            r.limits.loaded_ms ? utc(r.limits.loaded_ms).c_str() : "never",
            r.limits.ok ? "" : "\n  LAST RELOAD REJECTED (the limits above stay in force): ",
            r.limits.ok ? "" : r.limits.error.c_str(),
            r.limits.store_error.empty()
                ? ""
                : "\n  LIMITS STORE UNREACHABLE (the limits above stay in force): ",
            r.limits.store_error.c_str());
    }
    // USAGE: the protocol version of the last usage (docs/operations.md "Upgrading"); "-"
    // from a controller of the release before, which does not say.
    auto usage_v = [](std::uint64_t v) { return v ? "v" + std::to_string(v) : std::string("-"); };
    std::vector<std::vector<std::string>> zones = {
        {"ZONE", "COLLECTOR", "HOSTS", "STALE", "AGE", "STATE", "USAGE"}};
    for (const auto& z : r.zones) {
        zones.push_back({z.zone, z.source, std::to_string(z.hosts), std::to_string(z.stale_hosts),
                         std::to_string(z.age_ms) + "ms", z.fresh ? "fresh" : "STALE",
                         usage_v(z.usage_v)});
    }
    print_table(zones);
    if (!r.peers.empty()) {
        std::vector<std::vector<std::string>> peers = {
            {"PEER", "REGION", "AGE", "LIMITS", "STATE", "USAGE"}};
        for (const auto& p : r.peers) {
            peers.push_back({p.source, p.region, std::to_string(p.age_ms) + "ms",
                             p.limits_digest == r.limits.digest
                                 ? "same"
                                 : "DIFFERENT (" + p.limits_digest + ")",
                             p.fresh ? "fresh" : "STALE", usage_v(p.usage_v)});
        }
        print_table(peers);
    }
}

// ---------------------------------------------------------------------------------------------
// One request, one reply

// Sends `q` (stamped now) and waits for the reply: 0, or 3 with `err` saying why. A REQ socket
// per request: after a timeout it cannot be used again.
int ask(::zmq::context_t& ctx, const grlctl::Config& c, wire::AdminRequest& q, wire::AdminReply& r,
        std::string& err) {
    q.ts_ms = now_ms();
    q.seq = q.ts_ms;
    const std::string& ep = c.controller;
    try {
        ::zmq::socket_t s(ctx, ZMQ_REQ);
        s.set(::zmq::sockopt::rcvtimeo, static_cast<int>(c.timeout_ms));
        s.set(::zmq::sockopt::sndtimeo, static_cast<int>(c.timeout_ms));
        s.set(::zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(wire::kMaxMessageBytes));
        if (c.keypair) daemon::make_curve_client(s, *c.keypair, c.server_key);
        daemon::connect(s, ep);
        std::string body;
        wire::encode(q, body);
        if (!s.send(::zmq::buffer(body), ::zmq::send_flags::none)) {
            err = "cannot send to " + ep + ": " + ::zmq::error_t().what();
            return 3;
        }
        ::zmq::message_t reply;
        if (!s.recv(reply)) {
            err = "no answer from " + ep + " within " + daemon::cli::format_duration(c.timeout_ms);
            return 3;
        }
        std::string e;
        if (!wire::decode(reply.to_string_view(), r, e)) {
            err = "malformed reply from " + ep + ": " + e;
            return 3;
        }
    } catch (const std::exception& e) {
        err = e.what();
        return 3;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// grlctl top

std::atomic<bool> top_stop{false};

// Screens until Ctrl-C (or --count): the buckets and the status every --interval. On a
// terminal each screen replaces the last one; otherwise screens follow each other, separated
// by a blank line (or, with --json, one buckets reply per line).
int top(const grlctl::Config& c) {
    struct sigaction sa {};
    sa.sa_handler = [](int) { top_stop = true; };
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    const bool tty = isatty(STDOUT_FILENO) != 0;
    ::zmq::context_t ctx = daemon::make_context();
    for (std::uint32_t n = 0; !top_stop && (c.top_count == 0 || n < c.top_count); ++n) {
        const auto started = std::chrono::steady_clock::now();
        wire::AdminRequest qb = c.request;
        wire::AdminRequest qs;
        qs.op = wire::AdminOp::Status;
        wire::AdminReply buckets, status;
        grlctl::TopView view;
        view.controller_endpoint = c.controller;
        view.interval_ms = c.top_interval_ms;
        const bool have_buckets = ask(ctx, c, qb, buckets, view.error) == 0;
        const bool have_status = have_buckets && ask(ctx, c, qs, status, view.error) == 0;
        view.now_ms = now_ms();
        if (c.json) {
            if (have_buckets) std::printf("%s\n", to_json(buckets).c_str());
        } else {
            struct winsize ws {};
            if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) {
                view.width = ws.ws_col;
                view.height = ws.ws_row;
            }
            const std::string screen = grlctl::render_top(have_buckets ? &buckets : nullptr,
                                                          have_status ? &status : nullptr, view);
            // Home, the screen, then clear what the last one left below it.
            std::printf("%s%s%s", tty ? "\x1b[H" : (n ? "\n" : ""), screen.c_str(),
                        tty ? "\x1b[J" : "");
        }
        std::fflush(stdout);
        if (c.top_count != 0 && n + 1 >= c.top_count) break;
        const auto next = started + std::chrono::milliseconds(c.top_interval_ms);
        while (!top_stop && std::chrono::steady_clock::now() < next)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
}

// The bucket's instances with hosts, then, for a key of a keyed bucket, its busiest keys.
int explain(const grlctl::Config& c) {
    ::zmq::context_t ctx = daemon::make_context();
    wire::AdminRequest qb = c.request;
    wire::AdminReply buckets, keys;
    std::string err;
    if (int rc = ask(ctx, c, qb, buckets, err); rc != 0) {
        std::fprintf(stderr, "grlctl: %s\n", err.c_str());
        return rc;
    }
    if (!buckets.ok) {
        std::fprintf(stderr, "grlctl: controller %s refused: %s\n", buckets.source.c_str(),
                     buckets.error.c_str());
        return 1;
    }
    bool keyed = false;
    for (const wire::BucketStatus& b : buckets.buckets) keyed = keyed || b.keyed;
    const bool ask_keys = keyed && !c.explain_key.empty();
    if (ask_keys) {
        wire::AdminRequest q = c.request;
        q.op = wire::AdminOp::Keys;
        q.top = wire::kMaxAdminTopKeys;
        if (int rc = ask(ctx, c, q, keys, err); rc != 0) {
            std::fprintf(stderr, "grlctl: %s\n", err.c_str());
            return rc;
        }
    } else if (!c.explain_key.empty()) {
        std::fprintf(stderr, "grlctl: note: bucket %s is not keyed: key \"%s\" ignored\n",
                     c.request.bucket.c_str(), c.explain_key.c_str());
    }
    std::fputs(grlctl::render_explain(c.request.bucket, buckets, ask_keys ? &keys : nullptr,
                                      c.explain_key, now_ms())
                   .c_str(),
               stdout);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    daemon::cli::Outcome<grlctl::Config> parsed =
        grlctl::parse_config(argc, argv, std::getenv("GRL_CONTROLLER"));
    if (!parsed.config) {
        std::fputs(parsed.text.c_str(), parsed.exit_code == 0 ? stdout : stderr);
        return parsed.exit_code;
    }
    const grlctl::Config& c = *parsed.config;
    const char* cmd = grlctl::to_string(c.command);

    if (c.command == grlctl::Command::Keygen) {
        try {
            daemon::KeyPair k = daemon::generate_keypair();
            daemon::write_keypair(c.keygen_file, k);
            std::printf("wrote %s (key pair) and %s.pub (public key %s)\n", c.keygen_file.c_str(),
                        c.keygen_file.c_str(), k.public_key.c_str());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "grlctl: %s\n", e.what());
            return 1;
        }
        return 0;
    }

    if (c.command == grlctl::Command::Top) return top(c);
    if (c.command == grlctl::Command::Explain && !c.json) return explain(c);

    wire::AdminRequest q = c.request;
    wire::AdminReply r;
    std::string err;
    {
        ::zmq::context_t ctx = daemon::make_context();
        if (int rc = ask(ctx, c, q, r, err); rc != 0) {
            std::fprintf(stderr, "grlctl: %s\n", err.c_str());
            return rc;
        }
    }

    if (c.json) {
        std::printf("%s\n", to_json(r).c_str());
        return r.ok ? 0 : 1;
    }
    if (!r.ok) {
        std::fprintf(stderr, "grlctl: controller %s refused: %s\n", r.source.c_str(),
                     r.error.c_str());
        return 1;
    }
    if (!r.error.empty()) std::fprintf(stderr, "grlctl: note: %s\n", r.error.c_str());
    switch (q.op) {
        case wire::AdminOp::Status: print_status(r); break;
        case wire::AdminOp::Keys: print_keys(r, q.bucket); break;
        case wire::AdminOp::Buckets:
            if (c.command == grlctl::Command::Show) {
                print_show(r, q.bucket);
            } else {
                print_buckets(r, q.hosts);
            }
            break;
        default:
            // A set that lists nothing: no host reports the bucket, so nothing is published
            // yet (the controller's note above says so).
            std::printf("done: %s %s on controller %s (%s)\n", cmd, q.bucket.c_str(),
                        r.source.c_str(),
                        q.op == wire::AdminOp::Set && r.buckets.empty() ? "nothing published yet"
                                                                        : "published at once");
            if (!r.buckets.empty()) print_buckets(r, false);
            break;
    }
    return 0;
}
