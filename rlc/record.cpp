#include "record.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <csignal>
#include <memory>
#include <thread>

#include "controller_metrics.h"
#include "grl/daemon/log.h"
#include "recorder.h"
#include "store.h"
#include "units.h"

namespace grl::rlc {

namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) {
    g_stop = true;
}

std::int64_t wall_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::int64_t mono_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::unique_ptr<httplib::Client> client_for(const std::string& address, std::int64_t poll_ms) {
    std::size_t colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0)
        throw std::invalid_argument("--controller \"" + address + "\": expected HOST:PORT");
    int port = 0;
    try {
        port = std::stoi(address.substr(colon + 1));
    } catch (...) {
    }
    if (port <= 0 || port > 65535)
        throw std::invalid_argument("--controller \"" + address + "\": bad port");
    auto c = std::make_unique<httplib::Client>(address.substr(0, colon), port);
    std::int64_t timeout_ms = std::max<std::int64_t>(200, std::min<std::int64_t>(poll_ms, 2000));
    c->set_connection_timeout(0, timeout_ms * 1000);
    c->set_read_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
    c->set_keep_alive(false);
    return c;
}

// One controller, fetched and read by its own thread: a controller whose host is gone
// (connections time out instead of being refused) delays nobody else's polls.
class Poller {
  public:
    struct Answer {
        std::uint64_t round = 0;
        std::string error;  // empty: `scrape` holds the answer
        Parsed<ControllerScrape> scrape;
    };

    Poller(std::string address, std::int64_t poll_ms)
        : address_(std::move(address)), http_(client_for(address_, poll_ms)) {
        thread_ = std::thread([this] { run(); });
    }
    ~Poller() {
        {
            std::lock_guard<std::mutex> l(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    Poller(const Poller&) = delete;
    Poller& operator=(const Poller&) = delete;

    const std::string& address() const { return address_; }
    // Asks for a fetch for `round`; ignored while the previous one is still under way.
    void request(std::uint64_t round) {
        {
            std::lock_guard<std::mutex> l(mu_);
            if (busy_) return;
            requested_ = round;
            busy_ = true;
        }
        cv_.notify_all();
    }
    // The answer for `round`, once it has arrived (each answer is taken once).
    std::optional<Answer> take(std::uint64_t round) {
        std::lock_guard<std::mutex> l(mu_);
        if (!answer_ || answer_->round != round) return std::nullopt;
        std::optional<Answer> a = std::move(answer_);
        answer_.reset();
        return a;
    }

    // What has been said about it in the log: a controller that stops answering is logged
    // once, and once more when it answers again.
    bool answering = true;
    bool warned_no_region = false;
    daemon::LogLimiter bad_text{60000};

  private:
    void run() {
        std::unique_lock<std::mutex> l(mu_);
        for (;;) {
            cv_.wait(l, [this] { return stop_ || busy_; });
            if (stop_) return;
            std::uint64_t round = requested_;
            l.unlock();
            Answer a;
            a.round = round;
            httplib::Result res = http_->Get("/metrics");
            if (!res)
                a.error = "GET /metrics: error " + httplib::to_string(res.error());
            else if (res->status != 200)
                a.error = "GET /metrics: HTTP status " + std::to_string(res->status);
            else
                a.scrape = parse_controller_metrics(res->body, address_);
            l.lock();
            answer_ = std::move(a);
            busy_ = false;
        }
    }

    std::string address_;
    std::unique_ptr<httplib::Client> http_;  // used by the thread only
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false, busy_ = false;
    std::uint64_t requested_ = 0;
    std::optional<Answer> answer_;
    std::thread thread_;
};

// Writes rows, keeping them for the next attempt when the store refuses (a lock held
// longer than the busy timeout): a slow reader costs a delay, not history.
void write_rows(Store& store, std::vector<Series>& pending, std::vector<Series> rows,
                daemon::LogLimiter& limiter) {
    for (Series& s : rows) pending.push_back(std::move(s));
    if (pending.empty()) return;
    try {
        store.write(pending, WriteMode::Merge);
        pending.clear();
    } catch (const StoreError& e) {
        limiter.hit(daemon::LogLevel::Error, {},
                    std::string("writing history failed, kept for the next attempt: ") + e.what(),
                    static_cast<std::uint64_t>(mono_ms()));
    }
}

using Pollers = std::vector<std::unique_ptr<Poller>>;
using Answers = std::vector<std::optional<Poller::Answer>>;

// Asks every controller at once; what has not answered within most of a poll period
// misses this round (logged by reports_of) rather than delaying it.
template <typename Stopping>
Answers poll_all(Pollers& ctls, std::uint64_t round, std::int64_t poll_ms, Stopping stopping) {
    for (auto& c : ctls) c->request(round);
    const std::int64_t deadline = mono_ms() + std::max<std::int64_t>(50, poll_ms * 3 / 4);
    Answers answers(ctls.size());
    for (;;) {
        bool all = true;
        for (std::size_t i = 0; i < ctls.size(); ++i) {
            if (!answers[i]) answers[i] = ctls[i]->take(round);
            all = all && answers[i];
        }
        if (all || mono_ms() >= deadline || stopping()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return answers;
}

// The reports of the controllers that answered; logs (once per change) those that did not,
// and what an answer lacked.
std::vector<ControllerReport> reports_of(Pollers& ctls, Answers& answers) {
    std::vector<ControllerReport> reports;
    for (std::size_t i = 0; i < ctls.size(); ++i) {
        Poller& c = *ctls[i];
        std::string error = !answers[i] ? "no answer within the poll period" : answers[i]->error;
        if (!error.empty()) {
            if (c.answering) {
                daemon::log_warn("controller " + c.address() + " not answering (" + error +
                                 "); retried every poll, the other controllers are still "
                                 "recorded");
                c.answering = false;
            }
            continue;
        }
        if (!c.answering) {
            daemon::log_info("controller " + c.address() + " answering again");
            c.answering = true;
        }
        Parsed<ControllerScrape>& s = answers[i]->scrape;
        if (!s) {
            c.bad_text.hit(daemon::LogLevel::Warn, {}, s.error,
                           static_cast<std::uint64_t>(mono_ms()));
            continue;
        }
        if (s.value.skipped_no_region > 0 && !c.warned_no_region) {
            daemon::log_warn("controller " + c.address() +
                             " does not export grl_controller_info (an older grl-controller): "
                             "its region and zone instances are not recorded, only global ones");
            c.warned_no_region = true;
        }
        reports.push_back(std::move(s.value.report));
    }
    return reports;
}

// Drops samples past the retention and folds old ones into hourly rows (wall time `t`).
void prune(Store& store, const RecordOptions& opt, std::int64_t t) {
    try {
        std::int64_t n = store.prune(t / 1000 - opt.retention_s);
        if (n > 0)
            daemon::log_info("pruned " + std::to_string(n) + " samples older than " +
                             format_time(t / 1000 - opt.retention_s));
        if (opt.rollup_after_s > 0) {
            std::int64_t r = store.rollup(t / 1000 - opt.rollup_after_s);
            if (r > 0)
                daemon::log_info("folded " + std::to_string(r) + " samples older than " +
                                 format_time(t / 1000 - opt.rollup_after_s) + " into hourly rows");
        }
    } catch (const StoreError& e) {
        daemon::log_warn(std::string("pruning failed, retried in an hour: ") + e.what());
    }
}

void catch_stop_signals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
}

}  // namespace

int run_record(const RecordOptions& opt) {
    Store store(opt.store);
    Recorder rec(opt.interval_s);
    Pollers ctls;
    for (const std::string& a : opt.controllers)
        ctls.push_back(std::make_unique<Poller>(a, opt.poll_ms));

    g_stop = false;
    if (opt.stop == nullptr) catch_stop_signals();
    auto stopping = [&opt] { return g_stop.load() || (opt.stop != nullptr && opt.stop->load()); };

    daemon::log_info("recording " + std::to_string(ctls.size()) + " controller(s) into " +
                     opt.store + ": " + std::to_string(opt.interval_s) +
                     " s intervals, polls every " + std::to_string(opt.poll_ms) +
                     " ms, retention " + std::to_string(opt.retention_s / 86400) + " d");

    std::vector<Series> pending;
    daemon::LogLimiter write_errors{60000};
    std::int64_t next_prune = 0;
    const std::int64_t started = mono_ms();
    std::int64_t next_poll = started;
    std::uint64_t rows_written = 0;
    std::uint64_t round = 0;
    while (!stopping()) {
        std::int64_t now = mono_ms();
        if (opt.duration_ms > 0 && now - started >= opt.duration_ms) break;
        if (now < next_poll) {
            // Short sleeps so that a signal is answered within 50 ms.
            std::this_thread::sleep_for(
                std::chrono::milliseconds(std::min<std::int64_t>(50, next_poll - now)));
            continue;
        }
        next_poll += opt.poll_ms;
        if (next_poll <= now) next_poll = now + opt.poll_ms;  // late: skip, do not catch up

        ++round;
        Answers answers = poll_all(ctls, round, opt.poll_ms, stopping);
        std::vector<ControllerReport> reports = reports_of(ctls, answers);
        const std::int64_t t = wall_ms();
        rec.poll(t, reports);
        std::vector<Series> closed = rec.take_closed(t);
        for (const Series& s : closed) rows_written += s.samples.size();
        write_rows(store, pending, std::move(closed), write_errors);

        if (opt.retention_s > 0 && mono_ms() >= next_prune) {
            // Hourly: retention is in days, and a pass over the whole file is not free.
            next_prune = mono_ms() + 3600ULL * 1000;
            prune(store, opt, t);
        }
    }
    std::vector<Series> rest = rec.take_all();
    for (const Series& s : rest) rows_written += s.samples.size();
    write_rows(store, pending, std::move(rest), write_errors);
    if (!pending.empty()) {
        daemon::log_error("stopped with " + std::to_string(pending.size()) +
                          " instances' rows not written (the store kept refusing)");
        return 1;
    }
    daemon::log_info("stopped: " + std::to_string(rows_written) +
                     " rows written, the open interval flushed");
    return 0;
}

}  // namespace grl::rlc
