// BENCHMARK BASELINE ONLY -- not part of grl. See README.md in this folder.
//
// One hiredis async connection per nginx worker, driven by nginx's event loop:
// the socket becomes an ngx_connection_t, and hiredis's addRead/delRead/
// addWrite/delWrite/cleanup hooks map to level-triggered nginx events, which
// is the readiness model hiredis's own adapters (libevent, libev) use.
//
// Writes are batched: once connected, "add write" does not arm EPOLLOUT but
// posts one event that runs at the end of the current event loop iteration, so
// every command queued while handling that iteration's requests goes out in a
// single write() and no epoll_ctl() is made per request. Only when the socket
// buffer is full (or while connecting) is a real write event armed.
//
// After any error hiredis frees the context (running every pending callback
// with a null reply first); our cleanup hook releases the nginx connection and
// a timer reconnects with exponential backoff (100 ms .. 2 s).

#include <cstring>

#include "redis_limit.h"

namespace redis_limit {
namespace {

constexpr ngx_msec_t kBackoffMin = 100;
constexpr ngx_msec_t kBackoffMax = 2000;

// Per-worker state (nginx workers are single-threaded). Plain data: no global
// constructor or destructor runs in the master or at exit.
struct Conn {
    const ConnConf* conf;
    ngx_log_t* log;
    redisAsyncContext* ac;
    ngx_connection_t* c;
    bool ready;     // connected and the script loaded
    bool loading;   // SCRIPT LOAD in flight
    bool stopping;  // conn_stop() was called: no more reconnects
    bool flushing;  // inside redisAsyncHandleWrite: "add write" must arm the event
    bool connected_once;
    ngx_msec_t backoff;
    ngx_msec_t last_progress;  // last read, or when commands started to be pending
    ngx_event_t retry;         // reconnect timer
    ngx_event_t flush;         // posted: write what this loop iteration queued
    char sha[41];
};

Conn g;

void connect_now() noexcept;
void on_script_loaded(redisAsyncContext* ac, void* reply, void* privdata) noexcept;

void schedule_retry() noexcept {
    if (g.stopping || g.retry.timer_set) return;
    ngx_add_timer(&g.retry, g.backoff);
    g.backoff = g.backoff * 2 > kBackoffMax ? kBackoffMax : g.backoff * 2;
}

// ---- nginx events -> hiredis -------------------------------------------------

void handle_write(redisAsyncContext* ac) noexcept {
    g.flushing = true;
    redisAsyncHandleWrite(ac);  // may free ac (and run our cleanup hook)
    g.flushing = false;
}

void on_read(ngx_event_t* ev) noexcept {
    auto* c = static_cast<ngx_connection_t*>(ev->data);
    g.last_progress = ngx_current_msec;
    redisAsyncHandleRead(static_cast<redisAsyncContext*>(c->data));
}

void on_write(ngx_event_t* ev) noexcept {
    auto* c = static_cast<ngx_connection_t*>(ev->data);
    handle_write(static_cast<redisAsyncContext*>(c->data));
}

void on_flush(ngx_event_t*) noexcept {
    if (g.ac) handle_write(g.ac);
}

void on_retry(ngx_event_t*) noexcept {
    connect_now();
}

// ---- hiredis hooks -> nginx events -------------------------------------------

void add_read(void* p) noexcept {
    auto* c = static_cast<ngx_connection_t*>(p);
    if (c->read->active) return;
    if (ngx_add_event(c->read, NGX_READ_EVENT, NGX_LEVEL_EVENT) != NGX_OK) {
        ngx_log_error(NGX_LOG_ALERT, g.log, 0, "redis_limit: cannot add the read event");
    }
}

void del_read(void* p) noexcept {
    auto* c = static_cast<ngx_connection_t*>(p);
    if (c->read->active) ngx_del_event(c->read, NGX_READ_EVENT, 0);
}

void add_write(void* p) noexcept {
    auto* c = static_cast<ngx_connection_t*>(p);
    if (c->write->active) return;
    bool connected = g.ac && (g.ac->c.flags & REDIS_CONNECTED);
    if (connected && !g.flushing) {
        // A new command: write it (with the others of this iteration) later.
        if (!g.flush.posted) {
            ngx_post_event(&g.flush, &ngx_posted_events);
        }
        return;
    }
    // Connecting, or a write left data behind: wait for writability.
    if (ngx_add_event(c->write, NGX_WRITE_EVENT, NGX_LEVEL_EVENT) != NGX_OK) {
        ngx_log_error(NGX_LOG_ALERT, g.log, 0, "redis_limit: cannot add the write event");
    }
}

void del_write(void* p) noexcept {
    auto* c = static_cast<ngx_connection_t*>(p);
    if (c->write->active) ngx_del_event(c->write, NGX_WRITE_EVENT, 0);
}

// hiredis is freeing the context (it closes the socket right after this).
void cleanup(void* p) noexcept {
    auto* c = static_cast<ngx_connection_t*>(p);
    if (c->read->active) ngx_del_event(c->read, NGX_READ_EVENT, 0);
    if (c->write->active) ngx_del_event(c->write, NGX_WRITE_EVENT, 0);
    if (c->read->posted) {  // a multi-statement macro
        ngx_delete_posted_event(c->read);
    }
    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }
    if (g.flush.posted) {
        ngx_delete_posted_event(&g.flush);
    }
    ngx_free_connection(c);
    c->fd = static_cast<ngx_socket_t>(-1);  // stale epoll events for it are ignored
    g.c = nullptr;
    g.ac = nullptr;
    g.ready = false;
    g.loading = false;
    schedule_retry();
}

// ---- connection lifecycle ------------------------------------------------------

void send_script_load() noexcept {
    const std::string& s = g.conf->script;
    g.ready = false;
    g.loading = redisAsyncCommand(g.ac, on_script_loaded, nullptr, "SCRIPT LOAD %b", s.data(),
                                  s.size()) == REDIS_OK;
}

void on_script_loaded(redisAsyncContext* ac, void* reply, void*) noexcept {
    g.loading = false;
    auto* rep = static_cast<redisReply*>(reply);
    if (rep == nullptr) return;  // the connection is going away
    if (rep->type == REDIS_REPLY_STRING && rep->len == 40) {
        std::memcpy(g.sha, rep->str, 40);
        g.sha[40] = '\0';
        g.ready = true;
        ngx_uint_t level = g.connected_once ? NGX_LOG_WARN : NGX_LOG_INFO;
        ngx_log_error(level, g.log, 0, "redis_limit: %s to redis at %s",
                      g.connected_once ? "reconnected" : "connected", g.conf->display.c_str());
        g.connected_once = true;
        g.backoff = kBackoffMin;
        return;
    }
    ngx_log_error(NGX_LOG_ERR, g.log, 0, "redis_limit: SCRIPT LOAD on %s failed: %*s",
                  g.conf->display.c_str(),
                  rep->type == REDIS_REPLY_ERROR ? static_cast<size_t>(rep->len) : 0,
                  rep->type == REDIS_REPLY_ERROR ? rep->str : "");
    redisAsyncFree(ac);  // deferred by hiredis until this callback returns; then reconnect
}

void on_connect(const redisAsyncContext* ac, int status) noexcept {
    if (status != REDIS_OK) {
        // hiredis frees the context next; the cleanup hook schedules a retry.
        ngx_log_error(NGX_LOG_WARN, g.log, 0, "redis_limit: cannot connect to redis at %s: %s",
                      g.conf->display.c_str(), ac->errstr);
        return;
    }
    send_script_load();
}

void on_disconnect(const redisAsyncContext* ac, int status) noexcept {
    if (status != REDIS_OK && !g.stopping) {
        ngx_log_error(NGX_LOG_WARN, g.log, 0, "redis_limit: connection to redis at %s lost: %s",
                      g.conf->display.c_str(), ac->errstr);
    }
}

void connect_now() noexcept {
    if (g.stopping || g.ac) return;
    const ConnConf& cf = *g.conf;
    redisAsyncContext* ac = cf.unix_path.empty() ? redisAsyncConnect(cf.host.c_str(), cf.port)
                                                 : redisAsyncConnectUnix(cf.unix_path.c_str());
    if (ac == nullptr) {
        ngx_log_error(NGX_LOG_ALERT, g.log, 0, "redis_limit: out of memory connecting to %s",
                      cf.display.c_str());
        schedule_retry();
        return;
    }
    if (ac->err) {
        ngx_log_error(NGX_LOG_WARN, g.log, 0, "redis_limit: cannot connect to redis at %s: %s",
                      cf.display.c_str(), ac->errstr);
        redisAsyncFree(ac);  // no hooks attached yet: nothing of nginx's is touched
        schedule_retry();
        return;
    }
    ngx_connection_t* c = ngx_get_connection(ac->c.fd, g.log);
    if (c == nullptr) {
        redisAsyncFree(ac);
        schedule_retry();
        return;
    }
    c->data = ac;
    c->read->handler = on_read;
    c->write->handler = on_write;
    c->read->log = g.log;
    c->write->log = g.log;
    ac->ev.data = c;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    g.ac = ac;
    g.c = c;
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    // Arms the write event: the non-blocking connect completes on writability.
    redisAsyncSetConnectCallback(ac, on_connect);
}

}  // namespace

void conn_start(ngx_cycle_t* cycle, const ConnConf* conf) noexcept {
    ngx_memzero(&g, sizeof(g));
    g.conf = conf;
    g.log = cycle->log;
    g.backoff = kBackoffMin;
    g.retry.handler = on_retry;
    g.retry.log = cycle->log;
    g.retry.data = &g;
    g.retry.cancelable = 1;  // graceful shutdown does not wait for it
    g.flush.handler = on_flush;
    g.flush.log = cycle->log;
    g.flush.data = &g;
    connect_now();
}

void conn_stop() noexcept {
    if (g.conf == nullptr) return;
    g.stopping = true;
    if (g.retry.timer_set) ngx_del_timer(&g.retry);
    if (g.ac) redisAsyncFree(g.ac);  // pending callbacks run with a null reply
}

bool conn_ready() noexcept {
    return g.ready && g.ac != nullptr;
}

bool conn_eval(int argc, const char** argv, std::size_t* lens, redisCallbackFn* fn,
               void* privdata) noexcept {
    if (!conn_ready()) return false;
    if (g.ac->replies.head == nullptr) {
        g.last_progress = ngx_current_msec;  // idle until now
    } else if (ngx_current_msec - g.last_progress > g.conf->stall_ms) {
        ngx_log_error(NGX_LOG_WARN, g.log, 0,
                      "redis_limit: redis at %s has not answered for %Mms, reconnecting",
                      g.conf->display.c_str(), ngx_current_msec - g.last_progress);
        redisAsyncFree(g.ac);  // pending callbacks run now with a null reply
        return false;
    }
    argv[0] = "EVALSHA";
    lens[0] = 7;
    argv[1] = g.sha;
    lens[1] = 40;
    return redisAsyncCommandArgv(g.ac, fn, privdata, argc, argv, lens) == REDIS_OK;
}

void conn_script_missing() noexcept {
    if (g.ac == nullptr || g.loading || g.stopping) return;
    ngx_log_error(NGX_LOG_WARN, g.log, 0,
                  "redis_limit: redis at %s lost the script, loading it again",
                  g.conf->display.c_str());
    send_script_load();
}

}  // namespace redis_limit
