// Stop requests from SIGINT/SIGTERM (see stop_signal.h).
#include "train/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>

#include "core/error.h"

namespace braid::train {
namespace {

// Lock-free, so storing and loading it from a signal handler is async-signal-safe.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

void write_stderr(const char* text) {
  // write(2) is async-signal-safe; a short write of a note is not worth a retry loop.
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
}

// When the first request came (CLOCK_MONOTONIC, ns): a repeat of the same signal within
// kEchoWindowNs is the same request delivered twice, not a person insisting. `timeout`
// signals its child and then its whole process group; Slurm signals every process of a
// step while braid launch forwards the launcher's copy.
std::atomic<int64_t> g_first_ns{0};
constexpr int64_t kEchoWindowNs = 500'000'000;

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe (POSIX)
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

extern "C" void on_stop_signal(int sig) {
  const int saved_errno = errno;
  int expected = 0;
  if (g_stop_signal.compare_exchange_strong(expected, sig)) {
    g_first_ns.store(monotonic_ns());
    write_stderr(sig == SIGINT ? "\nbraid: SIGINT: stopping after this step with a checkpoint "
                                 "(send it again to stop at once, without one)\n"
                               : "\nbraid: SIGTERM: stopping after this step with a checkpoint "
                                 "(send it again to stop at once, without one)\n");
  } else if (expected == sig && monotonic_ns() - g_first_ns.load() < kEchoWindowNs) {
    // The same request again (an echo): keep stopping at the step boundary.
  } else {
    // A second request: the default action (termination) right away.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  errno = saved_errno;
}

struct sigaction g_previous[2];
constexpr int kSignals[2] = {SIGINT, SIGTERM};

// The handler's own frame is small, but the kernel saves the whole register state on the
// stack too (with AVX-512 about 3 KiB; MINSIGSTKSZ is not a constant on glibc 2.34+).
constexpr size_t kAltStackBytes = 64 << 10;
stack_t g_previous_alt_stack{};

}  // namespace

int stop_requested() { return g_stop_signal.load(); }
void request_stop(int signal) { g_stop_signal.store(signal); }
void clear_stop_request() { g_stop_signal.store(0); }

StopOnSignal::StopOnSignal() : alt_stack_(new char[kAltStackBytes]) {
  clear_stop_request();
  stack_t alt{};
  alt.ss_sp = alt_stack_.get();
  alt.ss_size = kAltStackBytes;
  if (::sigaltstack(&alt, &g_previous_alt_stack) != 0)
    BRAID_THROW(Error, "cannot install an alternate signal stack: ", std::strerror(errno));
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // Restart interrupted system calls: the run goes on to the step boundary. On the
  // alternate stack: never at an rsp that a JIT kernel pointed elsewhere (header).
  action.sa_flags = SA_RESTART | SA_ONSTACK;
  for (int i = 0; i < 2; ++i)
    if (::sigaction(kSignals[i], &action, &g_previous[i]) != 0)
      BRAID_THROW(Error, "cannot install a handler for ", signal_name(kSignals[i]), ": ",
                  std::strerror(errno));
}

StopOnSignal::~StopOnSignal() {
  for (int i = 0; i < 2; ++i) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  ::sigaltstack(&g_previous_alt_stack, nullptr);
}

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "a signal";
  }
}

}  // namespace braid::train
