// Deadlines for every blocking wait in comm/: a point on the steady clock plus the moment
// the wait began, so a TimeoutError can say how long it waited, and how often a wait that
// is still stuck says so before then (comm/stall_watch.h). Value type, thread-safe.
#pragma once

#include <chrono>
#include <cstdint>

namespace braid::comm {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  // Expires `timeout` from now; a non-positive timeout expires immediately.
  static Deadline after(std::chrono::milliseconds timeout) {
    const auto now = Clock::now();
    return Deadline(now, now + timeout);
  }
  static Deadline never() { return Deadline(Clock::now(), Clock::time_point::max()); }
  // The same deadline, and a wait still stuck after `interval` logs a warning naming what
  // it waits for, again every `interval` (0: never).
  Deadline warn_stalls_every(std::chrono::milliseconds interval) const {
    Deadline d = *this;
    d.stall_warning_ = interval;
    return d;
  }

  bool expired() const { return Clock::now() >= at_; }
  bool is_never() const { return at_ == Clock::time_point::max(); }
  Clock::time_point at() const { return at_; }
  Clock::time_point started() const { return started_; }
  std::chrono::milliseconds stall_warning() const { return stall_warning_; }
  // Milliseconds left, clamped to [0, INT32_MAX] so it can feed poll().
  int remaining_ms() const {
    if (is_never()) return INT32_MAX;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now());
    return left.count() <= 0          ? 0
           : left.count() > INT32_MAX ? INT32_MAX
                                      : static_cast<int>(left.count());
  }
  // Seconds since the wait began, for error messages.
  double waited_seconds() const {
    return std::chrono::duration<double>(Clock::now() - started_).count();
  }

 private:
  Deadline(Clock::time_point started, Clock::time_point at) : started_(started), at_(at) {}
  Clock::time_point started_;
  Clock::time_point at_;
  std::chrono::milliseconds stall_warning_{0};
};

// The default for every comm wait when a job says nothing (BRAID_TIMEOUT_S overrides it
// in launch/). Long enough for a slow first connection, short enough that a dead peer is
// reported while someone is still watching.
inline constexpr std::chrono::milliseconds kDefaultTimeout{300'000};

// How long a rank waits for a peer before it logs whom it waits for, and then how often it
// repeats that (Horovod's stall inspector): early enough that a person watching learns which
// rank is stuck, long before kDefaultTimeout ends the job.
inline constexpr std::chrono::milliseconds kDefaultStallWarning{30'000};

}  // namespace braid::comm
