// Metrics as JSON lines (one object per line, appended and flushed), and the progress
// line a person watches: redrawn in place on a terminal, plain lines otherwise.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace braid::train {

class MetricsLog {
 public:
  MetricsLog() = default;
  // Appends to `path` (created if missing).
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);

 private:
  std::FILE* file_ = nullptr;
};

// The progress line on stdout. It is redrawn in place (carriage return, ANSI erase) only
// when stdout and stderr are both terminals: a person watching. Otherwise every update is
// a plain line, so logs hold no escape codes: piped output, and Open MPI's ranks, whose
// stdout is a pseudo-terminal while their stderr is a pipe, with mpirun's own output
// going to a file or pipe as often as not.
class Progress {
 public:
  // A disabled Progress prints nothing (the ranks other than 0).
  explicit Progress(bool enabled = true);
  // "epoch 1/3  step 420/469  loss 0.4123  5,120 samples/s  ETA 0:12"
  void update(const std::string& line);
  // A line that stays (evaluation results, warnings); ends any in-place line first.
  void print(const std::string& line);

 private:
  bool enabled_;
  bool tty_;
  bool dirty_ = false;
};

std::string format_duration(double seconds);  // "1:02:03" or "2:03"

}  // namespace braid::train
