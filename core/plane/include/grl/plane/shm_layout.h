// The layout of the module's shared memory, the shm (declared by `grl_zone`, nginx's
// ngx_shm_zone_t): plain integers only (no pointers, no floats), so the shm is valid in every
// worker and survives `nginx -s reload`. In code it is `shm` (namespace grl::shm,
// MainConf::shm_base); a bare "zone" is the fleet's availability zone, the one a collector
// serves (docs/design.md "Words").
//
//   [Header][BucketSlot x capacity][WorkerCounters x capacity x kWorkerSlots]
//
// Counters: each worker adds to its own cache line (slot = worker % kWorkerSlots)
// with a relaxed atomic add, so workers never contend and old and new workers
// sharing a slot during a reload lose nothing.
// Instructions: written by the one reporter process, read by every worker;
// each field is an independent atomic, written ratio first and expiry last.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grl/common/bucket_types.h"
#include "grl/plane/keyed.h"
#include "grl/wire/wire.h"

namespace grl::shm {

inline constexpr std::uint64_t kMagic = 0x31656e6f7a6c7267ULL;  // "grlzone1"
inline constexpr std::uint32_t kLayoutVersion = 5;              // 4: key tables; 5: KeyText::listed
inline constexpr std::uint32_t kWorkerSlots = 32;
inline constexpr std::uint64_t kThresholdOne = 1ULL << 32;  // ratio 1.0
// The last kRuntimeSlots bucket slots are reserved for run-time (emergency)
// buckets defined by the control plane; configuration never assigns them.
inline constexpr std::uint32_t kRuntimeSlots = wire::kMaxRuntimeBuckets;
inline constexpr std::size_t kMaxRuntimeValue = 127;

struct alignas(64) WorkerCounters {
    std::atomic<std::uint64_t> offered;
    std::atomic<std::uint64_t> dropped;
    std::atomic<std::uint64_t> shadow_dropped;
};

// Per-worker request statistics that belong to no bucket.
struct alignas(64) WorkerStats {
    std::atomic<std::uint64_t> missing_caller;
    std::atomic<std::uint64_t> regex_limit_hits;  // matches stopped by kRegexMatchLimit
    // After the fields above, in what was padding (the layout of older zones is unchanged):
    std::atomic<std::uint64_t> cost_invalid;  // cost=/cost_after= values not a number (cost.h)
};
static_assert(sizeof(WorkerStats) == 64, "WorkerStats grew: bump kLayoutVersion");

// Definition of a run-time bucket. Written only by the reporter, under a
// sequence lock (odd `seq` = being written; claimed and released by
// compare-and-swap, taken over from a writer dead for kStuckClaimMs: see
// core/plane/src/plane.cpp); workers copy it out when the header's runtime_gen changes.
struct alignas(64) RuntimeDef {
    std::atomic<std::uint32_t> seq;
    std::uint8_t in_use;
    std::uint8_t caller_kind;     // MatchKind
    std::uint8_t procedure_kind;  // MatchKind
    std::uint8_t scope;           // Scope
    std::uint8_t caller_len;
    std::uint8_t procedure_len;
    char name[kMaxNameLen + 1];
    char caller[kMaxRuntimeValue + 1];
    char procedure[kMaxRuntimeValue + 1];
    // After the fields above, in what was padding (the layout of an older shm is unchanged):
    std::atomic<std::uint64_t> claimed_ms;  // monotonic ms of the last claim of `seq`
    std::atomic<std::uint64_t> takeovers;   // claims taken over from a dead writer
};
static_assert(sizeof(RuntimeDef) == 384, "RuntimeDef grew: bump kLayoutVersion");

// Which configuration generation each running worker process serves, so that a reload frees
// the slot of a removed bucket only once no worker that may still count into it runs (an old
// worker finishing long requests can outlive several reloads). A worker takes an entry at
// start and gives it back at exit; one killed leaves a dead pid behind, which the master
// recognises (and a later worker reuses).
inline constexpr std::uint32_t kWorkerRegs = 256;
struct WorkerReg {
    std::atomic<std::uint32_t> pid;  // 0: free
    std::uint32_t reserved;
    std::atomic<std::uint64_t> gen;
};
// Whether a process still runs (the module passes kill(pid, 0); tests pass a fake).
using PidAlive = bool (*)(std::uint32_t pid);

// Control-plane state as shown in status output and logged on change.
enum class PlaneState : std::uint32_t { Waiting = 0, Active = 1, Expired = 2 };
std::string_view to_string(PlaneState s);

struct alignas(64) BucketSlot {
    // Identity: written by the master at configuration time only.
    char name[kMaxNameLen + 1];
    std::uint32_t in_use;
    std::uint64_t config_gen;  // last configuration generation that had this bucket
    // Instruction: written by the reporter, read by all workers.
    std::atomic<std::uint64_t> threshold;   // drop if rand32 < threshold
    std::atomic<std::uint64_t> expires_ms;  // monotonic ms; 0 = never had one
    std::atomic<std::uint64_t> received_ms;
    std::atomic<std::uint64_t> issued_ts_ms;  // sender wall clock, for "freshest wins"
    std::atomic<std::uint64_t> limit_mrps;    // effective limit from the control plane
    std::atomic<std::uint32_t> mode;          // effective Mode from the control plane
    std::atomic<std::uint32_t> state;         // PlaneState last logged for this bucket
    // A keyed bucket's key table (keyed.h, docs/per-key.md): where it lies in the shared
    // memory, as an offset from the shm's Header (0: none), and what it was made for (a hash
    // of the key's definition and keys=), so that a reload keeping both keeps the table.
    // Written by the master at configuration time; read per request by the workers.
    std::atomic<std::int64_t> key_table;
    std::uint64_t key_sig;
    // A quota bucket's last instruction (docs/design/008-quotas.md): monotonic ms when its
    // window ends (0: no quota in it) and the quota left then. A used-up quota's instruction
    // expires at quota_reset_ms. Read for the RateLimit header field only; both fit the
    // slot's padding, so the layout's size is unchanged.
    std::atomic<std::uint64_t> quota_reset_ms;
    std::atomic<std::uint64_t> quota_left;
};
static_assert(sizeof(BucketSlot) == 192, "BucketSlot grew: bump kLayoutVersion");

struct alignas(64) Header {
    std::uint64_t magic;
    std::uint32_t layout_version;
    std::uint32_t capacity;  // bucket slots
    std::uint32_t worker_slots;
    std::uint32_t reserved;
    std::uint64_t epoch;                      // random id of this shm's counters
    std::uint64_t config_gen;                 // incremented at every configuration load
    std::atomic<std::uint64_t> active_gen;    // configuration whose workers run now
    std::atomic<std::uint64_t> previous_gen;  // the one they replaced
    std::atomic<std::uint64_t> report_seq;
    std::atomic<std::uint64_t> reports_sent;
    std::atomic<std::uint64_t> reports_dropped;
    std::atomic<std::uint64_t> instructions_received;
    std::atomic<std::uint64_t> instructions_malformed;
    std::atomic<std::uint64_t> instructions_unknown_bucket;
    std::atomic<std::uint64_t> plane_last_ms;  // monotonic ms of the last valid instruction msg
    std::atomic<std::uint32_t> plane_state;    // PlaneState last logged
    std::atomic<std::uint32_t> reporter_pid;
    std::atomic<std::uint64_t> runtime_gen;              // bumped on every run-time bucket change
    std::atomic<std::uint64_t> runtime_rejected;         // definitions that found no free slot
    std::atomic<std::uint64_t> curve_handshakes_ok;      // with the collector (grl_curve_*)
    std::atomic<std::uint64_t> curve_handshakes_failed;  // refused or failed
    WorkerStats worker[kWorkerSlots];
    RuntimeDef runtime[kRuntimeSlots];  // runtime[i] uses bucket slot capacity - kRuntimeSlots + i
    std::atomic<std::uint64_t> worker_regs_full;  // workers that found no free entry
    WorkerReg workers[kWorkerRegs];
    // Surge damping (docs/design.md): times a bucket's damper tightened (offered well above
    // the control plane's basis) or eased (well below it) on this host.
    std::atomic<std::uint64_t> surge_tightened;
    std::atomic<std::uint64_t> surge_eased;
};

// Bytes needed for an shm of `capacity` buckets (not counting allocator overhead).
std::size_t bytes_for(std::uint32_t capacity);
// Largest capacity that fits in `bytes` (including the kRuntimeSlots reserved slots;
// an shm with capacity <= kRuntimeSlots is unusable).
std::uint32_t capacity_for(std::size_t bytes);

// A typed view over the raw memory of an shm.
class View {
  public:
    View() = default;
    explicit View(void* base) : base_(static_cast<char*>(base)) {}

    // Formats fresh memory (zeroes it; the caller supplies the epoch).
    void format(std::uint32_t capacity, std::uint64_t epoch);
    // Empty when the memory holds an shm this code can adopt, else why not.
    std::string check_compatible() const;

    // Assigns slots to the named buckets of a new configuration and returns
    // its generation in `gen`: an existing slot of the same name keeps its
    // counters and ratio; a new name takes a free slot. A slot is freed only
    // when neither the running configuration nor the one before it, nor any
    // registered worker that `alive` says still runs (old workers finishing
    // requests across several reloads), has its bucket — a reload that fails
    // after this call therefore frees nothing the running workers use. Without
    // `alive`, every registered worker counts as running.
    // Returns an error when there are more buckets than free slots.
    std::string assign(const std::vector<std::string>& names, std::vector<std::uint16_t>& slots,
                       std::uint64_t& gen, PidAlive alive = nullptr);
    // A worker process of configuration `gen` starts (`pid`) or exits. Registering reuses the
    // entry of a process `alive` says is gone; false when every entry holds a running worker
    // (counted in worker_regs_full: its generation is then protected for one reload only).
    bool register_worker(std::uint32_t pid, std::uint64_t gen, PidAlive alive) const;
    void unregister_worker(std::uint32_t pid) const;
    // The oldest generation a running registered worker serves (UINT64_MAX: none).
    std::uint64_t oldest_running_gen(PidAlive alive) const;
    // Records that workers of configuration `gen` are running (called when a
    // worker starts); the previously running generation becomes the old one.
    void activate(std::uint64_t gen) const;

    Header& header() const { return *reinterpret_cast<Header*>(base_); }
    // The key table of the bucket in slot i (an empty Table, base() null, when not keyed).
    keyed::Table key_table(std::uint32_t i) const {
        const std::int64_t off = slot(i).key_table.load(std::memory_order_acquire);
        return off == 0 ? keyed::Table() : keyed::Table(base_ + off);
    }
    BucketSlot& slot(std::uint32_t i) const {
        return reinterpret_cast<BucketSlot*>(base_ + sizeof(Header))[i];
    }
    WorkerCounters& counters(std::uint32_t bucket, std::uint32_t worker) const {
        auto* all = reinterpret_cast<WorkerCounters*>(base_ + sizeof(Header) +
                                                      sizeof(BucketSlot) * header().capacity);
        return all[bucket * kWorkerSlots + worker % kWorkerSlots];
    }

    struct Totals {
        std::uint64_t offered = 0, admitted = 0, dropped = 0, shadow_dropped = 0;
    };
    // Sums a bucket's counters over all worker slots.
    Totals totals(std::uint32_t bucket) const;
    // The offered count alone (what surge damping reads every 10 ms): one load per line.
    std::uint64_t offered(std::uint32_t bucket) const;

    bool valid() const { return base_ != nullptr; }
    // Bucket slot used by run-time definition i.
    std::uint32_t runtime_slot(std::uint32_t i) const {
        return header().capacity - kRuntimeSlots + i;
    }
    // Clears a slot's instruction and counters (for reuse by another bucket).
    void reset_slot(std::uint32_t i) const;

  private:
    char* base_ = nullptr;
};

}  // namespace grl::shm
