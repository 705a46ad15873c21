// ngx_http_grl_module: tables and lifecycle only. Directives live in
// grl_conf.cpp, the request path in grl_handler.cpp, the status page in
// grl_status.cpp and the ZeroMQ reporter in grl_reporter.cpp.

#include <signal.h>
#include <unistd.h>

#include <cerrno>

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
    // Preaccess, like limit_req: after rewrites have settled $uri, before
    // access checks and content.
    auto* h = static_cast<ngx_http_handler_pt*>(
        ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers));
    if (h == nullptr) return NGX_ERROR;
    *h = preaccess_handler;
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
    if (m && m->zone_base) {
        zone::View z(m->zone_base);
        z.activate(m->config_gen);
        // Until this worker exits, no reload frees a slot its configuration uses.
        if (!z.register_worker(static_cast<std::uint32_t>(ngx_pid), m->config_gen, pid_alive)) {
            ngx_log_error(NGX_LOG_WARN, cycle->log, 0,
                          "grl: the zone's worker registry is full (%ui entries): slots of "
                          "buckets this worker counts are protected for one reload only",
                          static_cast<ngx_uint_t>(zone::kWorkerRegs));
        }
        m->cpp->matcher.count_limit_hits_in(
            &z.header()
                 .worker[static_cast<std::uint32_t>(ngx_worker) % zone::kWorkerSlots]
                 .regex_limit_hits);
    }
    return reporter_start(cycle);
}

void exit_process(ngx_cycle_t* cycle) noexcept {
    reporter_stop(cycle);
    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) return;
    auto* m =
        static_cast<MainConf*>(ngx_http_cycle_get_module_main_conf(cycle, ngx_http_grl_module));
    if (m && m->zone_base)
        zone::View(m->zone_base).unregister_worker(static_cast<std::uint32_t>(ngx_pid));
}

ngx_http_module_t module_ctx = {
    preconfiguration,   // preconfiguration: register $grl_* variables
    postconfiguration,  // postconfiguration: install the preaccess handler
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
    nullptr,                 // init module
    grl::ngx::init_process,  // init process: PRNG seed, reporter in worker 0
    nullptr,                 // init thread
    nullptr,                 // exit thread
    grl::ngx::exit_process,  // exit process: close ZeroMQ sockets
    nullptr,                 // exit master
    NGX_MODULE_V1_PADDING};
}
