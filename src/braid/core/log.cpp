#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

namespace braid {

namespace {

std::atomic<int> g_rank{0};

}  // namespace

LogLevel log_level() {
  // BRAID_LOG's level, when it names one.
  static const std::optional<LogLevel> chosen = []() -> std::optional<LogLevel> {
    const char* env = std::getenv("BRAID_LOG");
    if (!env || !*env) return std::nullopt;
    if (!std::strcmp(env, "debug")) return LogLevel::debug;
    if (!std::strcmp(env, "warn")) return LogLevel::warn;
    if (!std::strcmp(env, "error")) return LogLevel::error;
    return LogLevel::info;
  }();
  if (chosen) return *chosen;
  return g_rank.load(std::memory_order_relaxed) == 0 ? LogLevel::info : LogLevel::warn;
}

void set_log_rank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }

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
