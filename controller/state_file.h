// The state file (--state-file): the override table, run-time buckets included, across
// restarts. Read at start (a bad file is moved aside, never overwritten), written whenever
// the table changes (every admin change and tick passes through save()).
#pragma once

#include <cstdint>
#include <string>

#include "grl/control/control.h"
#include "grl/daemon/metrics.h"
#include "config.h"

namespace grl::controller {

class StateFile {
  public:
    StateFile(const Config& cfg, control::Controller& ctl) : cfg_(cfg), ctl_(ctl) {}
    void restore();
    void save();
    void write_metrics(daemon::MetricsText& m) const;  // with --state-file only

  private:
    const Config& cfg_;
    control::Controller& ctl_;
    std::string state_saved_;  // the state file's content as last written
    bool state_ok_ = true;     // false: the last write failed, or the file read at start was bad
    std::uint64_t state_writes_ = 0;
};

}  // namespace grl::controller
