#include "grl/daemon/etcd_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace grl::daemon::etcd {

namespace {
constexpr std::uint64_t kBackoffMinMs = 250;
constexpr std::uint64_t kBackoffMaxMs = 10000;
}  // namespace

KeyWatch::KeyWatch(Loop& loop, Url url, Access access, std::int64_t after_revision,
                   std::function<void(const WatchEvent&)> fn)
    : loop_(loop), client_(std::move(url), std::move(access)), fn_(std::move(fn)) {
    event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0)
        throw std::runtime_error(std::string("eventfd for the etcd watch: ") +
                                 std::strerror(errno));
    loop_.on_fd(event_fd_, POLLIN, [this](short) { drain(); });
    thread_ = std::thread([this, after_revision] { run(after_revision); });
}

KeyWatch::~KeyWatch() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    // A stop() that lands before the watch's connection is made is a no-op in httplib (the
    // watch would then wait on a quiet stream): repeat it until the thread is out.
    while (!done_) {
        client_.stop();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    thread_.join();
    loop_.remove_fd(event_fd_);
    ::close(event_fd_);
}

void KeyWatch::post(WatchEvent e) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(std::move(e));
    }
    std::uint64_t one = 1;
    // Only fails when the counter would overflow: the loop is woken anyway.
    [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof(one));
}

void KeyWatch::drain() {
    std::uint64_t n = 0;
    [[maybe_unused]] ssize_t r = ::read(event_fd_, &n, sizeof(n));
    std::deque<WatchEvent> got;
    {
        std::lock_guard<std::mutex> lock(mu_);
        got.swap(queue_);
    }
    for (const WatchEvent& e : got) fn_(e);
}

bool KeyWatch::sleep_ms(std::uint64_t ms) {
    std::unique_lock<std::mutex> lock(mu_);
    return !cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stop_; });
}

void KeyWatch::run(std::int64_t after_revision) {
    struct Done {
        std::atomic<bool>& done;
        ~Done() { done = true; }
    } done{done_};
    std::uint64_t backoff = kBackoffMinMs;
    std::int64_t next = after_revision > 0 ? after_revision + 1 : 0;
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (stop_) return;
        }
        if (next == 0) {
            try {
                RangeReply r = client_.get();
                WatchEvent e;
                e.kv = r.kv;
                if (!e.kv.exists) e.kv.mod_revision = 0;
                post(std::move(e));
                next = r.revision + 1;
                backoff = kBackoffMinMs;
            } catch (const std::exception& ex) {
                WatchEvent e;
                e.kind = WatchEvent::Kind::Lost;
                e.error = ex.what();
                post(std::move(e));
                if (!sleep_ms(backoff)) return;
                backoff = std::min(backoff * 2, kBackoffMaxMs);
                continue;
            }
        }
        client_.watch(next, [&](const WatchMessage& m) {
            if (m.canceled) return false;  // e.g. the start was compacted: read the key again
            for (const KeyValue& kv : m.events) {
                WatchEvent e;
                e.kv = kv;
                post(std::move(e));
                next = kv.mod_revision + 1;
            }
            return true;
        });
        // The stream ended (etcd went away, restarted, compacted, an hour's read timeout):
        // read the key whole again; a failed get reports Lost and backs off.
        next = 0;
        if (!sleep_ms(50)) return;
    }
}

}  // namespace grl::daemon::etcd
