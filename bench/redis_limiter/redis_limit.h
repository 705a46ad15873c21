// BENCHMARK BASELINE ONLY -- not part of grl. See README.md in this folder.
//
// Declarations shared by the two files of ngx_http_redis_limit_module: the
// module (directives, request path) and the per-worker Redis connection that
// drives hiredis's async API from nginx's event loop.
// nginx's and hiredis's C headers are included only here, as SYSTEM includes
// (see CMakeLists.txt), so -Werror applies to our code only.
#pragma once

extern "C" {
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
}

#include <cstddef>
#include <string>

namespace redis_limit {

// Where the per-worker connection goes and what it loads once connected.
struct ConnConf {
    std::string host;  // TCP host (an address or a name from /etc/hosts)
    int port = 0;
    std::string unix_path;       // set instead of host/port for "unix:/path"
    std::string script;          // Lua source loaded with SCRIPT LOAD after each connect
    std::string display;         // as written in redis_limit_server, for log messages
    ngx_msec_t stall_ms = 2000;  // commands pending and nothing read for this long:
                                 // drop the connection and reconnect
};

// Starts connecting (init_process of a worker). Reconnects with backoff after
// any error until conn_stop().
void conn_start(ngx_cycle_t* cycle, const ConnConf* conf) noexcept;

// Frees the connection (exit_process). Pending callbacks run with a null reply.
void conn_stop() noexcept;

// True when connected and the script is loaded, so conn_eval() can be used.
bool conn_ready() noexcept;

// Queues EVALSHA of the loaded script. Returns false when not ready, or when
// the server has left commands unanswered for longer than stall_ms (a hung
// server or a black-holed connection): the connection is then dropped, its
// pending callbacks run with a null reply, and a reconnect is scheduled.
// The caller fills argv[2..argc); argv[0] and argv[1] are set here (EVALSHA,
// the script's SHA1). On success `fn` is called exactly once with `privdata`:
// with the reply, or with a null reply when the connection fails or is freed.
// Commands queued during one event loop iteration go out in one write() at the
// end of that iteration.
bool conn_eval(int argc, const char** argv, std::size_t* lens, redisCallbackFn* fn,
               void* privdata) noexcept;

// The server answered NOSCRIPT (e.g. after SCRIPT FLUSH): load the script again;
// conn_ready() is false until it is.
void conn_script_missing() noexcept;

}  // namespace redis_limit
