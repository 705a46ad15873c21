// Declarations shared by the files of ngx_http_grl_module.
// nginx's C headers are included only here, inside extern "C", as SYSTEM
// includes (see ngx_module/CMakeLists.txt), so -Werror applies to our code only.
#pragma once

extern "C" {
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
}

#include "grl/bucket.h"
#include "grl/curve_keys.h"
#include "grl/decision.h"
#include "grl/plane.h"
#include "grl/prng.h"
#include "grl/zone_layout.h"

extern "C" {
extern ngx_module_t ngx_http_grl_module;
}

namespace grl::ngx {

enum MissingCaller : ngx_uint_t { kMissingSkip = 0, kMissingValue = 1 };

// A request attribute from a complex value; `index` >= 0 when the value is one
// plain variable, read directly without building a string.
struct Source {
    ngx_http_complex_value_t* cv;
    ngx_int_t index;
};

// The part of the http{} configuration that needs C++ objects; freed by a
// pool cleanup of the configuration's pool.
struct Config {
    Matcher matcher;
    BucketTable table;
    Identity id;
    std::vector<std::string> instruction_endpoints;
    std::string collector_endpoint;
    // CURVE towards the collector (grl_curve_keypair, grl_curve_server_key);
    // empty strings: plain ZeroMQ.
    curve::KeyPair curve_keypair;
    std::string curve_keypair_file;
    std::string curve_server_key;
    std::string curve_server_key_file;
    bool curve() const { return !curve_keypair_file.empty(); }  // validated: both or neither
};

struct MainConf {
    Config* cpp;
    ngx_shm_zone_t* shm_zone;
    ngx_str_t zone_name;
    void* zone_base;           // the zone's Header, set by init_zone
    std::uint64_t config_gen;  // this configuration's generation in the zone

    Source caller;
    Source procedure;
    ngx_uint_t missing_caller;  // MissingCaller
    ngx_str_t missing_caller_value;

    ngx_msec_t report_interval;
    ngx_msec_t instruction_ttl;
    ngx_uint_t has_host;  // grl_host was given
};

struct LocConf {
    ngx_flag_t enable;
    ngx_uint_t reject_status;
    ngx_msec_t retry_after;  // NGX_CONF_UNSET_MSEC; 0 = off
    ngx_msec_t retry_after_jitter;
    ngx_uint_t log_level;
    ngx_flag_t status_handler;  // grl_status in this location
};

// What the handler decided, kept for the $grl_* variables.
struct RequestCtx {
    Outcome outcome;
    std::uint8_t n;
    std::uint16_t matched[kMaxMatchesPerRequest];  // zone slots of the matched buckets
};

inline zone::View zone_view(const MainConf* m) {
    return zone::View(m->zone_base);
}
inline std::string to_std(const ngx_str_t& s) {
    return std::string(reinterpret_cast<const char*>(s.data), s.len);
}

// Per-process PRNG for drop sampling, seeded in init_process.
extern Prng g_prng;
// kill(pid, 0): whether a process (a registered worker) still runs.
bool pid_alive(std::uint32_t pid) noexcept;

// grl_conf.cpp
extern ngx_command_t commands[];
void* create_main_conf(ngx_conf_t* cf) noexcept;
char* init_main_conf(ngx_conf_t* cf, void* conf) noexcept;
void* create_loc_conf(ngx_conf_t* cf) noexcept;
char* merge_loc_conf(ngx_conf_t* cf, void* parent, void* child) noexcept;

// grl_handler.cpp
ngx_int_t preaccess_handler(ngx_http_request_t* r) noexcept;
ngx_int_t add_variables(ngx_conf_t* cf) noexcept;

// grl_status.cpp
ngx_int_t status_handler(ngx_http_request_t* r) noexcept;

// grl_reporter.cpp
ngx_int_t reporter_start(ngx_cycle_t* cycle) noexcept;
void reporter_stop(ngx_cycle_t* cycle) noexcept;

}  // namespace grl::ngx
