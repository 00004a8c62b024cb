#include "launch/signal_relay.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace braid::launch {
namespace {

std::atomic<int> g_signal_pipe{-1};

extern "C" void forward_to_pipe(int signo, siginfo_t* info, void*) {
  const int saved = errno;
  const int fd = g_signal_pipe.load(std::memory_order_relaxed);
  if (fd >= 0) {
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
    const SignalRecord r{signo, info != nullptr ? static_cast<int32_t>(info->si_pid) : 0,
                         info != nullptr ? info->si_code : 0,
                         static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec};
    [[maybe_unused]] ssize_t n = ::write(fd, &r, sizeof r);
  }
  errno = saved;
}

}  // namespace

SignalRelay::SignalRelay() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    BRAID_THROW(IoError, "launch: cannot create a pipe: ", std::strerror(errno));
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  g_signal_pipe.store(write_fd_);
  struct sigaction sa {};
  sa.sa_sigaction = forward_to_pipe;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP | SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < std::size(kCaught); ++i) ::sigaction(kCaught[i], &sa, &old_[i]);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
}

SignalRelay::~SignalRelay() {
  for (size_t i = 0; i < std::size(kCaught); ++i) ::sigaction(kCaught[i], &old_[i], nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  g_signal_pipe.store(-1);
  ::close(read_fd_);
  ::close(write_fd_);
}

bool is_echo(const SignalRecord& first, const SignalRecord& again) {
  return again.signo == first.signo && again.code == SI_USER && first.code == SI_USER &&
         again.sender == first.sender && again.sender != 0 &&
         again.at_ns - first.at_ns <
             std::chrono::duration_cast<std::chrono::nanoseconds>(kEchoWindow).count();
}

}  // namespace braid::launch
