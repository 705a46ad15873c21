#include "relay.h"

#include <charconv>
#include <stdexcept>
#include <vector>

#include "grl/daemon/connections.h"
#include "grl/daemon/log.h"
#include "grl/daemon/loop.h"
#include "grl/zmq/socket.h"
#include "grl/wire.h"

namespace grl::collector {

namespace {
std::string ctl_endpoint(const void* self) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "inproc://grl-relay-%p", self);
    return buf;
}
}  // namespace

Relay::Relay(daemon::Context& ctx, daemon::Socket sub, daemon::Socket pub, std::string topics[3],
             std::unique_ptr<daemon::HandshakeWatch> watch)
    : sub_(std::move(sub)),
      pub_(std::move(pub)),
      watch_(std::move(watch)),
      ctl_(ctx, ZMQ_PAIR),
      ctl_thread_(ctx, ZMQ_PAIR) {
    for (int i = 0; i < 3; ++i) topics_[i] = topics[i];
    ctl_.bind(ctl_endpoint(this));
    ctl_thread_.connect(ctl_endpoint(this));
}

Relay::~Relay() {
    stop();
}

void Relay::start() {
    thread_ = std::thread([this] { run(); });
}

void Relay::stop() {
    if (!thread_.joinable()) return;
    zmq_send(ctl_.get(), "stop", 4, 0);
    thread_.join();
}

// A rebind request is "rebind <seq> <endpoint>", its reply "<seq> <delayed 0|1> <error>" (error
// empty: bound again).
void Relay::rebind_publish(const std::string& endpoint, daemon::RebindDone done, daemon::Loop& loop,
                           std::uint64_t timeout_ms) {
    if (!thread_.joinable()) return done("the relay is not running", false);
    const std::uint64_t seq = ++rebind_seq_;
    if (!ctl_.send("rebind " + std::to_string(seq) + " " + endpoint)) {
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
    for (int guard = 0; guard < 64 && ctl_.recv_frames(frames, 1) > 0; ++guard) {
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
    if (ctl_thread_.recv_frames(frames, 1) == 0) return true;
    const std::string_view command = frames[0].view();
    constexpr std::string_view kRebind = "rebind ";
    if (command.substr(0, kRebind.size()) != kRebind) return false;  // "stop"
    const std::string_view args = command.substr(kRebind.size());
    const std::size_t space = args.find(' ');
    const std::string seq(args.substr(0, space));
    if (space == std::string_view::npos) {
        ctl_thread_.send(seq + " 0 bad rebind command");
    } else if (rebind_) {
        ctl_thread_.send(seq + " 0 a rebind of the publish socket is under way");
    } else {
        rebind_ = std::make_unique<daemon::Rebind>(pub_.get(), std::string(args.substr(space + 1)),
                                                   daemon::mono_ms());
        rebind_for_ = seq;
        end_rebind();
    }
    return true;
}

void Relay::end_rebind() {
    if (!rebind_ || rebind_->retry(daemon::mono_ms()) == daemon::Rebind::State::Waiting) return;
    ctl_thread_.send(rebind_for_ + (rebind_->tries() > 1 ? " 1 " : " 0 ") + rebind_->error());
    rebind_.reset();
}

std::map<std::string, Relay::Entry> Relay::entries(std::uint64_t now_mono) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (now_mono > it->second.recv_mono + it->second.ttl_ms) {
            it = entries_.erase(it);
        } else {
            ++it;
        }
    }
    return entries_;
}

void Relay::run() {
    daemon::LogLimiter bad_log(10000);
    std::vector<zmq::Frame> frames;
    wire::Instructions msg;
    std::string error;
    zmq_pollitem_t items[4] = {{sub_.get(), 0, ZMQ_POLLIN, 0},
                               {ctl_thread_.get(), 0, ZMQ_POLLIN, 0},
                               {pub_.get(), 0, ZMQ_POLLIN, 0},
                               {watch_ ? watch_->monitor() : nullptr, 0, ZMQ_POLLIN, 0}};
    for (;;) {
        long timeout = -1;  // until a message, or until a refused controller is due again
        if (watch_ && watch_->next_ms()) {
            std::uint64_t now = daemon::mono_ms(), next = watch_->next_ms();
            timeout = next > now ? static_cast<long>(next - now) : 0;
        }
        if (rebind_) {  // the publish port still held: bind again when due
            std::uint64_t now = daemon::mono_ms(), next = rebind_->next_ms();
            const long left = next > now ? static_cast<long>(next - now) : 0;
            if (timeout < 0 || left < timeout) timeout = left;
        }
        if (zmq_poll(items, watch_ ? 4 : 3, timeout) < 0) {
            if (zmq_errno() == EINTR) continue;
            daemon::log_error("relay: zmq_poll: " + daemon::zmq_error());
            return;
        }
        end_rebind();
        if ((items[1].revents & ZMQ_POLLIN) && !on_command()) return;
        if (items[2].revents & ZMQ_POLLIN) on_subscriptions();
        if (watch_) watch_->handle(daemon::mono_ms());
        for (int guard = 0; guard < 1024; ++guard) {
            std::size_t n = sub_.recv_frames(frames, 2);
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
            Last& last = last_[std::string(topic)];
            last.expires_mono = now + msg.ttl_ms;
            if (pub_.send_frames({topic, frames[1].view()})) {
                relayed.fetch_add(1, std::memory_order_relaxed);
            } else {
                dropped.fetch_add(1, std::memory_order_relaxed);
            }
            last_mono.store(now, std::memory_order_relaxed);
            if (msg.source != last_source_) {
                last_source_ = msg.source;
                sources_seen.fetch_add(1, std::memory_order_relaxed);
            }
            {
                std::lock_guard<std::mutex> lock(mu_);
                for (const wire::Instruction& e : msg.buckets) {
                    Entry& x = entries_[e.name];
                    x.ratio_ppm = e.ratio_ppm;
                    x.limit_mrps = e.limit_mrps;
                    x.mode = e.mode;
                    x.recv_mono = now;
                    x.ttl_ms = msg.ttl_ms;
                }
            }
            std::swap(last.msg, msg);  // kept for replay; msg's buffers are reused next time
        }
    }
}

// Subscription messages from nginx: byte 1 = subscribe, then the topic. A subscriber to a
// topic whose last message is still within its TTL gets it again now.
void Relay::on_subscriptions() {
    std::vector<zmq::Frame> frames;
    std::string body;
    for (int guard = 0; guard < 1024; ++guard) {
        std::size_t n = pub_.recv_frames(frames, 1);
        if (n == 0) return;
        std::string_view m = frames[0].view();
        if (n != 1 || m.empty() || m[0] != 1) continue;
        auto it = last_.find(std::string(m.substr(1)));
        const std::uint64_t now = daemon::mono_ms();
        if (it == last_.end() || now >= it->second.expires_mono) continue;
        wire::Instructions& msg = it->second.msg;
        msg.ttl_ms = it->second.expires_mono - now;
        wire::encode(msg, body);
        if (pub_.send_frames({it->first, body})) {
            replayed.fetch_add(1, std::memory_order_relaxed);
        }
    }
}

}  // namespace grl::collector
