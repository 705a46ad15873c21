// Where the controller's limits come from (--limits): a file, loaded at start, on SIGHUP and
// when it changes; or a key in etcd, read at start and watched. A new set is taken whole or
// rejected whole, the last good one kept; its state is in /metrics and `grlctl status`.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "grl/control/control.h"
#include "grl/daemon/etcd_watch.h"
#include "grl/daemon/limits_file.h"
#include "grl/daemon/loop.h"
#include "grl/daemon/metrics.h"
#include "grl/wire/wire_control.h"
#include "config.h"

namespace grl::controller {

class LimitsSource {
  public:
    LimitsSource(const Config& cfg, daemon::Loop& loop, control::Controller& ctl)
        : cfg_(cfg), loop_(loop), ctl_(ctl) {}
    // The first limits: a file or a value in etcd that does not parse throws (there is no
    // last good one); an unreachable etcd or a missing key does not.
    void start();
    void reload(const char* why);       // SIGHUP
    wire::LimitsStatus status() const;  // for grlctl status and the dashboard
    void write_metrics(daemon::MetricsText& m) const;

  private:
    struct FileId {
        dev_t dev = 0;
        ino_t ino = 0;
        off_t size = -1;
        std::int64_t mtime_ns = -1;
        bool operator==(const FileId& o) const {
            return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
        }
    };
    FileId limits_file_id() const;
    void watch_limits();
    // A new limits set (file or etcd): taken whole, or rejected whole with the last good kept.
    bool take_limits(daemon::LimitsLoad l, const std::string& why);
    void start_etcd();
    void on_etcd(const daemon::etcd::WatchEvent& e);

    const Config& cfg_;
    daemon::Loop& loop_;
    control::Controller& ctl_;
    FileId limits_id_;
    bool limits_ok_ = true;
    std::string limits_error_;
    std::uint64_t limits_loaded_wall_ = 0;
    std::uint64_t limits_reloads_ok_ = 0;
    std::uint64_t limits_reloads_rejected_ = 0;
    // --limits etcd://: the watch (its own thread), the revision in force and etcd's state.
    std::unique_ptr<daemon::etcd::KeyWatch> etcd_;
    std::int64_t etcd_revision_ = -1;  // mod_revision of the value in force (0: no key yet)
    bool etcd_up_ = false;
    std::string etcd_error_;  // why etcd is unreachable ("" while up)
    std::uint64_t etcd_losses_ = 0;
};

}  // namespace grl::controller
