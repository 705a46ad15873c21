// The C side of the Lua API (lua/resty/grl.lua, docs/directives.md "OpenResty and Lua"),
// called through LuaJIT's FFI as lua-resty-core calls the lua module: thin glue over what
// the request path and the status page already do (decide, admit_key, fold_keyed,
// view_bucket). Exported by name (exports.map); never throws, allocates or locks. The
// request comes from resty.core.base.get_request(): its configuration gives the shm and
// the buckets, its location grl_dry_run.
//
// The structs and return codes are mirrored in lua/resty/grl.lua's cdef: change both.

#include <cstring>

#include "grl/common/ratio.h"
#include "grl_keyed.h"
#include "grl_module.h"

extern "C" {

struct grl_lua_decision_t {
    int decision;  // grl::Decision
    std::uint32_t ratio_ppm;
};

struct grl_lua_bucket_t {
    std::uint64_t offered, admitted, dropped, shadow_dropped, limit_mrps;
    std::uint32_t ratio_ppm;
    int state;  // grl::shm::PlaneState
    int mode;   // grl::Mode
    int keyed;
};

struct grl_lua_key_t {
    std::uint64_t offered, dropped;
    std::uint32_t ratio_ppm;
    int state;  // grl::shm::PlaneState of the key's own ratio
};

}  // extern "C"

namespace grl::ngx {
namespace {

// Return codes (>= 0: success or a bucket index).
enum LuaError : int {
    kNoRequest = -1,      // called without a request (init_by_lua)
    kNoShm = -2,          // no grl_zone in this configuration
    kUnknownBucket = -3,  // no configured bucket of that name (or index)
    kNotKeyed = -4,       // a key given for a bucket without key=
    kKeyRequired = -5,    // no key given for a keyed bucket
    kKeyNotFound = -6,    // the key has no entry in the bucket's key table on this host
};

// The request's main configuration when it has an shm, else null with `err` set.
const MainConf* main_conf(ngx_http_request_t* r, int& err) {
    if (r == nullptr) {
        err = kNoRequest;
        return nullptr;
    }
    auto* m = static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_grl_module));
    if (m == nullptr || m->shm_base == nullptr) {
        err = kNoShm;
        return nullptr;
    }
    return m;
}

// Configured bucket `bucket` (an index from grl_lua_bucket_index) of the request's
// configuration, or an error code.
int check_bucket(ngx_http_request_t* r, int bucket, const MainConf*& m) {
    int err = 0;
    m = main_conf(r, err);
    if (m == nullptr) return err;
    if (bucket < 0 || static_cast<std::size_t>(bucket) >= m->cpp->table.defs.size()) {
        return kUnknownBucket;
    }
    return 0;
}

}  // namespace

// C linkage (unmangled names for the FFI) in our namespace.
extern "C" {

// The index of configured bucket `name`, for the calls below.
__attribute__((visibility("default"))) int grl_lua_bucket_index(ngx_http_request_t* r,
                                                                const char* name,
                                                                std::size_t len) noexcept {
    int err = 0;
    const MainConf* m = main_conf(r, err);
    if (m == nullptr) return err;
    const int i = m->cpp->table.find(std::string_view(name, len));
    return i < 0 ? kUnknownBucket : i;
}

// Decides one request of `key` (nullptr: none) in `bucket` as the request path does for a
// request matching that bucket alone: counted in it, sampled against its ratio, a keyed
// bucket's key counted and capped in its key table.
__attribute__((visibility("default"))) int grl_lua_decide(ngx_http_request_t* r, int bucket,
                                                          const char* key, std::size_t key_len,
                                                          grl_lua_decision_t* out) noexcept {
    const MainConf* m = nullptr;
    if (const int err = check_bucket(r, bucket, m)) return err;
    const auto idx = static_cast<std::uint16_t>(bucket);
    const bool keyed = m->cpp->table.keyed_spec(idx) != nullptr;
    if (keyed && key == nullptr) return kKeyRequired;
    if (!keyed && key != nullptr) return kNotKeyed;
    auto* l = static_cast<LocConf*>(ngx_http_get_module_loc_conf(r, ngx_http_grl_module));
    const bool dry_run = l->dry_run != 0;
    const shm::View shm(m->shm_base);
    const auto worker = static_cast<std::uint32_t>(ngx_worker);
    const std::uint16_t slot = m->cpp->table.slots[idx];
    std::uint32_t units = 1;  // the bucket's cost=, as for a request matching it
    request_costs(r, m, shm, worker, &idx, 1, 1, &units);
    Outcome o = decide(shm, &slot, 1, worker, ngx_current_msec, g_prng, dry_run, &units);
    KeyedVerdict v;
    if (keyed &&
        admit_key(m, shm, idx, slot, 0, key_len ? std::string_view(key, key_len) : kEmptyKey,
                  dry_run, units, v)) {
        fold_keyed(shm, &slot, 1, &v, 1, worker, o, &units);
    }
    out->decision = static_cast<int>(o.decision);
    out->ratio_ppm = threshold_to_ppm(o.threshold);
    return 0;
}

// A bucket's counters on this host and the control plane's ratio, as the status page shows.
__attribute__((visibility("default"))) int grl_lua_read_bucket(ngx_http_request_t* r, int bucket,
                                                               grl_lua_bucket_t* out) noexcept {
    const MainConf* m = nullptr;
    if (const int err = check_bucket(r, bucket, m)) return err;
    const auto idx = static_cast<std::size_t>(bucket);
    const BucketView v = view_bucket(shm::View(m->shm_base), m->cpp->table.defs[idx],
                                     m->cpp->table.slots[idx], ngx_current_msec);
    out->offered = v.tot.offered;
    out->admitted = v.tot.admitted;
    out->dropped = v.tot.dropped;
    out->shadow_dropped = v.tot.shadow_dropped;
    out->limit_mrps = v.limit_mrps;
    out->ratio_ppm = threshold_to_ppm(v.threshold);
    out->state = static_cast<int>(v.state);
    out->mode = static_cast<int>(v.mode);
    out->keyed = m->cpp->table.keyed_spec(idx) != nullptr;
    return 0;
}

// One key's counters in a keyed bucket's table on this host and the control plane's ratio for
// it; kKeyNotFound when the key has no entry (never seen, or evicted). Claims nothing.
__attribute__((visibility("default"))) int grl_lua_read_key(ngx_http_request_t* r, int bucket,
                                                            const char* key, std::size_t key_len,
                                                            grl_lua_key_t* out) noexcept {
    const MainConf* m = nullptr;
    if (const int err = check_bucket(r, bucket, m)) return err;
    const auto idx = static_cast<std::size_t>(bucket);
    if (m->cpp->table.keyed_spec(idx) == nullptr) return kNotKeyed;
    const keyed::Table t = shm::View(m->shm_base).key_table(m->cpp->table.slots[idx]);
    const std::string_view k = key_len ? std::string_view(key, key_len) : kEmptyKey;
    const keyed::Entry* e = t.valid() ? t.find(keyed::hash_key(k)) : nullptr;
    if (e == nullptr) return kKeyNotFound;
    const std::uint64_t expires = e->expires_ms.load(std::memory_order_relaxed);
    const bool active = expires > ngx_current_msec;
    out->offered = e->offered.load(std::memory_order_relaxed);
    out->dropped = e->dropped.load(std::memory_order_relaxed);
    out->ratio_ppm = threshold_to_ppm(active ? e->threshold.load(std::memory_order_relaxed) : 0);
    out->state = static_cast<int>(expires == 0 ? shm::PlaneState::Waiting
                                  : active     ? shm::PlaneState::Active
                                               : shm::PlaneState::Expired);
    return 0;
}

}  // extern "C"
}  // namespace grl::ngx
