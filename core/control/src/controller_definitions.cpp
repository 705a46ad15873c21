// Definitions and limits: which definition and scope hosts vote for, and the limits digest.
#include "grl/control/control.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <tuple>
#include <utility>

#include "controller_detail.h"
#include "grl/common/bucket.h"
#include "grl/common/ratio.h"
#include "grl/common/saturating.h"

namespace grl::control {

using namespace detail;  // NOLINT(google-build-using-namespace): this library's own helpers

namespace {

void fnv(std::uint64_t& h, std::string_view s) {
    for (char c : s) {
        h ^= static_cast<unsigned char>(c);
        h *= 1099511628211ULL;
    }
    h ^= 0xff;  // field separator
    h *= 1099511628211ULL;
}

}  // namespace

std::string_view to_string(LimitSource s) {
    switch (s) {
        case LimitSource::Conf: return "conf";
        case LimitSource::File: return "file";
        case LimitSource::Override: return "override";
        case LimitSource::Removed: return "removed";
    }
    return "?";
}

std::string digest(const Limits& l) {
    std::uint64_t h = 14695981039346656037ULL;
    for (const auto& [name, f] : l.buckets) {  // std::map: sorted, so layout-independent
        fnv(h, name);
        fnv(h, f.limit_mrps ? std::to_string(*f.limit_mrps) : "-");
        fnv(h, f.mode ? to_string(*f.mode) : "-");
        // Only when present, so that files without candidates keep the digest older
        // controllers compute for them (peers compare digests during an upgrade).
        if (f.candidate_mrps) fnv(h, "candidate=" + std::to_string(*f.candidate_mrps));
        if (f.has_match)
            fnv(h, match_text(f.match) + kind_text(f.match.caller_kind) + "/" +
                       kind_text(f.match.procedure_kind));
    }
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
    return buf;
}

std::optional<wire::Definition> resolve(const std::vector<wire::DefinitionCount>& defs,
                                        std::optional<Scope> scope) {
    bool any_of_scope = false;
    if (scope) {
        for (const auto& d : defs)
            any_of_scope = any_of_scope || (d.def.scope == *scope && d.hosts);
    }
    const wire::DefinitionCount* best = nullptr;
    for (const auto& d : defs) {
        if (d.hosts == 0) continue;
        if (any_of_scope && d.def.scope != *scope) continue;
        if (best == nullptr || d.hosts > best->hosts) {
            best = &d;
            continue;
        }
        if (d.hosts < best->hosts) continue;
        if (d.def.limit_mrps != best->def.limit_mrps) {
            if (d.def.limit_mrps < best->def.limit_mrps) best = &d;
            continue;
        }
        if (d.def.mode != best->def.mode) {
            if (d.def.mode == Mode::Deny) best = &d;
            continue;
        }
        if (d.def.scope < best->def.scope) best = &d;  // full determinism
    }
    if (best == nullptr) return std::nullopt;
    wire::Definition out = best->def;
    if (scope) out.scope = *scope;
    return out;
}

std::optional<Scope> resolve_scope(const std::vector<wire::DefinitionCount>& defs) {
    std::uint64_t n[3] = {0, 0, 0};
    for (const auto& d : defs) {
        std::uint64_t& k = n[static_cast<int>(d.def.scope)];
        k = sat_add(k, d.hosts);
    }
    std::optional<Scope> best;
    std::uint64_t best_n = 0;
    for (Scope s : {Scope::Global, Scope::Region, Scope::Zone}) {  // wider first: wins ties
        std::uint64_t k = n[static_cast<int>(s)];
        if (k > best_n) {
            best = s;
            best_n = k;
        }
    }
    return best;
}

void merge_definitions(std::vector<wire::DefinitionCount>& into,
                       const std::vector<wire::DefinitionCount>& add) {
    // Called per bucket and zone every tick (a million times at 50 zones x 10,000 buckets):
    // most often every host of the fleet reports one definition.
    if (into.size() == 1 && add.size() == 1 && into[0].def == add[0].def) {
        into[0].hosts = sat_add(into[0].hosts, add[0].hosts);
        return;
    }
    for (const auto& a : add) {
        bool found = false;
        for (auto& d : into) {
            if (d.def == a.def) {
                d.hosts = sat_add(d.hosts, a.hosts);
                found = true;
                break;
            }
        }
        if (!found) into.push_back(a);
    }
    auto before = [](const wire::DefinitionCount& x, const wire::DefinitionCount& y) {
        if (x.hosts != y.hosts) return x.hosts > y.hosts;
        return x.def < y.def;
    };
    if (!std::is_sorted(into.begin(), into.end(), before))
        std::sort(into.begin(), into.end(), before);
}

}  // namespace grl::control
