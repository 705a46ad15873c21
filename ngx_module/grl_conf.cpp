// Directives of ngx_http_grl_module: parsing, defaults, and the shm.
// Every rejected value produces one `nginx -t` message naming the directive
// and the value (nginx appends "in FILE:LINE").

#include <fcntl.h>
#include <unistd.h>

#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "grl/common/parse.h"
#include "grl/plane/keyed_spec.h"
#include "grl_module.h"

namespace grl::ngx {
namespace {

std::string_view sv(const ngx_str_t& s) {
    return {reinterpret_cast<const char*>(s.data), s.len};
}

char* conf_error(ngx_conf_t* cf, const std::string& msg) {
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", msg.c_str());
    return static_cast<char*>(NGX_CONF_ERROR);
}

std::string directive(const ngx_command_t* cmd) {
    return "\"" + to_std(cmd->name) + "\"";
}

std::string quoted(std::string_view v) {
    return "\"" + std::string(v) + "\"";
}

// Runs a directive body, turning a C++ exception (only std::bad_alloc is
// possible here) into a configuration error instead of a crash.
template <typename F>
char* guarded(ngx_conf_t* cf, F&& body) noexcept {
    try {
        return body();
    } catch (const std::exception& e) {
        return conf_error(cf, std::string("grl: ") + e.what());
    }
}

bool valid_endpoint(std::string_view e) {
    auto starts = [&](std::string_view p) { return e.substr(0, p.size()) == p; };
    if (starts("ipc://") || starts("inproc://")) return e.size() > 6;
    if (!starts("tcp://")) return false;
    std::string_view rest = e.substr(6);
    std::size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == rest.size()) return false;
    for (char c : rest.substr(colon + 1)) {
        if (c < '0' || c > '9') return false;
    }
    return true;
}

// ---- grl_zone name:size -------------------------------------------------

ngx_int_t init_shm(ngx_shm_zone_t* shm_zone, void* data) noexcept;

char* set_zone(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* m = static_cast<MainConf*>(conf);
        ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
        if (m->shm_zone) return const_cast<char*>("is duplicate");
        std::string_view arg = sv(value[1]);
        std::size_t colon = arg.find(':');
        if (colon == std::string_view::npos || colon == 0) {
            return conf_error(
                cf, directive(cmd) + ": invalid zone " + quoted(arg) + ", expected name:size");
        }
        auto size = parse_size(arg.substr(colon + 1));
        if (!size) return conf_error(cf, directive(cmd) + ": " + size.error);
        // Room for the slab allocator's bookkeeping plus at least one bucket.
        std::uint64_t min = 8 * ngx_pagesize + shm::bytes_for(shm::kRuntimeSlots + 1);
        if (size.value < min) {
            return conf_error(cf, directive(cmd) + ": zone " + quoted(arg) +
                                      " is too small, at least " + std::to_string(min / 1024 + 1) +
                                      "k");
        }
        m->shm_name.data = value[1].data;
        m->shm_name.len = colon;
        m->shm_zone = ngx_shared_memory_add(cf, &m->shm_name, size.value, &ngx_http_grl_module);
        if (m->shm_zone == nullptr) return static_cast<char*>(NGX_CONF_ERROR);
        if (m->shm_zone->data) {
            return conf_error(
                cf, directive(cmd) + ": zone " + quoted(sv(m->shm_name)) + " is already used");
        }
        m->shm_zone->init = init_shm;
        m->shm_zone->data = m;
        return NGX_CONF_OK;
    });
}

// ---- grl_caller / grl_procedure VALUE, grl_bucket's key=VALUE -------------

// Compiles an attribute of the request (an nginx complex value) into `src`; an error text
// (to follow the directive's name) or empty.
std::string compile_source(ngx_conf_t* cf, ngx_str_t v, Source& src) {
    if (v.len == 0) return "empty value";
    // One plain variable ("$name"): read by index, no string is built per request.
    bool plain = v.len > 1 && v.data[0] == '$';
    for (size_t i = 1; plain && i < v.len; ++i) {
        u_char c = v.data[i];
        plain =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    }
    if (plain) {
        ngx_str_t name = {v.len - 1, v.data + 1};
        src.index = ngx_http_get_variable_index(cf, &name);
        return src.index == NGX_ERROR ? "unknown variable " + quoted(sv(v)) : std::string();
    }
    auto* cv = static_cast<ngx_http_complex_value_t*>(
        ngx_pcalloc(cf->pool, sizeof(ngx_http_complex_value_t)));
    if (cv == nullptr) return "out of memory";
    ngx_http_compile_complex_value_t ccv;
    ngx_memzero(&ccv, sizeof(ccv));
    ccv.cf = cf;
    ccv.value = &v;
    ccv.complex_value = cv;
    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) return "invalid value " + quoted(sv(v));
    if (cv->lengths == nullptr) {
        return quoted(sv(v)) + " has no variable, so every request would look the same";
    }
    src.cv = cv;
    return {};
}

// ---- grl_bucket NAME [key=V [keys=N] [report_keys=K] [hash_keys=on|off]] [caller*=V]
//                     [procedure*=V] rate=R [scope=S] [mode=M] --------------------------

bool take_match(std::string_view arg, std::string_view what, MatchSpec& spec, bool& dup,
                bool& matched) {
    struct Form {
        std::string_view suffix;
        MatchKind kind;
    };
    const Form forms[] = {
        {"=", MatchKind::Exact}, {"_prefix=", MatchKind::Prefix}, {"_regex=", MatchKind::Regex}};
    for (const Form& f : forms) {
        std::string key = std::string(what) + std::string(f.suffix);
        if (arg.substr(0, key.size()) == key) {
            matched = true;
            dup = spec.kind != MatchKind::Any;
            spec.kind = f.kind;
            spec.value = std::string(arg.substr(key.size()));
            return true;
        }
    }
    return false;
}

// Takes one cost=N|$variable or cost_after=$variable argument of a grl_bucket; false when
// `arg` is neither, else true with `error` set (naming the value) when it is invalid.
bool take_cost(ngx_conf_t* cf, ngx_str_t arg, Config::Cost& c, std::string& error) {
    const std::string_view a = sv(arg);
    const bool after = a.substr(0, 11) == "cost_after=";
    if (!after && a.substr(0, 5) != "cost=") return false;
    const std::size_t eq = after ? 11 : 5;
    const std::uint8_t bit = after ? 2 : 1;
    if (c.given & bit) {
        error = "duplicate " + quoted(a);
        return true;
    }
    c.given |= bit;
    const std::string_view v = a.substr(eq);
    const char* expected = after ? "one variable, e.g. cost_after=$upstream_http_x_tokens_used"
                                 : "0-4294967295 or one variable, e.g. cost=$http_x_cost";
    if (!v.empty() && v[0] == '$') {
        Source& s = after ? c.after : c.var;
        std::string err = compile_source(cf, ngx_str_t{arg.len - eq, arg.data + eq}, s);
        if (err.empty() && s.index < 0) err = "invalid value " + quoted(v);
        if (!err.empty())
            error = std::string(a.substr(0, eq)) + ": " + err + ", expected " + expected;
        return true;
    }
    std::uint64_t n = 0;
    if (after || !parse_uint(v, n) || n > kMaxCost) {
        error = "invalid " + quoted(a) + ", expected " + expected;
        return true;
    }
    c.units = static_cast<std::uint32_t>(n);
    return true;
}

// Takes a quota=N/PERIOD or window_offset=DURATION argument; returns an error naming the value.
std::string take_quota(std::string_view arg, QuotaSpec& quota, std::string_view& offset) {
    if (arg.substr(0, 14) == "window_offset=") {
        if (!offset.empty()) return "duplicate " + quoted(arg);
        offset = arg.substr(14);
        return offset.empty() ? "invalid window_offset \"\", expected e.g. 30s, 5m or 2h" : "";
    }
    if (quota) return "duplicate " + quoted(arg);
    auto q = parse_quota(arg.substr(6));
    if (!q) return q.error;
    quota = q.value;
    return {};
}

// The checks that need every argument: window_offset= against quota='s period. With key=, the
// quota is each key's (docs/design/009-per-key-quotas.md), and reports list as many keys as
// they can unless report_keys= says otherwise: every key's use has to reach the control plane.
std::string settle_quota(QuotaSpec& quota, std::string_view offset, KeyedSpec& keyed) {
    if (!offset.empty() && !quota) return "window_offset=" + std::string(offset) + " needs quota=";
    if (quota && keyed.keyed && (keyed.given & kReportKeysGiven) == 0) {
        keyed.report_keys = static_cast<std::uint32_t>(wire::kMaxReportKeys);
    }
    if (offset.empty()) return {};
    auto o = parse_window_offset(offset, quota.period);
    if (!o) return o.error;
    quota.offset_ms = o.value;
    return {};
}

char* set_bucket(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* m = static_cast<MainConf*>(conf);
        ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
        std::string d = directive(cmd);
        if (m->shm_zone == nullptr) {
            return conf_error(cf, d + " needs \"grl_zone\" before it");
        }
        BucketDef def;
        def.name = to_std(value[1]);
        if (!valid_name(def.name)) {
            return conf_error(cf, d + ": invalid bucket name " + quoted(def.name) +
                                      ", expected 1-63 of [A-Za-z0-9_.:-]");
        }
        d += " " + quoted(def.name);
        bool has_rate = false, has_scope = false, has_mode = false;
        QuotaSpec quota;
        std::string_view offset;  // window_offset=, checked against the quota's period
        KeyedSpec keyed;
        Source key_source = {nullptr, NGX_CONF_UNSET};
        Config::Cost cost;
        for (ngx_uint_t i = 2; i < cf->args->nelts; ++i) {
            std::string_view arg = sv(value[i]);
            bool dup = false, matched = false;
            if (arg.substr(0, 4) == "key=") {
                if (keyed.keyed) return conf_error(cf, d + ": duplicate " + quoted(arg));
                ngx_str_t v = {value[i].len - 4, value[i].data + 4};
                std::string err = compile_source(cf, v, key_source);
                if (!err.empty()) return conf_error(cf, d + ": key=: " + err);
                keyed.keyed = true;
                keyed.key = std::string(arg.substr(4));
                continue;
            }
            std::string param_err;
            if (take_cost(cf, value[i], cost, param_err) ||
                take_keyed_param(arg, keyed, param_err)) {
                if (!param_err.empty()) return conf_error(cf, d + ": " + param_err);
                continue;
            }
            if (take_match(arg, "caller", def.caller, dup, matched) ||
                take_match(arg, "procedure", def.procedure, dup, matched)) {
                std::string_view key = arg.substr(0, arg.find('='));
                if (dup)
                    return conf_error(
                        cf, d + ": more than one caller/procedure match in " + quoted(arg));
                const MatchSpec& spec = key.substr(0, 6) == "caller" ? def.caller : def.procedure;
                if (spec.value.empty())
                    return conf_error(cf, d + ": empty value in " + quoted(arg));
                if (spec.kind == MatchKind::Regex) {
                    std::string err = check_regex(spec.value);
                    if (!err.empty()) return conf_error(cf, d + ": " + err);
                }
                continue;
            }
            if (arg.substr(0, 5) == "rate=") {
                if (has_rate) return conf_error(cf, d + ": duplicate " + quoted(arg));
                auto r = parse_rate(arg.substr(5));
                if (!r)
                    return conf_error(cf, d + ": " + r.error + ", expected e.g. 100r/s or 600r/m");
                def.limit_mrps = r.value;
                has_rate = true;
                continue;
            }
            if (arg.substr(0, 6) == "quota=" || arg.substr(0, 14) == "window_offset=") {
                std::string err = take_quota(arg, quota, offset);
                if (!err.empty()) return conf_error(cf, d + ": " + err);
                continue;
            }
            if (arg.substr(0, 6) == "scope=") {
                auto s = parse_scope(arg.substr(6));
                if (has_scope || !s) {
                    return conf_error(cf, d + ": invalid scope " + quoted(arg.substr(6)) +
                                              ", expected global, region or zone");
                }
                def.scope = *s;
                has_scope = true;
                continue;
            }
            if (arg.substr(0, 5) == "mode=") {
                auto md = parse_mode(arg.substr(5));
                if (has_mode || !md) {
                    return conf_error(cf, d + ": invalid mode " + quoted(arg.substr(5)) +
                                              ", expected deny or shadow");
                }
                def.mode = *md;
                has_mode = true;
                continue;
            }
            return conf_error(cf, d + ": invalid parameter " + quoted(arg));
        }
        std::string quota_err = settle_quota(quota, offset, keyed);
        if (!quota_err.empty()) return conf_error(cf, d + ": " + quota_err);
        if (!has_rate && !quota) {
            return conf_error(cf, d + " must have \"rate\" or \"quota\" parameter");
        }
        if (!has_rate) def.limit_mrps = kNoRateMrps;  // the quota alone limits it
        if (keyed.given && !keyed.keyed) {
            return conf_error(cf, d + ": keys=, report_keys= and hash_keys= need key=");
        }
        if (keyed.keyed && def.limit_mrps == 0) {
            return conf_error(cf, d + ": a keyed bucket needs a rate above 0");
        }
        if (m->cpp->table.defs.size() >= 65535) return conf_error(cf, d + ": too many buckets");
        std::string err = m->cpp->matcher.add(def);
        if (!err.empty()) return conf_error(cf, d + ": " + err);
        m->cpp->table.defs.push_back(def);
        m->cpp->any_keyed = m->cpp->any_keyed || keyed.keyed;
        m->cpp->table.keyed.push_back(std::move(keyed));
        m->cpp->table.quotas.push_back(quota);
        m->cpp->key_sources.push_back(key_source);
        m->cpp->any_cost = m->cpp->any_cost || cost.units != 1 || cost.var.index >= 0;
        if (cost.after.index >= 0) {
            m->cpp->any_cost_after = true;
            m->record_needed = 1;  // the log phase reads the matched buckets from the record
        }
        m->cpp->costs.push_back(cost);
        return NGX_CONF_OK;
    });
}

// ---- grl_caller / grl_procedure VALUE -------------------------------------

char* set_source(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* m = static_cast<MainConf*>(conf);
        Source* src = reinterpret_cast<Source*>(reinterpret_cast<char*>(m) + cmd->offset);
        ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
        if (src->cv || src->index >= 0) return const_cast<char*>("is duplicate");
        std::string err = compile_source(cf, value[1], *src);
        if (!err.empty()) return conf_error(cf, directive(cmd) + ": " + err);
        return NGX_CONF_OK;
    });
}

// ---- grl_missing_caller skip | value=NAME ---------------------------------

char* set_missing_caller(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    auto* m = static_cast<MainConf*>(conf);
    ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
    if (m->missing_caller != NGX_CONF_UNSET_UINT) return const_cast<char*>("is duplicate");
    std::string_view arg = sv(value[1]);
    if (arg == "skip") {
        m->missing_caller = kMissingSkip;
        return NGX_CONF_OK;
    }
    if (arg.substr(0, 6) == "value=" && arg.size() > 6) {
        m->missing_caller = kMissingValue;
        m->missing_caller_value.data = value[1].data + 6;
        m->missing_caller_value.len = value[1].len - 6;
        return NGX_CONF_OK;
    }
    return conf_error(
        cf, directive(cmd) + ": invalid value " + quoted(arg) + ", expected skip or value=NAME");
}

// ---- grl_host [id=NAME] zone=NAME region=NAME -------------------------------

char* set_host(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* m = static_cast<MainConf*>(conf);
        ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
        if (m->has_host) return const_cast<char*>("is duplicate");
        Identity& id = m->cpp->id;
        for (ngx_uint_t i = 1; i < cf->args->nelts; ++i) {
            std::string_view arg = sv(value[i]);
            std::size_t eq = arg.find('=');
            std::string_view key = arg.substr(0, eq);
            std::string_view val = eq == std::string_view::npos ? "" : arg.substr(eq + 1);
            std::string* field = key == "id"       ? &id.host
                                 : key == "zone"   ? &id.zone
                                 : key == "region" ? &id.region
                                                   : nullptr;
            if (field == nullptr || eq == std::string_view::npos) {
                return conf_error(cf, directive(cmd) + ": invalid parameter " + quoted(arg) +
                                          ", expected id=, zone= or region=");
            }
            if (!valid_name(val)) {
                return conf_error(cf, directive(cmd) + ": invalid " + std::string(key) + " " +
                                          quoted(val) + ", expected 1-63 of [A-Za-z0-9_.:-]");
            }
            *field = std::string(val);
        }
        if (id.zone.empty() || id.region.empty()) {
            return conf_error(cf, directive(cmd) + " must have \"zone\" and \"region\" parameters");
        }
        m->has_host = 1;
        return NGX_CONF_OK;
    });
}

// ---- grl_collector / grl_instructions ENDPOINT... ---------------------------

char* set_endpoints(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* m = static_cast<MainConf*>(conf);
        ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
        bool collector = sv(cmd->name) == "grl_collector";
        if (collector ? !m->cpp->collector_endpoint.empty()
                      : !m->cpp->instruction_endpoints.empty()) {
            return const_cast<char*>("is duplicate");
        }
        for (ngx_uint_t i = 1; i < cf->args->nelts; ++i) {
            std::string_view e = sv(value[i]);
            if (!valid_endpoint(e)) {
                return conf_error(cf, directive(cmd) + ": invalid endpoint " + quoted(e) +
                                          ", expected tcp://host:port or ipc://path");
            }
            if (collector) {
                m->cpp->collector_endpoint = std::string(e);
            } else {
                m->cpp->instruction_endpoints.emplace_back(e);
            }
        }
        return NGX_CONF_OK;
    });
}

// ---- grl_curve_keypair FILE / grl_curve_server_key FILE ------------------------

char* set_curve_file(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* m = static_cast<MainConf*>(conf);
        ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
        bool keypair = sv(cmd->name) == "grl_curve_keypair";
        std::string& file = keypair ? m->cpp->curve_keypair_file : m->cpp->curve_server_key_file;
        if (!file.empty()) return const_cast<char*>("is duplicate");
        ngx_str_t name = value[1];
        if (name.len == 0) {
            return conf_error(cf, directive(cmd) + ": empty file name");
        }
        // Relative to the configuration prefix, like ssl_certificate.
        if (ngx_conf_full_name(cf->cycle, &name, 1) != NGX_OK) {
            return static_cast<char*>(NGX_CONF_ERROR);
        }
        file = to_std(name);
        std::ifstream f(file);
        if (!f) {
            return conf_error(
                cf, directive(cmd) + ": cannot read " + quoted(file) + ": " + std::strerror(errno));
        }
        std::ostringstream text;
        text << f.rdbuf();
        try {
            if (keypair) {
                m->cpp->curve_keypair = curve::parse_keypair(text.str(), file);
            } else {
                m->cpp->curve_server_key = curve::parse_public_key(text.str(), file);
            }
        } catch (const std::runtime_error& e) {
            return conf_error(cf, directive(cmd) + ": " + e.what());
        }
        return NGX_CONF_OK;
    });
}

// ---- durations -------------------------------------------------------------

char* set_duration(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        ngx_msec_t* field = reinterpret_cast<ngx_msec_t*>(static_cast<char*>(conf) + cmd->offset);
        ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
        if (*field != NGX_CONF_UNSET_MSEC) return const_cast<char*>("is duplicate");
        auto d = parse_duration_ms(sv(value[1]));
        if (!d) return conf_error(cf, directive(cmd) + ": " + d.error);
        bool interval = sv(cmd->name) == "grl_report_interval";
        if (interval && (d.value < 100 || d.value > 60000)) {
            return conf_error(cf, directive(cmd) + ": " + quoted(sv(value[1])) +
                                      " is out of range, expected 100ms..60s");
        }
        if (!interval && (d.value < 100 || d.value > 3600000)) {
            return conf_error(cf, directive(cmd) + ": " + quoted(sv(value[1])) +
                                      " is out of range, expected 100ms..1h");
        }
        *field = d.value;
        return NGX_CONF_OK;
    });
}

// ---- grl_reject_status CODE ------------------------------------------------

char* set_reject_status(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    auto* l = static_cast<LocConf*>(conf);
    ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
    if (l->reject_status != NGX_CONF_UNSET_UINT) return const_cast<char*>("is duplicate");
    ngx_int_t n = ngx_atoi(value[1].data, value[1].len);
    if (n < 400 || n > 599) {
        return conf_error(cf, directive(cmd) + ": invalid status " + quoted(sv(value[1])) +
                                  ", expected 400..599");
    }
    l->reject_status = static_cast<ngx_uint_t>(n);
    return NGX_CONF_OK;
}

// ---- grl_retry_after off | DURATION [jitter=DURATION] ----------------------

char* set_retry_after(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* l = static_cast<LocConf*>(conf);
        ngx_str_t* value = static_cast<ngx_str_t*>(cf->args->elts);
        if (l->retry_after != NGX_CONF_UNSET_MSEC) return const_cast<char*>("is duplicate");
        std::string_view arg = sv(value[1]);
        if (arg == "off") {
            if (cf->args->nelts > 2) {
                return conf_error(cf,
                                  directive(cmd) + ": invalid parameter " + quoted(sv(value[2])));
            }
            l->retry_after = 0;
            l->retry_after_jitter = 0;
            return NGX_CONF_OK;
        }
        auto d = parse_duration_ms(arg);
        if (!d || d.value < 1000) {
            return conf_error(cf, directive(cmd) + ": invalid delay " + quoted(arg) +
                                      ", expected off or at least 1s");
        }
        l->retry_after = d.value;
        l->retry_after_jitter = 0;
        if (cf->args->nelts > 2) {
            std::string_view j = sv(value[2]);
            auto jd = j.substr(0, 7) == "jitter=" ? parse_duration_ms(j.substr(7))
                                                  : Parsed<std::uint64_t>{0, "x"};
            if (!jd) {
                return conf_error(cf, directive(cmd) + ": invalid parameter " + quoted(j) +
                                          ", expected jitter=DURATION");
            }
            l->retry_after_jitter = jd.value;
        }
        return NGX_CONF_OK;
    });
}

// ---- grl_status --------------------------------------------------------------

char* set_status(ngx_conf_t* cf, ngx_command_t*, void* conf) noexcept {
    auto* l = static_cast<LocConf*>(conf);
    auto* clcf = static_cast<ngx_http_core_loc_conf_t*>(
        ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module));
    clcf->handler = status_handler;
    l->status_handler = 1;
    return NGX_CONF_OK;
}

// ---- grl_dry_run / grl_ratelimit_headers / grl_problem_json on | off --------

// A flag whose "on" needs the per-request record (grl_module.h, MainConf::record_needed).
char* set_record_flag(ngx_conf_t* cf, ngx_command_t* cmd, void* conf) noexcept {
    char* rv = ngx_conf_set_flag_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) return rv;
    auto* flag = reinterpret_cast<ngx_flag_t*>(static_cast<char*>(conf) + cmd->offset);
    if (*flag) {
        auto* m =
            static_cast<MainConf*>(ngx_http_conf_get_module_main_conf(cf, ngx_http_grl_module));
        m->record_needed = 1;
        if (sv(cmd->name) == "grl_ratelimit_headers") m->ratelimit_headers_used = 1;
    }
    return NGX_CONF_OK;
}

ngx_conf_enum_t log_levels[] = {{ngx_string("info"), NGX_LOG_INFO},
                                {ngx_string("notice"), NGX_LOG_NOTICE},
                                {ngx_string("warn"), NGX_LOG_WARN},
                                {ngx_string("error"), NGX_LOG_ERR},
                                {ngx_null_string, 0}};

// ---- the shm -----------------------------------------------------------------

std::uint64_t random_epoch() {
    std::uint64_t e = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &e, sizeof(e)) != static_cast<ssize_t>(sizeof(e))) e = 0;
        close(fd);
    }
    e ^= (static_cast<std::uint64_t>(ngx_pid) << 40) ^
         static_cast<std::uint64_t>(ngx_current_msec) ^
         (static_cast<std::uint64_t>(ngx_random()) << 16);
    return e ? e : 1;
}

// ---- key tables of keyed buckets (docs/per-key.md) ------------------------------
// Each keyed bucket's table is a block of the shm's slab pool, found from its bucket slot
// (BucketSlot::key_table). A reload keeps a table when the bucket keeps its key definition and
// keys= (key_sig); else the bucket gets a new table and the old one goes back to the pool.

std::uint64_t key_sig(const KeyedSpec& k) {
    return keyed::hash_key(k.key + '\n' + std::to_string(k.keys));
}

// What a table takes from the slab pool: whole pages.
std::size_t pool_bytes(std::uint32_t keys) {
    const std::size_t b = keyed::bytes_for(keys);
    return (b + ngx_pagesize - 1) / ngx_pagesize * ngx_pagesize;
}

std::size_t key_tables_bytes(const Config& c) {
    std::size_t n = 0;
    for (const KeyedSpec& k : c.table.keyed) n += k.keyed ? pool_bytes(k.keys) : 0;
    return n;
}

std::string human_size(std::size_t bytes) {
    return bytes >= (1u << 20) ? std::to_string((bytes + (1u << 20) - 1) >> 20) + "m"
                               : std::to_string((bytes + 1023) >> 10) + "k";
}

// After assign(): frees the tables of slots it reset (`before`: each slot's table before), and
// gives each keyed bucket its table (kept, or new). An error names the bucket and the size.
std::string place_key_tables(ngx_shm_zone_t* shm_zone, const shm::View& shm, const Config& c,
                             const std::vector<std::int64_t>& before) {
    auto* shpool = reinterpret_cast<ngx_slab_pool_t*>(shm_zone->shm.addr);
    char* base = reinterpret_cast<char*>(&shm.header());
    for (std::size_t i = 0; i < before.size(); ++i) {
        if (before[i] != 0 && shm.slot(static_cast<std::uint32_t>(i)).key_table.load() == 0) {
            ngx_slab_free(shpool, base + before[i]);
        }
    }
    for (std::size_t i = 0; i < c.table.defs.size(); ++i) {
        shm::BucketSlot& s = shm.slot(c.table.slots[i]);
        const KeyedSpec* k = c.table.keyed_spec(i);
        const std::int64_t held = s.key_table.load();
        if (k != nullptr && held != 0 && s.key_sig == key_sig(*k)) continue;  // kept
        // The old table goes back to the pool first, so that a table of the same size (a new
        // key= with the same keys=) always fits. The slot is cleared before: a worker of the
        // running configuration reads it per request and skips the bucket's keys meanwhile;
        // only one that read the old offset within these few instructions may count one
        // request in the new table.
        if (held != 0) {
            s.key_table.store(0, std::memory_order_release);
            s.key_sig = 0;
            ngx_slab_free(shpool, base + held);
        }
        std::int64_t made = 0;
        if (k != nullptr) {
            void* p = ngx_slab_alloc(shpool, keyed::bytes_for(k->keys));
            if (p == nullptr) {
                const std::size_t need = pool_bytes(k->keys);
                const std::size_t free = shpool->pfree * ngx_pagesize;
                return "no room for the key table of bucket \"" + c.table.defs[i].name +
                       "\" (keys=" + std::to_string(k->keys) + ": " + std::to_string(need) +
                       " bytes, " + std::to_string(free) + " free); a grl_zone of at least " +
                       human_size(shm_zone->shm.size + need - std::min(need, free) +
                                  2 * ngx_pagesize) +
                       " holds it (a new size creates a new shm)";
            }
            keyed::Table(p).format(k->keys);
            made = static_cast<char*>(p) - base;
        }
        s.key_sig = k != nullptr ? key_sig(*k) : 0;
        s.key_table.store(made, std::memory_order_release);
    }
    return {};
}

ngx_int_t init_shm(ngx_shm_zone_t* shm_zone, void* data) noexcept {
    auto* m = static_cast<MainConf*>(shm_zone->data);
    auto* shpool = reinterpret_cast<ngx_slab_pool_t*>(shm_zone->shm.addr);
    ngx_log_t* log = shm_zone->shm.log;
    try {
        if (data) {
            // Reload with the same grl_zone name and size: adopt the counters and ratios.
            m->shm_base = static_cast<MainConf*>(data)->shm_base;
        } else if (shm_zone->shm.exists) {
            m->shm_base = shpool->data;
        } else {
            // The bucket slots take what the key tables of this configuration leave (two
            // pages to spare for the pool's rounding). With keyed buckets, only half of it:
            // the other half stays free for key tables a reload adds or grows.
            const std::size_t free = shpool->pfree * ngx_pagesize;
            const std::size_t tables = key_tables_bytes(*m->cpp) + 2 * ngx_pagesize;
            const std::size_t rest = free > tables ? free - tables : 0;
            std::uint32_t cap = shm::capacity_for(m->cpp->any_keyed ? rest / 2 : rest);
            if (cap <= shm::kRuntimeSlots) {
                const std::size_t need =
                    shm_zone->shm.size - free + tables + shm::bytes_for(shm::kRuntimeSlots + 1);
                ngx_log_error(NGX_LOG_EMERG, log, 0,
                              "grl_zone \"%V\" is too small for its buckets and their key "
                              "tables (keys=): it needs at least %s",
                              &shm_zone->shm.name, human_size(need).c_str());
                return NGX_ERROR;
            }
            void* p = ngx_slab_alloc(shpool, shm::bytes_for(cap));
            if (p == nullptr) return NGX_ERROR;
            shm::View(p).format(cap, random_epoch());
            m->shm_base = p;
            shpool->data = p;
        }
        shm::View shm(m->shm_base);
        std::string err = shm.check_compatible();
        if (!err.empty()) {
            ngx_log_error(NGX_LOG_EMERG, log, 0,
                          "grl_zone \"%V\" cannot be reused: %s; "
                          "give grl_zone another name or restart nginx",
                          &shm_zone->shm.name, err.c_str());
            return NGX_ERROR;
        }
        std::vector<std::string> names;
        for (const BucketDef& d : m->cpp->table.defs) names.push_back(d.name);
        std::vector<std::int64_t> tables_before(shm.header().capacity);
        for (std::uint32_t i = 0; i < shm.header().capacity; ++i) {
            tables_before[i] = shm.slot(i).key_table.load();
        }
        err = shm.assign(names, m->cpp->table.slots, m->config_gen, pid_alive);
        if (err.empty()) err = place_key_tables(shm_zone, shm, *m->cpp, tables_before);
        if (!err.empty()) {
            ngx_log_error(NGX_LOG_EMERG, log, 0, "grl_zone \"%V\": %s", &shm_zone->shm.name,
                          err.c_str());
            return NGX_ERROR;
        }
        m->cpp->def_of_slot.assign(shm.header().capacity, -1);
        for (std::size_t i = 0; i < m->cpp->table.slots.size(); ++i) {
            m->cpp->def_of_slot[m->cpp->table.slots[i]] = static_cast<int>(i);
        }
        return NGX_OK;
    } catch (const std::exception& e) {
        ngx_log_error(NGX_LOG_EMERG, log, 0, "grl_zone \"%V\": %s", &shm_zone->shm.name, e.what());
        return NGX_ERROR;
    }
}

void free_config(void* data) noexcept {
    delete static_cast<Config*>(data);
}

}  // namespace

// ---- directive table -----------------------------------------------------------

ngx_command_t commands[] = {
    {ngx_string("grl_zone"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, set_zone,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_bucket"), NGX_HTTP_MAIN_CONF | NGX_CONF_2MORE, set_bucket,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_caller"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, set_source,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(MainConf, caller), nullptr},
    {ngx_string("grl_procedure"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, set_source,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(MainConf, procedure), nullptr},
    {ngx_string("grl_missing_caller"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, set_missing_caller,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_host"), NGX_HTTP_MAIN_CONF | NGX_CONF_1MORE, set_host,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_collector"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, set_endpoints,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_instructions"), NGX_HTTP_MAIN_CONF | NGX_CONF_1MORE, set_endpoints,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_curve_keypair"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, set_curve_file,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_curve_server_key"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, set_curve_file,
     NGX_HTTP_MAIN_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_report_interval"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, set_duration,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(MainConf, report_interval), nullptr},
    {ngx_string("grl_instruction_ttl"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, set_duration,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(MainConf, instruction_ttl), nullptr},
    {ngx_string("grl_surge_damping"), NGX_HTTP_MAIN_CONF | NGX_CONF_FLAG, ngx_conf_set_flag_slot,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(MainConf, surge_damping), nullptr},
    {ngx_string("grl"), NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(LocConf, enable), nullptr},
    {ngx_string("grl_reject_status"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1, set_reject_status,
     NGX_HTTP_LOC_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_retry_after"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE12, set_retry_after,
     NGX_HTTP_LOC_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_log_level"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_enum_slot, NGX_HTTP_LOC_CONF_OFFSET, offsetof(LocConf, log_level), log_levels},
    {ngx_string("grl_status"), NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS, set_status,
     NGX_HTTP_LOC_CONF_OFFSET, 0, nullptr},
    {ngx_string("grl_dry_run"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG, set_record_flag,
     NGX_HTTP_LOC_CONF_OFFSET, offsetof(LocConf, dry_run), nullptr},
    {ngx_string("grl_ratelimit_headers"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG, set_record_flag,
     NGX_HTTP_LOC_CONF_OFFSET, offsetof(LocConf, ratelimit_headers), nullptr},
    {ngx_string("grl_problem_json"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG, set_record_flag,
     NGX_HTTP_LOC_CONF_OFFSET, offsetof(LocConf, problem_json), nullptr},
    ngx_null_command};

// ---- configuration create / init / merge -------------------------------------

void* create_main_conf(ngx_conf_t* cf) noexcept {
    auto* m = static_cast<MainConf*>(ngx_pcalloc(cf->pool, sizeof(MainConf)));
    if (m == nullptr) return nullptr;
    ngx_pool_cleanup_t* cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == nullptr) return nullptr;
    try {
        m->cpp = new Config();
    } catch (...) {
        return nullptr;
    }
    cln->handler = free_config;
    cln->data = m->cpp;
    m->caller.index = NGX_CONF_UNSET;
    m->procedure.index = NGX_CONF_UNSET;
    m->missing_caller = NGX_CONF_UNSET_UINT;
    m->report_interval = NGX_CONF_UNSET_MSEC;
    m->instruction_ttl = NGX_CONF_UNSET_MSEC;
    m->surge_damping = NGX_CONF_UNSET;
    return m;
}

char* init_main_conf(ngx_conf_t* cf, void* conf) noexcept {
    return guarded(cf, [&]() -> char* {
        auto* m = static_cast<MainConf*>(conf);
        ngx_conf_init_uint_value(m->missing_caller, kMissingSkip);
        ngx_conf_init_msec_value(m->report_interval, 1000);
        ngx_conf_init_msec_value(m->instruction_ttl, 5000);
        ngx_conf_init_value(m->surge_damping, 1);
        if (m->procedure.cv == nullptr && m->procedure.index < 0) {
            ngx_str_t uri = ngx_string("uri");
            m->procedure.index = ngx_http_get_variable_index(cf, &uri);
            if (m->procedure.index == NGX_ERROR) return static_cast<char*>(NGX_CONF_ERROR);
        }
        Config& c = *m->cpp;
        if (c.id.host.empty()) {
            std::string h = to_std(cf->cycle->hostname);
            c.id.host = valid_name(h) ? h : "nginx";
        }
        bool plane = !c.collector_endpoint.empty() || !c.instruction_endpoints.empty();
        if (plane && !m->has_host) {
            return conf_error(cf,
                              "\"grl_collector\" and \"grl_instructions\" need \"grl_host\" "
                              "with zone= and region= (this host's place in the fleet)");
        }
        if (plane && m->shm_zone == nullptr) {
            return conf_error(cf, "\"grl_collector\" and \"grl_instructions\" need \"grl_zone\"");
        }
        bool has_pair = !c.curve_keypair_file.empty(),
             has_server = !c.curve_server_key_file.empty();
        if (has_pair != has_server) {
            return conf_error(
                cf, std::string("\"") + (has_pair ? "grl_curve_keypair" : "grl_curve_server_key") +
                        "\" needs \"" + (has_pair ? "grl_curve_server_key" : "grl_curve_keypair") +
                        "\" (CURVE needs this host's key pair and the collector's "
                        "public key)");
        }
        if (has_pair && !plane) {
            return conf_error(cf,
                              "\"grl_curve_keypair\" needs \"grl_collector\" or "
                              "\"grl_instructions\" (CURVE secures their connections)");
        }
        if (has_pair && !zmq_has("curve")) {
            return conf_error(cf, "\"grl_curve_keypair\": this libzmq was built without CURVE");
        }
        if (m->instruction_ttl <= m->report_interval) {
            return conf_error(cf, "\"grl_instruction_ttl\" " + std::to_string(m->instruction_ttl) +
                                      "ms must be longer than \"grl_report_interval\" " +
                                      std::to_string(m->report_interval) + "ms");
        }
        bool has_caller = m->caller.cv != nullptr || m->caller.index >= 0;
        for (const BucketDef& d : c.table.defs) {
            if (d.caller.kind != MatchKind::Any && !has_caller) {
                return conf_error(cf, "\"grl_bucket\" \"" + d.name +
                                          "\" matches on caller but \"grl_caller\" is not set");
            }
        }
        return NGX_CONF_OK;
    });
}

void* create_loc_conf(ngx_conf_t* cf) noexcept {
    auto* l = static_cast<LocConf*>(ngx_pcalloc(cf->pool, sizeof(LocConf)));
    if (l == nullptr) return nullptr;
    l->enable = NGX_CONF_UNSET;
    l->reject_status = NGX_CONF_UNSET_UINT;
    l->retry_after = NGX_CONF_UNSET_MSEC;
    l->retry_after_jitter = NGX_CONF_UNSET_MSEC;
    l->log_level = NGX_CONF_UNSET_UINT;
    l->dry_run = NGX_CONF_UNSET;
    l->ratelimit_headers = NGX_CONF_UNSET;
    l->problem_json = NGX_CONF_UNSET;
    return l;
}

char* merge_loc_conf(ngx_conf_t*, void* parent, void* child) noexcept {
    auto* prev = static_cast<LocConf*>(parent);
    auto* conf = static_cast<LocConf*>(child);
    ngx_conf_merge_value(conf->enable, prev->enable, 0);
    ngx_conf_merge_uint_value(conf->reject_status, prev->reject_status, 429);
    if (conf->retry_after == NGX_CONF_UNSET_MSEC) {
        conf->retry_after = prev->retry_after == NGX_CONF_UNSET_MSEC ? 1000 : prev->retry_after;
        conf->retry_after_jitter =
            prev->retry_after_jitter == NGX_CONF_UNSET_MSEC ? 1000 : prev->retry_after_jitter;
    }
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_INFO);
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    ngx_conf_merge_value(conf->ratelimit_headers, prev->ratelimit_headers, 0);
    ngx_conf_merge_value(conf->problem_json, prev->problem_json, 0);
    return NGX_CONF_OK;
}

}  // namespace grl::ngx
