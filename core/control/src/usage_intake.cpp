#include "grl/control/usage_intake.h"

namespace grl::control {

UsageIntake::UsageIntake(Controller& ctl, std::uint64_t parts_timeout_ms)
    : ctl_(ctl),
      zone_parts_(ctl.options().max_zones, parts_timeout_ms),
      region_parts_(ctl.options().max_peers, parts_timeout_ms) {}

bool UsageIntake::read_zone(std::string_view bytes, std::string& error) {
    return zone_parts_.read(bytes, zone_, error);
}

bool UsageIntake::read_region(std::string_view bytes, std::string& error) {
    return region_parts_.read(bytes, region_, error);
}

template <class Usage>
wire::PartResult UsageIntake::assemble(wire::PartAssembler<Usage>& parts, Usage& m,
                                       const Clock& now, std::string* why) {
    if (m.parts <= 1) return wire::PartResult::Whole;
    const wire::PartResult r = parts.add(m, now.mono_ms, why);
    if (r == wire::PartResult::Full && why && why->empty()) {
        *why = "part from " + m.source + " ignored: " + std::to_string(parts.pending()) +
               " sets pending (--max-zones / --max-peers)";
    }
    return r;
}

UsageIntake::Taken UsageIntake::take_zone(const Clock& now, std::string* why) {
    Taken t;
    t.part = assemble(zone_parts_, zone_, now, why);
    if (!t.taken()) return t;
    // On acceptance zone_ gets the zone's previous usage; either way its vector goes back to
    // the assembler, for the zone's next set to be read into.
    t.accepted = ctl_.take_zone_usage(zone_, now, why, &t.early);
    zone_parts_.recycle(zone_);
    return t;
}

UsageIntake::Taken UsageIntake::take_region(const Clock& now, std::string* why) {
    Taken t;
    t.part = assemble(region_parts_, region_, now, why);
    if (!t.taken()) return t;
    t.accepted = ctl_.take_region_usage(region_, now, why);
    region_parts_.recycle(region_);
    return t;
}

UsageIntake::Expired UsageIntake::expire(std::uint64_t now_ms) {
    return {zone_parts_.expire(now_ms), region_parts_.expire(now_ms)};
}

}  // namespace grl::control
