// Prometheus text exposition (format 0.0.4), built at scrape time from the daemon's state.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace grl::daemon {

using Label = std::pair<std::string_view, std::string_view>;

class MetricsText {
  public:
    // Starts a metric family (HELP and TYPE lines); type is "counter" or "gauge".
    void family(std::string_view name, std::string_view type, std::string_view help);
    void sample(std::string_view name, std::initializer_list<Label> labels, double value);
    void sample(std::string_view name, double value) { sample(name, {}, value); }
    const std::string& text() const { return out_; }

  private:
    std::string out_;
};

// grl_build_info{version,component} 1: which build each scraped process runs (the nginx
// status page writes the same family with component="nginx").
void write_build_info(MetricsText& m, std::string_view component);

}  // namespace grl::daemon
