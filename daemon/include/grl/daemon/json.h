// A minimal JSON writer (grlctl --json, the endpoints file).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grl::daemon {

class Json {
  public:
    Json& begin_object();
    Json& end_object();
    Json& begin_array();
    Json& end_array();
    Json& key(std::string_view k);
    Json& str(std::string_view v);
    Json& num(double v);
    Json& uint(std::uint64_t v);
    Json& boolean(bool v);
    Json& null();
    const std::string& text() const { return out_; }

  private:
    void comma();
    std::string out_;
    std::vector<bool> first_;  // per open container: no element written yet
    bool after_key_ = false;
};

// Writes {"name": "endpoint", ...} to `path` atomically (temporary file + rename).
void write_endpoints_file(const std::string& path,
                          const std::vector<std::pair<std::string, std::string>>& endpoints);

}  // namespace grl::daemon
