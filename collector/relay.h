// The collector's relay of instructions (controllers -> this zone's nginx), on its own thread
// so that the latency of instructions never depends on how many reports are being ingested.
// It subscribes to the global topic, its region's and its zone's, decodes every message, and
// forwards only valid ones whose topic matches their scope, as the same frames.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "grl/common/bucket_types.h"
#include "grl/daemon/connections.h"
#include "grl/daemon/curve.h"
#include "grl/daemon/loop.h"
#include "grl/daemon/zmq.h"
#include "grl/wire/wire.h"

namespace grl::collector {

class Relay {
  public:
    // `sub` is connected to the controllers (and subscribed), `pub` (an XPUB) bound for
    // nginx; both move to the relay thread at start(), with `sub`'s CURVE handshake watch if
    // any. The last messages relayed per topic (its newest tick's, see Set) are sent again
    // whenever an nginx subscribes to the topic, so that a host that (re)connects gets its
    // ratios at once, not at the controller's next tick.
    Relay(::zmq::context_t& ctx, ::zmq::socket_t sub, ::zmq::socket_t pub, std::string topics[3],
          std::unique_ptr<daemon::HandshakeWatch> watch = nullptr);
    ~Relay();  // stops the thread
    Relay(const Relay&) = delete;
    Relay& operator=(const Relay&) = delete;

    void start();
    void stop();
    // Unbinds the publish socket from `endpoint` and binds it there again (daemon::Rebind), on
    // the relay thread: its subscribers' connections close. Waits for nothing: `done` runs on
    // `loop`'s thread with the result when the relay's reply arrives (on_replies()), or with
    // "the relay did not answer" after `timeout_ms`. Each request carries a sequence number
    // that its reply repeats: the late reply of a request given up on is dropped (counted in
    // stale_replies()), never taken for the answer to a later one.
    void rebind_publish(const std::string& endpoint, daemon::RebindDone done, daemon::Loop& loop,
                        std::uint64_t timeout_ms = 5000);
    // The main thread's side of the relay's replies: the owner's loop calls on_replies() while
    // it is readable.
    void* replies() { return ctl_.handle(); }
    void on_replies();
    std::uint64_t stale_replies() const { return stale_replies_; }

    // The last instruction relayed for a bucket (for /metrics).
    struct Entry {
        std::uint32_t ratio_ppm = 0;
        std::uint64_t limit_mrps = 0;
        Mode mode = Mode::Deny;
        std::uint64_t recv_mono = 0;
        std::uint64_t ttl_ms = 0;
    };
    // The buckets of the last sets held (see Set) still within their TTL at `now`, the newest
    // message's entry per bucket. Built when asked (a scrape), not per message relayed.
    std::map<std::string, Entry> entries(std::uint64_t now_mono);

    // Bounds of what is held for replay: messages of one set (a controller's tick of 65,536
    // buckets in one scope is 16 messages of 4,096) and sources (controllers) per topic.
    static constexpr std::size_t kMaxSetMessages = 16;
    static constexpr std::size_t kMaxSources = 8;
    // A replay goes to every subscriber of its topic (an XPUB cannot send to one connection),
    // so a topic is replayed at most once per kReplayGapMs: the subscriptions that come within
    // the gap are served by one replay at its end (counted in `coalesced`). Without it, each
    // subscription of a flood sent the set to every nginx of the zone.
    static constexpr std::uint64_t kReplayGapMs = 100;

    std::atomic<std::uint64_t> relayed{0};
    std::atomic<std::uint64_t> replayed{0};   // last messages sent again to new subscribers
    std::atomic<std::uint64_t> coalesced{0};  // subscriptions served by a later replay
    std::atomic<std::uint64_t> malformed{0};
    std::atomic<std::uint64_t> dropped{0};  // the PUB refused (should not happen)
    std::atomic<std::uint64_t> last_mono{0};
    std::atomic<std::uint64_t> sources_seen{0};  // bumped when a message came from a new source

    const daemon::HandshakeWatch* watch() const { return watch_.get(); }

  private:
    // The last set per topic and source: the messages of one tick of one controller (a scope
    // with more than 4,096 buckets is published in several messages with the same ts_ms).
    // The newest set of a topic is replayed to new subscribers, every message of it, each with
    // the TTL it has left (re-encoded: the original ttl_ms would extend the controller's answer
    // by its age).
    struct Held {
        wire::Instructions msg;
        std::uint64_t recv_mono = 0;
        std::uint64_t expires_mono = 0;
    };
    struct Set {
        std::uint64_t ts_ms = 0;  // the tick's (the messages')
        std::vector<Held> held;   // in the order received
        std::uint64_t expires_mono() const { return held.empty() ? 0 : held.back().expires_mono; }
    };
    // Keeps `msg` as part of its topic's and source's set (a message of a newer tick starts a
    // new set); `msg` gets a spare message's buffers back.
    void hold(std::string_view topic, wire::Instructions& msg, std::uint64_t now);

    void run();
    void on_subscriptions();
    // Sends the topic's newest set again (every subscriber of the topic gets it).
    void replay(const std::string& topic, std::uint64_t now);
    // Replays the topics whose gap has ended with subscriptions waiting; the next such time in
    // `next_ms` (0: none).
    void replay_due(std::uint64_t now, std::uint64_t& next_ms);
    bool on_command();  // false: stop

    ::zmq::socket_t sub_;
    ::zmq::socket_t pub_;
    std::unique_ptr<daemon::HandshakeWatch> watch_;
    ::zmq::socket_t ctl_;         // main thread side of the commands (stop, rebind)
    ::zmq::socket_t ctl_thread_;  // relay thread side
    std::string topics_[3];
    std::thread thread_;
    std::mutex mu_;  // last_ and spare_: written by the relay thread, read by entries()
    std::map<std::string, std::map<std::string, Set>, std::less<>> last_;  // topic, source
    std::vector<wire::Instructions> spare_;  // buffers of replaced sets
    std::string last_source_;
    struct Replays {
        std::uint64_t last_mono = 0;  // the topic's last replay
        std::uint64_t waiting = 0;    // subscriptions since, served at the gap's end
    };
    std::map<std::string, Replays, std::less<>> replays_;  // relay thread; the three topics
    daemon::LogLimiter replay_log_;
    // Main thread: rebind requests waiting for their reply, by sequence number.
    std::uint64_t rebind_seq_ = 0;
    std::map<std::uint64_t, daemon::RebindDone> pending_;
    std::uint64_t stale_replies_ = 0;
    // Relay thread: the rebind under way (the port still held), and its request's number.
    std::unique_ptr<daemon::Rebind> rebind_;
    std::string rebind_for_;
    void end_rebind();  // replies when rebind_ has ended
};

}  // namespace grl::collector
