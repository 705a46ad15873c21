// The Rate Limit Configurator's model of traffic history: what is recorded per bucket
// instance and per recording interval, and how the rest of grl-rlc reads it.
// The store (SQLite by default) writes and reads these; policies and what-if only read
// them. Schema and meaning: docs/rlc.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "grl/common/bucket_types.h"
#include "grl/control/instance_key.h"

namespace grl::rlc {

// One bucket instance (grl/control/instance_key.h), as the controller names it.
using control::InstanceKey;

// The mean and the peak of one rate over a recording interval. The peak is the highest
// controller tick's rate in the interval: averages hide the peaks a limit must cover.
struct Rate {
    double mean = 0;  // r/s
    double peak = 0;  // r/s, highest tick
};

// One recording interval (typically 60 s, at most a few minutes) of one instance.
struct Sample {
    std::int64_t start_s = 0;    // unix seconds, start of the interval
    std::int32_t length_s = 60;  // interval length
    std::int32_t ticks = 0;      // controller ticks seen in it (0: a gap, not a zero)
    Rate offered, admitted, dropped, shadow_dropped;
    double limit_rps = -1;   // limit in force at the end of the interval; -1: unknown
    Mode mode = Mode::Deny;  // mode in force at the end of the interval
    double ratio = 0;        // mean published drop ratio over the interval
    // A candidate limit the controllers evaluated beside the one in force (the limits file's
    // `candidate:`), at the end of the interval; -1: none. Its would-drops: max(0, offered -
    // candidate) per tick, mean and peak over the interval (0 without a candidate).
    double candidate_limit_rps = -1;
    Rate candidate_would_drop;
};

struct Series {
    InstanceKey key;
    std::vector<Sample> samples;  // ascending start_s, no duplicates; gaps are missing rows
};

// Where policies and what-if read history from: the SQLite store, a Prometheus server, or
// (in unit tests) memory. Readers go bucket slice by bucket slice (buckets(), then read()
// of ~50 names at a time) so that memory is bounded by a slice, not by the fleet: five
// weeks at 60 s are 50,400 samples, ~5 MB, per instance.
class HistorySource {
  public:
    virtual ~HistorySource() = default;
    // The names of the buckets with at least one sample in [since_s, until_s), ascending,
    // each once. A source may list a name whose read() then finds nothing (Prometheus'
    // series index is coarser than a sample); none leaves out a bucket it has samples of.
    virtual std::vector<std::string> buckets(std::int64_t since_s, std::int64_t until_s) = 0;
    // Every instance of the named buckets with at least one sample in [since_s, until_s),
    // samples restricted to that range, in InstanceKey order. A name without samples
    // (or unknown) contributes nothing.
    virtual std::vector<Series> read(std::int64_t since_s, std::int64_t until_s,
                                     const std::vector<std::string>& buckets) = 0;
    // Every bucket at once: for small histories (tests, import); cycles read slices.
    std::vector<Series> read(std::int64_t since_s, std::int64_t until_s) {
        return read(since_s, until_s, buckets(since_s, until_s));
    }
};

// Buckets per read() of a cycle and of what-if. Memory follows a slice's history: 50
// buckets x 5 weeks at 60 s, one instance each, are 2.5 M samples, ~260 MB (docs/rlc.md,
// "Measured"); buckets with many zones want smaller slices (--slice).
inline constexpr std::size_t kSliceBuckets = 50;

// `names` cut into consecutive slices of at most `size` names (1 if `size` is 0).
inline std::vector<std::vector<std::string>> slices(const std::vector<std::string>& names,
                                                    std::size_t size) {
    size = std::max<std::size_t>(1, size);
    std::vector<std::vector<std::string>> out;
    for (std::size_t i = 0; i < names.size(); i += size)
        out.emplace_back(
            names.begin() + static_cast<std::ptrdiff_t>(i),
            names.begin() + static_cast<std::ptrdiff_t>(std::min(names.size(), i + size)));
    return out;
}

}  // namespace grl::rlc
