// libFuzzer harness, stateful: a sequence of messages and clock steps driven by the input,
// fed into the collector's rate table and the controller as the daemons feed them. Checks
// that nothing overflows (UBSan), that every published ratio is a ratio, and that the
// messages the two produce always decode again. Input: a list of records
//   [op byte][clock step byte][length: 2 bytes LE][body]
// op % 4: 0 report -> rates::Table (then the zone usage goes to the controller),
//         1 zone_usage -> PartAssembler -> Controller, 2 region_usage -> Controller,
//         3 tick (+ sweep and the assembler's expiry).
// Also checks the bounds hostile input must not pass: the rate table's bytes (forged epochs
// and invented hosts included) and the assembler's sets per zone and bytes per set.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "grl/control/control.h"
#include "grl/control/rates.h"
#include "grl/wire/usage_parts.h"
#include "grl/wire/wire.h"
#include "grl/wire/wire_control.h"

namespace {

void check_instructions(const grl::control::TickOutput& out) {
    std::string bytes, error;
    for (const grl::wire::Instructions& m : out.instructions) {
        for (const grl::wire::Instruction& e : m.buckets) {
            if (e.ratio_ppm > 1000000) std::abort();
        }
        bytes.clear();
        grl::wire::encode(m, bytes);
        grl::wire::Instructions back;
        if (!grl::wire::decode(bytes, back, error)) std::abort();
    }
    bytes.clear();
    grl::wire::encode(out.region_usage, bytes);
    grl::wire::RegionUsage back;
    if (!grl::wire::decode(bytes, back, error)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    grl::rates::Options ro;
    ro.max_hosts = 64;
    ro.max_bytes = 1 << 20;
    grl::rates::Table table(ro);
    grl::control::Options co;
    co.name = "ctl-r1";
    co.region = "r1";
    co.interval_ms = 250;
    co.ttl_ms = 750;
    grl::control::Controller ctl(co);
    grl::control::Clock now{1000000, 1700000000000};
    constexpr std::size_t kSetBytes = 256 << 10;
    grl::wire::PartAssembler<grl::wire::ZoneUsage> parts(8, 750, kSetBytes);
    grl::wire::Report report;
    grl::wire::ZoneUsage zu;
    grl::wire::RegionUsage ru;
    std::string error;
    std::size_t pos = 0;
    while (pos + 4 <= size) {
        const std::uint8_t op = data[pos];
        const std::uint64_t step = std::uint64_t{data[pos + 1]} * 10;
        const std::size_t len = data[pos + 2] | (std::size_t{data[pos + 3]} << 8);
        pos += 4;
        std::string_view body(reinterpret_cast<const char*>(data) + pos, std::min(len, size - pos));
        pos += body.size();
        now.mono_ms += step;
        now.wall_ms += step;
        switch (op % 4) {
            case 0:
                if (!grl::wire::decode(body, report, error)) break;
                report.zone = "z1";
                report.region = "r1";
                table.add(report, now.mono_ms);
                // One report may take the table beyond its bound (by its own size at most).
                if (table.bytes_held() > ro.max_bytes + 8 * grl::wire::kMaxMessageBytes)
                    std::abort();
                zu = grl::wire::ZoneUsage();
                zu.source = "col-z1";
                zu.region = "r1";
                zu.zone = "z1";
                zu.seq = now.mono_ms;
                zu.ts_ms = now.wall_ms;
                zu.interval_ms = 250;
                table.usage(zu);
                ctl.on_zone_usage(zu, now);
                break;
            case 1:
                if (!grl::wire::decode(body, zu, error)) break;
                if (zu.parts > 1 && parts.add(zu, now.mono_ms) != grl::wire::PartResult::Complete) {
                    if (parts.pending() > 8) std::abort();
                    break;
                }
                ctl.on_zone_usage(zu, now);
                parts.recycle(zu);
                break;
            case 2:
                if (grl::wire::decode(body, ru, error)) ctl.on_region_usage(ru, now);
                break;
            case 3:
                table.sweep(now.mono_ms);
                parts.expire(now.mono_ms);
                check_instructions(ctl.tick(now));
                break;
        }
    }
    check_instructions(ctl.tick(now));
    return 0;
}
