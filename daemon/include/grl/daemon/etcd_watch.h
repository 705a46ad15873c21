// Watches one etcd key from a thread of its own and hands what it sees to the daemon's
// single-threaded loop (grl/daemon/loop.h) through a queue and an eventfd: the loop never
// blocks on etcd. The thread gets the key, then watches it from the next revision; when the
// stream ends it gets the key again (so a missed or compacted revision costs nothing: the
// value is read whole), and when etcd cannot be reached it retries with a backoff (250 ms
// doubling to 10 s). It reports Lost only when a get fails, so a watch that merely timed out
// and was taken up again is not an outage.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "grl/daemon/etcd.h"
#include "grl/daemon/loop.h"

namespace grl::daemon::etcd {

struct WatchEvent {
    enum class Kind : std::uint8_t {
        Value,  // the key's value (kv.exists false: no such key); may repeat a value seen
        Lost,   // etcd could not be reached (error says why); the thread retries
    };
    Kind kind = Kind::Value;
    KeyValue kv;
    std::string error;
};

class KeyWatch {
  public:
    // Starts the thread at once, from `after_revision` + 1 (0: get the key first). `fn` runs in
    // the loop's thread for every event.
    KeyWatch(Loop& loop, Url url, Access access, std::int64_t after_revision,
             std::function<void(const WatchEvent&)> fn);
    ~KeyWatch();  // stops and joins the thread
    KeyWatch(const KeyWatch&) = delete;
    KeyWatch& operator=(const KeyWatch&) = delete;

  private:
    void run(std::int64_t after_revision);
    void post(WatchEvent e);
    void drain();
    bool sleep_ms(std::uint64_t ms);  // false when stopping

    Loop& loop_;
    Client client_;
    std::function<void(const WatchEvent&)> fn_;
    int event_fd_ = -1;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<WatchEvent> queue_;
    bool stop_ = false;
    std::atomic<bool> done_{false};  // run() returned
    std::thread thread_;
};

}  // namespace grl::daemon::etcd
