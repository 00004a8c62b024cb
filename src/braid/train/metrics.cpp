#include "train/metrics.h"

#include <unistd.h>

#include <cmath>

#include "core/error.h"

namespace braid::train {

MetricsLog::MetricsLog(const std::string& path) : file_(std::fopen(path.c_str(), "a")) {
  if (!file_) BRAID_THROW(IoError, "metrics: cannot open '", path, "' for appending");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

Progress::Progress(bool enabled)
    : enabled_(enabled), tty_(isatty(STDOUT_FILENO) != 0 && isatty(STDERR_FILENO) != 0) {}

void Progress::update(const std::string& line) {
  if (!enabled_) return;
  if (tty_) {
    std::printf("\r\033[K%s", line.c_str());
    dirty_ = true;
  } else {
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
}

void Progress::print(const std::string& line) {
  if (!enabled_) return;
  if (dirty_) std::printf("\n");
  dirty_ = false;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  return buf;
}

}  // namespace braid::train
