// Declarations shared by the files of ngx_http_grl_module.
// nginx's C headers are included only here, inside extern "C", as SYSTEM
// includes (see ngx_module/CMakeLists.txt), so -Werror applies to our code only.
#pragma once

extern "C" {
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
}

#include "grl/common/bucket.h"
#include "grl/common/curve_keys.h"
#include "grl/plane/decision.h"
#include "grl/plane/keyed_decision.h"
#include "grl/plane/plane.h"
#include "grl/common/prng.h"
#include "grl/plane/cost.h"
#include "grl/plane/shm_layout.h"

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
    // def_of_slot[slot] is the index into table.defs of the configured bucket in that shm
    // slot, -1 for none (set by init_shm): the RateLimit-Policy field's configured limit.
    std::vector<int> def_of_slot;
    // key_sources[i]: where bucket table.defs[i]'s key comes from (grl_bucket key=VALUE);
    // {nullptr, -1} for a bucket that is not keyed.
    std::vector<Source> key_sources;
    bool any_keyed = false;  // some bucket has key=
    // costs[i]: what a request counts as in bucket table.defs[i] (grl_bucket cost=, cost_after=;
    // grl_cost.cpp). Run-time buckets count 1.
    struct Cost {
        std::uint32_t units = 1;                   // cost=N (1 when not given)
        Source var = {nullptr, NGX_CONF_UNSET};    // cost=$variable
        Source after = {nullptr, NGX_CONF_UNSET};  // cost_after=$variable
        std::uint8_t given = 0;                    // 1: cost=, 2: cost_after= (to refuse repeats)
    };
    std::vector<Cost> costs;
    bool any_cost = false;        // some bucket's cost is not 1: the request path reads costs
    bool any_cost_after = false;  // some bucket has cost_after=: the log phase handler runs
};

struct MainConf {
    Config* cpp;
    ngx_shm_zone_t* shm_zone;
    ngx_str_t shm_name;
    void* shm_base;            // the shm's Header, set by init_shm
    std::uint64_t config_gen;  // this configuration's generation in the shm

    Source caller;
    Source procedure;
    ngx_uint_t missing_caller;  // MissingCaller
    ngx_str_t missing_caller_value;

    ngx_msec_t report_interval;
    ngx_msec_t instruction_ttl;
    ngx_uint_t has_host;       // grl_host was given
    ngx_flag_t surge_damping;  // grl_surge_damping (docs/design.md "Surge damping")

    // The request path (grl_handler.cpp). The per-request record (RequestCtx) is
    // kept in the request's slot of an internal variable at `record_index`; it is
    // allocated only when `record_needed`: a $grl_* variable is named in the
    // configuration (found at init_module), or a feature that reads it sets it (the
    // RateLimit header fields and problem+json bodies: grl_ratelimit_headers,
    // grl_problem_json; and grl_dry_run).
    ngx_uint_t record_index;
    ngx_flag_t record_needed;
    ngx_flag_t procedure_is_uri;  // grl_procedure is $uri (the default): read r->uri
    // `grl_ratelimit_headers on` appears somewhere: only then is the header filter installed
    // (otherwise every response, matched or not, paid a call through it).
    ngx_flag_t ratelimit_headers_used;
};

struct LocConf {
    ngx_flag_t enable;
    ngx_uint_t reject_status;
    ngx_msec_t retry_after;  // NGX_CONF_UNSET_MSEC; 0 = off
    ngx_msec_t retry_after_jitter;
    ngx_uint_t log_level;
    ngx_flag_t status_handler;     // grl_status in this location
    ngx_flag_t dry_run;            // grl_dry_run: every bucket evaluated in shadow
    ngx_flag_t ratelimit_headers;  // grl_ratelimit_headers: RateLimit-Policy, RateLimit
    ngx_flag_t problem_json;       // grl_problem_json: application/problem+json rejections
};

// What the handler decided, kept for the $grl_* variables; n = 0 in the shared
// records of requests decided while the record was not needed.
struct RequestCtx {
    Outcome outcome;
    std::uint8_t n;
    std::uint8_t dry_run;         // decided under grl_dry_run: nothing was enforced
    std::uint32_t retry_after_s;  // the Retry-After sent with a rejection, 0 none
    std::uint16_t matched[kMaxMatchesPerRequest];  // shm slots of the matched buckets
    // $grl_key: the key the request was counted under in a keyed bucket (the deciding one, or
    // else the first keyed bucket matched); the bytes are the request's own. len 0: none.
    const char* key;
    std::uint32_t key_len;
    // Bit i for matched[i]: a keyed bucket, and its key is over its limit (KeyedVerdict::over);
    // the RateLimit header field and the problem+json body speak of the key's own limit there.
    std::uint16_t keyed;
    std::uint16_t keyed_over;
    // Bit i: the key was rejected with ratio 1 (a quota per key used up: RateLimit r=0 until
    // the window ends).
    std::uint16_t keyed_used_up;
};
static_assert(kMaxMatchesPerRequest <= 16, "RequestCtx::keyed holds one bit per matched bucket");

// The keys of the keyed buckets a request matched, and their verdicts (grl_keyed.h).
struct KeyedRequest {
    KeyedVerdict verdicts[kMaxMatchesPerRequest];  // the first n are set
    std::size_t n;
    bool dropped;  // some verdict is not Pass: only then is there anything to fold
};

inline shm::View shm_view(const MainConf* m) {
    return shm::View(m->shm_base);
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
// Reads a request attribute; false when the variable is not found or empty. Values other
// modules change later in the request (realip's $remote_addr, a `set` in a later phase) must
// not stay frozen: what this read cached, it flushes. Inline: a single variable (the usual
// key=) costs no call; a complex value is read_complex's.
bool read_complex(ngx_http_request_t* r, const Source& s, std::string_view& out);
inline bool read_source(ngx_http_request_t* r, const Source& s, std::string_view& out) {
    if (s.index < 0) return read_complex(r, s, out);
    const auto index = static_cast<ngx_uint_t>(s.index);
    ngx_http_variable_value_t& slot = r->variables[index];
    const bool was_cached = slot.valid || slot.not_found;
    ngx_http_variable_value_t* v = ngx_http_get_indexed_variable(r, index);
    const bool ok = v != nullptr && !v->not_found && v->len != 0;
    if (ok) out = {reinterpret_cast<const char*>(v->data), v->len};
    if (!was_cached) slot.valid = slot.not_found = 0;  // the data stays where it is
    return ok;
}

// grl_keyed.h: the keyed branch of the request path (admit_keys, and admit_key for Lua).
inline constexpr std::string_view kEmptyKey = "-";  // the one key of empty or missing values

// grl_cost.cpp: what a request counts as (docs/directives.md, grl_bucket cost=, cost_after=;
// the arguments are parsed in grl_conf.cpp).
// The request's units in each of its n matched buckets, the first `configured` of them
// configured (idx: indices into table.defs), the rest run-time buckets (1).
void request_costs(ngx_http_request_t* r, const MainConf* m, const shm::View& shm,
                   std::uint32_t worker, const std::uint16_t* idx, std::size_t configured,
                   std::size_t n, std::uint32_t* cost) noexcept;
// Log phase: adds cost_after= units to the buckets (and keys) a served request matched.
ngx_int_t cost_after_handler(ngx_http_request_t* r) noexcept;
// The request's record, also after internal redirects; nullptr when no bucket matched.
RequestCtx* find_ctx(ngx_http_request_t* r) noexcept;
ngx_int_t add_variables(ngx_conf_t* cf) noexcept;
// postconfiguration: the index of the variable slot that holds the per-request record.
ngx_int_t index_record(ngx_conf_t* cf, MainConf* m) noexcept;
// init_module: what the request path needs, once the whole configuration is known.
void settle_request_path(ngx_cycle_t* cycle) noexcept;

// grl_conventions.cpp: the RateLimit header fields and problem+json rejections
ngx_int_t install_header_filter(ngx_conf_t* cf) noexcept;
ngx_int_t send_problem(ngx_http_request_t* r, const RequestCtx& ctx, ngx_uint_t status) noexcept;

// grl_status.cpp
ngx_int_t status_handler(ngx_http_request_t* r) noexcept;

// grl_reporter.cpp
ngx_int_t reporter_start(ngx_cycle_t* cycle) noexcept;
void reporter_stop(ngx_cycle_t* cycle) noexcept;

}  // namespace grl::ngx
