#include "state_file.h"

#include <cstdio>
#include <optional>
#include <stdexcept>

#include "grl/daemon/files.h"
#include "grl/daemon/log.h"
#include "grl/wire/wire_control.h"
#include "clock.h"

namespace grl::controller {

// The state file holds the override table (run-time buckets included) and the use of each
// quota instance as a region_usage message (docs/protocol.md) with no usage: one codec, one
// source of truth. A controller
// with no peer to learn them from gets its emergency limits back after a restart.
void StateFile::restore() {
    if (cfg_.state_file.empty()) return;
    std::optional<std::string> text;
    std::string error;
    wire::RegionUsage saved;
    try {
        text = daemon::read_file_if_exists(cfg_.state_file);
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (error.empty() && !text) {
        daemon::log_info("state file " + cfg_.state_file + " does not exist yet: no overrides");
        return;
    }
    if (error.empty() && !wire::decode(*text, saved, error)) {
        error = cfg_.state_file + ": " + error;
    }
    if (!error.empty()) {
        // Kept aside for a human, never overwritten; the controller starts without it.
        const std::string aside = cfg_.state_file + ".bad";
        std::rename(cfg_.state_file.c_str(), aside.c_str());
        state_ok_ = false;
        daemon::log_error("state file rejected, starting without overrides (moved to " + aside +
                          "): " + error);
        return;
    }
    const std::size_t n = ctl_.restore_overrides(saved.overrides, now());
    ctl_.restore_quotas(saved.quotas);
    state_saved_ = *text;
    daemon::log_info("state file " + cfg_.state_file + ": " + std::to_string(n) + " of " +
                     std::to_string(saved.overrides.size()) +
                     " overrides restored (expired ones lapse at the first tick), " +
                     std::to_string(saved.quotas.size()) + " quota uses");
    saved.quotas.clear();
    wire::encode(saved, table_saved_);  // the table as it is in the file
}

void StateFile::save(std::uint64_t mono_ms, bool final) {
    if (cfg_.state_file.empty()) return;
    wire::RegionUsage state;
    state.v = cfg_.usage_version;  // readable by the release before during an upgrade
    state.source = cfg_.opts.name;
    state.region = cfg_.opts.region;
    state.interval_ms = cfg_.opts.interval_ms;
    state.ts_ms = 1;  // fixed, so that the bytes change only when the table does
    state.seq = 1;
    for (const auto& [name, o] : ctl_.overrides()) state.overrides.push_back(o);
    std::string table;
    wire::encode(state, table);
    const bool table_changed = table != table_saved_;
    if (!table_changed && !final && saved_mono_ != 0 && mono_ms < saved_mono_ + kQuotaSaveMs) {
        return;
    }
    ctl_.quotas().own_use(state.quotas);  // the window's use, so that a restart keeps it
    std::string bytes;
    wire::encode(state, bytes);
    if (bytes == state_saved_) return;
    try {
        daemon::write_file_atomically(cfg_.state_file, bytes, 0600);
        state_saved_ = std::move(bytes);
        table_saved_ = std::move(table);
        saved_mono_ = mono_ms;
        ++state_writes_;
        if (!state_ok_) daemon::log_info("state file " + cfg_.state_file + " written again");
        state_ok_ = true;
    } catch (const std::exception& e) {
        if (state_ok_) daemon::log_error(std::string("state file not written: ") + e.what());
        state_ok_ = false;
    }
}

void StateFile::write_metrics(daemon::MetricsText& m) const {
    static const daemon::Family<StateFile> families[] = {
        {"grl_controller_state_file_ok", "gauge",
         "1 when the state file (--state-file) was read and is being written; 0 after a "
         "rejected file at start or a failed write.",
         [](daemon::Samples& o, const StateFile& s) { o(s.state_ok_ ? 1.0 : 0.0); }},
        {"grl_controller_state_file_writes_total", "counter",
         "Times the state file was written (a change of the override table; the quotas' use "
         "at most every 5 s).",
         [](daemon::Samples& o, const StateFile& s) { o(static_cast<double>(s.state_writes_)); }},
    };
    if (!cfg_.state_file.empty()) daemon::write(m, families, *this);
}

}  // namespace grl::controller
