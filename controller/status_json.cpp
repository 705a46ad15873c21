#include "status_json.h"

namespace grl::controller {

void write_match(daemon::Json& j, const wire::RuntimeMatch& m) {
    auto kind = [](MatchKind k) {
        return k == MatchKind::Prefix ? "prefix" : k == MatchKind::Regex ? "regex" : "exact";
    };
    j.begin_object();
    j.key("caller").str(m.caller).key("caller_kind").str(kind(m.caller_kind));
    j.key("procedure").str(m.procedure).key("procedure_kind").str(kind(m.procedure_kind));
    j.key("scope").str(to_string(m.scope));
    j.end_object();
}

void write_bucket_status(daemon::Json& j, const wire::BucketStatus& b) {
    j.begin_object();
    j.key("name").str(b.name);
    j.key("scope").str(to_string(b.scope));
    j.key("region").str(b.region);
    j.key("zone").str(b.zone);
    j.key("offered_rps").num(b.offered_mrps / 1000.0);
    j.key("admitted_rps").num(b.admitted_mrps / 1000.0);
    j.key("shadow_dropped_rps").num(b.shadow_dropped_mrps / 1000.0);
    j.key("limit_rps").num(b.limit_mrps / 1000.0);
    j.key("ratio").num(b.ratio_ppm / 1e6);
    if (b.candidate_limit_mrps) {
        j.key("candidate_limit_rps").num(*b.candidate_limit_mrps / 1000.0);
        j.key("candidate_would_drop_rps").num(b.candidate_would_drop_mrps / 1000.0);
    }
    j.key("mode").str(to_string(b.mode));
    j.key("limit_source").str(b.limit_source);
    j.key("mode_source").str(b.mode_source);
    j.key("expires_ms").uint(b.expires_ms);
    j.key("hosts").uint(b.hosts);
    j.key("host_names").begin_array();
    for (const auto& h : b.host_names) j.str(h);
    j.end_array();
    j.key("definitions").begin_array();
    for (const auto& d : b.definitions) {
        j.begin_object();
        j.key("scope").str(to_string(d.def.scope)).key("mode").str(to_string(d.def.mode));
        j.key("limit_rps").num(d.def.limit_mrps / 1000.0).key("hosts").uint(d.hosts);
        j.end_object();
    }
    j.end_array();
    j.key("runtime").boolean(b.has_match);
    // A keyed bucket: its limit is each key's and its own ratio 0; keys_limited counts its keys
    // with a ratio (`grlctl keys` lists them).
    j.key("keyed").boolean(b.keyed);
    if (b.keyed) j.key("keys_limited").uint(b.keys_limited);
    if (b.has_match) {
        j.key("match");
        write_match(j, b.match);
    }
    j.end_object();
}

void write_zone_status(daemon::Json& j, const wire::ZoneStatus& z) {
    j.begin_object();
    j.key("zone").str(z.zone).key("collector").str(z.source).key("hosts").uint(z.hosts);
    j.key("stale_hosts").uint(z.stale_hosts).key("age_ms").uint(z.age_ms);
    j.key("fresh").boolean(z.fresh);
    if (z.usage_v) j.key("usage_v").uint(z.usage_v);
    j.end_object();
}

}  // namespace grl::controller
