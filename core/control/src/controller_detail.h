// Helpers shared by the controller's source files (src/controller_*.cpp): the text of events
// and refusals, and small rules every input follows. Internal to grl_control.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "grl/common/ratio.h"
#include "grl/control/control.h"

namespace grl::control::detail {

inline std::string rps(double mrps) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%.1f r/s", mrps / 1000.0);
    return buf;
}

inline std::string rps(std::uint64_t mrps) {
    return rps(static_cast<double>(mrps));
}

inline std::string ratio_text(std::uint32_t ppm) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%u.%04u", ppm / kPpmOne, (ppm % kPpmOne) / 100);
    return buf;
}

inline std::uint64_t round_mrps(double v) {
    if (!(v > 0)) return 0;
    if (v >= 1.8e19) return UINT64_MAX;
    return static_cast<std::uint64_t>(std::llround(v));
}

inline std::string where(Scope scope, const std::string& region, const std::string& zone) {
    switch (scope) {
        case Scope::Global: return "global";
        case Scope::Region: return "region " + region;
        case Scope::Zone: return "zone " + zone;
    }
    return "?";
}

inline std::string kind_text(MatchKind k) {
    switch (k) {
        case MatchKind::Exact: return "";
        case MatchKind::Prefix: return "_prefix";
        case MatchKind::Regex: return "_regex";
        case MatchKind::Any: return "";
    }
    return "";
}

inline std::string match_text(const wire::RuntimeMatch& m) {
    std::string s;
    if (!m.caller.empty()) s += "caller" + kind_text(m.caller_kind) + "=" + m.caller;
    if (!m.procedure.empty()) {
        if (!s.empty()) s += ' ';
        s += "procedure" + kind_text(m.procedure_kind) + "=" + m.procedure;
    }
    s += " scope=";
    s += to_string(m.scope);
    return s;
}

// Of a wire::UsageBucket or a SumEntry.
template <typename Entry>
inline void add_rates(Rates& r, const Entry& b) {
    r.offered += static_cast<double>(b.offered_mrps);
    r.admitted += static_cast<double>(b.admitted_mrps);
    r.dropped += static_cast<double>(b.dropped_mrps);
    r.shadow_dropped += static_cast<double>(b.shadow_dropped_mrps);
}

// Of two messages of one sender: newer by the sender's clock, then by seq.
template <typename Message>
inline bool newer_than(const Message& u, const Message& held) {
    return u.ts_ms > held.ts_ms || (u.ts_ms == held.ts_ms && u.seq > held.seq);
}

// A sender's interval sets how long its message stays fresh and is remembered: within bounds,
// so that one message cannot claim to stay fresh for years (or overflow the arithmetic).
inline std::uint64_t clamp_interval(std::uint64_t ms) {
    return std::clamp(ms, kMinIntervalMs, kMaxIntervalMs);
}

inline void refuse(std::string* why, std::string text) {
    if (why) *why = std::move(text);
}

}  // namespace grl::control::detail
