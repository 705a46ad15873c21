// grl-rlc record: polls every controller's /metrics, feeds the recorder, writes closed
// intervals to the store until SIGTERM or SIGINT, then flushes the open interval.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace grl::rlc {

struct RecordOptions {
    std::string store;
    std::vector<std::string> controllers;  // HOST:PORT of each controller's --metrics-bind
    std::int32_t interval_s = 60;
    std::int64_t poll_ms = 1000;
    std::int64_t retention_s = 35LL * 86400;
    std::int64_t rollup_after_s = 0;  // fold older samples into hourly rows (0: never)
    // Stop after this long (0: until a signal); for tests and benchmarks.
    std::int64_t duration_ms = 0;
    // Given: the caller owns the signals (serve records on a thread) and stops the recorder
    // by setting this; else run_record stops at SIGTERM/SIGINT.
    const std::atomic<bool>* stop = nullptr;
};

// Runs until a signal (or duration_ms); returns the process exit status. Throws
// StoreError when the store cannot be opened.
int run_record(const RecordOptions& opt);

}  // namespace grl::rlc
