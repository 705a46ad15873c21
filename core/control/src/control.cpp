#include "grl/control/control.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <tuple>
#include <utility>

#include "grl/common/bucket.h"
#include "grl/common/ratio.h"
#include "grl/common/saturating.h"

namespace grl::control {

namespace {

std::string rps(double mrps) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%.1f r/s", mrps / 1000.0);
    return buf;
}

std::string rps(std::uint64_t mrps) {
    return rps(static_cast<double>(mrps));
}

std::string ratio_text(std::uint32_t ppm) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%u.%04u", ppm / kPpmOne, (ppm % kPpmOne) / 100);
    return buf;
}

std::uint64_t round_mrps(double v) {
    if (!(v > 0)) return 0;
    if (v >= 1.8e19) return UINT64_MAX;
    return static_cast<std::uint64_t>(std::llround(v));
}

std::string where(Scope scope, const std::string& region, const std::string& zone) {
    switch (scope) {
        case Scope::Global: return "global";
        case Scope::Region: return "region " + region;
        case Scope::Zone: return "zone " + zone;
    }
    return "?";
}

std::string kind_text(MatchKind k) {
    switch (k) {
        case MatchKind::Exact: return "";
        case MatchKind::Prefix: return "_prefix";
        case MatchKind::Regex: return "_regex";
        case MatchKind::Any: return "";
    }
    return "";
}

std::string match_text(const wire::RuntimeMatch& m) {
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
void add_rates(Rates& r, const Entry& b) {
    r.offered += static_cast<double>(b.offered_mrps);
    r.admitted += static_cast<double>(b.admitted_mrps);
    r.dropped += static_cast<double>(b.dropped_mrps);
    r.shadow_dropped += static_cast<double>(b.shadow_dropped_mrps);
}

}  // namespace

// What aggregate() reads of a usage entry, written while the entry is in cache.
void Controller::fill(SumEntry& s, const wire::UsageBucket& b) {
    s.offered_mrps = b.offered_mrps;
    s.admitted_mrps = b.admitted_mrps;
    s.dropped_mrps = b.dropped_mrps;
    s.shadow_dropped_mrps = b.shadow_dropped_mrps;
    s.hosts = b.hosts;
    s.rated_hosts = b.rated_hosts;
    s.keys = !b.keys.empty();
    s.definitions = static_cast<std::uint8_t>(std::min<std::size_t>(b.definitions.size(), 2));
    if (s.definitions == 1) {
        const wire::DefinitionCount& d = b.definitions[0];
        s.def_limit_mrps = d.def.limit_mrps;
        s.def_hosts = d.hosts;
        s.def_scope = d.def.scope;
        s.def_mode = d.def.mode;
        s.def_keyed = d.def.keyed;
    }
}

// One entry into, out of a bucket's running sums. Inlined into their loops: run_replace()'s
// out-and-in then loads and stores each sum of the Run once.
[[gnu::always_inline]] inline void Controller::count_in(Run& r, SumEntry& c, bool short_of) {
    ++r.n;
    c.counted = 0;
    const bool missing = c.hosts > 0 && c.rated_hosts == 0;
    const std::uint64_t rates =
        c.offered_mrps | c.admitted_mrps | c.dropped_mrps | c.shadow_dropped_mrps;
    if (((rates | c.hosts | c.rated_hosts | c.def_hosts) >> 48) != 0 || (missing && rates != 0)) {
        ++r.odd;
        c.counted |= kOdd;
    }
    if (missing) ++r.missing;
    if (c.rated_hosts < c.hosts || short_of) {
        ++r.incomplete;
        c.counted |= kIncomplete;
    }
    r.hosts += c.hosts;
    r.offered += c.offered_mrps;
    r.admitted += c.admitted_mrps;
    r.dropped += c.dropped_mrps;
    r.shadow_dropped += c.shadow_dropped_mrps;
    r.rated_hosts += c.rated_hosts;
    r.keys += c.keys;
    if (c.definitions == 1) {
        // The first entry with one definition, when no kSimple entry is left, sets the run's:
        // a definition changed on every host becomes the simple case again once each zone
        // has sent one usage with it.
        if (r.simple == 0) {
            r.def_limit_mrps = c.def_limit_mrps;
            r.def_scope = c.def_scope;
            r.def_mode = c.def_mode;
            r.def_keyed = c.def_keyed;
        }
        if (r.is_def(c)) {
            ++r.simple;
            r.def_hosts += c.def_hosts;
            c.counted |= kSimple;
        } else {
            ++r.other;
            c.counted |= kOther;
        }
    } else if (c.definitions > 1) {
        ++r.other;
        c.counted |= kOther;
    }
}

[[gnu::always_inline]] inline void Controller::count_out(Run& r, const SumEntry& c) {
    --r.n;
    if (c.hosts > 0 && c.rated_hosts == 0) --r.missing;
    if (c.counted & kOdd) --r.odd;
    if (c.counted & kIncomplete) --r.incomplete;
    r.hosts -= c.hosts;
    r.offered -= c.offered_mrps;
    r.admitted -= c.admitted_mrps;
    r.dropped -= c.dropped_mrps;
    r.shadow_dropped -= c.shadow_dropped_mrps;
    r.rated_hosts -= c.rated_hosts;
    r.keys -= c.keys;
    if (c.counted & kSimple) {
        --r.simple;
        r.def_hosts -= c.def_hosts;
    }
    if (c.counted & kOther) --r.other;
}

void Controller::size_runs() {
    if (own_runs_.size() >= ids_.span()) return;
    own_runs_.resize(ids_.span());
    remote_runs_.resize(ids_.span());
}

void Controller::run_add(const std::vector<std::uint32_t>& ids, std::vector<SumEntry>& sums,
                         const ZoneEntry* zone) {
    size_runs();
    const bool short_of = zone && zone->short_of_hosts;
    std::vector<Run>& runs = zone ? own_runs_ : remote_runs_;
    for (std::size_t k = 0; k < sums.size(); ++k) count_in(runs[ids[k]], sums[k], short_of);
}

void Controller::run_sub(const std::vector<std::uint32_t>& ids, const std::vector<SumEntry>& sums,
                         bool zone) {
    for (std::size_t k = 0; k < sums.size(); ++k)
        count_out(zone ? own_runs_[ids[k]] : remote_runs_[ids[k]], sums[k]);
}

// A zone's usage replaced by one naming the same buckets at the same places: each bucket's
// sums are touched once, the old entry out and the new one in.
void Controller::run_replace(const std::vector<std::uint32_t>& ids,
                             const std::vector<SumEntry>& old, ZoneEntry& zone) {
    const bool short_of = zone.short_of_hosts;
    for (std::size_t k = 0; k < zone.sums.size(); ++k) {
        Run& r = own_runs_[ids[k]];
        count_out(r, old[k]);
        count_in(r, zone.sums[k], short_of);
    }
}

bool Controller::repeats(const std::vector<std::uint32_t>& ids) {
    if (seen_.size() < ids_.span()) seen_.resize(ids_.span());
    ++seen_check_;
    for (std::uint32_t id : ids) {
        if (seen_[id] == seen_check_) return true;
        seen_[id] = seen_check_;
    }
    return false;
}

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

// ---------------------------------------------------------------------------------------------
// Free functions

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

// ---------------------------------------------------------------------------------------------
// Controller: inputs

Controller::Controller(Options o) : opt_(std::move(o)), ids_(opt_.max_bucket_names) {
    if (opt_.window == 0) opt_.window = 1;
    if (opt_.stale_intervals == 0) opt_.stale_intervals = 1;
    if (opt_.forget_intervals < opt_.stale_intervals) opt_.forget_intervals = opt_.stale_intervals;
    if (opt_.interval_ms == 0) opt_.interval_ms = 1000;
}

bool Controller::zone_fresh(const ZoneEntry& z, const Clock& now) const {
    std::uint64_t iv = std::max(z.usage.interval_ms, opt_.interval_ms);
    return now.mono_ms < z.recv_mono + opt_.stale_intervals * iv;
}

bool Controller::short_of_hosts(const ZoneEntry& z, std::uint64_t hosts, const Clock& now) const {
    std::uint64_t iv = std::max(z.usage.interval_ms, opt_.interval_ms);
    return hosts < z.awaited_hosts && now.mono_ms < z.returned_mono + opt_.stale_intervals * iv;
}

bool Controller::peer_fresh(const PeerEntry& p, const Clock& now) const {
    std::uint64_t iv = std::max(p.usage.interval_ms, opt_.interval_ms);
    return now.mono_ms < p.recv_mono + opt_.stale_intervals * iv;
}

namespace {
// Of two messages of one sender: newer by the sender's clock, then by seq.
template <typename Message>
bool newer_than(const Message& u, const Message& held) {
    return u.ts_ms > held.ts_ms || (u.ts_ms == held.ts_ms && u.seq > held.seq);
}

// A sender's interval sets how long its message stays fresh and is remembered: within bounds,
// so that one message cannot claim to stay fresh for years (or overflow the arithmetic).
std::uint64_t clamp_interval(std::uint64_t ms) {
    return std::clamp(ms, kMinIntervalMs, kMaxIntervalMs);
}

void refuse(std::string* why, std::string text) {
    if (why) *why = std::move(text);
}
}  // namespace

std::string_view to_string(Accepted a) {
    switch (a) {
        case Accepted::Yes: return "accepted";
        case Accepted::Older: return "older";
        case Accepted::WrongRegion: return "wrong_region";
        case Accepted::Self: return "self";
        case Accepted::Future: return "future";
        case Accepted::TooManyHosts: return "too_many_hosts";
        case Accepted::Full: return "full";
        case Accepted::TooManyBuckets: return "too_many_buckets";
    }
    return "?";
}

// Clocks of the fleet are synchronised to well within max_skew_ms. A stamp further ahead is a
// broken or forged sender: held, its message would be "newer" than every genuine one (and its
// override would win every later change). A stamp behind our clock pins nothing (any newer
// message wins, and a held message that goes stale never blocks one), so it is not bounded.
bool Controller::from_the_future(std::uint64_t ts_ms, const Clock& now) const {
    return ts_ms > sat_add(now.wall_ms, opt_.max_skew_ms);
}

std::string Controller::ahead(std::uint64_t ts_ms, const Clock& now) const {
    return std::to_string(ts_ms) + " is " + std::to_string(ts_ms - now.wall_ms) +
           " ms ahead of this controller's clock (at most " + std::to_string(opt_.max_skew_ms) +
           " allowed)";
}

namespace {
// The positions of `buckets` in name order, in `order`; left empty when they are in order
// already (as senders send them).
void name_order(const std::vector<wire::UsageBucket>& buckets, std::vector<std::uint32_t>& order) {
    order.clear();
    auto less = [&](std::uint32_t a, std::uint32_t b) { return buckets[a].name < buckets[b].name; };
    bool sorted = true;
    for (std::size_t i = 1; i < buckets.size() && sorted; ++i)
        sorted = buckets[i - 1].name < buckets[i].name;
    if (sorted) return;
    order.resize(buckets.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), less);
}
}  // namespace

Accepted Controller::check_zone_usage(const wire::ZoneUsage& u, const Clock& now,
                                      std::string* why) const {
    if (u.region != opt_.region) return Accepted::WrongRegion;
    if (from_the_future(u.ts_ms, now)) {
        refuse(why, "zone usage from " + u.source + " (zone " + u.zone + ") refused: ts_ms " +
                        ahead(u.ts_ms, now));
        return Accepted::Future;
    }
    // The decoder checked that no bucket claims more hosts than the message: bounding the
    // message's count bounds every count and vote in it.
    if (u.hosts > opt_.max_zone_hosts || u.stale_hosts > opt_.max_zone_hosts) {
        refuse(why, "zone usage from " + u.source + " (zone " + u.zone + ") refused: it claims " +
                        std::to_string(u.hosts) + " hosts and " + std::to_string(u.stale_hosts) +
                        " stale hosts (at most " + std::to_string(opt_.max_zone_hosts) +
                        " each per zone)");
        return Accepted::TooManyHosts;
    }
    auto it = zones_.find(u.zone);
    if (it == zones_.end() && zones_.size() >= opt_.max_zones) {
        refuse(why, "zone usage from " + u.source + " (zone " + u.zone +
                        ") refused: this controller already holds " +
                        std::to_string(zones_.size()) + " zones (--max-zones)");
        return Accepted::Full;
    }
    if (it != zones_.end()) {
        const wire::ZoneUsage& held = it->second.usage;
        // Newer by the sender's clock, then by seq: a duplicate or a late message loses, a
        // restarted collector (seq from 1, later ts_ms) wins. A held entry that has gone stale
        // never blocks a newcomer (a collector whose clock stepped back).
        if (!newer_than(u, held) && zone_fresh(it->second, now)) return Accepted::Older;
    }
    return Accepted::Yes;
}

Accepted Controller::on_zone_usage(const wire::ZoneUsage& u, const Clock& now, std::string* why) {
    wire::ZoneUsage copy = u;
    return take_zone_usage(copy, now, why);
}

Accepted Controller::take_zone_usage(wire::ZoneUsage& u, const Clock& now, std::string* why,
                                     Early* early, std::uint64_t names_mark) {
    if (early) *early = Early{};
    handed_back_mark_ = 0;
    const Accepted a = check_zone_usage(u, now, why);
    if (a != Accepted::Yes) return a;
    auto held = zones_.find(u.zone);
    const ZoneEntry* before = held == zones_.end() ? nullptr : &held->second;
    bool same_places = false;
    // The mark is the zone's generation when its usage was last taken: usage_gen_ never
    // repeats, so no other zone's or earlier usage's mark equals it.
    const bool known_same = before && names_mark != 0 && names_mark == before->gen;
    if (!intern(u.buckets, before ? &before->ids : nullptr, same_places, known_same)) {
        refuse(why, too_many_buckets("zone", u.source, u.zone));
        return Accepted::TooManyBuckets;
    }
    // Judged against the state before the usage is taken: freshness, awaited hosts, instances.
    const bool was_fresh = before && zone_fresh(*before, now);
    if (early) early->new_rates = brings_new_rates(u, before, now);
    // Back from silence, or a restarted collector (its seq starts again from 1).
    const bool returning = before && (!was_fresh || u.seq < before->usage.seq);
    ZoneEntry& e = zone_entry(u.zone);
    if (returning && !e.short_of_hosts) {
        e.awaited_hosts = e.usage.hosts;
        e.returned_mono = now.mono_ms;
    }
    // Out of the running sums before its ids may be released; with the same buckets at the
    // same places, out and in in one pass below.
    const bool replace = e.in_run && same_places && e.sums.size() == u.buckets.size();
    if (replace) {
        std::swap(e.sums, sums_scratch_);
    } else if (e.in_run) {
        run_sub(e.ids, e.sums, true);
    }
    std::swap(e.usage, u);
    std::swap(e.ids, ids_scratch_);
    keep_or_release(ids_scratch_, same_places);  // the replaced usage's
    if (!same_places) e.repeats = repeats(e.ids);
    e.gen = ++usage_gen_;
    // The usage handed back held the same names at the same places as the one taken.
    if (same_places) handed_back_mark_ = e.gen;
    const bool judge_change = early && was_fresh && !early->new_rates;
    stand_in(e, u.buckets, now, same_places, judge_change ? &early->change : nullptr);
    e.short_of_hosts = short_of_hosts(e, e.usage.hosts, now);
    if (replace) {
        run_replace(e.ids, sums_scratch_, e);
    } else if (e.in_run) {
        run_add(e.ids, e.sums, &e);
    }
    return Accepted::Yes;
}

Controller::ZoneEntry& Controller::zone_entry(const std::string& zone) {
    auto it = zones_.try_emplace(zone).first;
    it->second.name = it->first;
    return it->second;
}

// A bucket whose hosts all lack a rate (a restarted collector, new hosts) has sums of zero that
// mean "unknown": its last rated entry stands in for a while, else it is unrated. Most usages
// name the same buckets at the same places as the one they replace: the last rated entries
// then stand beside them and are matched by place, without comparing a name. Else one merge
// of the new entries (in name order) with the last rated ones (sorted by name). At 10,000
// buckets x 50 zones, a map lookup and a copy per entry, then the comparisons of names in that
// merge and in the early judgement, were much of the controller's intake.
void Controller::stand_in(ZoneEntry& e, const std::vector<wire::UsageBucket>& prev,
                          const Clock& now, bool same_places, Change* change) {
    e.usage.interval_ms = clamp_interval(e.usage.interval_ms);
    e.recv_mono = now.mono_ms;
    const std::uint64_t keep =
        opt_.hold_intervals * std::max(e.usage.interval_ms, opt_.interval_ms);
    auto live = [&](const LastRated& l) { return now.mono_ms <= l.mono + keep; };
    // Early::change: only a sum over the same number of rated hosts as the last is compared.
    auto judge = [&](const wire::UsageBucket& b, const LastRated& l) {
        if (!change || b.rated_hosts == 0 || b.rated_hosts != l.rated_hosts) return;
        const Change c = changed_well(static_cast<double>(l.offered_mrps),
                                      static_cast<double>(b.offered_mrps), e.usage.interval_ms);
        if (c == Change::Rise || (c == Change::Fall && *change == Change::None)) *change = c;
    };
    // Entry b with its last rated entry l (kept false: none): rated, b becomes the last; else
    // a live l stands in; else the place is left without one.
    auto update = [&](wire::UsageBucket& b, LastRated& l) {
        if (l.kept) judge(b, l);
        if (b.hosts > 0 && b.rated_hosts > 0) {
            l.offered_mrps = b.offered_mrps;
            l.admitted_mrps = b.admitted_mrps;
            l.dropped_mrps = b.dropped_mrps;
            l.shadow_dropped_mrps = b.shadow_dropped_mrps;
            l.rated_hosts = b.rated_hosts;
            l.mono = now.mono_ms;
            l.kept = true;
            return;
        }
        if (!l.kept || !live(l)) {
            l.kept = false;
            return;
        }
        if (b.hosts > 0) {
            b.offered_mrps = l.offered_mrps;
            b.admitted_mrps = l.admitted_mrps;
            b.dropped_mrps = l.dropped_mrps;
            b.shadow_dropped_mrps = l.shadow_dropped_mrps;
            b.rated_hosts = std::min(l.rated_hosts, b.hosts);
        }
    };
    std::vector<wire::UsageBucket>& buckets = e.usage.buckets;
    std::vector<LastRated>& old = e.last_rated;
    const std::size_t n = buckets.size();
    // The entry as aggregate() reads it, once it is final.
    e.sums.resize(n);
    auto update_at = [&](std::size_t at, LastRated& l) {
        update(buckets[at], l);
        fill(e.sums[at], buckets[at]);
    };
    // old[k] is buckets[k]'s; e.order still holds. (The previous stand_in left at least n
    // entries: checked all the same, since old[k] past the end would be no entry at all.)
    std::vector<std::string>& gone = e.gone_names;
    if (same_places && old.size() >= n + gone.size()) {
        for (std::size_t k = 0; k < n; ++k) update_at(k, old[k]);
        std::size_t kept = n;
        for (std::size_t j = n; j < old.size(); ++j) {
            if (!live(old[j])) continue;
            old[kept] = old[j];
            std::swap(gone[kept - n], gone[j - n]);
            ++kept;
        }
        old.resize(kept);
        gone.resize(kept - n);
        return;
    }
    // The previous usage's entries stand first in `old`, by place (their names are `prev`'s),
    // then those of buckets it no longer named (names in `gone`).
    const std::size_t places =
        std::min(old.size() - std::min(old.size(), gone.size()), prev.size());
    auto name_of = [&](std::uint32_t j) -> const std::string& {
        return j < places ? prev[j].name : gone[j - (old.size() - gone.size())];
    };
    name_order(buckets, e.order);
    std::vector<std::uint32_t>& sorted = last_sorted_;
    sorted.clear();
    for (std::uint32_t j = 0; j < old.size(); ++j) {
        if (old[j].kept && (j < places || j >= old.size() - gone.size())) sorted.push_back(j);
    }
    auto by_name = [&](std::uint32_t x, std::uint32_t y) { return name_of(x) < name_of(y); };
    if (!std::is_sorted(sorted.begin(), sorted.end(), by_name))
        std::sort(sorted.begin(), sorted.end(), by_name);
    std::vector<LastRated>& next = last_rated_scratch_;
    std::vector<std::string>& next_gone = gone_names_scratch_;
    next.clear();
    next.resize(n);
    next_gone.clear();
    auto keep_gone = [&](std::uint32_t j) {
        if (!live(old[j])) return;
        next.push_back(old[j]);
        next_gone.push_back(name_of(j));
    };
    std::size_t i = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t at = e.order.empty() ? k : e.order[k];
        const wire::UsageBucket& b = buckets[at];
        for (; i < sorted.size() && name_of(sorted[i]) < b.name; ++i) keep_gone(sorted[i]);
        LastRated& l = next[at];
        if (i < sorted.size() && name_of(sorted[i]) == b.name) l = old[sorted[i++]];
        update_at(at, l);
    }
    for (; i < sorted.size(); ++i) keep_gone(sorted[i]);
    std::swap(old, next);
    std::swap(gone, next_gone);
}

Accepted Controller::check_region_usage(const wire::RegionUsage& u, const Clock& now,
                                        std::string* why) {
    if (u.source == opt_.name) return Accepted::Self;
    // Checked before the overrides are merged: a message that cannot be true is refused whole.
    if (from_the_future(u.ts_ms, now)) {
        refuse(why, "region usage from " + u.source + " (region " + u.region + ") refused: ts_ms " +
                        ahead(u.ts_ms, now));
        return Accepted::Future;
    }
    if (u.hosts > opt_.max_region_hosts) {
        refuse(why, "region usage from " + u.source + " (region " + u.region +
                        ") refused: it claims " + std::to_string(u.hosts) + " hosts (at most " +
                        std::to_string(opt_.max_region_hosts) + " per region)");
        return Accepted::TooManyHosts;
    }
    if (peers_.size() >= opt_.max_peers && peers_.count(u.source) == 0) {
        refuse(why, "region usage from " + u.source + " (region " + u.region +
                        ") refused: this controller already holds " +
                        std::to_string(peers_.size()) + " peer controllers (--max-peers)");
        return Accepted::Full;
    }
    // The override table is a last-writer-wins map: merging is idempotent and
    // order-independent, so even an older message's entries are merged.
    const wire::Override* first_refused = nullptr;
    std::size_t refused = 0;
    for (const wire::Override& o : u.overrides) {
        if (merge_override(o, now)) continue;
        if (refused++ == 0) first_refused = &o;
    }
    if (refused) {
        overrides_rejected_ += refused;
        refuse(why, "override of bucket \"" + first_refused->name + "\" (origin " +
                        first_refused->origin + ") from " + u.source + " refused: set_ms " +
                        ahead(first_refused->set_ms, now) +
                        (refused > 1 ? "; " + std::to_string(refused - 1) + " more refused" : ""));
    }
    auto it = peers_.find(u.source);
    if (it != peers_.end()) {
        const wire::RegionUsage& held = it->second.usage;
        if (!newer_than(u, held) && peer_fresh(it->second, now)) return Accepted::Older;
    }
    return Accepted::Yes;
}

Accepted Controller::on_region_usage(const wire::RegionUsage& u, const Clock& now,
                                     std::string* why) {
    const Accepted a = check_region_usage(u, now, why);
    if (a != Accepted::Yes) return a;
    wire::RegionUsage copy = u;
    return keep_region_usage(copy, now, why);
}

Accepted Controller::take_region_usage(wire::RegionUsage& u, const Clock& now, std::string* why) {
    const Accepted a = check_region_usage(u, now, why);
    if (a != Accepted::Yes) return a;
    return keep_region_usage(u, now, why);
}

Accepted Controller::keep_region_usage(wire::RegionUsage& u, const Clock& now, std::string* why) {
    auto held = peers_.find(u.source);
    bool same_places = false;
    if (!intern(u.buckets, held == peers_.end() ? nullptr : &held->second.ids, same_places)) {
        refuse(why, too_many_buckets("region", u.source, u.region));
        return Accepted::TooManyBuckets;
    }
    PeerEntry& e = held == peers_.end() ? peers_[u.source] : held->second;
    if (e.in_run) run_sub(e.ids, e.sums, false);
    std::swap(e.usage, u);
    std::swap(e.ids, ids_scratch_);
    keep_or_release(ids_scratch_, same_places);
    if (!same_places) e.repeats = repeats(e.ids);
    e.gen = ++usage_gen_;
    e.sums.resize(e.usage.buckets.size());
    for (std::size_t k = 0; k < e.sums.size(); ++k) fill(e.sums[k], e.usage.buckets[k]);
    if (e.in_run) run_add(e.ids, e.sums, nullptr);
    e.usage.interval_ms = clamp_interval(e.usage.interval_ms);
    e.recv_mono = now.mono_ms;
    const wire::RegionUsage& m = e.usage;
    bool differs = m.limits_digest != limits_digest_;
    if (differs && digest_mismatch_.insert(m.source).second) {
        pending_.push_back({Event::Level::Warn, "",
                            "peer " + m.source + " (region " + m.region +
                                ") has different limits (digest " +
                                (m.limits_digest.empty() ? "none" : m.limits_digest) + ", ours " +
                                (limits_digest_.empty() ? "none" : limits_digest_) +
                                "): global buckets may get different answers"});
    } else if (!differs && digest_mismatch_.erase(m.source)) {
        pending_.push_back(
            {Event::Level::Info, "", "peer " + m.source + " has the same limits again"});
    }
    return Accepted::Yes;
}

// Most usages name the same buckets in the same order as the one they replace: one comparison
// with the name at the same place then finds the id without hashing the name. When every name
// stands at its place, the new usage takes over the old one's hold on its ids: nothing is
// retained here, nor released by the caller (a pass over the holders less, each way).
bool Controller::intern(const std::vector<wire::UsageBucket>& buckets,
                        const std::vector<std::uint32_t>* held, bool& same_places,
                        bool known_same) {
    std::vector<std::uint32_t>& ids = ids_scratch_;
    const std::size_t n = buckets.size();
    const std::size_t places = held ? held->size() : 0;
    if (known_same && n == places) {
        ids.assign(held->begin(), held->end());
        same_places = true;
        return true;
    }
    ids.resize(n);
    std::size_t k = 0;
    for (; k < n && k < places && ids_.name((*held)[k]) == buckets[k].name; ++k)
        ids[k] = (*held)[k];
    same_places = held && k == n && places == n;
    if (same_places) return true;
    for (std::size_t j = 0; j < k; ++j) ids_.retain(ids[j]);
    for (; k < n; ++k) {
        const std::string& name = buckets[k].name;
        if (k < places && ids_.name((*held)[k]) == name) {
            ids_.retain((*held)[k]);
            ids[k] = (*held)[k];
            continue;
        }
        ids[k] = ids_.acquire(name);
        if (ids[k] == BucketIds::kNone) {
            ids.resize(k);
            release(ids);
            return false;
        }
    }
    return true;
}

std::string Controller::too_many_buckets(std::string_view kind, const std::string& source,
                                         const std::string& place) const {
    return std::string(kind) + " usage from " + source + " (" + std::string(kind) + " " + place +
           ") refused: it names buckets beyond the " + std::to_string(opt_.max_bucket_names) +
           " this controller holds (--max-bucket-names)";
}

void Controller::keep_or_release(std::vector<std::uint32_t>& replaced, bool same_places) {
    if (same_places) {
        replaced.clear();  // the same ids, held on by the usage that replaced them
    } else {
        release(replaced);
    }
}

void Controller::release(std::vector<std::uint32_t>& ids) {
    for (std::uint32_t id : ids) ids_.release(id);
    ids.clear();
}

void Controller::set_limits(Limits l, const Clock&) {
    limits_ = std::move(l);
    limits_digest_ = digest(limits_);
    digest_mismatch_.clear();  // re-evaluated on the next message of each peer
}

// ---------------------------------------------------------------------------------------------
// Overrides

bool Controller::override_active(const wire::Override& o, const Clock& now) const {
    return !o.tombstone() && (o.expires_ms == 0 || now.wall_ms < o.expires_ms);
}

// False when the entry is refused: stamped beyond max_skew_ms, it would win over every later
// change (set_ms near UINT64_MAX: for ever), so no operator could clear it.
bool Controller::merge_override(const wire::Override& o, const Clock& now) {
    if (from_the_future(o.set_ms, now)) return false;
    auto it = overrides_.find(o.name);
    if (it == overrides_.end()) {
        if (!room_for_override(override_active(o, now), now)) return true;
        overrides_.emplace(o.name, o);
        return true;
    }
    const wire::Override& held = it->second;
    if (std::tie(o.set_ms, o.origin) > std::tie(held.set_ms, held.origin)) it->second = o;
    return true;
}

// Whether a new entry fits: live overrides count against max_overrides; removed ones
// (tombstones, expired entries) are kept for tombstone_ms only while there is room, so the oldest
// makes way for a live one (counted). A tombstone dropped early can let a peer's stale copy of
// the entry back in; a table full of them would refuse every new override for a day.
bool Controller::room_for_override(bool live, const Clock& now) {
    if (overrides_.size() < opt_.max_overrides) return true;
    if (!live) return false;
    auto oldest = overrides_.end();
    std::uint64_t oldest_ms = UINT64_MAX;
    for (auto it = overrides_.begin(); it != overrides_.end(); ++it) {
        const wire::Override& held = it->second;
        if (override_active(held, now)) continue;
        const std::uint64_t dead_since = held.tombstone() ? held.set_ms : held.expires_ms;
        if (dead_since < oldest_ms) {
            oldest_ms = dead_since;
            oldest = it;
        }
    }
    if (oldest == overrides_.end()) return false;
    announced_expired_.erase(oldest->first);
    overrides_.erase(oldest);
    ++tombstones_dropped_;
    return true;
}

std::size_t Controller::restore_overrides(const std::vector<wire::Override>& entries,
                                          const Clock& now) {
    std::size_t n = 0;
    for (const wire::Override& o : entries) n += merge_override(o, now) ? 1 : 0;
    return n;
}

// A local change's stamp: our clock, or just after the held entry's when that is ahead (a peer
// whose clock runs ahead, within max_skew_ms), so that the change wins.
std::uint64_t Controller::stamp(const std::string& bucket, const Clock& now) const {
    auto it = overrides_.find(bucket);
    std::uint64_t s = now.wall_ms;
    if (it != overrides_.end() && it->second.set_ms >= s) s = sat_add(it->second.set_ms, 1);
    return s;
}

std::uint64_t Controller::hosts_reporting(const std::string& bucket) const {
    std::uint64_t n = 0;
    for (const auto& [key, inst] : instances_) {
        if (inst.bucket == bucket) n = sat_add(n, inst.hosts);
    }
    return n;
}

namespace {
std::string describe(const wire::Override& o) {
    std::string s;
    if (o.has_match) s += match_text(o.match) + ", ";
    s += "limit ";
    s += o.limit_mrps ? rps(*o.limit_mrps) : std::string("unchanged");
    s += ", mode ";
    s += o.mode ? std::string(to_string(*o.mode)) : std::string("unchanged");
    if (o.expires_ms) s += ", expires at " + std::to_string(o.expires_ms) + " ms";
    return s;
}
}  // namespace

std::string Controller::set_override(const std::string& bucket,
                                     std::optional<std::uint64_t> limit_mrps,
                                     std::optional<Mode> mode, std::uint64_t for_ms,
                                     const Clock& now) {
    if (!valid_name(bucket)) return "invalid bucket name \"" + bucket + "\"";
    if (!limit_mrps && !mode) return "nothing to set: give a limit and/or a mode";
    auto it = overrides_.find(bucket);
    if (it == overrides_.end() && !room_for_override(true, now)) {
        return "too many overrides (" + std::to_string(opt_.max_overrides) + ")";
    }
    wire::Override o;
    if (it != overrides_.end() && override_active(it->second, now)) o = it->second;
    o.name = bucket;
    if (limit_mrps) o.limit_mrps = limit_mrps;
    if (mode) o.mode = mode;
    o.expires_ms = for_ms ? sat_add(now.wall_ms, for_ms) : 0;  // "for ever" rather than wrap
    o.set_ms = stamp(bucket, now);
    o.origin = opt_.name;
    overrides_[bucket] = o;
    announced_expired_.erase(bucket);
    pending_.push_back({Event::Level::Info, bucket, "override set: " + describe(o)});
    return {};
}

std::string Controller::clear_override(const std::string& bucket, bool clear_limit, bool clear_mode,
                                       const Clock& now) {
    if (!clear_limit && !clear_mode) clear_limit = clear_mode = true;
    auto it = overrides_.find(bucket);
    if (it == overrides_.end() || !override_active(it->second, now)) {
        return "no override for bucket \"" + bucket + "\"";
    }
    if (it->second.has_match) {
        return "bucket \"" + bucket + "\" is a run-time bucket: use remove";
    }
    wire::Override o = it->second;
    if (clear_limit) o.limit_mrps.reset();
    if (clear_mode) o.mode.reset();
    if (o.tombstone()) o.expires_ms = 0;
    o.set_ms = stamp(bucket, now);
    o.origin = opt_.name;
    it->second = o;
    pending_.push_back({Event::Level::Info, bucket,
                        o.tombstone() ? std::string("override cleared")
                                      : "override partly cleared: " + describe(o)});
    return {};
}

std::string Controller::add_runtime(const std::string& bucket, const wire::RuntimeMatch& match,
                                    std::uint64_t limit_mrps, std::optional<Mode> mode,
                                    std::uint64_t for_ms, const Clock& now) {
    if (!valid_name(bucket)) return "invalid bucket name \"" + bucket + "\"";
    std::string bad = wire::check_match(match);
    if (!bad.empty()) return "bucket \"" + bucket + "\": " + bad;
    auto it = overrides_.find(bucket);
    if (it != overrides_.end() && override_active(it->second, now)) {
        return it->second.has_match
                   ? "run-time bucket \"" + bucket + "\" already exists (remove it first)"
                   : "bucket \"" + bucket + "\" has an override (a configured bucket)";
    }
    auto f = limits_.buckets.find(bucket);
    if (f != limits_.buckets.end() && f->second.has_match) {
        return "bucket \"" + bucket + "\" is a run-time bucket of the limits file";
    }
    if (std::uint64_t n = hosts_reporting(bucket)) {
        return "bucket \"" + bucket + "\" is reported by " + std::to_string(n) +
               " host(s): it is defined in nginx.conf, or a removed run-time bucket has not "
               "expired yet";
    }
    if (it == overrides_.end() && !room_for_override(true, now)) {
        return "too many overrides (" + std::to_string(opt_.max_overrides) + ")";
    }
    std::size_t runtime = 0;
    for (const auto& [name, o] : overrides_) runtime += o.has_match && override_active(o, now);
    for (const auto& [name, f] : limits_.buckets) runtime += f.has_match;
    if (runtime >= wire::kMaxRuntimeBuckets) {
        return "too many run-time buckets (nginx has room for " +
               std::to_string(wire::kMaxRuntimeBuckets) + ")";
    }
    wire::Override o;
    o.name = bucket;
    o.limit_mrps = limit_mrps;
    o.mode = mode.value_or(Mode::Deny);
    o.has_match = true;
    o.match = match;
    o.expires_ms = for_ms ? sat_add(now.wall_ms, for_ms) : 0;  // "for ever" rather than wrap
    o.set_ms = stamp(bucket, now);
    o.origin = opt_.name;
    overrides_[bucket] = o;
    announced_expired_.erase(bucket);
    pending_.push_back({Event::Level::Info, bucket, "run-time bucket added: " + describe(o)});
    return {};
}

std::string Controller::remove_runtime(const std::string& bucket, const Clock& now) {
    auto it = overrides_.find(bucket);
    if (it == overrides_.end() || !override_active(it->second, now) || !it->second.has_match) {
        auto f = limits_.buckets.find(bucket);
        if (f != limits_.buckets.end() && f->second.has_match) {
            return "bucket \"" + bucket + "\" is defined in the limits file: edit the file";
        }
        return "no run-time bucket \"" + bucket + "\"";
    }
    wire::Override o;
    o.name = bucket;
    o.set_ms = stamp(bucket, now);
    o.origin = opt_.name;
    it->second = o;
    pending_.push_back({Event::Level::Info, bucket, "run-time bucket removed"});
    return {};
}

// ---------------------------------------------------------------------------------------------
// The tick, step by step

TickOutput Controller::tick(const Clock& now) {
    TickOutput out;
    tick(now, out);
    return out;
}

void Controller::tick(const Clock& now, TickOutput& out) {
    ++tick_;
    out.events.clear();
    out.events.swap(pending_);
    const Inputs in = gather(now, out.events);
    expire_overrides(now, out.events);
    const Usage& usage = aggregate(in, now);
    next_instance_ = instances_.begin();
    for (const BucketUsage* bu : usage) {
        const BucketUsage& u = *bu;
        const std::string_view name = u.name;
        std::optional<BucketRule> rule = bucket_rule(name, u, now);
        if (!rule) continue;
        if (rule->scope == Scope::Zone) {
            sample_zones(name, u, *rule, in, now, out.events);
        } else {
            sample_wide(name, u, *rule, now, out.events);
        }
    }
    // One line when buckets start being walked, one when none is any more (the metric says
    // how many each tick).
    if (!opt_.walk_entries && (buckets_walked_ > 0) != walking_) {
        walking_ = buckets_walked_ > 0;
        out.events.push_back(
            {Event::Level::Info, "",
             walking_ ? std::to_string(buckets_walked_) +
                            " bucket(s) summed entry by entry, their running sums not saying "
                            "enough (some zones only, several definitions, keys, zone scope, "
                            "run-time buckets): grl_controller_buckets_walked"
                      : "every bucket read from its running sums again"});
    }
    instructions(in, now, out.instructions);  // forgets and notes the instances too
    region_usage(in, usage, now, out.region_usage);
}

// Inputs in force: this region's fresh zones, and the freshest fresh peer of every other region
// (active-active partners share a region: counting both would count it twice). Zones and peers
// silent for forget_intervals are forgotten here, which bounds what a departed sender costs.
Controller::Inputs Controller::gather(const Clock& now, std::vector<Event>& events) {
    Inputs in;
    fresh_hosts_ = stale_hosts_ = 0;
    for (auto it = zones_.begin(); it != zones_.end();) {
        const ZoneEntry& z = it->second;
        std::uint64_t iv = std::max(z.usage.interval_ms, opt_.interval_ms);
        if (now.mono_ms >= z.recv_mono + opt_.forget_intervals * iv) {
            events.push_back({Event::Level::Warn, "", "zone " + it->first + " forgotten"});
            if (z.in_run) run_sub(z.ids, z.sums, true);
            release(it->second.ids);
            it = zones_.erase(it);
            continue;
        }
        // Into the running sums when it becomes fresh (again), out when it goes stale.
        const bool fresh = zone_fresh(z, now);
        if (fresh != z.in_run) {
            ZoneEntry& e = it->second;
            if (fresh) {
                run_add(e.ids, e.sums, &e);
            } else {
                run_sub(e.ids, e.sums, true);
            }
            e.in_run = fresh;
        }
        if (fresh) {
            in.zones.push_back(&z);
            fresh_hosts_ = sat_add(fresh_hosts_, z.usage.hosts);
            stale_hosts_ = sat_add(stale_hosts_, z.usage.stale_hosts);
        } else {
            stale_hosts_ = sat_add(stale_hosts_, sat_add(z.usage.hosts, z.usage.stale_hosts));
        }
        ++it;
    }
    fresh_zones_ = in.zones.size();
    // Other regions: the freshest fresh peer of each; a region with none but a peer heard
    // within peer_hold_ms keeps that peer's last usage (a partition: see Options).
    std::map<std::string, const PeerEntry*> held;
    for (auto it = peers_.begin(); it != peers_.end();) {
        const PeerEntry& p = it->second;
        std::uint64_t iv = std::max(p.usage.interval_ms, opt_.interval_ms);
        const std::uint64_t forget = std::max(opt_.forget_intervals * iv, opt_.peer_hold_ms);
        if (now.mono_ms >= sat_add(p.recv_mono, forget)) {
            digest_mismatch_.erase(it->first);
            if (p.in_run) run_sub(p.ids, p.sums, false);
            release(it->second.ids);
            it = peers_.erase(it);
            continue;
        }
        if (p.usage.region != opt_.region) {
            const bool fresh = peer_fresh(p, now);
            auto& slot = fresh ? in.remote : held;
            if (fresh || now.mono_ms < sat_add(p.recv_mono, opt_.peer_hold_ms)) {
                const PeerEntry*& r = slot[p.usage.region];
                if (r == nullptr || p.usage.ts_ms > r->usage.ts_ms) r = &p;
            }
        }
        ++it;
    }
    std::set<std::string> holding;
    for (const auto& [region, p] : held) {
        if (in.remote.count(region)) continue;  // another peer of the region still speaks
        in.remote[region] = p;
        holding.insert(region);
        if (held_regions_.count(region) == 0) {
            events.push_back({Event::Level::Warn, "",
                              "peer region " + region +
                                  " silent: its last usage stays in the "
                                  "global sums for up to " +
                                  std::to_string(opt_.peer_hold_ms / 1000) +
                                  " s (global limits split by the last known shares)"});
        }
    }
    for (const std::string& region : held_regions_) {
        if (holding.count(region)) continue;
        bool back = in.remote.count(region) > 0;
        if (!back) ++regions_lost_;
        events.push_back({back ? Event::Level::Info : Event::Level::Warn, "",
                          back ? "peer region " + region + " heard again"
                               : "peer region " + region + " silent for " +
                                     std::to_string(opt_.peer_hold_ms / 1000) +
                                     " s: out of the global sums (its share is no longer "
                                     "reserved)"});
    }
    held_regions_.swap(holding);
    // Into the running sums: the peer chosen for each other region, and no other.
    for (auto& [source, p] : peers_) {
        auto r = in.remote.find(p.usage.region);
        const bool chosen = r != in.remote.end() && r->second == &p;
        if (chosen == p.in_run) continue;
        if (chosen) {
            run_add(p.ids, p.sums, nullptr);
        } else {
            run_sub(p.ids, p.sums, false);
        }
        p.in_run = chosen;
    }
    return in;
}

// Expiry is by wall clock and evaluated by every controller on its own, so it is announced
// here, once per expiry. Tombstones and expired entries are dropped after tombstone_ms: long
// enough for every peer to have merged them, so a removal cannot come back from a stale copy.
void Controller::expire_overrides(const Clock& now, std::vector<Event>& events) {
    for (auto it = overrides_.begin(); it != overrides_.end();) {
        const wire::Override& o = it->second;
        bool expired = !o.tombstone() && o.expires_ms && now.wall_ms >= o.expires_ms;
        if (expired && announced_expired_.insert(it->first).second) {
            events.push_back({Event::Level::Info, it->first,
                              o.has_match ? "run-time bucket expired" : "override expired"});
        }
        std::uint64_t dead_since = o.tombstone() ? o.set_ms : (expired ? o.expires_ms : 0);
        if (dead_since && now.wall_ms > sat_add(dead_since, opt_.tombstone_ms)) {
            announced_expired_.erase(it->first);
            it = overrides_.erase(it);
            continue;
        }
        ++it;
    }
}

// Every bucket's entries among the inputs, with its definitions fleet-wide (the scope vote is
// fleet-wide so that a name is published in one scope only). Run-time buckets get an entry even
// without usage: they must reach nginx before any host has them.
//
// Most buckets' sums are read from their running sums (from_run()). The others are walked:
// each input's entries of those buckets are added into the sums of their bucket ids (ids_,
// given when the usage was taken in), list after list: zones first, in name order, then other
// regions, as every bucket was summed before running sums (docs/control-plane.md). The buckets
// are then listed in name order (ids_.by_name(), sorted again only when names came or went),
// merged with the run-time buckets'. At 50 zones x 10,000 buckets a merge of the 54 lists by
// name spent a third of the tick comparing names (docs/control-plane.md "Bucket ids"). The sums
// keep their vectors' capacity from tick to tick.
const Controller::Usage& Controller::aggregate(const Inputs& in, const Clock& now) {
    for (std::size_t id = by_id_.size(); id < ids_.span(); ++id) {
        by_id_.emplace_back();
        by_id_.back().id = static_cast<std::uint32_t>(id);
    }
    size_runs();
    // What the running sums say of a bucket that every zone (or every peer) with entries
    // reports: the basis_ms and gen aggregate() would find walking those zones in name order.
    // (A zone without entries, such as a relay's collector without hosts, holds no bucket.)
    run_basis_ms_ = run_zones_gen_ = run_peers_gen_ = 0;
    run_peers_ = 0;
    tick_zones_.clear();
    // A usage names a bucket twice (counts then say nothing), or the option: walk all.
    bool walk_all = opt_.walk_entries;
    for (const ZoneEntry* z : in.zones) {
        walk_all = walk_all || z->repeats;
        if (z->usage.buckets.empty()) continue;
        const std::uint64_t ts = z->usage.ts_ms;
        run_basis_ms_ = run_basis_ms_ == 0 ? ts : std::min(run_basis_ms_, ts);
        run_zones_gen_ = std::max(run_zones_gen_, z->gen);
        tick_zones_.push_back(z->name);
    }
    for (const auto& [region, p] : in.remote) {
        walk_all = walk_all || p->repeats;
        if (p->usage.buckets.empty()) continue;
        run_peers_gen_ = std::max(run_peers_gen_, p->gen);
        ++run_peers_;
    }
    walk_.assign(ids_.span(), walk_all ? 1 : 0);
    bool any_walk = walk_all;
    // Run-time buckets are walked: a zone-scoped one is sampled per zone from the entries.
    auto walk_name = [&](const std::string& name) {
        const std::uint32_t id = ids_.find(name);
        if (id == BucketIds::kNone) return;
        walk_[id] = 1;
        any_walk = true;
    };
    for (const auto& [name, o] : overrides_) {
        if (o.has_match && override_active(o, now)) walk_name(name);
    }
    for (const auto& [name, f] : limits_.buckets) {
        if (f.has_match) walk_name(name);
    }
    for (std::uint32_t id = 0; id < walk_.size(); ++id) {
        const Run& o = own_runs_[id];
        const Run& m = remote_runs_[id];
        if (walk_[id] || o.n + m.n == 0) continue;  // walked, or in no input
        BucketUsage& u = by_id_[id];
        if (from_run(u, o, m)) {
            u.tick = tick_;
            u.name = ids_.name(id);
        } else {
            walk_[id] = 1;
            any_walk = true;
        }
    }
    auto start = [&](BucketUsage& u, std::string_view name) {  // capacity kept
        u.tick = tick_;
        u.name = name;
        u.own.clear();
        u.own_zones = 0;
        u.remote.clear();
        u.own_defs.clear();
        u.fleet_defs.clear();
        u.own_sums = u.remote_sums = BucketUsage::Sums{};
        u.basis_ms = 0;
        u.inputs_gen = 0;
        u.own_n = u.remote_n = 0;
        u.own_all = false;
    };
    // merge_definitions() without a call, nor a read of the entry's own list, in the most
    // common case: every host of the fleet reports one definition.
    auto merge = [](std::vector<wire::DefinitionCount>& into, const SumEntry& c,
                    const wire::UsageBucket& b) {
        if (c.definitions == 1 && into.size() == 1 && into[0].def == c.def()) {
            into[0].hosts = sat_add(into[0].hosts, c.def_hosts);
        } else if (c.definitions == 1 && into.empty()) {
            into.push_back({c.def(), c.def_hosts});
        } else if (c.definitions == 0) {
            // Nothing to add (`into` is sorted already, as merge_definitions() leaves it).
        } else {
            merge_definitions(into, b.definitions);
        }
    };
    // `c` is the entry `b` as stand_in() or keep_region_usage() left it: `b` is only read
    // when `c` does not say enough (several definitions).
    auto add = [&](const SumEntry& b, const wire::UsageBucket& entry, std::uint32_t id,
                   const ZoneEntry* zone, std::uint64_t gen) {
        BucketUsage& u = by_id_[id];
        if (u.tick != tick_) start(u, ids_.name(id));
        u.inputs_gen = std::max(u.inputs_gen, gen);
        BucketUsage::Sums& sums = zone ? u.own_sums : u.remote_sums;
        if (b.hosts > 0 && b.rated_hosts == 0) {
            ++sums.missing;
        } else {
            add_rates(sums.rated, b);
            ++sums.rated_n;
        }
        sums.incomplete += b.rated_hosts < b.hosts || (zone && zone->short_of_hosts);
        sums.hosts = sat_add(sums.hosts, b.hosts);
        sums.offered = sat_add(sums.offered, b.offered_mrps);
        sums.admitted = sat_add(sums.admitted, b.admitted_mrps);
        sums.dropped = sat_add(sums.dropped, b.dropped_mrps);
        sums.shadow_dropped = sat_add(sums.shadow_dropped, b.shadow_dropped_mrps);
        sums.rated_hosts = sat_add(sums.rated_hosts, b.rated_hosts);
        sums.keys = sums.keys || b.keys;
        if (zone) {
            // The hosts that apply an instance's ratio here reported to these zones: the
            // oldest of their usages bounds which of its own reports a host finds in the
            // sample (sample_wide).
            const std::uint64_t ts = zone->usage.ts_ms;
            u.basis_ms = u.basis_ms == 0 ? ts : std::min(u.basis_ms, ts);
            if (u.own.empty() || u.own.back().first != zone) ++u.own_zones;
            u.own.emplace_back(zone, &entry);
            merge(u.own_defs, b, entry);
        } else {
            // This region's definitions, then the fleet's from them.
            if (u.remote.empty()) u.fleet_defs = u.own_defs;
            u.remote.push_back(&entry);
            merge(u.fleet_defs, b, entry);
        }
    };
    // The buckets the running sums do not say enough of, entry by entry (walk_: the rare
    // cases, see from_run()).
    for (const ZoneEntry* z : in.zones) {
        const std::vector<wire::UsageBucket>& buckets = z->usage.buckets;
        for (std::size_t k = 0; any_walk && k < buckets.size(); ++k) {
            if (walk_[z->ids[k]]) add(z->sums[k], buckets[k], z->ids[k], z, z->gen);
        }
    }
    for (const auto& [region, p] : in.remote) {
        const std::vector<wire::UsageBucket>& buckets = p->usage.buckets;
        for (std::size_t k = 0; any_walk && k < buckets.size(); ++k) {
            if (walk_[p->ids[k]]) add(p->sums[k], buckets[k], p->ids[k], nullptr, p->gen);
        }
    }
    std::vector<std::string_view> runtime;  // run-time buckets, with or without usage
    for (const auto& [name, o] : overrides_) {
        if (o.has_match && override_active(o, now)) runtime.emplace_back(name);
    }
    for (const auto& [name, f] : limits_.buckets) {
        if (f.has_match) runtime.emplace_back(name);
    }
    std::sort(runtime.begin(), runtime.end());
    runtime.erase(std::unique(runtime.begin(), runtime.end()), runtime.end());
    runtime_usage_.resize(runtime.size());  // not resized again: usage_ points into it
    std::size_t next_runtime = 0;
    auto runtime_only = [&](std::string_view name) {
        BucketUsage& u = runtime_usage_[next_runtime++];
        start(u, name);
        usage_.push_back(&u);
    };
    usage_.clear();
    buckets_walked_ = 0;
    for (std::uint32_t id : ids_.by_name()) {
        BucketUsage& u = by_id_[id];
        if (u.tick != tick_) continue;  // no fresh input names it
        while (next_runtime < runtime.size() && runtime[next_runtime] < u.name)
            runtime_only(runtime[next_runtime]);
        if (next_runtime < runtime.size() && runtime[next_runtime] == u.name) ++next_runtime;
        if (walk_[id]) {
            ++buckets_walked_;
            if (u.remote.empty()) u.fleet_defs = u.own_defs;
            u.own_n = u.own.size();
            u.remote_n = u.remote.size();
            u.own_all = u.own.size() == u.own_zones && u.own_zones == tick_zones_.size();
        }
        usage_.push_back(&u);
    }
    while (next_runtime < runtime.size()) runtime_only(runtime[next_runtime]);
    return usage_;
}

// A bucket's sums from its running sums, exactly what walking its entries would give, when
// they say enough: its zones are none or all the fresh zones with entries, its peers none or
// all those chosen with entries (a zone names a bucket once: then basis_ms and inputs_gen are
// those inputs', and own_zones all of them), no entry
// carries keys or more than one definition, or another definition than the run's (then the
// definitions are one count each), none is zone-scoped (sampled per zone from the entries),
// and the rated sums are below 2^53 (then summing them as doubles, entry by entry, was exact).
bool Controller::from_run(BucketUsage& u, const Run& o, const Run& m) const {
    if (o.n != 0 && o.n != tick_zones_.size()) return false;
    if (m.n != 0 && m.n != run_peers_) return false;
    if (o.other || m.other || o.keys || m.keys) return false;
    if ((o.simple && o.def_scope == Scope::Zone) || (m.simple && m.def_scope == Scope::Zone))
        return false;
    // Below 2^15 entries of values below 2^48 each side (no entry odd), the sums are exact
    // and so is their total; below 2^53, summing the rates as doubles entry by entry was too.
    if (o.odd || m.odd || o.n >= (1u << 15) || m.n >= (1u << 15)) return false;
    constexpr std::uint64_t kExact = std::uint64_t{1} << 53;
    if (o.offered + m.offered >= kExact || o.admitted + m.admitted >= kExact ||
        o.dropped + m.dropped >= kExact || o.shadow_dropped + m.shadow_dropped >= kExact) {
        return false;
    }
    // No entry odd: an unrated entry has no rates, so the rated entries' are all of them.
    auto sums = [&](const Run& x, BucketUsage::Sums& s) {
        s.rated.offered = static_cast<double>(x.offered);
        s.rated.admitted = static_cast<double>(x.admitted);
        s.rated.dropped = static_cast<double>(x.dropped);
        s.rated.shadow_dropped = static_cast<double>(x.shadow_dropped);
        s.rated_n = x.n - x.missing;
        s.missing = x.missing;
        s.incomplete = x.incomplete;
        s.hosts = x.hosts;
        s.offered = x.offered;
        s.admitted = x.admitted;
        s.dropped = x.dropped;
        s.shadow_dropped = x.shadow_dropped;
        s.rated_hosts = x.rated_hosts;
        s.keys = false;
    };
    sums(o, u.own_sums);
    sums(m, u.remote_sums);
    u.own.clear();
    u.remote.clear();
    u.own_n = o.n;
    u.own_zones = o.n;
    u.remote_n = m.n;
    u.own_all = o.n == tick_zones_.size();
    u.basis_ms = o.n ? run_basis_ms_ : 0;
    u.inputs_gen = std::max(o.n ? run_zones_gen_ : 0, m.n ? run_peers_gen_ : 0);
    u.own_defs.clear();
    if (o.simple) u.own_defs.push_back({o.def(), o.def_hosts});
    u.fleet_defs = u.own_defs;
    if (m.simple) {
        // As merge_definitions() would merge the peers' entries one by one.
        if (u.fleet_defs.size() == 1 && u.fleet_defs[0].def == m.def()) {
            u.fleet_defs[0].hosts = o.def_hosts + m.def_hosts;
        } else {
            merge_definitions(u.fleet_defs, {{m.def(), m.def_hosts}});
        }
    }
    return true;
}

// What applies to every instance of a bucket: its override in force, its limits-file entry,
// its match when it is a run-time bucket, and its scope: a run-time bucket's own, else the one
// most hosts report (resolve_scope). nullopt when no host reports a definition.
std::optional<Controller::BucketRule> Controller::bucket_rule(std::string_view name,
                                                              const BucketUsage& u,
                                                              const Clock& now) const {
    BucketRule rule;
    if (!overrides_.empty()) {
        auto it = overrides_.find(std::string(name));
        if (it != overrides_.end() && override_active(it->second, now))
            rule.active_override = &it->second;
    }
    if (!limits_.buckets.empty()) {
        auto it = limits_.buckets.find(std::string(name));
        if (it != limits_.buckets.end()) rule.file = &it->second;
    }
    if (rule.active_override && rule.active_override->has_match) {
        rule.match = &rule.active_override->match;
    } else if (rule.file && rule.file->has_match) {
        rule.match = &rule.file->match;
    }
    if (rule.match) {
        rule.scope = rule.match->scope;
        return rule;
    }
    std::optional<Scope> s = resolve_scope(u.fleet_defs);
    if (!s) return std::nullopt;
    rule.scope = *s;
    return rule;
}

namespace {
// No host of the entry has a rate yet: its zero sums mean "unknown", not "no traffic".
bool unrated(const wire::UsageBucket& b) {
    return b.hosts > 0 && b.rated_hosts == 0;
}
// Some hosts of the entry have no rate yet.
bool partial(const wire::UsageBucket& b) {
    return b.rated_hosts < b.hosts;
}
const std::vector<wire::DefinitionCount> kNoDefinitions;  // a Sample's without a domain
}  // namespace

// Zone buckets: one instance per zone of this region that reports the bucket. An unrated zone
// holds its instance's last samples, and creates none (a false ratio of 0 is never published).
// A run-time bucket also gets an instance in every other fresh zone: nginx creates it from the
// instruction, so it must be published before any host reports it.
void Controller::sample_zones(std::string_view name, const BucketUsage& u, const BucketRule& rule,
                              const Inputs& in, const Clock& now, std::vector<Event>& events) {
    for (const auto& [z, b] : u.own) {
        const std::string& zone = z->usage.zone;
        Sample s;
        s.hold = unrated(*b);
        if (s.hold && !rule.match && !find_instance(name, rule.scope, zone)) continue;
        if (!s.hold) add_rates(s.sum, *b);
        s.has_usage = true;
        s.provisional = partial(*b) || z->short_of_hosts;
        s.basis_ms = z->usage.ts_ms;
        s.inputs_gen = z->gen;
        s.bucket_id = u.id;
        s.hosts = s.own_hosts = b->hosts;
        s.domain = &b->definitions;
        s.keys = b->keys;  // one zone: already summed by its collector
        s.zone = z;
        update_instance(name, zone, rule, std::move(s), now, events);
    }
    if (!rule.match) return;
    for (const ZoneEntry* z : in.zones) {
        const Instance* done = find_instance(name, rule.scope, z->usage.zone);
        if (done && done->tick == tick_) continue;  // has usage, updated above
        Sample s;
        s.zone = z;
        s.bucket_id = u.id;
        update_instance(name, z->usage.zone, rule, std::move(s), now, events);
    }
}

// Region and global buckets: one instance summing this region's zones and, for a global
// bucket, the freshest usage of every other region. When part of the usage is unknown (a zone
// without rates yet), an existing instance holds its last samples rather than counting that
// part as zero; a new one starts from what is known, unless nothing is.
void Controller::sample_wide(std::string_view name, const BucketUsage& u, const BucketRule& rule,
                             const Clock& now, std::vector<Event>& events) {
    const bool global = rule.scope == Scope::Global;
    Sample s;
    // The sums aggregate() took: unrated entries are left out (and counted), so that an
    // unknown part of the usage is never counted as zero.
    auto add = [](Rates& into, const Rates& r) {
        into.offered += r.offered;
        into.admitted += r.admitted;
        into.dropped += r.dropped;
        into.shadow_dropped += r.shadow_dropped;
    };
    add(s.sum, u.own_sums.rated);
    std::size_t rated = u.own_sums.rated_n, missing = u.own_sums.missing,
                incomplete = u.own_sums.incomplete;
    s.basis_ms = u.basis_ms;
    s.inputs_gen = u.inputs_gen;
    s.bucket_id = u.id;
    s.own_hosts = u.own_sums.hosts;
    s.hosts = s.own_hosts;
    if (!global) s.domain = &u.own_defs;
    if (global) {
        add(s.sum, u.remote_sums.rated);
        rated += u.remote_sums.rated_n;
        missing += u.remote_sums.missing;
        incomplete += u.remote_sums.incomplete;
        s.hosts = sat_add(s.hosts, u.remote_sums.hosts);
        s.domain = &u.fleet_defs;  // a global bucket's hosts are the fleet's
    }
    s.has_usage = u.own_n > 0 || (global && u.remote_n > 0);
    if (!s.has_usage && !rule.match) return;
    s.hold = missing > 0 && find_instance(name, rule.scope, "") != nullptr;
    if (s.has_usage && rated == 0 && !s.hold && !rule.match) return;
    s.provisional = incomplete > 0;
    std::vector<const std::vector<wire::KeyRate>*> key_lists;
    if (u.own_sums.keys) {
        for (const auto& [z, b] : u.own) {
            if (!b->keys.empty()) key_lists.push_back(&b->keys);
        }
    }
    if (global && u.remote_sums.keys) {
        for (const wire::UsageBucket* b : u.remote) {
            if (!b->keys.empty()) key_lists.push_back(&b->keys);
        }
    }
    if (!key_lists.empty()) s.keys = sum_keys(key_lists, kMaxInstanceKeys);
    s.own = &u.own;
    s.own_all = u.own_all;
    update_instance(name, "", rule, std::move(s), now, events);
}

// One instance's tick: the definition in force, the smoothed rates and the ratio, and the
// events its change of state deserves. Instances are created here, on first use.
void Controller::update_instance(std::string_view name, const std::string& zone,
                                 const BucketRule& rule, Sample&& s, const Clock& now,
                                 std::vector<Event>& events) {
    // Buckets are sampled in name order, and a zone bucket's zones in name order, as instances
    // are kept: most often the instance is the one after the last updated, which saves a
    // descent of the tree per instance.
    auto it = next_instance_;
    if (it == instances_.end() || it->first.bucket != name || it->first.scope != rule.scope ||
        it->first.zone != zone) {
        it = instances_.find(InstanceKeyRef{name, rule.scope, "", zone});
    }
    if (it == instances_.end()) {
        it = instances_.emplace(InstanceKey{std::string(name), rule.scope, "", zone}, Instance{}).first;
        // Its key's, for good: found by that key at every later tick.
        it->second.bucket = name;
        it->second.scope = rule.scope;
        it->second.zone = zone;
    }
    next_instance_ = std::next(it);
    Instance& inst = it->second;
    const Before before{inst.tick == 0, inst.ratio_ppm, inst.disagreeing_hosts};
    inst.tick = tick_;
    inst.bucket_id = s.bucket_id;
    inst.hosts = s.hosts;
    inst.own_hosts = s.own_hosts;
    inst.own_zones.clear();  // its capacity kept
    inst.own_zones_all = s.own_all;
    if (s.zone) inst.own_zones.push_back(s.zone->name);
    if (s.own && !s.own_all) {
        for (const auto& [z, b] : *s.own) inst.own_zones.push_back(z->name);
    }
    // A run-time bucket that lost its definition while hosts still report it: it is not a
    // bucket of nginx.conf, whatever the hosts' definitions say, until they drop it.
    // Past the grace, a name still reported is a bucket of nginx.conf by that name now.
    const bool defined = rule.match || rule.active_override || rule.file;
    const bool grace_over =
        inst.removed_mono && now.mono_ms >= inst.removed_mono + removed_grace_ms();
    if (defined || grace_over) {
        inst.removed_mono = 0;
    } else if (inst.runtime) {
        inst.removed_mono = std::max<std::uint64_t>(now.mono_ms, 1);
    }
    inst.runtime = rule.match != nullptr;
    inst.match = rule.match ? *rule.match : wire::RuntimeMatch{};
    inst.has_usage = s.has_usage;
    const std::optional<wire::Definition> conf =
        resolve_definition(inst, rule, s.domain ? *s.domain : kNoDefinitions);
    if (inst.removed_mono) inst.limit_source = inst.mode_source = LimitSource::Removed;
    inst.keyed = conf && conf->keyed && !inst.runtime;
    smooth(inst, s);
    if (inst.keyed) {
        update_keys(inst, s, now, events);
    } else if (inst.keys.size() > 0) {
        inst.keys = KeyTable{};  // no longer keyed (a reload): nginx drops its key ratios
    }
    evaluate_candidate(inst, rule);
    announce(inst, before, conf, events);
}

// The definition in force: nginx.conf's as the instance's hosts vote (resolve()), then the
// limits file, then an override, for the limit and the mode separately. Returns the hosts'
// vote, which a disagreement event names.
std::optional<wire::Definition> Controller::resolve_definition(
    Instance& inst, const BucketRule& rule,
    const std::vector<wire::DefinitionCount>& domain) const {
    std::optional<wire::Definition> conf = resolve(domain, inst.scope);
    inst.limit_mrps = conf ? conf->limit_mrps : 0;
    inst.mode = conf ? conf->mode : Mode::Deny;
    inst.limit_source = inst.mode_source = LimitSource::Conf;
    inst.expires_ms = 0;
    inst.disagreeing_hosts = 0;
    if (conf) {
        for (const auto& d : domain) {
            if (d.def != *conf) inst.disagreeing_hosts = sat_add(inst.disagreeing_hosts, d.hosts);
        }
    }
    if (const FileLimit* file = rule.file) {
        if (file->limit_mrps) {
            inst.limit_mrps = *file->limit_mrps;
            inst.limit_source = LimitSource::File;
        }
        if (file->mode) {
            inst.mode = *file->mode;
            inst.mode_source = LimitSource::File;
        }
    }
    if (const wire::Override* ovr = rule.active_override) {
        if (ovr->limit_mrps) {
            inst.limit_mrps = *ovr->limit_mrps;
            inst.limit_source = LimitSource::Override;
        }
        if (ovr->mode) {
            inst.mode = *ovr->mode;
            inst.mode_source = LimitSource::Override;
        }
        inst.expires_ms = ovr->expires_ms;
    }
    if (inst.runtime) inst.disagreeing_hosts = 0;  // hosts echo the definition we publish
    // Copied into the instance's own vector, whose capacity stays from tick to tick.
    inst.definitions.assign(domain.begin(),
                            domain.begin() + static_cast<std::ptrdiff_t>(
                                                 std::min(domain.size(), wire::kMaxDefinitions)));
    return conf;
}

// The mean of the last `window` samples, then the ratio. `hold`: part of the usage is unknown
// this tick, so no sample is taken and the last ones stand. A provisional sample (some hosts
// have no rate yet) is replaced by the next sample rather than averaged with it, so that it
// costs nothing once the rates are complete.
void Controller::smooth(Instance& inst, const Sample& s) const {
    const bool pushed = !s.hold || inst.samples.empty();
    if (pushed) {
        // No usage newer than the newest sample's: a tick soon after an early one (which a
        // usage brought) sees that usage again. Pushed twice, it filled the window with one
        // sample and ended a fast attack: a 1.5x step seen in part by the early tick (1.21 L)
        // then averaged its next sample (1.5 L) with the repeat, 0.26 instead of 1/3 for an
        // interval, and the damped hosts let 1.1 L through.
        const bool repeat = s.inputs_gen != 0 && s.inputs_gen == inst.inputs_gen;
        if ((inst.last_provisional || repeat) && !inst.samples.empty()) inst.samples.pop_back();
        inst.samples.push_back(s.sum);
        inst.inputs_gen = s.inputs_gen;
        inst.last_provisional = s.provisional;
        // Surge damping needs the instance's offered rate *of one sample*, paired with the
        // sample's time, so that each host finds its own share of it (docs/design.md).
        if (!s.hold && s.has_usage && !s.provisional) {
            inst.basis_offered_mrps = s.sum.offered;
            inst.basis_ms = s.basis_ms;
        }
    }
    while (inst.samples.size() > opt_.window) inst.samples.pop_front();
    Rates mean;
    for (const Rates& r : inst.samples) {
        mean.offered += r.offered;
        mean.admitted += r.admitted;
        mean.dropped += r.dropped;
        mean.shadow_dropped += r.shadow_dropped;
    }
    double n = static_cast<double>(inst.samples.size());
    mean.offered /= n;
    mean.admitted /= n;
    mean.dropped /= n;
    mean.shadow_dropped /= n;
    // Fast attack: a newest sample well above the mean is a surge, not noise; use it alone so
    // that the ratio answers within one tick. Decreases stay averaged (a drop in demand
    // over-drops for at most one window, the safe direction). A surge usually spans two or
    // three samples (the first ones see it in part): while each new sample is still above
    // the one before, the attack goes on, rather than averaging the rise's last step with a
    // sample it has outgrown (a 1.5x step's ratio lagged a tick at 0.26 instead of 1/3).
    const Rates& newest = inst.samples.back();
    if (opt_.fast_attack > 0 && pushed) {
        const bool rising = inst.samples.size() >= 2 &&
                            newest.offered > inst.samples[inst.samples.size() - 2].offered;
        inst.attacking =
            newest.offered > mean.offered * (1.0 + opt_.fast_attack) || (inst.attacking && rising);
    }
    // Fast release: a newest sample under the limit needs no drop at all; averaged with the
    // sample before a fall, it kept rejecting legitimate requests for another tick (at 250 ms
    // intervals the last of them came 0.8 s after the fall, three intervals). Not from a
    // provisional sample: it sums only part of the hosts, not the demand. Only the ratio is
    // released; the rates shown (and a candidate limit's would-drop) stay smoothed.
    const bool released = opt_.fast_attack > 0 && inst.limit_mrps > 0 && !inst.last_provisional &&
                          round_mrps(newest.offered) <= inst.limit_mrps;
    if (opt_.fast_attack > 0 && inst.attacking) mean = newest;
    inst.offered_mrps = mean.offered;
    inst.admitted_mrps = mean.admitted;
    inst.dropped_mrps = mean.dropped;
    inst.shadow_dropped_mrps = mean.shadow_dropped;
    inst.ratio_ppm = inst.limit_mrps == 0 ? kPpmOne
                     : released           ? 0
                                : drop_ratio_ppm(round_mrps(inst.offered_mrps), inst.limit_mrps);
}

// A keyed instance: its own ratio stays 0 (its limit is each key's) and it has no surge basis;
// each key's ratio comes from the key table. A full table refuses new keys: counted, and one
// line when the instance starts and stops refusing.
void Controller::update_keys(Instance& inst, const Sample& s, const Clock& now,
                             std::vector<Event>& events) {
    inst.ratio_ppm = 0;
    inst.basis_ms = 0;
    inst.basis_offered_mrps = 0;
    KeyOptions ko;
    ko.window = opt_.window;
    ko.fast_attack = opt_.fast_attack;
    ko.ttl_ms = opt_.ttl_ms;
    ko.max_keys = opt_.max_instance_keys;
    const std::size_t refused =
        inst.keys.update(s.keys, s.hold, s.provisional, inst.limit_mrps, ko, now.mono_ms);
    keys_refused_ = sat_add(keys_refused_, refused);
    const std::string at = where(inst.scope, opt_.region, inst.zone);
    if (refused > 0 && !inst.keys_refusing) {
        events.push_back({Event::Level::Warn, inst.bucket,
                          "key table full in " + at + ": " + std::to_string(inst.keys.size()) +
                              " keys held (--max-instance-keys), " + std::to_string(refused) +
                              " new key(s) refused this tick; they are limited by each host's "
                              "local cap only"});
    } else if (refused == 0 && inst.keys_refusing) {
        events.push_back({Event::Level::Info, inst.bucket, "key table has room again in " + at});
    }
    inst.keys_refusing = refused > 0;
}

// The candidate is judged on the same smoothed offered rate as the ratio in force, so that its
// would-drops are what this instance would have dropped had the candidate been the limit.
void Controller::evaluate_candidate(Instance& inst, const BucketRule& rule) const {
    inst.candidate_mrps = rule.file ? rule.file->candidate_mrps : std::nullopt;
    inst.candidate_would_drop_mrps =
        inst.candidate_mrps
            ? std::max(0.0, inst.offered_mrps - static_cast<double>(*inst.candidate_mrps))
            : 0.0;
}

// One line when an instance starts or stops dropping, and when its hosts start or stop
// disagreeing on its definition: changes of state, never one line per tick.
void Controller::announce(const Instance& inst, const Before& before,
                          const std::optional<wire::Definition>& conf,
                          std::vector<Event>& events) const {
    const bool starts_dropping = inst.ratio_ppm > 0 && (before.is_new || before.ratio_ppm == 0);
    const bool stops_dropping = inst.ratio_ppm == 0 && !before.is_new && before.ratio_ppm > 0;
    const bool starts_disagreeing =
        inst.disagreeing_hosts > 0 && (before.is_new || before.disagreeing_hosts == 0);
    const bool stops_disagreeing =
        inst.disagreeing_hosts == 0 && !before.is_new && before.disagreeing_hosts > 0;
    if (!starts_dropping && !stops_dropping && !starts_disagreeing && !stops_disagreeing) return;
    const std::string at = where(inst.scope, opt_.region, inst.zone);
    if (starts_dropping) {
        events.push_back(
            {Event::Level::Info, inst.bucket,
             std::string(inst.mode == Mode::Shadow ? "would drop (shadow)" : "dropping") + " in " +
                 at + ": ratio " + ratio_text(inst.ratio_ppm) + ", offered " +
                 rps(inst.offered_mrps) + ", limit " + rps(inst.limit_mrps)});
    } else if (stops_dropping) {
        events.push_back({Event::Level::Info, inst.bucket,
                          "under the limit again in " + at + ": offered " + rps(inst.offered_mrps) +
                              ", limit " + rps(inst.limit_mrps)});
    }
    if (starts_disagreeing) {
        events.push_back(
            {Event::Level::Warn, inst.bucket,
             "hosts disagree on the definition in " + at + ": " +
                 std::to_string(inst.disagreeing_hosts) + " of " + std::to_string(inst.hosts) +
                 " host(s) differ from the one in force (" + std::string(to_string(inst.scope)) +
                 ", " + std::string(to_string(conf ? conf->mode : Mode::Deny)) + ", " +
                 rps(conf ? conf->limit_mrps : 0) + ")"});
    } else if (stops_disagreeing) {
        events.push_back(
            {Event::Level::Info, inst.bucket, "hosts agree on the definition again in " + at});
    }
}

// One message per scope instance of this region, heartbeats included (an empty bucket list
// tells nginx "no drops", which differs from "no control plane"). At most
// kMaxBucketsPerMessage entries per message; the rest go in further messages.
// The same walk of instances_ (the tick's last change of it) forgets the instances no step
// updated this tick: they have lost their usage and their rule, are no longer published, and
// nginx fails open on them when their ratios expire. It notes the others by id for
// brings_new_rates() (note_instance()). At 10,000 buckets the map's nodes are cold: one walk
// for the three, not three walks.
void Controller::instructions(const Inputs& in, const Clock& now,
                              std::vector<wire::Instructions>& out) {
    // Message 0 is global, 1 the region's, 2 + i the zone in.zones[i] (sorted by name). They
    // and their entries are the last tick's, written over (by_scope_n_ entries in each), as are
    // the parts in `out`: a new entry per instance, moved as its message grew and again into
    // its part, was 15% of a tick's instructions at 10,000 buckets (grl_tick_bench).
    std::vector<wire::Instructions>& msgs = by_scope_;
    msgs.resize(2 + in.zones.size());
    by_scope_n_.assign(msgs.size(), 0);
    auto head = [&](wire::Instructions& m, Scope scope, std::string_view zone) {
        m.source = opt_.name;
        m.ts_ms = now.wall_ms;
        m.ttl_ms = opt_.ttl_ms;
        m.scope = scope;
        if (scope == Scope::Global) {
            m.region.clear();
        } else {
            m.region = opt_.region;
        }
        m.zone = zone;
    };
    head(msgs[0], Scope::Global, "");
    head(msgs[1], Scope::Region, "");
    for (std::size_t i = 0; i < in.zones.size(); ++i)
        head(msgs[2 + i], Scope::Zone, in.zones[i]->usage.zone);
    reset_id_instances();
    Noting noting;
    for (auto it = instances_.begin(); it != instances_.end();) {
        Instance& inst = it->second;
        if (inst.tick != tick_) {
            it = instances_.erase(it);
            continue;
        }
        note_instance(noting, inst);
        ++it;
        std::size_t idx = 0;
        switch (inst.scope) {
            case Scope::Global: idx = 0; break;
            case Scope::Region: idx = 1; break;
            case Scope::Zone: {
                auto z = std::lower_bound(
                    in.zones.begin(), in.zones.end(), inst.zone,
                    [](const ZoneEntry* e, const std::string& n) { return e->usage.zone < n; });
                if (z == in.zones.end() || (*z)->usage.zone != inst.zone) continue;
                idx = 2 + static_cast<std::size_t>(z - in.zones.begin());
                break;
            }
        }
        inst.published = (inst.own_hosts > 0 || inst.runtime) && inst.removed_mono == 0;
        if (!inst.published) continue;
        std::vector<wire::Instruction>& entries = msgs[idx].buckets;
        if (by_scope_n_[idx] == entries.size()) entries.emplace_back();
        wire::Instruction& e = entries[by_scope_n_[idx]++];
        e.name = inst.bucket;
        e.ratio_ppm = inst.ratio_ppm;
        e.limit_mrps = inst.limit_mrps;
        e.mode = inst.mode;
        e.has_match = inst.runtime;
        if (inst.runtime) {
            e.match = inst.match;
        } else if (!(e.match == wire::RuntimeMatch{})) {
            e.match = wire::RuntimeMatch{};  // the slot's last entry was a run-time bucket's
        }
        e.has_basis = inst.basis_ms != 0 && !inst.keyed;
        e.basis_offered_mrps = round_mrps(inst.basis_offered_mrps);
        e.basis_ms = inst.basis_ms;
        e.keyed = inst.keyed;
        if (inst.keyed) {
            e.ratio_ppm = 0;
            e.keys = inst.keys.ratios();
        } else {
            e.keys.clear();
        }
    }
    for (std::size_t i = 0; i < msgs.size(); ++i) msgs[i].buckets.resize(by_scope_n_[i]);
    // An entry's encoded size, bounded from above: ~130 bytes (docs/protocol.md), a match up
    // to ~300 more, and a keyed entry's [h, ratio_ppm] pairs at most 15 bytes each. Entries
    // are cut into messages of at most kMaxBucketsPerMessage and about 1 MiB.
    auto entry_bytes = [](const wire::Instruction& e) {
        return std::size_t{160} + (e.has_match ? 320 : 0) + (e.keyed ? 16 + 16 * e.keys.size() : 0);
    };
    constexpr std::size_t kBudget = wire::kMaxMessageBytes - 4096;  // the header's room
    std::size_t parts = 0;
    for (wire::Instructions& m : msgs) {
        const std::size_t n = m.buckets.size();
        std::size_t from = 0;
        do {
            std::size_t to = from, bytes = 0;
            while (to < n && to - from < wire::kMaxBucketsPerMessage &&
                   (to == from || bytes + entry_bytes(m.buckets[to]) <= kBudget)) {
                bytes += entry_bytes(m.buckets[to]);
                ++to;
            }
            if (parts == out.size()) out.emplace_back();
            wire::Instructions& part = out[parts++];
            part.source = m.source;
            part.ts_ms = m.ts_ms;
            part.ttl_ms = m.ttl_ms;
            part.scope = m.scope;
            part.region = m.region;
            part.zone = m.zone;
            part.seq = ++seq_;
            if (from == 0 && to == n) {
                std::swap(part.buckets, m.buckets);  // the whole message, no entry moved
            } else {
                part.buckets.resize(to - from);
                std::move(m.buckets.begin() + static_cast<std::ptrdiff_t>(from),
                          m.buckets.begin() + static_cast<std::ptrdiff_t>(to),
                          part.buckets.begin());
            }
            from = to;
        } while (from < n);
    }
    out.resize(parts);
}

// What the peers need for global buckets: raw sums over this region's fresh zones (each peer
// smooths on its own), the limits digest (to detect different limits) and the whole override
// table (replication).
void Controller::region_usage(const Inputs& in, const Usage& usage, const Clock& now,
                              wire::RegionUsage& ru) {
    ru.v = wire::kUsageVersion;
    ru.source = opt_.name;
    ru.region = opt_.region;
    ru.seq = ++seq_;
    ru.ts_ms = now.wall_ms;
    ru.interval_ms = opt_.interval_ms;
    ru.zones = in.zones.size();
    ru.hosts = fresh_hosts_;
    ru.limits_digest = limits_digest_;
    ru.part = 0;
    ru.parts = 1;
    // Into the entries of the last tick's region usage (the daemon passes the same TickOutput
    // every tick): their names and definition lists keep their storage. A new entry per bucket
    // and a copy of its definitions were 13% of a tick's instructions at 10,000 buckets
    // (grl_tick_bench under callgrind).
    std::size_t n = 0;
    for (const BucketUsage* p : usage) {
        const BucketUsage& a = *p;
        if (a.own_n == 0) continue;
        if (n == ru.buckets.size()) ru.buckets.emplace_back();
        wire::UsageBucket& u = ru.buckets[n++];
        if (u.name != a.name) u.name = a.name;  // most often the same bucket as last tick
        u.offered_mrps = a.own_sums.offered;    // summed by aggregate()
        u.admitted_mrps = a.own_sums.admitted;
        u.dropped_mrps = a.own_sums.dropped;
        u.shadow_dropped_mrps = a.own_sums.shadow_dropped;
        u.hosts = a.own_sums.hosts;
        u.rated_hosts = a.own_sums.rated_hosts;
        u.definitions.assign(a.own_defs.begin(),
                             a.own_defs.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                      a.own_defs.size(), wire::kMaxDefinitions)));
        u.host_names.clear();
        u.keys.clear();
        // A keyed bucket's keys, summed over the region's zones (peers sum them for global
        // buckets); only beside a keyed definition, as the protocol requires.
        const bool keyed = std::any_of(u.definitions.begin(), u.definitions.end(),
                                       [](const wire::DefinitionCount& d) { return d.def.keyed; });
        if (keyed) {
            std::vector<const std::vector<wire::KeyRate>*> lists;
            for (const auto& [z, b] : a.own) {
                if (!b->keys.empty()) lists.push_back(&b->keys);
            }
            if (!lists.empty()) u.keys = sum_keys(lists, wire::kMaxUsageKeys);
        }
        // Sent in parts when it does not fit one message (wire::encode_parts).
        if (n == wire::kMaxUsageBuckets) break;
    }
    ru.buckets.resize(n);
    ru.overrides.clear();
    for (const auto& [name, o] : overrides_) {
        if (ru.overrides.size() == wire::kMaxOverrides) break;
        ru.overrides.push_back(o);
    }
}

const Instance* Controller::find_instance(std::string_view bucket, Scope scope,
                                          std::string_view zone) const {
    auto it = instances_.find(InstanceKeyRef{bucket, scope, "", zone});
    return it == instances_.end() ? nullptr : &it->second;
}

// ---------------------------------------------------------------------------------------------
// Queries

bool Controller::brings_new_rates(const wire::ZoneUsage& u, const ZoneEntry* z,
                                  const Clock& now) const {
    const bool zone_was_silent = z == nullptr || !zone_fresh(*z, now);
    // Still without some hosts the zone had before it came back: not complete yet.
    const bool short_of = !zone_was_silent && short_of_hosts(*z, u.hosts, now);
    for (std::size_t k = 0; k < u.buckets.size(); ++k) {
        const wire::UsageBucket& b = u.buckets[k];
        if (b.rated_hosts == 0) continue;
        if (zone_was_silent) return true;
        // Rates now complete where the newest sample was provisional.
        const bool complete = b.rated_hosts == b.hosts && !short_of;
        const std::uint32_t id = ids_scratch_[k];
        if (id >= id_instances_.size() || id_instances_[id].binds != ids_.binds(id)) {
            if (new_rates_by_name(b.name, u.zone, complete)) return true;
            continue;
        }
        const IdInstances& f = id_instances_[id];
        if (!f.any) return true;
        if (!complete) continue;
        if (f.wide_provisional) return true;
        if (f.zone_provisional) {
            const Instance* i = find_instance(b.name, Scope::Zone, u.zone);
            if (i && i->last_provisional) return true;
        }
    }
    return false;
}

bool Controller::new_rates_by_name(std::string_view bucket, std::string_view zone,
                                   bool complete) const {
    auto it = instances_.lower_bound(InstanceKeyRef{bucket, Scope::Global, "", ""});
    if (it == instances_.end() || it->second.bucket != bucket) return true;
    for (; complete && it != instances_.end() && it->second.bucket == bucket; ++it) {
        const Instance& i = it->second;
        if ((i.scope != Scope::Zone || i.zone == zone) && i.last_provisional) return true;
    }
    return false;
}

// After each tick (instructions(), the only change of instances_): what brings_new_rates() asks
// of them, by id. An id free now has no instance here, and a name that takes it later changes
// its binds.
void Controller::reset_id_instances() {
    id_instances_.resize(ids_.span());
    for (std::uint32_t id = 0; id < id_instances_.size(); ++id)
        id_instances_[id] = IdInstances{ids_.binds(id)};
}

// Each instance kept, in the map's order (instances come by bucket).
void Controller::note_instance(Noting& n, const Instance& i) {
    if (n.first || i.bucket != n.bucket) {
        n.first = false;
        n.bucket = i.bucket;
        // The instance was updated this tick (the others are forgotten first), from the usage
        // of its id; a run-time bucket that no input names may still have an id (a stale zone
        // names it), found by name. 10,000 lookups a tick were 3.7% of the controller's cycles
        // at 50 zones x 10,000 buckets (perf, bench/control_plane/README.md).
        const std::uint32_t id =
            i.bucket_id != BucketIds::kNone ? i.bucket_id : ids_.find(n.bucket);
        n.f = id == BucketIds::kNone ? nullptr : &id_instances_[id];
        if (n.f) n.f->any = true;
    }
    if (n.f == nullptr || !i.last_provisional) return;
    (i.scope == Scope::Zone ? n.f->zone_provisional : n.f->wide_provisional) = true;
}

std::vector<wire::BucketStatus> Controller::status(const std::string& filter,
                                                   bool with_hosts) const {
    std::vector<wire::BucketStatus> out;
    // Every instance for the dashboard's snapshot: grown one at a time, 10,000 entries of ~400
    // bytes were moved 14 times (29% of the copy's instructions, grl_tick_bench).
    if (filter.empty()) out.reserve(instances_.size());
    for (const auto& [key, inst] : instances_) {
        if (!filter.empty() && inst.bucket != filter) continue;
        wire::BucketStatus s;
        s.name = inst.bucket;
        s.scope = inst.scope;
        s.region = inst.scope == Scope::Global ? "" : opt_.region;
        s.zone = inst.zone;
        s.offered_mrps = round_mrps(inst.offered_mrps);
        s.admitted_mrps = round_mrps(inst.admitted_mrps);
        s.shadow_dropped_mrps = round_mrps(inst.shadow_dropped_mrps);
        s.limit_mrps = inst.limit_mrps;
        s.ratio_ppm = inst.ratio_ppm;
        s.candidate_limit_mrps = inst.candidate_mrps;
        s.candidate_would_drop_mrps = round_mrps(inst.candidate_would_drop_mrps);
        s.mode = inst.mode;
        s.limit_source = to_string(inst.limit_source);
        s.mode_source = to_string(inst.mode_source);
        s.expires_ms = inst.expires_ms;
        s.hosts = inst.hosts;
        s.definitions = inst.definitions;
        s.has_match = inst.runtime;
        s.match = inst.match;
        s.keyed = inst.keyed;
        s.keys_limited = inst.keys.limited();
        if (with_hosts) {
            for (const std::string_view zname : inst.own_zones_all ? tick_zones_ : inst.own_zones) {
                auto z = zones_.find(std::string(zname));
                if (z == zones_.end()) continue;
                const wire::ZoneUsage& u = z->second.usage;
                const std::vector<std::string>* names = &u.host_names;
                for (const wire::UsageBucket& b : u.buckets) {
                    if (b.name == inst.bucket && !b.host_names.empty()) names = &b.host_names;
                }
                for (const std::string& h : *names) {
                    if (s.host_names.size() < wire::kMaxHostNames) s.host_names.push_back(h);
                }
            }
            std::sort(s.host_names.begin(), s.host_names.end());
        }
        out.push_back(std::move(s));
    }
    return out;
}

std::string Controller::keys(const std::string& bucket, std::uint32_t top,
                             std::vector<wire::KeyStatus>& out) const {
    out.clear();
    if (top == 0) top = wire::kDefaultAdminTopKeys;
    bool found = false, keyed = false;
    for (auto it = instances_.lower_bound(InstanceKeyRef{bucket, Scope::Global, "", ""});
         it != instances_.end() && it->second.bucket == bucket; ++it) {
        const Instance& inst = it->second;
        found = true;
        if (!inst.keyed) continue;
        keyed = true;
        for (const KeyState* k : inst.keys.busiest(top)) {
            if (out.size() == wire::kMaxStatusEntries) break;  // the reply's array bound
            wire::KeyStatus ks;
            ks.name = inst.bucket;
            ks.scope = inst.scope;
            ks.region = inst.scope == Scope::Global ? "" : opt_.region;
            ks.zone = inst.zone;
            ks.limit_mrps = inst.limit_mrps;
            ks.ratio_ppm = k->ratio_ppm;
            ks.key.hash = k->hash;
            ks.key.text = k->text;
            ks.key.offered_mrps = round_mrps(k->offered_mrps);
            // The last sum's drops beside a smoothed offered rate: shown at most offered.
            ks.key.dropped_mrps = std::min(k->dropped_mrps, ks.key.offered_mrps);
            ks.key.hosts = k->hosts;
            out.push_back(std::move(ks));
        }
    }
    if (!found) return "no host reports bucket \"" + bucket + "\"";
    if (!keyed) return "bucket \"" + bucket + "\" is not keyed (no key= in its definition)";
    return {};
}

std::vector<wire::ZoneStatus> Controller::zones(const Clock& now) const {
    std::vector<wire::ZoneStatus> out;
    for (const auto& [name, z] : zones_) {
        wire::ZoneStatus s;
        s.zone = name;
        s.source = z.usage.source;
        s.hosts = z.usage.hosts;
        s.stale_hosts = z.usage.stale_hosts;
        s.age_ms = now.mono_ms > z.recv_mono ? now.mono_ms - z.recv_mono : 0;
        s.fresh = zone_fresh(z, now);
        s.usage_v = z.usage.v;
        out.push_back(std::move(s));
    }
    return out;
}

std::vector<wire::PeerStatus> Controller::peers(const Clock& now) const {
    std::vector<wire::PeerStatus> out;
    for (const auto& [name, p] : peers_) {
        wire::PeerStatus s;
        s.source = name;
        s.region = p.usage.region;
        s.age_ms = now.mono_ms > p.recv_mono ? now.mono_ms - p.recv_mono : 0;
        s.limits_digest = p.usage.limits_digest;
        s.fresh = peer_fresh(p, now);
        s.usage_v = p.usage.v;
        out.push_back(std::move(s));
    }
    return out;
}

}  // namespace grl::control
