// How `braid launch` hears signals: handlers for SIGINT, SIGTERM and SIGCHLD write one
// record per signal (which, who sent it, when) to a self-pipe the supervision loop polls.
// The process has other threads (BLAS's, the store's), so a signal may land on any of them;
// a handler that only writes such a record works wherever it runs. SIGPIPE is ignored
// meanwhile: a rank's closed pipe must not kill the launcher.
//
// Not thread-safe: one SignalRelay per process at a time; it restores the previous
// handlers when destroyed.
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <iterator>

namespace braid::launch {

// What a handler writes to the self-pipe: well under PIPE_BUF, so each write is atomic and
// reads return whole records.
struct SignalRecord {
  int32_t signo;
  int32_t sender;  // si_pid: 0 when the kernel sent it (a terminal's Ctrl-C)
  int32_t code;    // si_code: SI_USER for kill(2)
  int64_t at_ns;   // CLOCK_MONOTONIC when it arrived
};

class SignalRelay {
 public:
  static constexpr int kCaught[] = {SIGINT, SIGTERM, SIGCHLD};

  SignalRelay();  // IoError when the pipe cannot be made
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  int read_fd() const { return read_fd_; }  // non-blocking

 private:
  int read_fd_ = -1, write_fd_ = -1;
  struct sigaction old_[std::size(kCaught)]{};
  struct sigaction old_pipe_ {};
};

// coreutils `timeout` signals its child and then its own process group, which holds the
// child: the launcher gets the same signal twice from one sender within microseconds. A
// person asking again takes far longer, and a terminal's Ctrl-C comes from the kernel
// (sender 0), once per key press, so neither is mistaken for such an echo.
inline constexpr std::chrono::milliseconds kEchoWindow{500};
bool is_echo(const SignalRecord& first, const SignalRecord& again);

}  // namespace braid::launch
