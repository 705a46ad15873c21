#include "relay.h"

#include <charconv>
#include <stdexcept>
#include <vector>

#include "grl/daemon/connections.h"
#include "grl/daemon/log.h"
#include "grl/daemon/loop.h"
#include "grl/zmq/socket.h"
#include "grl/wire/wire.h"

namespace grl::collector {

namespace {
std::string ctl_endpoint(const void* self) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "inproc://grl-relay-%p", self);
    return buf;
}
}  // namespace

Relay::Relay(::zmq::context_t& ctx, ::zmq::socket_t sub, ::zmq::socket_t pub, std::string topics[3],
             std::unique_ptr<daemon::HandshakeWatch> watch)
    : sub_(std::move(sub)),
      pub_(std::move(pub)),
      watch_(std::move(watch)),
      ctl_(ctx, ZMQ_PAIR),
      ctl_thread_(ctx, ZMQ_PAIR) {
    for (int i = 0; i < 3; ++i) topics_[i] = topics[i];
    daemon::bind(ctl_, ctl_endpoint(this));
    daemon::connect(ctl_thread_, ctl_endpoint(this));
}

Relay::~Relay() {
    stop();
}

void Relay::start() {
    thread_ = std::thread([this] { run(); });
}

void Relay::stop() {
    if (!thread_.joinable()) return;
    try {
        ctl_.send(::zmq::str_buffer("stop"), ::zmq::send_flags::none);
    } catch (const ::zmq::error_t&) {  // from ~Relay: nothing may escape
    }
    thread_.join();
}

// A rebind request is "rebind <seq> <endpoint>", its reply "<seq> <delayed 0|1> <error>" (error
// empty: bound again).
void Relay::rebind_publish(const std::string& endpoint, daemon::RebindDone done, daemon::Loop& loop,
                           std::uint64_t timeout_ms) {
    if (!thread_.joinable()) return done("the relay is not running", false);
    const std::uint64_t seq = ++rebind_seq_;
    if (!daemon::send_frames(ctl_, {"rebind " + std::to_string(seq) + " " + endpoint})) {
        return done("the relay takes no command", false);
    }
    pending_.emplace(seq, std::move(done));
    loop.after(timeout_ms, [this, seq, timeout_ms] {
        auto it = pending_.find(seq);
        if (it == pending_.end()) return;
        daemon::RebindDone d = std::move(it->second);
        pending_.erase(it);
        d("the relay did not answer within " + std::to_string(timeout_ms) + " ms", false);
    });
}

void Relay::on_replies() {
    std::vector<zmq::Frame> frames;
    for (int guard = 0; guard < 64 && zmq::recv_frames(ctl_.handle(), frames, 1) > 0; ++guard) {
        const std::string_view reply = frames[0].view();
        std::uint64_t seq = 0;
        const std::size_t space = reply.find(' ');
        auto it = pending_.end();
        if (space != std::string_view::npos && reply.size() >= space + 3 &&
            std::from_chars(reply.data(), reply.data() + space, seq).ec == std::errc()) {
            it = pending_.find(seq);
        }
        if (it == pending_.end()) {
            ++stale_replies_;  // the answer to a request given up on
            daemon::log_warn(
                "relay: a reply to a rebind of the publish socket came after the "
                "request was given up on, dropped: \"" +
                std::string(reply) + "\"");
            continue;
        }
        daemon::RebindDone d = std::move(it->second);
        pending_.erase(it);
        const bool delayed = reply.substr(space + 1, 1) == "1";
        d(std::string(reply.substr(space + 3)), delayed);
    }
}

bool Relay::on_command() {
    std::vector<zmq::Frame> frames;
    if (zmq::recv_frames(ctl_thread_.handle(), frames, 1) == 0) return true;
    const std::string_view command = frames[0].view();
    constexpr std::string_view kRebind = "rebind ";
    if (command.substr(0, kRebind.size()) != kRebind) return false;  // "stop"
    const std::string_view args = command.substr(kRebind.size());
    const std::size_t space = args.find(' ');
    const std::string seq(args.substr(0, space));
    if (space == std::string_view::npos) {
        daemon::send_frames(ctl_thread_, {seq + " 0 bad rebind command"});
    } else if (rebind_) {
        daemon::send_frames(ctl_thread_, {seq + " 0 a rebind of the publish socket is under way"});
    } else {
        rebind_ = std::make_unique<daemon::Rebind>(pub_, std::string(args.substr(space + 1)),
                                                   daemon::mono_ms());
        rebind_for_ = seq;
        end_rebind();
    }
    return true;
}

void Relay::end_rebind() {
    if (!rebind_ || rebind_->retry(daemon::mono_ms()) == daemon::Rebind::State::Waiting) return;
    daemon::send_frames(ctl_thread_,
                        {rebind_for_ + (rebind_->tries() > 1 ? " 1 " : " 0 ") + rebind_->error()});
    rebind_.reset();
}

std::map<std::string, Relay::Entry> Relay::entries(std::uint64_t now_mono) {
    std::map<std::string, Entry> out;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [topic, sources] : last_) {
        for (const auto& [source, set] : sources) {
            for (const Held& h : set.held) {
                if (now_mono >= h.expires_mono) continue;
                for (const wire::Instruction& e : h.msg.buckets) {
                    Entry& x = out[e.name];
                    if (x.recv_mono > h.recv_mono) continue;  // a newer message named it
                    x.ratio_ppm = e.ratio_ppm;
                    x.limit_mrps = e.limit_mrps;
                    x.mode = e.mode;
                    x.recv_mono = h.recv_mono;
                    x.ttl_ms = h.expires_mono - h.recv_mono;
                }
            }
        }
    }
    return out;
}

// On the relay thread, after the message was forwarded: a lock and a swap of buffers, nothing
// per bucket (the table for /metrics is built from the sets when asked).
void Relay::hold(std::string_view topic, wire::Instructions& msg, std::uint64_t now) {
    std::lock_guard<std::mutex> lock(mu_);
    auto t = last_.find(topic);
    if (t == last_.end()) t = last_.emplace(std::string(topic), std::map<std::string, Set>{}).first;
    std::map<std::string, Set>& sources = t->second;
    auto it = sources.find(msg.source);
    if (it == sources.end()) {
        // A source beyond the bound replaces the one heard from least recently.
        if (sources.size() >= kMaxSources) {
            auto oldest = sources.begin();
            for (auto s = sources.begin(); s != sources.end(); ++s) {
                if (s->second.expires_mono() < oldest->second.expires_mono()) oldest = s;
            }
            for (Held& h : oldest->second.held) spare_.push_back(std::move(h.msg));
            sources.erase(oldest);
        }
        it = sources.emplace(msg.source, Set{}).first;
    }
    Set& set = it->second;
    if (set.ts_ms != msg.ts_ms || set.held.size() >= kMaxSetMessages) {  // a new tick's set
        for (Held& h : set.held) spare_.push_back(std::move(h.msg));
        set.held.clear();
        set.ts_ms = msg.ts_ms;
    }
    set.held.emplace_back();
    Held& h = set.held.back();
    std::swap(h.msg, msg);
    h.recv_mono = now;
    h.expires_mono = now + h.msg.ttl_ms;
    if (!spare_.empty()) {
        std::swap(msg, spare_.back());  // the next decode reuses its buffers
        spare_.pop_back();
    }
    if (spare_.size() > 2 * kMaxSetMessages) spare_.resize(2 * kMaxSetMessages);
}

void Relay::run() {
    daemon::LogLimiter bad_log(10000);
    std::vector<zmq::Frame> frames;
    wire::Instructions msg;
    std::string error;
    zmq_pollitem_t items[4] = {{sub_.handle(), 0, ZMQ_POLLIN, 0},
                               {ctl_thread_.handle(), 0, ZMQ_POLLIN, 0},
                               {pub_.handle(), 0, ZMQ_POLLIN, 0},
                               {watch_ ? watch_->monitor() : nullptr, 0, ZMQ_POLLIN, 0}};
    for (;;) {
        long timeout = -1;  // until a message, or until a refused controller is due again
        if (watch_ && watch_->next_ms()) {
            std::uint64_t now = daemon::mono_ms(), next = watch_->next_ms();
            timeout = next > now ? static_cast<long>(next - now) : 0;
        }
        std::uint64_t replay_ms = 0;
        replay_due(daemon::mono_ms(), replay_ms);
        if (replay_ms) {  // subscriptions wait for the end of their topic's replay gap
            const std::uint64_t now = daemon::mono_ms();
            const long left = replay_ms > now ? static_cast<long>(replay_ms - now) : 0;
            if (timeout < 0 || left < timeout) timeout = left;
        }
        if (rebind_) {  // the publish port still held: bind again when due
            std::uint64_t now = daemon::mono_ms(), next = rebind_->next_ms();
            const long left = next > now ? static_cast<long>(next - now) : 0;
            if (timeout < 0 || left < timeout) timeout = left;
        }
        if (zmq_poll(items, watch_ ? 4 : 3, timeout) < 0) {
            if (zmq_errno() == EINTR) continue;
            daemon::log_error(std::string("relay: zmq_poll: ") + ::zmq::error_t().what());
            return;
        }
        end_rebind();
        if ((items[1].revents & ZMQ_POLLIN) && !on_command()) return;
        if (items[2].revents & ZMQ_POLLIN) on_subscriptions();
        if (watch_) watch_->handle(daemon::mono_ms());
        for (int guard = 0; guard < 1024; ++guard) {
            std::size_t n = zmq::recv_frames(sub_.handle(), frames, 2);
            if (n == 0) break;
            const std::uint64_t now = daemon::mono_ms();
            std::string_view topic = frames[0].view();
            bool ok = zmq::read_instruction(n, topic, n >= 2 ? frames[1].view() : "", msg, error);
            if (ok && topic != topics_[0] && topic != topics_[1] && topic != topics_[2]) {
                ok = false;
                error = "topic \"" + std::string(topic) + "\" is not for this zone";
            }
            if (!ok) {
                malformed.fetch_add(1, std::memory_order_relaxed);
                bad_log.hit(daemon::LogLevel::Warn, {},
                            "dropped malformed instruction message: " + error, now);
                continue;
            }
            if (daemon::send_frames(pub_, {topic, frames[1].view()})) {
                relayed.fetch_add(1, std::memory_order_relaxed);
            } else {
                dropped.fetch_add(1, std::memory_order_relaxed);
            }
            last_mono.store(now, std::memory_order_relaxed);
            if (msg.source != last_source_) {
                last_source_ = msg.source;
                sources_seen.fetch_add(1, std::memory_order_relaxed);
            }
            hold(topic, msg, now);
        }
    }
}

// Subscription messages from nginx: byte 1 = subscribe, then the topic. A subscriber to a
// topic gets the newest set of it still within its TTL again, every message of it: now, or at
// the end of the topic's replay gap (kReplayGapMs).
void Relay::on_subscriptions() {
    std::vector<zmq::Frame> frames;
    for (int guard = 0; guard < 1024; ++guard) {
        std::size_t n = zmq::recv_frames(pub_.handle(), frames, 1);
        if (n == 0) return;
        std::string_view m = frames[0].view();
        if (n != 1 || m.empty() || m[0] != 1) continue;
        const std::string_view topic = m.substr(1);
        // Only the three topics relayed are held: nothing to replay for another.
        if (topic != topics_[0] && topic != topics_[1] && topic != topics_[2]) continue;
        const std::uint64_t now = daemon::mono_ms();
        auto it = replays_.find(topic);
        if (it == replays_.end()) it = replays_.emplace(std::string(topic), Replays{}).first;
        Replays& r = it->second;
        if (r.last_mono != 0 && now - r.last_mono < kReplayGapMs) {
            ++r.waiting;
            coalesced.fetch_add(1, std::memory_order_relaxed);
            continue;
        }
        r.last_mono = now;
        replay(it->first, now);
    }
}

void Relay::replay_due(std::uint64_t now, std::uint64_t& next_ms) {
    next_ms = 0;
    for (auto& [topic, r] : replays_) {
        if (r.waiting == 0) continue;
        if (now - r.last_mono < kReplayGapMs) {
            const std::uint64_t due = r.last_mono + kReplayGapMs;
            if (next_ms == 0 || due < next_ms) next_ms = due;
            continue;
        }
        replay_log_.hit(daemon::LogLevel::Warn, {},
                        "subscriptions to " + topic + " come faster than one replay per " +
                            std::to_string(kReplayGapMs) + " ms: " + std::to_string(r.waiting) +
                            " served by one replay (a flood of subscriptions?)",
                        now);
        r.waiting = 0;
        r.last_mono = now;
        replay(topic, now);
    }
}

void Relay::replay(const std::string& topic, std::uint64_t now) {
    std::string body;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = last_.find(topic);
    if (it == last_.end()) return;
    Set* newest = nullptr;
    for (auto& [source, set] : it->second) {
        if (now >= set.expires_mono()) continue;
        if (!newest || set.ts_ms > newest->ts_ms) newest = &set;
    }
    if (!newest) return;
    for (Held& h : newest->held) {
        if (now >= h.expires_mono) continue;
        const std::uint64_t ttl = h.msg.ttl_ms;
        h.msg.ttl_ms = h.expires_mono - now;
        wire::encode(h.msg, body);
        h.msg.ttl_ms = ttl;
        if (daemon::send_frames(pub_, {topic, body}))
            replayed.fetch_add(1, std::memory_order_relaxed);
    }
}

}  // namespace grl::collector
