// Starting one rank: resolving the command like execvp, then fork + execve with the rank's
// environment, stdout and stderr on pipes to the launcher, stdin on /dev/null, in its own
// process group (so the launcher can signal the rank and everything it started, and a
// Ctrl-C at the terminal reaches only the launcher), and with PR_SET_PDEATHSIG so the rank
// dies with the launcher. Between fork and exec the child makes only async-signal-safe
// calls: the launcher may have other threads (the store's, BLAS's).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace braid::launch {

// The path execve should run for `command`: as given when it contains '/', else the
// first executable file of that name in `path_list` (PATH syntax). Error naming the
// command and why it cannot be run.
std::string resolve_command(const std::string& command, const std::string& path_list);

struct ChildSpec {
  std::string path;                // from resolve_command
  std::vector<std::string> argv;   // argv[0] is the command as the user wrote it
  std::vector<std::string> env;    // "NAME=value" each
  sigset_t mask;                   // the signal mask the child starts with
  std::vector<int> reset_signals;  // set back to SIG_DFL in the child before exec
};

struct ChildProcess {
  pid_t pid = -1;   // also its process group's id
  int out_fd = -1;  // read ends, close-on-exec; the caller closes them
  int err_fd = -1;
};

// Starts the child and returns once it has exec'd. If exec fails the child is reaped and
// this throws Error naming the command and the reason.
ChildProcess spawn_child(const ChildSpec& spec);

}  // namespace braid::launch
