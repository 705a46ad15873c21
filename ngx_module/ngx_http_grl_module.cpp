// ngx_http_grl_module: tables and lifecycle only. Directives live in
// grl_conf.cpp, the request path in grl_handler.cpp, the RateLimit header fields and
// problem+json rejections in grl_conventions.cpp, the status page in
// grl_status.cpp and the ZeroMQ reporter in grl_reporter.cpp.

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "grl_module.h"

namespace grl::ngx {

Prng g_prng;

bool pid_alive(std::uint32_t pid) noexcept {
    return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

namespace {

ngx_int_t preconfiguration(ngx_conf_t* cf) noexcept {
    return add_variables(cf);
}

ngx_int_t postconfiguration(ngx_conf_t* cf) noexcept {
    auto* cmcf = static_cast<ngx_http_core_main_conf_t*>(
        ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module));
    auto* m = static_cast<MainConf*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_grl_module));
    if (index_record(cf, m) != NGX_OK) return NGX_ERROR;
    // Preaccess, like limit_req: after rewrites have settled $uri, before access
    // checks and content. nginx runs a phase's handlers last registered first,
    // and a dynamic module's postconfiguration runs after the built-in ones', so
    // a pushed handler would run before realip's (grl would count the load
    // balancer's address) and limit_req's. First in the array runs last in the
    // phase: grl sees the request as limit_req does, and a request limit_req or
    // limit_conn rejects is not counted.
    ngx_array_t& handlers = cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers;
    if (ngx_array_push(&handlers) == nullptr) return NGX_ERROR;
    auto* h = static_cast<ngx_http_handler_pt*>(handlers.elts);
    std::memmove(h + 1, h, (handlers.nelts - 1) * sizeof(ngx_http_handler_pt));
    h[0] = preaccess_handler;
    // cost_after= (grl_cost.cpp): the units known once the response is done, at the log phase.
    if (m->cpp->any_cost_after) {
        auto* log = static_cast<ngx_http_handler_pt*>(
            ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers));
        if (log == nullptr) return NGX_ERROR;
        *log = cost_after_handler;
    }
    // RateLimit header fields (grl_ratelimit_headers), added to every kind of response.
    return install_header_filter(cf);
}

ngx_int_t init_module(ngx_cycle_t* cycle) noexcept {
    settle_request_path(cycle);
    return NGX_OK;
}

ngx_int_t init_process(ngx_cycle_t* cycle) noexcept {
    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) return NGX_OK;
    // Distinct streams per worker and per start; not a secret.
    g_prng.seed((static_cast<std::uint64_t>(ngx_pid) << 32) ^
                static_cast<std::uint64_t>(ngx_time()) ^ reinterpret_cast<std::uintptr_t>(&cycle) ^
                (static_cast<std::uint64_t>(ngx_worker) << 48));
    auto* m =
        static_cast<MainConf*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_grl_module));
    if (m && m->shm_base) {
        shm::View shm(m->shm_base);
        shm.activate(m->config_gen);
        // Until this worker exits, no reload frees a slot its configuration uses.
        if (!shm.register_worker(static_cast<std::uint32_t>(ngx_pid), m->config_gen, pid_alive)) {
            ngx_log_error(
                NGX_LOG_WARN, cycle->log, 0,
                "grl: the shared memory's worker registry is full (%ui entries): slots of "
                "buckets this worker counts are protected for one reload only",
                static_cast<ngx_uint_t>(shm::kWorkerRegs));
        }
        m->cpp->matcher.count_limit_hits_in(
            &shm.header()
                 .worker[static_cast<std::uint32_t>(ngx_worker) % shm::kWorkerSlots]
                 .regex_limit_hits);
    }
    return reporter_start(cycle);
}

void exit_process(ngx_cycle_t* cycle) noexcept {
    reporter_stop(cycle);
    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) return;
    auto* m =
        static_cast<MainConf*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_grl_module));
    if (m && m->shm_base)
        shm::View(m->shm_base).unregister_worker(static_cast<std::uint32_t>(ngx_pid));
}

ngx_http_module_t module_ctx = {
    preconfiguration,   // preconfiguration: register $grl_* variables
    postconfiguration,  // postconfiguration: install the preaccess handler, header filter
    create_main_conf,   // create main configuration
    init_main_conf,     // init main configuration: defaults, bucket table
    nullptr,            // create server configuration
    nullptr,            // merge server configuration
    create_loc_conf,    // create location configuration
    merge_loc_conf      // merge location configuration
};

}  // namespace
}  // namespace grl::ngx

extern "C" {
ngx_module_t ngx_http_grl_module = {
    NGX_MODULE_V1,
    &grl::ngx::module_ctx,   // module context
    grl::ngx::commands,      // module directives
    NGX_HTTP_MODULE,         // module type
    nullptr,                 // init master
    grl::ngx::init_module,   // init module: what the request path needs (record, $uri)
    grl::ngx::init_process,  // init process: PRNG seed, reporter in worker 0
    nullptr,                 // init thread
    nullptr,                 // exit thread
    grl::ngx::exit_process,  // exit process: close ZeroMQ sockets
    nullptr,                 // exit master
    NGX_MODULE_V1_PADDING};
}
