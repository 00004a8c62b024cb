#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

void log_line(LogLevel level, const std::string& message) {
  static constexpr char tags[] = {'D', 'I', 'W', 'E'};
  std::fprintf(stderr, "[braid %c] %s\n", tags[static_cast<int>(level)], message.c_str());
}

}  // namespace braid
