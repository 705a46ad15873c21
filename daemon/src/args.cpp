#include "grl/daemon/args.h"

#include <cerrno>
#include <cstdlib>

#include "grl/parse.h"

namespace grl::daemon {

Args::Args(std::string program, std::string synopsis, std::vector<OptionSpec> specs)
    : program_(std::move(program)), synopsis_(std::move(synopsis)), specs_(std::move(specs)) {}

const OptionSpec* Args::spec(const std::string& name) const {
    for (const OptionSpec& s : specs_) {
        if (s.name == name) return &s;
    }
    return nullptr;
}

bool Args::parse(int argc, char** argv, int first, std::string& error) {
    for (int i = first; i < argc; ++i) {
        std::string a = argv[i];
        if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
            positional_.push_back(a);
            continue;
        }
        std::string name = a.substr(2), value;
        bool inline_value = false;
        if (auto eq = name.find('='); eq != std::string::npos) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
            inline_value = true;
        }
        const OptionSpec* s = spec(name);
        if (s == nullptr) {
            error = "unknown option --" + name;
            return false;
        }
        if (s->metavar.empty()) {
            if (inline_value) {
                error = "option --" + name + " takes no value";
                return false;
            }
            value = "1";
        } else if (!inline_value) {
            if (i + 1 >= argc) {
                error = "option --" + name + " needs a value (" + s->metavar + ")";
                return false;
            }
            value = argv[++i];
        }
        auto& v = values_[name];
        if (!v.empty() && !s->repeatable) {
            error = "option --" + name + " given twice";
            return false;
        }
        v.push_back(value);
    }
    return true;
}

bool Args::has(const std::string& name) const {
    auto it = values_.find(name);
    return it != values_.end() && !it->second.empty();
}

std::string Args::get(const std::string& name) const {
    auto it = values_.find(name);
    if (it != values_.end() && !it->second.empty()) return it->second.back();
    const OptionSpec* s = spec(name);
    return s ? s->default_value : std::string();
}

std::vector<std::string> Args::all(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? std::vector<std::string>() : it->second;
}

std::string Args::usage() const {
    std::string u = "usage: " + program_ + " " + synopsis_ + "\n\noptions:\n";
    for (const OptionSpec& s : specs_) {
        std::string left = "  --" + s.name + (s.metavar.empty() ? "" : " " + s.metavar);
        if (left.size() < 34) left.resize(34, ' ');
        u += left + " " + s.help;
        if (!s.default_value.empty()) u += " (default: " + s.default_value + ")";
        if (s.repeatable) u += " [repeatable]";
        u += "\n";
    }
    return u;
}

bool Args::duration_ms(const std::string& name, std::uint64_t& out, std::string& error) const {
    auto d = parse_duration_ms(get(name));
    if (!d) {
        error = "--" + name + ": " + d.error;
        return false;
    }
    out = d.value;
    return true;
}

bool parse_limit(const std::string& s, std::uint64_t& mrps, std::string& error) {
    if (s == "0" || s == "0r/s" || s == "0r/m") {  // a zero limit blocks everything
        mrps = 0;
        return true;
    }
    auto r = parse_rate(s);
    if (!r) {
        error = r.error + ", expected e.g. 100r/s, 600r/m or 0";
        return false;
    }
    mrps = r.value;
    return true;
}

bool Args::rate_mrps(const std::string& name, std::uint64_t& out, std::string& error) const {
    std::string e;
    if (parse_limit(get(name), out, e)) return true;
    error = "--" + name + ": " + e;
    return false;
}

bool Args::uint(const std::string& name, std::uint64_t& out, std::string& error) const {
    std::string v = get(name);
    errno = 0;
    char* end = nullptr;
    unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || v[0] == '-') {
        error = "--" + name + ": invalid number \"" + v + "\"";
        return false;
    }
    out = n;
    return true;
}

}  // namespace grl::daemon
