#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace braid {

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* env = std::getenv("BRAID_LOG");
    if (!env) return LogLevel::info;
    if (!std::strcmp(env, "debug")) return LogLevel::debug;
    if (!std::strcmp(env, "warn")) return LogLevel::warn;
    if (!std::strcmp(env, "error")) return LogLevel::error;
    return LogLevel::info;
  }();
  return level;
}

namespace {

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

LogSink& sink() {
  static LogSink s;
  return s;
}

}  // namespace

void log_line(LogLevel level, const std::string& message) {
  static constexpr char tags[] = {'D', 'I', 'W', 'E'};
  std::lock_guard lock(sink_mutex());
  if (sink()) {
    sink()(level, message);
    return;
  }
  std::fprintf(stderr, "[braid %c] %s\n", tags[static_cast<int>(level)], message.c_str());
}

LogSink set_log_sink(LogSink s) {
  std::lock_guard lock(sink_mutex());
  std::swap(sink(), s);
  return s;
}

}  // namespace braid
