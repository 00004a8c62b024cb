// The one skeleton of Transport::wait() and test(), which every transport runs with its
// own steps: how to make progress, how to tell that its requests are done, what to do
// while nothing moves. The skeleton owns what must behave alike on every transport: the
// deadline (checked on every pass that did not finish, so a wait never outlives it), the
// stall warnings (comm/stall_watch.h), and releasing the requests whether the wait
// succeeds or throws.
//
//   wait:  repeat { progress; done? -> release, return;
//                   idle pass: recheck (peer liveness), maybe go round again;
//                   past the deadline -> timeout(); stall due -> warn with pending();
//                   idle pass: idle() until the next event }
//          any exception: fail(), rethrow
//   test:  progress; done? (else recheck, done?) -> release, true; else false
//
// Not thread-safe: the steps belong to one wait on the thread driving the transport.
#pragma once

#include <string>

#include "comm/deadline.h"

namespace braid::comm {

class WaitSteps {
 public:
  virtual ~WaitSteps() = default;

  // One pass that does not block: moves whatever can move. True when anything moved.
  virtual bool progress() = 0;
  // True when every request waited on is complete; throws the first one's error
  // (PeerError, CollectiveMismatch, ...) when one failed.
  virtual bool done() = 0;
  // Checks worth making only now and then, while nothing moves (whether peers are still
  // alive). True when they changed something, so done() should be asked again.
  virtual bool recheck(Clock::time_point /*now*/) { return false; }
  // What the first pending request waits for, for a stall warning.
  virtual std::string pending() = 0;
  // Throws TimeoutError naming the first pending request.
  [[noreturn]] virtual void timeout() = 0;
  // Nothing moved for `idle_for`: wait a little (spin, yield, sleep, poll), waking no
  // later than `wake` (the deadline or the next stall warning).
  virtual void idle(Clock::time_point now, Clock::duration idle_for, Clock::time_point wake) = 0;
  // The requests are complete: forget them.
  virtual void release() = 0;
  // Called inside the handler of the exception that ends a wait or test: forget the
  // requests (and whatever the transport must do after an error).
  virtual void fail() = 0;
};

// Returns when steps.done(); throws what the steps throw, TimeoutError via
// steps.timeout() once `deadline` has passed. `rank` names this rank in stall warnings.
void run_wait(WaitSteps& steps, int rank, const Deadline& deadline);
// One non-blocking look: true (and released) when the requests are done.
bool run_test(WaitSteps& steps);

}  // namespace braid::comm
