// Captures what braid logs while it lives (core/log.h's sink), for tests that check that a
// warning was (or was not) given. Lines are kept as "W message" (the level's letter first).
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/log.h"

namespace braid::testing {

class LogCapture {
 public:
  LogCapture() {
    previous_ = set_log_sink([this](LogLevel level, const std::string& message) {
      static constexpr char kTags[] = {'D', 'I', 'W', 'E'};
      std::lock_guard lock(mutex_);
      lines_.push_back(std::string(1, kTags[static_cast<int>(level)]) + " " + message);
    });
  }
  ~LogCapture() { set_log_sink(std::move(previous_)); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::vector<std::string> lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  // Lines containing every one of `needles`.
  std::vector<std::string> matching(std::initializer_list<std::string_view> needles) const {
    std::vector<std::string> out;
    for (const auto& line : lines()) {
      bool all = true;
      for (auto n : needles) all = all && line.find(n) != std::string::npos;
      if (all) out.push_back(line);
    }
    return out;
  }
  std::string text() const {
    std::string s;
    for (const auto& line : lines()) s += line + "\n";
    return s;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
  LogSink previous_;
};

}  // namespace braid::testing
