// The state file (--state-file): the override table, run-time buckets included, and each quota
// instance's use, across restarts. Read at start (a bad file is moved aside, never
// overwritten); written whenever the override table changes (every admin change and tick
// passes through save()), and for the quotas' use alone at most every kQuotaSaveMs: use
// changes every tick under load, and a restart counts the time since the save again from the
// zones' next rates (docs/design/008-quotas.md), so a save a tick is disk writes for nothing.
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
    static constexpr std::uint64_t kQuotaSaveMs = 5000;
    void restore();
    // `final`: the daemon is stopping, the quotas' use is written whatever its age.
    void save(std::uint64_t mono_ms, bool final = false);
    void write_metrics(daemon::MetricsText& m) const;  // with --state-file only

  private:
    const Config& cfg_;
    control::Controller& ctl_;
    std::string state_saved_;       // the state file's content as last written
    std::string table_saved_;       // its override table alone, encoded
    std::uint64_t saved_mono_ = 0;  // when it was last written
    bool state_ok_ = true;  // false: the last write failed, or the file read at start was bad
    std::uint64_t state_writes_ = 0;
};

}  // namespace grl::controller
