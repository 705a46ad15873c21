#include "grl/daemon/log.h"

#include <sys/time.h>

#include <cstdint>
#include <cstdio>
#include <ctime>

namespace grl::daemon {

namespace {
std::string g_component = "grl";
LogLevel g_min = LogLevel::Info;

const char* level_name(LogLevel l) {
    switch (l) {
        case LogLevel::Debug: return "debug";
        case LogLevel::Info: return "info";
        case LogLevel::Warn: return "warn";
        case LogLevel::Error: return "error";
    }
    return "?";
}
}  // namespace

std::optional<LogLevel> parse_log_level(std::string_view s) {
    for (LogLevel l : {LogLevel::Debug, LogLevel::Info, LogLevel::Warn, LogLevel::Error}) {
        if (s == level_name(l)) return l;
    }
    return std::nullopt;
}

void log_init(std::string component, LogLevel min_level) {
    g_component = std::move(component);
    g_min = min_level;
}

bool log_enabled(LogLevel level) {
    return level >= g_min;
}

void log(LogLevel level, std::string_view bucket, std::string_view message) {
    if (!log_enabled(level)) return;
    struct timeval tv;
    gettimeofday(&tv, nullptr);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[64];
    std::snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(tv.tv_usec / 1000));
    std::string line;
    line.reserve(64 + message.size());
    line += ts;
    line += ' ';
    line += g_component;
    line += ' ';
    line += level_name(level);
    if (!bucket.empty()) {
        line += " bucket=";
        line += bucket;
    }
    line += ": ";
    for (char c : message) line += (c == '\n' || c == '\r') ? ' ' : c;  // one line per event
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
}

void LogLimiter::hit(LogLevel level, std::string_view bucket, const std::string& message,
                     std::uint64_t now_ms) {
    if (logged_ && now_ms < last_ms_ + period_ms_) {
        ++suppressed_;
        return;
    }
    std::string m = message;
    if (suppressed_) m += " (and " + std::to_string(suppressed_) + " more since the last line)";
    log(level, bucket, m);
    logged_ = true;
    last_ms_ = now_ms;
    suppressed_ = 0;
}

}  // namespace grl::daemon
