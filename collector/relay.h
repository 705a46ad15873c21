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
#include <thread>

#include "grl/bucket_types.h"
#include "grl/daemon/connections.h"
#include "grl/daemon/curve.h"
#include "grl/daemon/loop.h"
#include "grl/daemon/zmq.h"
#include "grl/wire.h"

namespace grl::collector {

class Relay {
  public:
    // `sub` is connected to the controllers (and subscribed), `pub` (an XPUB) bound for
    // nginx; both move to the relay thread at start(), with `sub`'s CURVE handshake watch if
    // any. The last message relayed per topic is sent again whenever an nginx subscribes to
    // the topic, so that a host that (re)connects gets its ratios at once, not at the
    // controller's next tick.
    Relay(daemon::Context& ctx, daemon::Socket sub, daemon::Socket pub, std::string topics[3],
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
    void* replies() const { return ctl_.get(); }
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
    // Entries still within their TTL at `now` (older ones are dropped).
    std::map<std::string, Entry> entries(std::uint64_t now_mono);

    std::atomic<std::uint64_t> relayed{0};
    std::atomic<std::uint64_t> replayed{0};  // last messages sent again to new subscribers
    std::atomic<std::uint64_t> malformed{0};
    std::atomic<std::uint64_t> dropped{0};  // the PUB refused (should not happen)
    std::atomic<std::uint64_t> last_mono{0};
    std::atomic<std::uint64_t> sources_seen{0};  // bumped when a message came from a new source

    const daemon::HandshakeWatch* watch() const { return watch_.get(); }

  private:
    // The last message per topic, replayed to new subscribers with the TTL it has left
    // (re-encoded: the original ttl_ms would extend the controller's answer by its age).
    struct Last {
        wire::Instructions msg;
        std::uint64_t expires_mono = 0;
    };

    void run();
    void on_subscriptions();
    bool on_command();  // false: stop

    daemon::Socket sub_;
    daemon::Socket pub_;
    std::unique_ptr<daemon::HandshakeWatch> watch_;
    daemon::Socket ctl_;         // main thread side of the commands (stop, rebind)
    daemon::Socket ctl_thread_;  // relay thread side
    std::string topics_[3];
    std::thread thread_;
    std::mutex mu_;
    std::map<std::string, Entry> entries_;
    std::string last_source_;
    // Main thread: rebind requests waiting for their reply, by sequence number.
    std::uint64_t rebind_seq_ = 0;
    std::map<std::uint64_t, daemon::RebindDone> pending_;
    std::uint64_t stale_replies_ = 0;
    // Relay thread: the rebind under way (the port still held), and its request's number.
    std::unique_ptr<daemon::Rebind> rebind_;
    std::string rebind_for_;
    void end_rebind();                  // replies when rebind_ has ended
    std::map<std::string, Last> last_;  // by topic (relay thread only)
};

}  // namespace grl::collector
