#include "grl/daemon/cli.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <memory>
#include <sstream>
#include <utility>

#include "grl/common/bucket_types.h"
#include "grl/common/parse.h"

namespace grl::daemon::cli {

namespace {

// CLI11's layout with our usage line ("usage: grlctl set BUCKET [options]") in place of its
// generated "Usage: grlctl set [OPTIONS] ..." that cannot tell required options apart.
class Help : public CLI::Formatter {
  public:
    explicit Help(std::string synopsis) : synopsis_(std::move(synopsis)) { column_width(32); }
    std::string make_help(const CLI::App* app, std::string name,
                          CLI::AppFormatMode mode) const override {
        if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
        std::string desc = app->get_description();
        return make_usage(app, name) + (desc.empty() ? "" : "\n" + wrap(desc, kWidth) + "\n") +
               make_positionals(app) + make_groups(app, mode) + make_subcommands(app, mode) +
               (app->get_footer().empty() ? "" : "\n" + make_footer(app));
    }
    // "set BUCKET [--limit RATE]...   description (alias: ...)": a command with its arguments.
    std::string make_subcommand(const CLI::App* sub) const override {
        std::string left = sub->get_name();
        if (auto help = std::dynamic_pointer_cast<const Help>(sub->get_formatter());
            help && !help->synopsis_.empty()) {
            left += " " + help->synopsis_;
        }
        std::string desc = sub->get_description();
        for (const std::string& a : sub->get_aliases()) desc += " (alias: " + a + ")";
        std::stringstream out;
        CLI::detail::format_help(out, left, wrap(desc, kWidth - get_column_width()),
                                 get_column_width());
        return out.str();
    }
    std::string make_usage(const CLI::App*, std::string name) const override {
        return "usage: " + name + (synopsis_.empty() ? "" : " " + synopsis_) + "\n";
    }
    std::string make_option_desc(const CLI::Option* opt) const override {
        return wrap(opt->get_description(), kWidth - get_column_width());
    }

  private:
    static constexpr std::size_t kWidth = 100;  // of the help text, like the code

    // Breaks `text` into lines of at most `width` characters, at spaces.
    static std::string wrap(const std::string& text, std::size_t width) {
        std::string out;
        std::size_t line = 0;
        std::size_t i = 0;
        while (i < text.size()) {
            std::size_t end = text.find(' ', i);
            if (end == std::string::npos) end = text.size();
            std::string word = text.substr(i, end - i);
            if (line > 0 && line + 1 + word.size() > width) {
                out += "\n";
                line = 0;
            } else if (line > 0) {
                out += " ";
                ++line;
            }
            out += word;
            line += word.size();
            i = end + 1;
        }
        return out;
    }

    std::string synopsis_;
};

std::string with_default(const std::string& help, const std::string& value) {
    return value.empty() ? help : help + " (default: " + value + ")";
}

bool all_digits(const std::string& s) {
    if (s.empty()) return false;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
    }
    return true;
}

}  // namespace

void init(CLI::App& app, const std::string& synopsis) {
    app.formatter(std::make_shared<Help>(synopsis));
    app.set_help_flag("-h,--help", "show this help and exit");
}

bool parse(CLI::App& app, int argc, const char* const* argv, int& exit_code, std::string& text) {
    try {
        app.parse(argc, argv);
        return true;
    } catch (const CLI::CallForHelp&) {
        text = app.help();  // of the subcommand given, if any
        exit_code = 0;
    } catch (const CLI::ParseError& e) {
        text = usage_error(app, e.what());
        exit_code = kUsageError;
    }
    return false;
}

std::string usage_error(const CLI::App& app, const std::string& message) {
    return app.get_name() + ": " + message + " (see " + app.get_name() + " --help)\n";
}

std::string format_duration(std::uint64_t ms) {
    if (ms == 0) return "0";
    if (ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
    if (ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
    if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
    return std::to_string(ms) + "ms";
}

CLI::Validator duration_validator(std::uint64_t min_ms, std::uint64_t max_ms) {
    return CLI::Validator(
        [min_ms, max_ms](std::string& s) -> std::string {
            Parsed<std::uint64_t> d = parse_duration_ms(s);
            if (!d) return d.error;
            if (d.value < min_ms || d.value > max_ms) {
                return "\"" + s + "\" is out of range " + format_duration(min_ms) + ".." +
                       format_duration(max_ms);
            }
            s = std::to_string(d.value);
            return {};
        },
        "");
}

CLI::Validator count_validator(std::uint64_t min, std::uint64_t max) {
    return CLI::Validator(
        [min, max](std::string& s) -> std::string {
            // Digits only: strtoull would take "-1", " 7" and "0x10".
            if (!all_digits(s) || s.size() > 19) return "invalid number \"" + s + "\"";
            std::uint64_t n = std::stoull(s);
            if (n < min || n > max) {
                return "\"" + s + "\" is out of range " + std::to_string(min) + ".." +
                       std::to_string(max);
            }
            return {};
        },
        "");
}

CLI::Validator size_validator(std::uint64_t min, std::uint64_t max) {
    return CLI::Validator(
        [min, max](std::string& s) -> std::string {
            Parsed<std::uint64_t> n = parse_size(s);
            if (!n) return n.error;
            if (n.value < min || n.value > max) {
                return "\"" + s + "\" is out of range " + format_size(min) + ".." +
                       format_size(max);
            }
            s = std::to_string(n.value);
            return {};
        },
        "");
}

std::string format_size(std::uint64_t bytes) {
    if (bytes != 0 && bytes % (1ULL << 20) == 0) return std::to_string(bytes >> 20) + "m";
    if (bytes != 0 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "k";
    return std::to_string(bytes);
}

bool local_endpoint(const std::string& endpoint) {
    if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
    if (endpoint.rfind("tcp://", 0) != 0) return false;
    const std::size_t colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon < 6) return false;
    std::string host = endpoint.substr(6, colon - 6);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    if (host == "localhost") return true;
    in_addr v4{};
    if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
    in6_addr v6{};
    return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

std::string check_exposure(const std::vector<std::pair<std::string, std::string>>& binds,
                           bool insecure) {
    if (insecure) return {};
    for (const auto& [option, endpoint] : binds) {
        if (!local_endpoint(endpoint)) {
            return option + " " + endpoint +
                   " is reachable from other machines without CURVE: anyone there could "
                   "speak for any host, zone or operator; bind it to 127.0.0.1, switch CURVE on, "
                   "or pass --insecure";
        }
    }
    return {};
}

CLI::Validator name_validator() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            if (valid_name(s)) return {};
            return "invalid name \"" + s + "\", expected 1-63 of [A-Za-z0-9_.:-]";
        },
        "");
}

CLI::Validator limit_validator() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            Parsed<std::uint64_t> l = parse_limit(s);
            if (!l) return l.error;
            s = std::to_string(l.value);
            return {};
        },
        "");
}

CLI::Option* add_text(CLI::App& app, const std::string& name, std::string& field,
                      const std::string& metavar, const std::string& help) {
    return app.add_option(name, field, with_default(help, field))->option_text(metavar);
}

CLI::Option* add_name(CLI::App& app, const std::string& name, std::string& field,
                      const std::string& help) {
    return add_text(app, name, field, "NAME", help)->check(name_validator());
}

CLI::Option* add_list(CLI::App& app, const std::string& name, std::vector<std::string>& field,
                      const std::string& metavar, const std::string& help) {
    // One value per occurrence: "--peer A B" would otherwise swallow B.
    return app.add_option(name, field, help + " (repeatable)")
        ->option_text(metavar)
        ->allow_extra_args(false);
}

CLI::Option* add_duration(CLI::App& app, const std::string& name, std::uint64_t& field_ms,
                          std::uint64_t min_ms, std::uint64_t max_ms, const std::string& help) {
    return app.add_option(name, field_ms, with_default(help, format_duration(field_ms)))
        ->option_text("DURATION")
        ->transform(duration_validator(min_ms, max_ms));
}

CLI::Option* add_count(CLI::App& app, const std::string& name, std::uint32_t& field,
                       std::uint32_t min, std::uint32_t max, const std::string& help,
                       const std::string& metavar) {
    return app.add_option(name, field, with_default(help, std::to_string(field)))
        ->option_text(metavar)
        ->check(count_validator(min, max));
}

CLI::Option* add_size(CLI::App& app, const std::string& name, std::uint64_t& field,
                      std::uint64_t min, std::uint64_t max, const std::string& help) {
    return app.add_option(name, field, with_default(help, format_size(field)))
        ->option_text("SIZE")
        ->transform(size_validator(min, max));
}

CLI::Option* add_usage_version(CLI::App& app, std::uint32_t& field, const std::string& what) {
    return add_count(app, "--usage-version", field, 1, 2,
                     "protocol version of the " + what +
                         " sent: 1 while some receiver is of the release before usage version 2 "
                         "(a rolling upgrade, docs/operations.md \"Upgrading\"), else 2",
                     "1|2");
}

CLI::Option* add_log_level(CLI::App& app, LogLevel& field) {
    static const char* const kNames[] = {"debug", "info", "warn", "error"};
    return app
        .add_option_function<std::string>(
            "--log-level",
            [&field](const std::string& s) {
                auto level = parse_log_level(s);
                if (!level) {
                    throw CLI::ValidationError(
                        "--log-level",
                        "invalid level \"" + s + "\", expected debug, info, warn or error");
                }
                field = *level;
            },
            with_default("debug, info, warn or error", kNames[static_cast<int>(field)]))
        ->option_text("LEVEL");
}

namespace {

// Runs `load(path)` into `field`; an exception (its message names the file) becomes a usage
// error naming the option.
template <typename T, typename Load>
CLI::Option* add_file(CLI::App& app, const std::string& name, T& field, const std::string& help,
                      Load load) {
    return app
        .add_option_function<std::string>(
            name,
            [&field, name, load](const std::string& path) {
                try {
                    field = load(path);
                } catch (const std::exception& e) {
                    throw CLI::ValidationError(name, e.what());
                }
            },
            help)
        ->option_text("FILE");
}

}  // namespace

CLI::Option* add_keypair(CLI::App& app, const std::string& name, std::optional<KeyPair>& field,
                         const std::string& help) {
    return add_file(app, name, field, help, [](const std::string& p) { return load_keypair(p); });
}

CLI::Option* add_public_key(CLI::App& app, const std::string& name, std::string& field,
                            const std::string& help) {
    return add_file(app, name, field, help,
                    [](const std::string& p) { return load_public_key(p); });
}

CLI::Option* add_authorized(CLI::App& app, const std::string& name, std::set<std::string>& field,
                            const std::string& help) {
    return add_file(app, name, field, help,
                    [](const std::string& p) { return load_authorized(p); });
}

CLI::Option* add_key_list(CLI::App& app, const std::string& name, curve::KeyList& field,
                          const std::string& help) {
    return add_file(app, name, field, help, [](const std::string& p) { return load_key_list(p); });
}

std::string split_keyed_endpoint(const std::string& option, std::string& value,
                                 std::map<std::string, std::string>& keys) {
    std::size_t eq = value.find('=');
    if (eq == std::string::npos) return {};
    std::string file = value.substr(eq + 1);
    std::string endpoint = value.substr(0, eq);
    if (endpoint.empty() || file.empty())
        return option + ": expected EP or EP=FILE, not \"" + value + "\"";
    try {
        keys[endpoint] = load_public_key(file);
    } catch (const std::exception& e) {
        return option + ": " + e.what();
    }
    value = endpoint;
    return {};
}

}  // namespace grl::daemon::cli
