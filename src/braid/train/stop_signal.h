// Graceful stop on SIGINT and SIGTERM. Slurm and Kubernetes preempt a job with SIGTERM and
// wait a grace period before SIGKILL; a person presses Ctrl-C. Either way the run should
// end at the next step boundary with a checkpoint, not lose everything since the last one.
//
// StopOnSignal installs handlers for its lifetime (restoring the previous ones after). The
// first SIGINT/SIGTERM only records the signal (an async-signal-safe atomic store and a
// one-line note on stderr); Trainer::run polls stop_requested() between steps. A second
// signal restores the default action and re-raises it, so the process ends at once; the
// same signal again within half a second is one request delivered twice (`timeout` sends
// it to the child and to its process group; Slurm to every process of a step) and changes
// nothing.
//
// The request is process-wide state because signal dispositions are: one StopOnSignal at a
// time. request_stop() does what the first signal does, for tests and embedders.
//
// The handlers run on an alternate signal stack (SA_ONSTACK), installed for the thread that
// makes the StopOnSignal (the compute thread). Debian 12's oneDNN (2.6) JIT sgemm kernels
// point rsp into the heap while they run (oneDNN issue #4845, fixed in 3.11): a signal frame
// pushed at rsp then overwrites heap memory, and glibc aborts later ("corrupted size vs.
// prev_size"). On the alternate stack the kernel writes the frame there instead.
#pragma once

#include <memory>

namespace braid::train {

// The signal number of a pending stop request, or 0.
int stop_requested();
void request_stop(int signal);
void clear_stop_request();

class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

 private:
  std::unique_ptr<char[]> alt_stack_;  // the handlers' stack on this thread
};

// "SIGTERM", "SIGINT", else "signal N".
const char* signal_name(int signal);

}  // namespace braid::train
