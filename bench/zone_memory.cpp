// Shared-zone memory per bucket, from the zone layout the module uses (grl/shm_layout.h).
// Prints one JSON object: fixed header bytes, bytes per bucket, and how many configured
// buckets fit in common grl_zone sizes (before nginx's slab allocator overhead, and after
// the slots reserved for run-time buckets). Run: build/bench/grl_zone_memory
#include <cstdio>

#include "grl/plane/shm_layout.h"

int main() {
    namespace shm = grl::shm;
    const std::size_t header = shm::bytes_for(0);
    const std::size_t per_bucket = shm::bytes_for(101) - shm::bytes_for(100);
    std::printf(
        "{\"header_bytes\":%zu,\"bytes_per_bucket\":%zu,\"worker_slots\":%u,"
        "\"runtime_slots\":%u,\"zones\":[",
        header, per_bucket, shm::kWorkerSlots, shm::kRuntimeSlots);
    const std::size_t sizes[] = {std::size_t{64} << 10, std::size_t{1} << 20,
                                 std::size_t{10} << 20};
    const char* names[] = {"64k", "1m", "10m"};
    for (int i = 0; i < 3; ++i) {
        std::uint32_t cap = shm::capacity_for(sizes[i]);
        std::uint32_t usable = cap > shm::kRuntimeSlots ? cap - shm::kRuntimeSlots : 0;
        std::printf("%s{\"size\":\"%s\",\"bytes\":%zu,\"configured_buckets\":%u}", i ? "," : "",
                    names[i], sizes[i], usable);
    }
    std::printf("]}\n");
    return 0;
}
