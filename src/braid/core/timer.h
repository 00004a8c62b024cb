// Wall-clock timing for step splits and benchmarks.
#pragma once

#include <chrono>

namespace braid {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds since construction or the last lap().
class Stopwatch {
 public:
  Stopwatch() : start_(now_seconds()) {}
  double elapsed() const { return now_seconds() - start_; }
  double lap() {
    const double t = now_seconds();
    const double d = t - start_;
    start_ = t;
    return d;
  }

 private:
  double start_;
};

}  // namespace braid
