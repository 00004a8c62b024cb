// Minimal leveled logging to stderr: "[braid I] message". Level from BRAID_LOG
// (debug, info, warn, error). Without BRAID_LOG, rank 0 of a job (and a lone process)
// logs at info and every other rank at warn, so a job's info lines come once while any
// rank's warnings and errors still show; BRAID_LOG set applies to every rank alike.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace braid {

enum class LogLevel { debug, info, warn, error };
LogLevel log_level();
// This process's rank in its job, for the default level above (0 until set). Set once at
// start-up, by the command that reads the rank; thread-safe.
void set_log_rank(int rank);
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
