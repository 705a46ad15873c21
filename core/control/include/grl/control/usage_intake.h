// Usage in: zone_usage and region_usage messages, whole or in parts (docs/protocol.md "Usage
// in parts"), read in place, assembled and taken by a Controller. The one path from received
// bytes to the controller's usage tables, shared by grl-controller, the benchmarks and tests.
//
// A caller reads a message (read_zone()), checks its header where it must (the daemon binds a
// zone to its CURVE key), then takes it (take_zone()). A part is held until its set is whole;
// the usage a taken one replaces goes back to the assembler, whose next set of that sender is
// read into its vector: in the steady state nothing is allocated and no name is copied.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "grl/control/control.h"
#include "grl/wire/usage_parts.h"

namespace grl::control {

class UsageIntake {
  public:
    // Sets pending at once: ctl's max_zones (zone usage) and max_peers (region usage). An
    // incomplete set is dropped after `parts_timeout_ms` (expire()).
    UsageIntake(Controller& ctl, std::uint64_t parts_timeout_ms);

    struct Taken {
        // Whole (one message) or Complete (the last part of a set): taken, `accepted` says
        // how. Anything else: nothing was taken (held until its set is whole, or dropped).
        wire::PartResult part = wire::PartResult::Whole;
        Accepted accepted = Accepted::Yes;
        Early early;  // zone usage only: what it asks of an early tick, when accepted
        bool taken() const {
            return part == wire::PartResult::Whole || part == wire::PartResult::Complete;
        }
    };

    // Reads one message as wire::read_usage() does (the same answer, the same error).
    bool read_zone(std::string_view bytes, std::string& error);
    // The message read last, for the caller's checks before take_zone(); after it, unspecified.
    const wire::ZoneUsage& zone() const { return zone_; }
    // Assembles and takes what read_zone() read. `why` (when given) gets one line on a
    // refusal, and on a part result other than Whole, Complete and Pending.
    Taken take_zone(const Clock& now, std::string* why = nullptr);

    bool read_region(std::string_view bytes, std::string& error);
    const wire::RegionUsage& region() const { return region_; }
    Taken take_region(const Clock& now, std::string* why = nullptr);

    // Drops the sets older than the timeout; returns how many of each kind.
    struct Expired {
        std::size_t zone = 0, region = 0;
    };
    Expired expire(std::uint64_t now_ms);
    // Sets dropped before all of their parts arrived (superseded or expired).
    std::uint64_t incomplete_zone_sets() const { return zone_parts_.incomplete(); }
    std::uint64_t incomplete_region_sets() const { return region_parts_.incomplete(); }

  private:
    template <class Usage>
    static wire::PartResult assemble(wire::PartAssembler<Usage>& parts, Usage& m, const Clock& now,
                                     std::string* why);

    Controller& ctl_;
    wire::ZoneUsage zone_;
    wire::RegionUsage region_;
    wire::PartAssembler<wire::ZoneUsage> zone_parts_;
    wire::PartAssembler<wire::RegionUsage> region_parts_;
};

}  // namespace grl::control
