#include "status_json.h"

namespace grl::controller {

using daemon::json_number;
using Json = nlohmann::ordered_json;

Json match_json(const wire::RuntimeMatch& m) {
    auto kind = [](MatchKind k) {
        return k == MatchKind::Prefix ? "prefix" : k == MatchKind::Regex ? "regex" : "exact";
    };
    return Json{{"caller", m.caller},
                {"caller_kind", kind(m.caller_kind)},
                {"procedure", m.procedure},
                {"procedure_kind", kind(m.procedure_kind)},
                {"scope", to_string(m.scope)}};
}

Json bucket_status_json(const wire::BucketStatus& b) {
    Json j;
    j["name"] = b.name;
    j["scope"] = to_string(b.scope);
    j["region"] = b.region;
    j["zone"] = b.zone;
    j["offered_rps"] = json_number(b.offered_mrps / 1000.0);
    j["admitted_rps"] = json_number(b.admitted_mrps / 1000.0);
    j["shadow_dropped_rps"] = json_number(b.shadow_dropped_mrps / 1000.0);
    j["limit_rps"] = json_number(b.limit_mrps / 1000.0);
    j["ratio"] = json_number(b.ratio_ppm / 1e6);
    if (b.candidate_limit_mrps) {
        j["candidate_limit_rps"] = json_number(*b.candidate_limit_mrps / 1000.0);
        j["candidate_would_drop_rps"] = json_number(b.candidate_would_drop_mrps / 1000.0);
    }
    j["mode"] = to_string(b.mode);
    j["limit_source"] = b.limit_source;
    j["mode_source"] = b.mode_source;
    j["expires_ms"] = b.expires_ms;
    j["hosts"] = b.hosts;
    j["host_names"] = b.host_names;
    Json defs = Json::array();
    for (const auto& d : b.definitions) {
        defs.push_back({{"scope", to_string(d.def.scope)},
                        {"mode", to_string(d.def.mode)},
                        {"limit_rps", json_number(d.def.limit_mrps / 1000.0)},
                        {"hosts", d.hosts}});
    }
    j["definitions"] = std::move(defs);
    j["runtime"] = b.has_match;
    // A keyed bucket: its limit is each key's and its own ratio 0; keys_limited counts its keys
    // with a ratio (`grlctl keys` lists them).
    j["keyed"] = b.keyed;
    if (b.keyed) j["keys_limited"] = b.keys_limited;
    if (b.key_quota) {  // a quota per key: each key's N, the window's end, keys that used it
        j["key_quota"] = b.key_quota;
        j["key_quota_reset_ms"] = b.key_quota_reset_ms;
        j["keys_used_up"] = b.keys_used_up;
    }
    if (b.has_match) j["match"] = match_json(b.match);
    return j;
}

Json zone_status_json(const wire::ZoneStatus& z) {
    Json j{{"zone", z.zone},     {"collector", z.source},
           {"hosts", z.hosts},   {"stale_hosts", z.stale_hosts},
           {"age_ms", z.age_ms}, {"fresh", z.fresh}};
    if (z.usage_v) j["usage_v"] = z.usage_v;
    return j;
}

}  // namespace grl::controller
