// Minimal leveled logging to stderr: "[braid I] message". Level from BRAID_LOG
// (debug, info, warn, error; default info).
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace braid {

enum class LogLevel { debug, info, warn, error };
LogLevel log_level();
void log_line(LogLevel level, const std::string& message);

// Where lines go instead of stderr, for tests that check what was logged; nullptr restores
// stderr. Returns the previous sink. The sink is called under a lock, one line at a time.
using LogSink = std::function<void(LogLevel, const std::string&)>;
LogSink set_log_sink(LogSink sink);

template <typename... Args>
void log_info(const Args&... args) {
  if (log_level() <= LogLevel::info) log_line(LogLevel::info, detail::concat(args...));
}
template <typename... Args>
void log_warn(const Args&... args) {
  if (log_level() <= LogLevel::warn) log_line(LogLevel::warn, detail::concat(args...));
}
template <typename... Args>
void log_debug(const Args&... args) {
  if (log_level() <= LogLevel::debug) log_line(LogLevel::debug, detail::concat(args...));
}

}  // namespace braid
