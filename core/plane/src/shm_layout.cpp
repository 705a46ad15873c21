#include "grl/plane/shm_layout.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace grl::shm {

std::string_view to_string(PlaneState s) {
    switch (s) {
        case PlaneState::Waiting: return "waiting";
        case PlaneState::Active: return "active";
        case PlaneState::Expired: return "expired";
    }
    return "?";
}

std::size_t bytes_for(std::uint32_t capacity) {
    return sizeof(Header) + capacity * (sizeof(BucketSlot) + kWorkerSlots * sizeof(WorkerCounters));
}

std::uint32_t capacity_for(std::size_t bytes) {
    if (bytes <= sizeof(Header)) return 0;
    std::size_t per = sizeof(BucketSlot) + kWorkerSlots * sizeof(WorkerCounters);
    std::size_t n = (bytes - sizeof(Header)) / per;
    return n > 65535 ? 65535 : static_cast<std::uint32_t>(n);
}

void View::format(std::uint32_t capacity, std::uint64_t epoch) {
    std::memset(base_, 0, bytes_for(capacity));
    // Zeroed memory is a valid representation of std::atomic<uint64_t> on every
    // platform we build for; placement-new makes the lifetime explicit.
    Header* h = new (base_) Header();
    h->magic = kMagic;
    h->layout_version = kLayoutVersion;
    h->capacity = capacity;
    h->worker_slots = kWorkerSlots;
    h->epoch = epoch;
    for (std::uint32_t i = 0; i < capacity; ++i) new (&slot(i)) BucketSlot();
    for (std::uint32_t b = 0; b < capacity; ++b) {
        for (std::uint32_t w = 0; w < kWorkerSlots; ++w) new (&counters(b, w)) WorkerCounters();
    }
}

std::string View::check_compatible() const {
    const Header& h = header();
    if (h.magic != kMagic) return "not grl's shared memory (bad magic)";
    if (h.layout_version != kLayoutVersion) {
        return "layout version " + std::to_string(h.layout_version) + ", this module uses " +
               std::to_string(kLayoutVersion);
    }
    if (h.worker_slots != kWorkerSlots) return "a different number of worker slots";
    return {};
}

bool View::register_worker(std::uint32_t pid, std::uint64_t gen, PidAlive alive) const {
    Header& h = header();
    // Our own entry first (a single-process nginx re-registering), then a free one, then one
    // left by a process that died without exiting (SIGKILL).
    for (int pass = 0; pass < 3; ++pass) {
        for (WorkerReg& w : h.workers) {
            std::uint32_t held = w.pid.load(std::memory_order_acquire);
            bool take = pass == 0   ? held == pid
                        : pass == 1 ? held == 0
                                    : held != 0 && alive != nullptr && !alive(held);
            if (!take) continue;
            // Owned first, then stamped: a reader between the two sees a free entry's 0 or a
            // dead one's older generation, which only protects more.
            if (held == pid ||
                w.pid.compare_exchange_strong(held, pid, std::memory_order_acq_rel)) {
                w.gen.store(gen, std::memory_order_release);
                return true;
            }
        }
    }
    h.worker_regs_full.fetch_add(1, std::memory_order_relaxed);
    return false;
}

void View::unregister_worker(std::uint32_t pid) const {
    for (WorkerReg& w : header().workers) {
        std::uint32_t held = pid;
        if (w.pid.compare_exchange_strong(held, 0, std::memory_order_acq_rel)) return;
    }
}

std::uint64_t View::oldest_running_gen(PidAlive alive) const {
    std::uint64_t oldest = UINT64_MAX;
    for (const WorkerReg& w : header().workers) {
        std::uint32_t pid = w.pid.load(std::memory_order_acquire);
        if (pid == 0 || (alive != nullptr && !alive(pid))) continue;
        oldest = std::min(oldest, w.gen.load(std::memory_order_acquire));
    }
    return oldest;
}

std::string View::assign(const std::vector<std::string>& names, std::vector<std::uint16_t>& slots,
                         std::uint64_t& gen, PidAlive alive) {
    Header& h = header();
    gen = ++h.config_gen;
    // Generations older than both the one replaced last and the oldest a live worker serves
    // have nobody left to count into their slots.
    const std::uint64_t keep_from =
        std::min(h.previous_gen.load(std::memory_order_relaxed), oldest_running_gen(alive));
    slots.assign(names.size(), 0);
    std::vector<bool> placed(names.size(), false);

    const std::uint32_t configurable = h.capacity > kRuntimeSlots ? h.capacity - kRuntimeSlots : 0;
    // Keep the slots of buckets that exist already.
    for (std::uint32_t i = 0; i < configurable; ++i) {
        BucketSlot& s = slot(i);
        if (!s.in_use) continue;
        for (std::size_t n = 0; n < names.size(); ++n) {
            if (!placed[n] && names[n] == s.name) {
                s.config_gen = gen;
                slots[n] = static_cast<std::uint16_t>(i);
                placed[n] = true;
                break;
            }
        }
    }
    // Free slots that neither the running nor the previous configuration uses
    // (a configuration that never ran — a failed reload — protects nothing).
    for (std::uint32_t i = 0; i < configurable; ++i) {
        BucketSlot& s = slot(i);
        if (s.in_use && s.config_gen < keep_from) reset_slot(i);
    }
    // Place new buckets in free slots.
    std::uint32_t next = 0;
    for (std::size_t n = 0; n < names.size(); ++n) {
        if (placed[n]) continue;
        while (next < configurable && slot(next).in_use) ++next;
        if (next == configurable) {
            return "too small: no free slot for bucket \"" + names[n] + "\" (room for " +
                   std::to_string(configurable) +
                   " configured buckets, counting those of the previous configuration)";
        }
        BucketSlot& s = slot(next);
        std::memset(s.name, 0, sizeof(s.name));
        std::memcpy(s.name, names[n].data(), std::min(names[n].size(), kMaxNameLen));
        s.in_use = 1;
        s.config_gen = gen;
        slots[n] = static_cast<std::uint16_t>(next);
        placed[n] = true;
    }
    return {};
}

void View::activate(std::uint64_t gen) const {
    Header& h = header();
    std::uint64_t active = h.active_gen.load(std::memory_order_relaxed);
    if (active == gen) return;
    h.previous_gen.store(active, std::memory_order_relaxed);
    h.active_gen.store(gen, std::memory_order_relaxed);
}

void View::reset_slot(std::uint32_t i) const {
    BucketSlot& s = slot(i);
    s.~BucketSlot();
    new (&s) BucketSlot();
    for (std::uint32_t w = 0; w < kWorkerSlots; ++w) {
        WorkerCounters& c = counters(i, w);
        c.offered = 0;
        c.dropped = 0;
        c.shadow_dropped = 0;
    }
}

View::Totals View::totals(std::uint32_t bucket) const {
    Totals t;
    for (std::uint32_t w = 0; w < kWorkerSlots; ++w) {
        const WorkerCounters& c = counters(bucket, w);
        // `offered` is incremented before `dropped`, so reading `dropped`
        // first keeps offered >= dropped in every snapshot.
        t.dropped += c.dropped.load(std::memory_order_acquire);
        t.shadow_dropped += c.shadow_dropped.load(std::memory_order_relaxed);
        t.offered += c.offered.load(std::memory_order_acquire);
    }
    t.admitted = t.offered - t.dropped;
    return t;
}

std::uint64_t View::offered(std::uint32_t bucket) const {
    std::uint64_t n = 0;
    for (std::uint32_t w = 0; w < kWorkerSlots; ++w) {
        n += counters(bucket, w).offered.load(std::memory_order_relaxed);
    }
    return n;
}

}  // namespace grl::shm
