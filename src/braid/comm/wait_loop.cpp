// run_wait and run_test: the loop every transport's wait() and test() share (wait_loop.h).
#include "comm/wait_loop.h"

#include <algorithm>

#include "comm/stall_watch.h"

namespace braid::comm {

void run_wait(WaitSteps& steps, int rank, const Deadline& deadline) {
  try {
    StallWatch stall(deadline);
    bool idle = false;
    Clock::time_point idle_since{};
    for (;;) {
      const bool moved = steps.progress();
      if (steps.done()) break;
      const Clock::time_point now = Clock::now();
      if (!moved) {
        if (!idle) {
          idle = true;
          idle_since = now;
        }
        if (steps.recheck(now)) continue;
      }
      if (now >= deadline.at()) steps.timeout();
      if (stall.due(now)) stall.report(now, rank, steps.pending());
      if (moved) {
        idle = false;
        continue;
      }
      steps.idle(now, now - idle_since, std::min(deadline.at(), stall.next()));
    }
  } catch (...) {
    steps.fail();
    throw;
  }
  steps.release();
}

bool run_test(WaitSteps& steps) {
  try {
    steps.progress();
    if (!steps.done() && !(steps.recheck(Clock::now()) && steps.done())) return false;
  } catch (...) {
    steps.fail();
    throw;
  }
  steps.release();
  return true;
}

}  // namespace braid::comm
