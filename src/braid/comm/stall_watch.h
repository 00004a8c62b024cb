// The stall inspector of one blocking wait (after Horovod's): a wait that has gone on for
// its deadline's stall_warning() logs which peer and which call it waits for, and repeats
// that at most once per interval, so a person learns which rank holds up the job long
// before the deadline turns the wait into a TimeoutError.
//
// Use in a wait loop: wake no later than next(); when due(now), report(now, what) with a
// description of the first request still pending. Not thread-safe: one per wait.
#pragma once

#include <cstdio>
#include <string>

#include "comm/deadline.h"
#include "core/log.h"

namespace braid::comm {

class StallWatch {
 public:
  explicit StallWatch(const Deadline& deadline)
      : deadline_(deadline),
        next_(deadline.stall_warning().count() > 0 ? deadline.started() + deadline.stall_warning()
                                                   : Clock::time_point::max()) {}

  // When the wait should next look (time_point::max(): never).
  Clock::time_point next() const { return next_; }
  bool due(Clock::time_point now) const { return now >= next_; }

  // `rank` waits for `what` ("a receive of 8 bytes from rank 1 for allreduce #7 ...").
  void report(Clock::time_point now, int rank, const std::string& what) {
    std::string left;
    if (!deadline_.is_never())
      left = "; it gives up in " + seconds(deadline_.at() - now) + " s (the timeout)";
    log_warn("rank ", rank, " is still waiting after ", seconds(now - deadline_.started()),
             " s: ", what, left);
    next_ = now + deadline_.stall_warning();
  }

 private:
  static std::string seconds(Clock::duration d) {
    char s[32];
    std::snprintf(s, sizeof(s), "%.1f", std::chrono::duration<double>(d).count());
    return s;
  }

  Deadline deadline_;
  Clock::time_point next_;
};

}  // namespace braid::comm
