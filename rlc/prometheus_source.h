// History read from a Prometheus server that scrapes the controllers (for fleets that
// already run one): per recording interval, the mean and the max of each controller gauge,
// by range queries over its HTTP API (docs/rlc-history.md, "Prometheus").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "history.h"

namespace grl::rlc {

struct PrometheusOptions {
    std::string url;               // http://HOST:PORT of the Prometheus server
    std::int32_t interval_s = 60;  // recording interval the samples are cut into
    std::int32_t scrape_s = 15;    // its scrape interval (resolution of the dropped peak)
    std::int64_t timeout_ms = 30000;
};

// What each range query asks for; one query per field.
enum class PromField {
    OfferedMean,
    OfferedPeak,
    AdmittedMean,
    AdmittedPeak,
    DroppedPeak,
    ShadowMean,
    ShadowPeak,
    Limit,
    Shadow,
    Ratio,
    Ticks,
    CandidateLimit,  // only while the limits file gives the bucket a candidate
    CandidateMean,
    CandidatePeak,
};
inline constexpr int kPromFields = 14;

// The PromQL of one field for `interval_s` windows: e.g. the offered peak is
// max_over_time(grl_bucket_offered_rps[60s]), joined with grl_controller_info for the
// controller's region. `selector` (prom_selector) restricts it to some buckets.
std::string prom_query(PromField f, std::int32_t interval_s, std::int32_t scrape_s,
                       const std::string& selector = "");

// A label matcher for exactly these buckets: {bucket=~"api|search\\.v2"} (regex
// metacharacters escaped, Prometheus anchors the regex). "" for no names.
std::string prom_selector(const std::vector<std::string>& buckets);

// The names of a /api/v1/label/bucket/values answer, ascending. Throws std::runtime_error
// naming `what` when it is not a successful list of strings.
std::vector<std::string> prom_label_values(std::string_view body, const std::string& what);

// Folds query_range answers into series: pure, so that it is tested without a server.
class PromAssembler {
  public:
    explicit PromAssembler(std::int32_t interval_s) : interval_s_(interval_s) {}
    // `body`: the JSON of one /api/v1/query_range answer for field `f`. Throws
    // std::runtime_error naming `what` (the query) when it is not a successful matrix.
    void add(PromField f, std::string_view body, const std::string& what);
    // Series per instance (a global instance seen through several controllers is one),
    // samples at the windows' starts, ascending; a window without an offered mean is a gap.
    std::vector<Series> series() const;

  private:
    struct Point {
        double v[kPromFields];
        bool has[kPromFields] = {};
    };
    std::int32_t interval_s_;
    std::map<InstanceKey, std::map<std::int64_t, Point>> points_;  // by window end
};

class PrometheusSource : public HistorySource {
  public:
    explicit PrometheusSource(PrometheusOptions o);
    // The bucket label values of grl_bucket_offered_rps series with data in the range
    // (Prometheus' index: it may name a bucket whose windows then hold nothing).
    std::vector<std::string> buckets(std::int64_t since_s, std::int64_t until_s) override;
    // Windows whose start is in [since_s, until_s) and that have ended, of the named
    // buckets only (a label matcher in every query); throws std::runtime_error naming the
    // server when it cannot be asked or answers an error.
    std::vector<Series> read(std::int64_t since_s, std::int64_t until_s,
                             const std::vector<std::string>& buckets) override;
    using HistorySource::read;

  private:
    PrometheusOptions opt_;
    std::string host_;
    int port_ = 0;
};

}  // namespace grl::rlc
