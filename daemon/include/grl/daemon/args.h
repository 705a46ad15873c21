// A small command-line parser for the daemons and grlctl: `--name value`, `--name=value`,
// repeatable options, flags, and a generated --help.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace grl::daemon {

struct OptionSpec {
    std::string name;     // without the leading "--"
    std::string metavar;  // empty: a flag without value
    std::string help;
    std::string default_value;  // shown in --help; returned by get() when absent
    bool repeatable = false;
};

class Args {
  public:
    Args(std::string program, std::string synopsis, std::vector<OptionSpec> specs);

    // Parses argv[first..]. Returns false with `error` set on an unknown option, a missing
    // value or a repeated non-repeatable option. Positional arguments are kept in order.
    bool parse(int argc, char** argv, int first, std::string& error);

    bool has(const std::string& name) const;
    std::string get(const std::string& name) const;  // last value, or the default
    std::vector<std::string> all(const std::string& name) const;
    const std::vector<std::string>& positional() const { return positional_; }
    std::string usage() const;

    // Typed getters; false with `error` naming the option and value.
    bool duration_ms(const std::string& name, std::uint64_t& out, std::string& error) const;
    bool rate_mrps(const std::string& name, std::uint64_t& out, std::string& error) const;
    bool uint(const std::string& name, std::uint64_t& out, std::string& error) const;

  private:
    const OptionSpec* spec(const std::string& name) const;

    std::string program_;
    std::string synopsis_;
    std::vector<OptionSpec> specs_;
    std::map<std::string, std::vector<std::string>> values_;
    std::vector<std::string> positional_;
};

// A bucket limit: a rate ("100r/s", "600r/m") or zero ("0", "0r/s": block everything).
bool parse_limit(const std::string& s, std::uint64_t& mrps, std::string& error);

}  // namespace grl::daemon
