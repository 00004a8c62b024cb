// `braid launch`: starts N ranks of one job on this machine and supervises them.
//
// The launcher makes a fresh secret, hosts the job's store itself (so the store outlives
// a failed rank 0), and starts every rank with braid's variables (launch/env.h) in its
// own process group. Rank output reaches the launcher's stdout and stderr as whole lines
// prefixed "[rank i] ". SIGINT and SIGTERM are forwarded to every rank. When a rank exits
// non-zero or by a signal, the others get SIGTERM, then SIGKILL after the grace period,
// and the result names the rank. Ranks die with the launcher (PR_SET_PDEATHSIG), and
// whatever a rank leaves running in its process group is killed when it exits.
//
// Not thread-safe: one launch() per process at a time (it installs signal handlers for
// SIGINT, SIGTERM, SIGCHLD and ignores SIGPIPE while it runs, then restores them).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "comm/transport_factory.h"

namespace braid::launch {

struct LaunchOptions {
  int ranks = 1;
  std::vector<std::string> command;                  // program and arguments, run through PATH
  std::optional<std::chrono::milliseconds> timeout;  // BRAID_TIMEOUT_S for the ranks
  std::optional<comm::TransportKind> transport;      // BRAID_TRANSPORT for the ranks
  std::chrono::milliseconds grace{3000};             // SIGTERM -> SIGKILL
  int out_fd = 1;                                    // where the ranks' stdout lines go
  int err_fd = 2;                                    // where their stderr lines go
};

struct LaunchResult {
  // 0 when every rank exited 0; else the failing rank's exit code, or 128 + the signal
  // that killed it (or that interrupted the launcher).
  int exit_code = 0;
  std::string message;  // one line for the user when exit_code != 0
};

// Errors before any rank runs (a command that cannot be executed, no store) are
// braid::Error / IoError naming the problem.
LaunchResult launch(const LaunchOptions& options);

// "SIGKILL" for 9; "signal 64" when it has no name.
std::string signal_name(int signo);

}  // namespace braid::launch
