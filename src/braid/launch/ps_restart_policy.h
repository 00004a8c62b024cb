// The launcher's side of restarting a parameter-server job's processes (`braid launch
// --servers S --workers W --max-restarts K`, LaunchOptions::ps_max_restarts): which dead
// worker or server is started again, and the word the survivors read in the store.
//
// A worker or server killed by a signal is restarted in its slot, as a new process told its
// incarnation (BRAID_RESTART_COUNT), while restarts are left (K over the whole job). One that
// exits with an error code is not: that is a bug or bad input, which a restart would repeat.
// Either way the decision goes into the job's restart log (comm/restart_log.h) before the
// new process starts, so the servers know whether to wait for a worker, and the workers
// whether to wait for a server, or to go on (or fail) as without restarts.
//
// Not thread-safe: the launcher's supervision loop owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/restart_log.h"
#include "comm/secret.h"

namespace braid::launch {

class PsRestartPolicy {
 public:
  // Reaches the job's store (`store_address`, "host:port": BRAID_STORE_ADDR) under the
  // job's prefix.
  PsRestartPolicy(int max_restarts, const std::string& store_address, const comm::Secret& secret,
                  const std::string& job_id);

  // Process `incarnation` of rank `rank` ended in failure (`by_signal`: a signal killed
  // it). Records the decision and returns whether to start the rank again. A store that
  // cannot be reached records nothing and restarts nothing (the survivors then go on as
  // in a job without restarts, after their bounded wait for the word).
  bool decide(int rank, int incarnation, bool by_signal);
  int used() const { return used_; }
  int max() const { return max_; }
  // Why the last decide() failed to record, or "".
  const std::string& error() const { return error_; }

 private:
  int max_;
  int used_ = 0;
  std::unique_ptr<comm::RestartLog> log_;
  std::string error_;
};

}  // namespace braid::launch
