#include "cli/stop_signal_wait.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"

namespace braid::cli {
namespace {

int g_wake[2] = {-1, -1};
volatile sig_atomic_t g_signal = 0;

extern "C" void on_stop(int sig) {
  const int saved_errno = errno;
  g_signal = sig;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(g_wake[1], &byte, 1);  // async-signal-safe
  errno = saved_errno;
}

}  // namespace

void catch_stop_signals(const char* who) {
  if (g_wake[0] >= 0) return;
  if (::pipe(g_wake) != 0) BRAID_THROW(Error, who, ": cannot make a pipe: ", std::strerror(errno));
  struct sigaction action {};
  action.sa_handler = on_stop;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (const int sig : {SIGINT, SIGTERM})
    if (::sigaction(sig, &action, nullptr) != 0)
      BRAID_THROW(Error, who, ": cannot handle ", strsignal(sig), ": ", std::strerror(errno));
}

// The pipe wakes it at once; the poll's 200 ms bound is for ThreadSanitizer, which defers a
// handler until the thread leaves its blocking call: a read restarted by SA_RESTART never
// returned, and the store outlived its SIGTERM.
int wait_for_stop_signal(int timeout_ms) {
  pollfd wake{g_wake[0], POLLIN, 0};
  const Stopwatch watch;
  while (g_signal == 0) {
    if (timeout_ms >= 0 && watch.elapsed() * 1e3 >= timeout_ms) return 0;
    ::poll(&wake, 1, 200);
  }
  return g_signal;
}

}  // namespace braid::cli
