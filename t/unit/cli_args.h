// argv for the parse_config() tests: "grl-x", then the given arguments.
#pragma once

#include <string>
#include <vector>

namespace grl::test {

class Argv {
  public:
    Argv(std::string program, std::vector<std::string> args) : args_(std::move(args)) {
        args_.insert(args_.begin(), std::move(program));
        for (const std::string& a : args_) ptrs_.push_back(a.c_str());
    }
    int argc() const { return static_cast<int>(ptrs_.size()); }
    const char* const* argv() const { return ptrs_.data(); }

  private:
    std::vector<std::string> args_;
    std::vector<const char*> ptrs_;
};

}  // namespace grl::test
