#include "grl/plane/plane.h"

#include <cstdarg>
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "grl/common/ratio.h"

namespace grl {

int BucketTable::find(std::string_view name) const {
    for (std::size_t i = 0; i < defs.size(); ++i) {
        if (defs[i].name == name) return static_cast<int>(i);
    }
    return -1;
}

namespace {

// Run-time definitions are written under a sequence lock (odd = being written) by the
// reporter. A writer can vanish between its two stores (its worker killed), and during a
// reload the old and the new worker 0 both run a reporter. So a writer claims the lock with
// a compare-and-swap (even s -> s + 1) after stamping `claimed_ms`; a second writer that
// finds it odd does not wait: it skips this write (the control plane sends the same
// definition again next interval) unless the claim is older than kStuckClaimMs, which only
// a dead writer leaves behind: then it takes the lock over (odd o -> o + 2, a value no one
// else holds). Release is a compare-and-swap too, so a writer whose claim was taken over
// never makes the sequence even under the new writer's feet. No definition stays locked
// for ever, and readers never copy a definition while a live writer writes it (a writer
// stopped for more than kStuckClaimMs mid-write, e.g. by SIGSTOP, is the one exception).
constexpr std::uint64_t kStuckClaimMs = 1000;

// The sequence value claimed, or 0 when another live writer holds the lock.
std::uint32_t claim_runtime_def(shm::RuntimeDef& d, std::uint64_t now_ms) {
    std::uint32_t s = d.seq.load(std::memory_order_acquire);
    for (;;) {
        if ((s & 1) == 0) {
            d.claimed_ms.store(now_ms, std::memory_order_relaxed);
            if (d.seq.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) return s + 1;
            continue;
        }
        const std::uint64_t since = d.claimed_ms.load(std::memory_order_relaxed);
        if (now_ms < since + kStuckClaimMs) return 0;
        if (d.seq.compare_exchange_weak(s, s + 2, std::memory_order_acq_rel)) {
            d.claimed_ms.store(now_ms, std::memory_order_relaxed);
            d.takeovers.fetch_add(1, std::memory_order_relaxed);
            return s + 2;
        }
    }
}

void release_runtime_def(shm::RuntimeDef& d, std::uint32_t mine) {
    d.seq.compare_exchange_strong(mine, mine + 1, std::memory_order_release,
                                  std::memory_order_relaxed);
}

// Writes a claimed definition.
void fill_runtime_def(shm::RuntimeDef& d, const std::string& name, const wire::RuntimeMatch& m) {
    std::atomic_thread_fence(std::memory_order_release);
    std::memset(d.name, 0, sizeof(d.name));
    std::memcpy(d.name, name.data(), std::min(name.size(), kMaxNameLen));
    d.caller_len = static_cast<std::uint8_t>(std::min(m.caller.size(), shm::kMaxRuntimeValue));
    std::memcpy(d.caller, m.caller.data(), d.caller_len);
    d.procedure_len =
        static_cast<std::uint8_t>(std::min(m.procedure.size(), shm::kMaxRuntimeValue));
    std::memcpy(d.procedure, m.procedure.data(), d.procedure_len);
    d.caller_kind = static_cast<std::uint8_t>(m.caller_kind);
    d.procedure_kind = static_cast<std::uint8_t>(m.procedure_kind);
    d.scope = static_cast<std::uint8_t>(m.scope);
    d.in_use = 1;
}

wire::RuntimeMatch match_of(const shm::RuntimeDef& d) {
    wire::RuntimeMatch m;
    m.caller.assign(d.caller, d.caller_len);
    m.caller_kind = static_cast<MatchKind>(d.caller_kind);
    m.procedure.assign(d.procedure, d.procedure_len);
    m.procedure_kind = static_cast<MatchKind>(d.procedure_kind);
    m.scope = static_cast<Scope>(d.scope);
    return m;
}

// Finds or creates the run-time definition for `in`; returns its bucket slot, or -1 when
// there is no free definition or another reporter is writing the definitions right now
// (the control plane sends the same entry again next interval).
int runtime_slot_for(const shm::View& shm, const wire::Instruction& in, std::uint64_t now_ms) {
    shm::Header& h = shm.header();
    int free_def = -1;
    for (std::uint32_t i = 0; i < shm::kRuntimeSlots; ++i) {
        shm::RuntimeDef& d = h.runtime[i];
        std::uint32_t before = d.seq.load(std::memory_order_acquire);
        if ((before & 1) != 0) {
            // Locked: another reporter writes it now, or a dead one left it mid-write, its
            // contents possibly torn: wipe it (a live definition comes back next interval).
            const std::uint32_t mine = claim_runtime_def(d, now_ms);
            if (mine == 0) return -1;
            d.in_use = 0;
            release_runtime_def(d, mine);
            h.runtime_gen.fetch_add(1, std::memory_order_release);
            before = d.seq.load(std::memory_order_acquire);
        }
        // Read like a worker does (another reporter may start writing meanwhile).
        const bool in_use = d.in_use != 0;
        const bool same_name = in_use && in.name == d.name;
        const bool same_match = same_name && match_of(d) == in.match;
        std::atomic_thread_fence(std::memory_order_acquire);
        if (d.seq.load(std::memory_order_relaxed) != before) return -1;
        if (!in_use) {
            if (free_def < 0) free_def = static_cast<int>(i);
            continue;
        }
        if (!same_name) continue;
        if (!same_match) {
            const std::uint32_t mine = claim_runtime_def(d, now_ms);
            if (mine == 0) return -1;
            fill_runtime_def(d, in.name, in.match);
            release_runtime_def(d, mine);
            h.runtime_gen.fetch_add(1, std::memory_order_release);
        }
        return static_cast<int>(shm.runtime_slot(i));
    }
    if (free_def < 0) {
        h.runtime_rejected.fetch_add(1, std::memory_order_relaxed);
        return -1;
    }
    auto i = static_cast<std::uint32_t>(free_def);
    shm::RuntimeDef& d = h.runtime[i];
    const std::uint32_t mine = claim_runtime_def(d, now_ms);
    if (mine == 0 || d.in_use) {  // another reporter took this definition first
        if (mine) release_runtime_def(d, mine);
        return -1;
    }
    shm.reset_slot(shm.runtime_slot(i));
    shm::BucketSlot& s = shm.slot(shm.runtime_slot(i));
    std::memcpy(s.name, in.name.data(), std::min(in.name.size(), kMaxNameLen));
    s.in_use = 1;
    fill_runtime_def(d, in.name, in.match);
    release_runtime_def(d, mine);
    h.runtime_gen.fetch_add(1, std::memory_order_release);
    return static_cast<int>(shm.runtime_slot(i));
}

}  // namespace

std::vector<RuntimeBucket> load_runtime(const shm::View& shm, std::uint64_t& gen) {
    shm::Header& h = shm.header();
    std::vector<RuntimeBucket> out;
    gen = h.runtime_gen.load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < shm::kRuntimeSlots; ++i) {
        const shm::RuntimeDef& d = h.runtime[i];
        for (int attempt = 0; attempt < 1000; ++attempt) {
            std::uint32_t before = d.seq.load(std::memory_order_acquire);
            if (before & 1) continue;
            bool in_use = d.in_use;
            RuntimeBucket b;
            if (in_use) {
                b.def.name.assign(d.name, strnlen(d.name, sizeof(d.name)));
                wire::RuntimeMatch m = match_of(d);
                if (!m.caller.empty()) b.def.caller = {m.caller_kind, m.caller};
                if (!m.procedure.empty()) b.def.procedure = {m.procedure_kind, m.procedure};
                b.def.scope = m.scope;
                b.slot = static_cast<std::uint16_t>(shm.runtime_slot(i));
            }
            std::atomic_thread_fence(std::memory_order_acquire);
            if (d.seq.load(std::memory_order_relaxed) != before) continue;
            if (in_use) {
                const shm::BucketSlot& s = shm.slot(b.slot);
                b.def.mode = static_cast<Mode>(s.mode.load(std::memory_order_relaxed));
                b.def.limit_mrps = s.limit_mrps.load(std::memory_order_relaxed);
                out.push_back(std::move(b));
            }
            break;
        }
    }
    return out;
}

std::vector<std::string> expire_runtime(const shm::View& shm, std::uint64_t now_ms) {
    shm::Header& h = shm.header();
    std::vector<std::string> removed;
    for (std::uint32_t i = 0; i < shm::kRuntimeSlots; ++i) {
        shm::RuntimeDef& d = h.runtime[i];
        if (!d.in_use) continue;
        const shm::BucketSlot& s = shm.slot(shm.runtime_slot(i));
        if (now_ms < s.expires_ms.load(std::memory_order_relaxed)) continue;
        const std::uint32_t mine = claim_runtime_def(d, now_ms);
        if (mine == 0) continue;  // another reporter is writing it: next time
        removed.emplace_back(d.name, strnlen(d.name, sizeof(d.name)));
        d.in_use = 0;
        release_runtime_def(d, mine);
        h.runtime_gen.fetch_add(1, std::memory_order_release);
    }
    return removed;
}

std::uint64_t runtime_takeovers(const shm::Header& h) {
    std::uint64_t n = 0;
    for (const shm::RuntimeDef& d : h.runtime) n += d.takeovers.load(std::memory_order_relaxed);
    return n;
}

void build_report(const shm::View& shm, const BucketTable& t, const Identity& id,
                  std::uint64_t interval_ms, std::uint64_t wall_ms, wire::Report& r) {
    shm::Header& h = shm.header();
    r.host = id.host;
    r.zone = id.zone;
    r.region = id.region;
    r.epoch = h.epoch;
    r.seq = h.report_seq.fetch_add(1, std::memory_order_relaxed) + 1;
    r.ts_ms = wall_ms;
    r.interval_ms = interval_ms;
    r.reports_dropped = h.reports_dropped.load(std::memory_order_relaxed);
    r.buckets.clear();
    r.buckets.reserve(t.defs.size());
    for (std::size_t i = 0; i < t.defs.size(); ++i) {
        const BucketDef& d = t.defs[i];
        shm::View::Totals tot = shm.totals(t.slots[i]);
        wire::ReportBucket b;
        b.name = d.name;
        b.scope = d.scope;
        b.mode = d.mode;
        b.limit_mrps = d.limit_mrps;
        b.quota = t.quota(i);
        b.offered = tot.offered;
        b.admitted = tot.admitted;
        b.dropped = tot.dropped;
        b.shadow_dropped = tot.shadow_dropped;
        r.buckets.push_back(std::move(b));
    }
    std::uint64_t gen = 0;
    for (const RuntimeBucket& rb : load_runtime(shm, gen)) {
        if (t.find(rb.def.name) >= 0) continue;  // a configured bucket of that name wins
        shm::View::Totals tot = shm.totals(rb.slot);
        wire::ReportBucket b;
        b.name = rb.def.name;
        b.scope = rb.def.scope;
        b.mode = rb.def.mode;
        b.limit_mrps = rb.def.limit_mrps;
        b.offered = tot.offered;
        b.admitted = tot.admitted;
        b.dropped = tot.dropped;
        b.shadow_dropped = tot.shadow_dropped;
        r.buckets.push_back(std::move(b));
    }
}

void add_key_rates(const shm::View& shm, const BucketTable& t, std::uint64_t now_ms,
                   wire::Report& r, std::uint64_t sent_ms) {
    // build_report lists the configured buckets first, in table order.
    for (std::size_t i = 0; i < t.defs.size() && i < r.buckets.size(); ++i) {
        const KeyedSpec* spec = t.keyed_spec(i);
        if (spec == nullptr) continue;
        wire::ReportBucket& b = r.buckets[i];
        b.keyed = true;
        b.keys.clear();
        const keyed::Table table = shm.key_table(t.slots[i]);
        if (!table.valid()) continue;
        const std::uint64_t last = table.header().reported_ms.exchange(now_ms);
        // The first report after the table was made covers an unknown span: count it as one
        // interval, the best guess (its rates only start the collector's view of the key).
        const std::uint64_t span_ms =
            last != 0 && now_ms > last ? now_ms - last : std::max<std::uint64_t>(r.interval_ms, 1);
        // 1/64 of the limit over the span, in requests; at least one request.
        const std::uint64_t min_offered =
            std::max<std::uint64_t>(1, b.limit_mrps * span_ms / 1000 / 1000 / 64);
        // A quota bucket lists every key with use too (docs/design/009-per-key-quotas.md).
        const QuotaSpec q = t.quota(i);
        if (q && sent_ms != 0 && sent_ms + 2 * r.interval_ms < window_at(q, r.ts_ms).start_ms) {
            table.drop_unlisted();
        }
        const std::vector<keyed::Hitter> hitters =
            q ? table.take_quota_keys(min_offered, spec->report_keys)
              : table.take_hitters(min_offered, spec->report_keys);
        for (const keyed::Hitter& h : hitters) {
            wire::KeyRate k;
            k.hash = h.hash;
            if (!spec->hash_keys) k.text = std::string(h.text);
            k.offered_mrps = h.offered * 1000 * 1000 / span_ms;
            k.dropped_mrps = h.dropped * 1000 * 1000 / span_ms;
            k.hosts = 1;
            k.used = h.used;
            b.keys.push_back(std::move(k));
        }
    }
}

void unlist_key_use(const shm::View& shm, const BucketTable& t, const wire::Report& r) {
    for (std::size_t i = 0; i < t.defs.size() && i < r.buckets.size(); ++i) {
        if (t.keyed_spec(i) == nullptr || !t.quota(i)) continue;
        const keyed::Table table = shm.key_table(t.slots[i]);
        if (!table.valid()) continue;
        for (const wire::KeyRate& k : r.buckets[i].keys) table.unlist(k.hash, k.used);
    }
}

void add_recent(wire::Report& r, const wire::Report& prev, std::uint64_t span_ms) {
    r.recent_ms = 0;
    for (wire::ReportBucket& b : r.buckets) b.has_recent = false;
    if (span_ms == 0 || prev.epoch != r.epoch || prev.seq == 0 || prev.seq >= r.seq) return;
    r.recent_ms = span_ms;
    for (std::size_t i = 0; i < r.buckets.size(); ++i) {
        wire::ReportBucket& b = r.buckets[i];
        // Buckets keep their order between reports; search only when it changed (reload).
        const wire::ReportBucket* p =
            i < prev.buckets.size() && prev.buckets[i].name == b.name ? &prev.buckets[i] : nullptr;
        for (std::size_t k = 0; p == nullptr && k < prev.buckets.size(); ++k) {
            if (prev.buckets[k].name == b.name) p = &prev.buckets[k];
        }
        if (p == nullptr || b.offered < p->offered || b.admitted < p->admitted ||
            b.dropped < p->dropped || b.shadow_dropped < p->shadow_dropped) {
            continue;
        }
        b.has_recent = true;
        b.recent = {b.offered - p->offered, b.admitted - p->admitted, b.dropped - p->dropped,
                    b.shadow_dropped - p->shadow_dropped};
    }
}

std::size_t apply_instructions(const shm::View& shm, const BucketTable& t,
                               const wire::Instructions& m, std::uint64_t now_ms,
                               std::uint64_t ttl_cap_ms) {
    shm::Header& h = shm.header();
    h.instructions_received.fetch_add(1, std::memory_order_relaxed);
    h.plane_last_ms.store(now_ms, std::memory_order_relaxed);
    std::uint64_t ttl = m.ttl_ms < ttl_cap_ms ? m.ttl_ms : ttl_cap_ms;
    std::size_t applied = 0;
    for (const wire::Instruction& in : m.buckets) {
        int i = t.find(in.name);
        int slot = i >= 0 ? t.slots[static_cast<std::size_t>(i)] : -1;
        if (slot < 0 && in.has_match) slot = runtime_slot_for(shm, in, now_ms);
        if (slot < 0) {
            h.instructions_unknown_bucket.fetch_add(1, std::memory_order_relaxed);
            continue;
        }
        shm::BucketSlot& s = shm.slot(static_cast<std::uint32_t>(slot));
        bool held_live = now_ms < s.expires_ms.load(std::memory_order_relaxed);
        if (held_live && m.ts_ms < s.issued_ts_ms.load(std::memory_order_relaxed)) continue;
        // Ratio and mode first, expiry last: a reader that sees the new expiry
        // also sees a ratio at least as new.
        s.threshold.store(ppm_to_threshold(in.ratio_ppm), std::memory_order_relaxed);
        s.mode.store(static_cast<std::uint32_t>(in.mode), std::memory_order_relaxed);
        s.limit_mrps.store(in.limit_mrps, std::memory_order_relaxed);
        s.issued_ts_ms.store(m.ts_ms, std::memory_order_relaxed);
        s.received_ms.store(now_ms, std::memory_order_relaxed);
        std::uint64_t expires = now_ms + ttl;
        // The window's end on the sender's clock (no host clock involved). A used-up quota is
        // rejected until then; the entry then expires and the bucket fails open until the next
        // instruction.
        // (A keyed bucket's quota is each key's: its reset serves the keys that used theirs.)
        const std::uint64_t reset_ms = in.quota ? in.quota_reset_ms : in.key_quota_reset_ms;
        const std::uint64_t to_reset = reset_ms > m.ts_ms ? reset_ms - m.ts_ms : 0;
        if (in.quota && in.quota_used >= in.quota) expires = std::min(expires, now_ms + to_reset);
        s.quota_left.store(in.quota > in.quota_used ? in.quota - in.quota_used : 0,
                           std::memory_order_relaxed);
        s.quota_reset_ms.store(
            in.quota || in.key_quota ? std::max<std::uint64_t>(now_ms + to_reset, 1) : 0,
            std::memory_order_relaxed);
        s.expires_ms.store(expires, std::memory_order_release);
        ++applied;
        // A keyed bucket: each key's ratio goes into the key's entry, when the key is in this
        // host's table (a key not there has no traffic here to drop); ratio 0 clears. A key
        // that used its quota up (ratio 1 with key_quota) is rejected until the window ends at
        // the latest, as a bucket's used-up quota.
        const keyed::Table table = shm.key_table(static_cast<std::uint32_t>(slot));
        if (!in.keyed || !table.valid()) continue;
        for (const wire::KeyRatio& k : in.keys) {
            std::uint64_t until = k.ratio_ppm == 0 ? 0 : now_ms + ttl;
            if (in.key_quota != 0 && k.ratio_ppm == kPpmOne) {
                until = std::min(until, now_ms + to_reset);
            }
            table.set_ratio(k.hash, ppm_to_threshold(k.ratio_ppm), until);
        }
    }
    return applied;
}

std::size_t limited_keys(const wire::Instruction& in) {
    std::size_t n = 0;
    for (const wire::KeyRatio& k : in.keys) n += k.ratio_ppm > 0 ? 1 : 0;
    return n;
}

KeyLimiting key_limiting(bool& limiting, const wire::Instruction& in) {
    const bool now = in.keyed && limited_keys(in) > 0;
    if (now == limiting) return KeyLimiting::Unchanged;
    limiting = now;
    return now ? KeyLimiting::Started : KeyLimiting::Stopped;
}

shm::PlaneState bucket_state(const shm::BucketSlot& s, std::uint64_t now_ms) {
    std::uint64_t exp = s.expires_ms.load(std::memory_order_relaxed);
    if (exp == 0) return shm::PlaneState::Waiting;
    return now_ms < exp ? shm::PlaneState::Active : shm::PlaneState::Expired;
}

BucketView view_bucket(const shm::View& shm, const BucketDef& def, std::uint16_t slot,
                       std::uint64_t now_ms) {
    const shm::BucketSlot& s = shm.slot(slot);
    BucketView v;
    v.def = &def;
    v.runtime = false;
    v.tot = shm.totals(slot);
    v.state = bucket_state(s, now_ms);
    bool active = v.state == shm::PlaneState::Active;
    v.threshold = active ? s.threshold.load(std::memory_order_relaxed) : 0;
    std::uint64_t rec = s.received_ms.load(std::memory_order_relaxed);
    v.age_ms = rec && now_ms > rec ? now_ms - rec : 0;
    v.mode = active ? static_cast<Mode>(s.mode.load(std::memory_order_relaxed)) : def.mode;
    v.limit_mrps = active ? s.limit_mrps.load(std::memory_order_relaxed) : def.limit_mrps;
    v.slot = slot;
    v.keyed = nullptr;
    return v;
}

shm::PlaneState plane_state(const shm::View& shm, std::uint64_t now_ms, std::uint64_t ttl_ms) {
    std::uint64_t last = shm.header().plane_last_ms.load(std::memory_order_relaxed);
    if (last == 0) return shm::PlaneState::Waiting;
    return now_ms < last + ttl_ms ? shm::PlaneState::Active : shm::PlaneState::Expired;
}

namespace {

// Names are restricted to [A-Za-z0-9_.:-] (valid_name), so they need no
// escaping in JSON strings or Prometheus label values.
void append(std::string& out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void append(std::string& out, const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n > 0) out.append(buf, static_cast<std::size_t>(n) < sizeof(buf) ? n : sizeof(buf) - 1);
}

std::string ratio_str(std::uint64_t threshold) {
    char buf[32];
    std::uint32_t ppm = threshold_to_ppm(threshold);
    std::snprintf(buf, sizeof(buf), "%u.%06u", ppm / kPpmOne, ppm % kPpmOne);
    return buf;
}

BucketView view_of(const StatusInput& in, const BucketDef& def, std::uint16_t slot, bool runtime) {
    BucketView v = view_bucket(*in.shm, def, slot, in.now_ms);
    v.runtime = runtime;
    return v;
}

// Configured buckets, then run-time ones (whose definitions `rt` must outlive the views).
std::vector<BucketView> all_views(const StatusInput& in, std::vector<RuntimeBucket>& rt) {
    std::vector<BucketView> views;
    for (std::size_t i = 0; i < in.table->defs.size(); ++i) {
        views.push_back(view_of(in, in.table->defs[i], in.table->slots[i], false));
        views.back().keyed = in.table->keyed_spec(i);
        views.back().key_quota = views.back().keyed != nullptr && in.table->quota(i);
    }
    std::uint64_t gen = 0;
    rt = load_runtime(*in.shm, gen);
    for (const RuntimeBucket& b : rt) {
        if (in.table->find(b.def.name) < 0) views.push_back(view_of(in, b.def, b.slot, true));
    }
    return views;
}

std::uint64_t missing_caller(const shm::View& shm) {
    std::uint64_t n = 0;
    for (const auto& w : shm.header().worker) n += w.missing_caller.load(std::memory_order_relaxed);
    return n;
}

std::uint64_t cost_invalid(const shm::View& shm) {
    std::uint64_t n = 0;
    for (const auto& w : shm.header().worker) n += w.cost_invalid.load(std::memory_order_relaxed);
    return n;
}

std::uint64_t regex_limit_hits(const shm::View& shm) {
    std::uint64_t n = 0;
    for (const auto& w : shm.header().worker) {
        n += w.regex_limit_hits.load(std::memory_order_relaxed);
    }
    return n;
}

// A key's text as a JSON string: keys are whatever clients send.
void append_json_string(std::string& out, std::string_view v) {
    out += '"';
    for (unsigned char c : v) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20 || c >= 0x7f) {
            append(out, "\\u%04x", c);  // a byte outside printable ASCII, shown as its value
        } else {
            out += static_cast<char>(c);
        }
    }
    out += '"';
}

// Keys shown per keyed bucket on the status page: the busiest since their entry was claimed.
constexpr std::size_t kStatusTopKeys = 10;

struct KeyRow {
    std::uint32_t i;
    std::uint64_t offered;
};

// ,"keyed":{...}: the bucket's key table and its busiest keys, each with its counts since its
// entry was claimed, its rate since the last report and the control plane's ratio for it.
void render_keyed_json(const StatusInput& in, const BucketView& v, std::string& out) {
    const keyed::Table t = in.shm->key_table(v.slot);
    if (!t.valid()) {
        out += ",\"keyed\":null";
        return;
    }
    const keyed::TableHeader& h = t.header();
    std::vector<KeyRow> rows;
    std::uint64_t in_use = 0;
    for (std::uint32_t i = 0; i < t.capacity(); ++i) {
        const std::uint64_t hash = t.entry(i).hash.load(std::memory_order_acquire);
        if (hash == keyed::kFree || hash == keyed::kClaiming) continue;
        ++in_use;
        rows.push_back({i, t.entry(i).offered.load(std::memory_order_relaxed)});
    }
    const std::size_t top = std::min(rows.size(), kStatusTopKeys);
    std::partial_sort(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(top), rows.end(),
                      [](const KeyRow& a, const KeyRow& b) { return a.offered > b.offered; });
    const std::uint64_t reported_ms = h.reported_ms.load(std::memory_order_relaxed);
    out += ",\"keyed\":{\"key\":";
    append_json_string(out, v.keyed->key);
    append(out,
           ",\"capacity\":%u,\"in_use\":%llu,\"claims\":%llu,\"evictions\":%llu,"
           "\"races\":%llu,\"report_keys\":%u,\"hash_keys\":%s",
           t.capacity(), static_cast<unsigned long long>(in_use),
           static_cast<unsigned long long>(h.claims.load()),
           static_cast<unsigned long long>(h.evictions.load()),
           static_cast<unsigned long long>(h.races.load()), v.keyed->report_keys,
           v.keyed->hash_keys ? "true" : "false");
    // A quota bucket's use lost with evicted keys before a report listed it.
    if (v.key_quota) {
        append(out, ",\"quota_units_lost\":%llu",
               static_cast<unsigned long long>(h.quota_units_lost.load()));
    }
    out += ",\"top\":[";
    for (std::size_t k = 0; k < top; ++k) {
        const keyed::Entry& e = t.entry(rows[k].i);
        const std::uint64_t offered = e.offered.load(std::memory_order_relaxed);
        const std::uint64_t expires = e.expires_ms.load(std::memory_order_relaxed);
        const bool active = expires > in.now_ms;
        if (k) out += ',';
        append(out, "{\"hash\":\"%016llx\",\"key\":",
               static_cast<unsigned long long>(e.hash.load(std::memory_order_relaxed)));
        if (v.keyed->hash_keys) {
            out += "null";  // hash_keys=on: keys are not shown, here either
        } else {
            append_json_string(out, t.text_of(rows[k].i));
        }
        append(out, ",\"offered\":%llu,\"dropped\":%llu,\"rate_rps\":",
               static_cast<unsigned long long>(offered),
               static_cast<unsigned long long>(e.dropped.load(std::memory_order_relaxed)));
        // Since the reporter's last look (none without a collector: no rate known).
        if (reported_ms != 0 && in.now_ms > reported_ms) {
            const std::uint64_t since =
                (offered - e.reported.load(std::memory_order_relaxed)) & 0xffffffffULL;
            append(
                out, "%.3f",
                static_cast<double>(since) * 1000.0 / static_cast<double>(in.now_ms - reported_ms));
        } else {
            out += "null";
        }
        append(out, ",\"ratio\":%s,\"ratio_state\":\"%s\"}",
               ratio_str(active ? e.threshold.load(std::memory_order_relaxed) : 0).c_str(),
               expires == 0 ? "waiting"
               : active     ? "active"
                            : "expired");
    }
    out += "]}";
}

}  // namespace

std::string render_status_json(const StatusInput& in) {
    const shm::Header& h = in.shm->header();
    std::uint64_t last = h.plane_last_ms.load(std::memory_order_relaxed);
    std::string out;
    out.reserve(512 + in.table->defs.size() * 400);
    append(out, "{\"version\":1,\"host\":\"%s\",\"zone\":\"%s\",\"region\":\"%s\",",
           in.id.host.c_str(), in.id.zone.c_str(), in.id.region.c_str());
    append(out, "\"shared_zone\":\"%s\",\"epoch\":\"%016llx\",", in.shm_name.c_str(),
           static_cast<unsigned long long>(h.epoch));
    append(out,
           "\"control_plane\":{\"state\":\"%s\",\"reporting\":%s,\"last_instruction_age_ms\":%s,"
           "\"reports_sent\":%llu,\"reports_dropped\":%llu,\"instructions_received\":%llu,"
           "\"instructions_malformed\":%llu,\"instructions_unknown_bucket\":%llu,"
           "\"curve\":%s,\"curve_handshakes_ok\":%llu,\"curve_handshakes_failed\":%llu},",
           std::string(to_string(plane_state(*in.shm, in.now_ms, in.ttl_ms))).c_str(),
           in.reporting ? "true" : "false",
           // null until the first instruction: an age that does not exist yet is no number
           last ? std::to_string(in.now_ms > last ? in.now_ms - last : 0).c_str() : "null",
           static_cast<unsigned long long>(h.reports_sent.load()),
           static_cast<unsigned long long>(h.reports_dropped.load()),
           static_cast<unsigned long long>(h.instructions_received.load()),
           static_cast<unsigned long long>(h.instructions_malformed.load()),
           static_cast<unsigned long long>(h.instructions_unknown_bucket.load()),
           in.curve ? "true" : "false",
           static_cast<unsigned long long>(h.curve_handshakes_ok.load()),
           static_cast<unsigned long long>(h.curve_handshakes_failed.load()));
    append(out,
           "\"missing_caller\":%llu,\"zone_capacity\":%u,\"runtime_rejected\":%llu,"
           "\"runtime_takeovers\":%llu,\"regex_limit_hits\":%llu,\"worker_registry_full\":%llu,"
           "\"surge_tightened\":%llu,\"surge_eased\":%llu,\"cost_invalid\":%llu,\"buckets\":[",
           static_cast<unsigned long long>(missing_caller(*in.shm)),
           h.capacity > shm::kRuntimeSlots ? h.capacity - shm::kRuntimeSlots : 0,
           static_cast<unsigned long long>(h.runtime_rejected.load()),
           static_cast<unsigned long long>(runtime_takeovers(h)),
           static_cast<unsigned long long>(regex_limit_hits(*in.shm)),
           static_cast<unsigned long long>(h.worker_regs_full.load()),
           static_cast<unsigned long long>(h.surge_tightened.load()),
           static_cast<unsigned long long>(h.surge_eased.load()),
           static_cast<unsigned long long>(cost_invalid(*in.shm)));
    std::vector<RuntimeBucket> rt;
    std::vector<BucketView> views = all_views(in, rt);
    for (std::size_t i = 0; i < views.size(); ++i) {
        const BucketView& v = views[i];
        if (i) out += ',';
        append(out,
               "{\"name\":\"%s\",\"runtime\":%s,\"scope\":\"%s\",\"mode\":\"%s\","
               "\"configured_mode\":\"%s\",\"limit_rps\":%.3f,\"configured_limit_rps\":%.3f,",
               v.def->name.c_str(), v.runtime ? "true" : "false",
               std::string(to_string(v.def->scope)).c_str(), std::string(to_string(v.mode)).c_str(),
               std::string(to_string(v.def->mode)).c_str(),
               static_cast<double>(v.limit_mrps) / 1000.0,
               static_cast<double>(v.def->limit_mrps) / 1000.0);
        append(out,
               "\"offered\":%llu,\"admitted\":%llu,\"dropped\":%llu,\"shadow_dropped\":%llu,"
               "\"ratio\":%s,\"ratio_state\":\"%s\",\"ratio_age_ms\":%llu",
               static_cast<unsigned long long>(v.tot.offered),
               static_cast<unsigned long long>(v.tot.admitted),
               static_cast<unsigned long long>(v.tot.dropped),
               static_cast<unsigned long long>(v.tot.shadow_dropped),
               ratio_str(v.threshold).c_str(), std::string(to_string(v.state)).c_str(),
               static_cast<unsigned long long>(v.age_ms));
        if (v.keyed) render_keyed_json(in, v, out);
        out += '}';
    }
    out += "]}\n";
    return out;
}

namespace {

void family(std::string& out, const char* name, const char* type, const char* help) {
    append(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

// Per bucket: its counters, ratio, limit and instruction.
void prometheus_buckets(const std::vector<BucketView>& views, std::string& out) {
    struct Counter {
        const char* name;
        const char* help;
        std::uint64_t shm::View::Totals::*field;
    };
    const Counter counters[] = {
        {"grl_bucket_offered_total", "Requests that matched the bucket.",
         &shm::View::Totals::offered},
        {"grl_bucket_admitted_total", "Matched requests that were passed.",
         &shm::View::Totals::admitted},
        {"grl_bucket_dropped_total", "Matched requests that were rejected.",
         &shm::View::Totals::dropped},
        {"grl_bucket_shadow_dropped_total", "Matched requests a shadow bucket would have dropped.",
         &shm::View::Totals::shadow_dropped},
    };
    for (const Counter& c : counters) {
        family(out, c.name, "counter", c.help);
        for (const BucketView& v : views) {
            append(out, "%s{bucket=\"%s\",scope=\"%s\",mode=\"%s\"} %llu\n", c.name,
                   v.def->name.c_str(), std::string(to_string(v.def->scope)).c_str(),
                   std::string(to_string(v.mode)).c_str(),
                   static_cast<unsigned long long>(v.tot.*c.field));
        }
    }
    family(out, "grl_bucket_ratio", "gauge",
           "Drop ratio currently applied (0 when none or expired).");
    for (const BucketView& v : views) {
        append(out, "grl_bucket_ratio{bucket=\"%s\"} %s\n", v.def->name.c_str(),
               ratio_str(v.threshold).c_str());
    }
    family(out, "grl_bucket_limit_rps", "gauge", "Effective limit in requests per second.");
    for (const BucketView& v : views) {
        append(out, "grl_bucket_limit_rps{bucket=\"%s\"} %.3f\n", v.def->name.c_str(),
               static_cast<double>(v.limit_mrps) / 1000.0);
    }
    family(out, "grl_bucket_ratio_age_seconds", "gauge", "Age of the bucket's last instruction.");
    for (const BucketView& v : views) {
        append(out, "grl_bucket_ratio_age_seconds{bucket=\"%s\"} %.3f\n", v.def->name.c_str(),
               static_cast<double>(v.age_ms) / 1000.0);
    }
    family(out, "grl_bucket_ratio_active", "gauge",
           "1 if the bucket holds an unexpired instruction.");
    for (const BucketView& v : views) {
        append(out, "grl_bucket_ratio_active{bucket=\"%s\"} %d\n", v.def->name.c_str(),
               v.state == shm::PlaneState::Active ? 1 : 0);
    }
}

// Keyed buckets: their key tables, per bucket (never per key: docs/per-key.md).
void prometheus_key_tables(const StatusInput& in, const std::vector<BucketView>& views,
                           std::string& out) {
    const struct {
        const char* name;
        const char* type;
        const char* help;
        int what;
    } key_families[] = {
        {"grl_bucket_key_capacity", "gauge", "Entries of a keyed bucket's key table (keys=).", 0},
        {"grl_bucket_key_claims_total", "counter",
         "Keys that took an entry of the bucket's key table (new, or evicting another).", 1},
        {"grl_bucket_key_evictions_total", "counter",
         "Keys pushed out of the bucket's key table by a newer key (least recently used first).",
         2},
        {"grl_bucket_key_races_total", "counter",
         "Claims of a key table entry lost to another worker (then retried).", 3},
    };
    for (const auto& f : key_families) {
        bool any = false;
        for (const BucketView& v : views) {
            const keyed::Table t = v.keyed ? in.shm->key_table(v.slot) : keyed::Table();
            if (!t.valid()) continue;
            if (!any) family(out, f.name, f.type, f.help);
            any = true;
            const keyed::TableHeader& h = t.header();
            const std::uint64_t value = f.what == 0   ? t.capacity()
                                        : f.what == 1 ? h.claims.load()
                                        : f.what == 2 ? h.evictions.load()
                                                      : h.races.load();
            append(out, "%s{bucket=\"%s\"} %llu\n", f.name, v.def->name.c_str(),
                   static_cast<unsigned long long>(value));
        }
    }
}

// The control plane as this host sees it: its state and the age of its last instruction.
void prometheus_plane(const StatusInput& in, std::string& out) {
    shm::PlaneState ps = plane_state(*in.shm, in.now_ms, in.ttl_ms);
    family(out, "grl_control_plane_state", "gauge", "1 for the current control-plane state.");
    for (shm::PlaneState s :
         {shm::PlaneState::Waiting, shm::PlaneState::Active, shm::PlaneState::Expired}) {
        append(out, "grl_control_plane_state{state=\"%s\"} %d\n", std::string(to_string(s)).c_str(),
               s == ps ? 1 : 0);
    }
    std::uint64_t last = in.shm->header().plane_last_ms.load(std::memory_order_relaxed);
    family(out, "grl_last_instruction_age_seconds", "gauge",
           "Time since the last valid instruction message (no sample before the first: "
           "grl_control_plane_state{state=\"waiting\"}).");
    if (last) {
        append(out, "grl_last_instruction_age_seconds %.3f\n",
               static_cast<double>(in.now_ms > last ? in.now_ms - last : 0) / 1000.0);
    }
}

// The host's own counters, one family each.
void prometheus_totals(const StatusInput& in, std::string& out) {
    const shm::Header& h = in.shm->header();
    const struct {
        const char* name;
        const char* help;
        std::uint64_t value;
    } totals[] = {
        {"grl_reports_sent_total", "Reports sent to the collector.", h.reports_sent.load()},
        {"grl_reports_dropped_total", "Reports dropped (collector unreachable or slow).",
         h.reports_dropped.load()},
        {"grl_instructions_received_total", "Valid instruction messages received.",
         h.instructions_received.load()},
        {"grl_instructions_malformed_total", "Instruction messages rejected as malformed.",
         h.instructions_malformed.load()},
        {"grl_instructions_unknown_bucket_total", "Instruction entries for unknown buckets.",
         h.instructions_unknown_bucket.load()},
        {"grl_missing_caller_total", "Requests without a caller (grl_missing_caller).",
         missing_caller(*in.shm)},
        {"grl_cost_invalid_total",
         "Requests whose cost= or cost_after= value was not a number (counted as 1 and 0).",
         cost_invalid(*in.shm)},
        {"grl_regex_limit_hits_total",
         "Regex matches stopped at the match limit (counted as no match).",
         regex_limit_hits(*in.shm)},
        {"grl_runtime_rejected_total", "Run-time bucket definitions that found no free slot.",
         h.runtime_rejected.load()},
        {"grl_runtime_takeovers_total",
         "Run-time definitions left locked by a dead writer and taken over.", runtime_takeovers(h)},
        {"grl_surge_tightened_total",
         "Times a bucket's surge damper held this host at its share of the limit (offered well "
         "above the control plane's basis).",
         h.surge_tightened.load()},
        {"grl_surge_eased_total",
         "Times a bucket's surge damper eased drops to this host's share (offered well below "
         "the basis).",
         h.surge_eased.load()},
        {"grl_worker_registry_full_total",
         "Workers that found the shm's worker registry full (their slots are protected for one "
         "reload only).",
         h.worker_regs_full.load()},
    };
    for (const auto& t : totals) {
        family(out, t.name, "counter", t.help);
        append(out, "%s %llu\n", t.name, static_cast<unsigned long long>(t.value));
    }
    // The daemons' name and labels for the client side of CURVE (daemon/src/curve.cpp), so
    // that one alert covers nginx -> collector and collector -> controller alike.
    family(out, "grl_curve_client_handshakes_total", "counter",
           "CURVE handshakes of this host's connections to its collector (grl_curve_keypair), by "
           "result.");
    append(out, "grl_curve_client_handshakes_total{peer=\"collector\",result=\"ok\"} %llu\n",
           static_cast<unsigned long long>(h.curve_handshakes_ok.load()));
    append(out, "grl_curve_client_handshakes_total{peer=\"collector\",result=\"failed\"} %llu\n",
           static_cast<unsigned long long>(h.curve_handshakes_failed.load()));
}

}  // namespace

std::string render_status_prometheus(const StatusInput& in) {
    std::string out;
    out.reserve(1024 + in.table->defs.size() * 900);
    family(out, "grl_build_info", "gauge", "The grl version this process runs (always 1).");
    append(out, "grl_build_info{version=\"%s\",component=\"nginx\"} 1\n", GRL_VERSION);
    std::vector<RuntimeBucket> rt;
    const std::vector<BucketView> views = all_views(in, rt);
    prometheus_buckets(views, out);
    prometheus_key_tables(in, views, out);
    prometheus_plane(in, out);
    prometheus_totals(in, out);
    return out;
}

}  // namespace grl
