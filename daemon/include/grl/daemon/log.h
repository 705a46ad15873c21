// One line per event on stderr: time, component, level, optional bucket, message.
//   2026-11-29T18:40:00.123Z grl-controller[ctl-a] info bucket=api: dropping in global: ...
// Nothing is logged per message at the default level (info); per-message detail is debug.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace grl::daemon {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

std::optional<LogLevel> parse_log_level(std::string_view s);
void log_init(std::string component, LogLevel min_level);
bool log_enabled(LogLevel level);
void log(LogLevel level, std::string_view bucket, std::string_view message);

inline void log_info(std::string_view msg) {
    log(LogLevel::Info, {}, msg);
}
inline void log_warn(std::string_view msg) {
    log(LogLevel::Warn, {}, msg);
}
inline void log_error(std::string_view msg) {
    log(LogLevel::Error, {}, msg);
}
inline void log_debug(std::string_view msg) {
    if (log_enabled(LogLevel::Debug)) log(LogLevel::Debug, {}, msg);
}

// At most one line per `period_ms` for a recurring condition (malformed messages, send
// failures); the line says how many occurrences it stands for.
class LogLimiter {
  public:
    explicit LogLimiter(std::uint64_t period_ms = 10000) : period_ms_(period_ms) {}
    // Counts one occurrence; logs it (with the count since the last line) when due.
    void hit(LogLevel level, std::string_view bucket, const std::string& message,
             std::uint64_t now_ms);

  private:
    std::uint64_t period_ms_;
    std::uint64_t last_ms_ = 0;
    std::uint64_t suppressed_ = 0;
    bool logged_ = false;
};

}  // namespace grl::daemon
