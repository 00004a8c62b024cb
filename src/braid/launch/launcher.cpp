// The supervision loop is one thread polling the ranks' output pipes and a self-pipe fed
// by the signal handlers (the process has other threads, BLAS's and the store's, so a
// signal may land on any of them; a handler that only writes a byte works wherever it
// runs). A SIGCHLD makes the loop look at every exited child with waitid(WNOWAIT): while
// an exited rank is not yet reaped its pid cannot be reused, so killing its process group
// (whatever it left running) cannot hit a stranger; then it is reaped. The launcher is a
// child subreaper, so what a rank orphans is reaped here too, and the loop ends once the
// ranks are gone, their pipes closed and no child is left (or after kDrainLimit).
#include "launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <memory>

#include "comm/secret.h"
#include "comm/store_server.h"
#include "core/error.h"
#include "launch/child_process.h"
#include "launch/output_prefixer.h"

extern char** environ;

namespace braid::launch {
namespace {

using Clock = std::chrono::steady_clock;

// After every rank has exited, how long to wait for pipes still held open, or adopted
// children still alive, when something escaped its rank's process group (setsid).
constexpr std::chrono::milliseconds kDrainLimit{2000};

std::atomic<int> g_signal_pipe{-1};

extern "C" void forward_to_pipe(int signo) {
  const int saved = errno;
  const int fd = g_signal_pipe.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const unsigned char b = static_cast<unsigned char>(signo);
    [[maybe_unused]] ssize_t n = ::write(fd, &b, 1);
  }
  errno = saved;
}

// Installs the handlers for the launch and restores the previous ones afterwards.
class SignalGuard {
 public:
  static constexpr int kCaught[] = {SIGINT, SIGTERM, SIGCHLD};

  SignalGuard() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
      BRAID_THROW(IoError, "launch: cannot create a pipe: ", std::strerror(errno));
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    g_signal_pipe.store(write_fd_);
    struct sigaction sa {};
    sa.sa_handler = forward_to_pipe;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kCaught); ++i) ::sigaction(kCaught[i], &sa, &old_[i]);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old_pipe_);
  }
  ~SignalGuard() {
    for (size_t i = 0; i < std::size(kCaught); ++i) ::sigaction(kCaught[i], &old_[i], nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    g_signal_pipe.store(-1);
    ::close(read_fd_);
    ::close(write_fd_);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

  int read_fd() const { return read_fd_; }

 private:
  int read_fd_ = -1, write_fd_ = -1;
  struct sigaction old_[std::size(kCaught)]{};
  struct sigaction old_pipe_ {};
};

struct Rank {
  ChildProcess proc;
  bool exited = false;
  int code = 0;    // exit code, when signal == 0
  int signal = 0;  // the signal that killed it
  std::unique_ptr<OutputPrefixer> out, err;

  bool failed() const { return signal != 0 || code != 0; }
  std::string how() const {
    if (signal != 0)
      return "was killed by signal " + std::to_string(signal) + " (" + signal_name(signal) + ")";
    return "exited with code " + std::to_string(code);
  }
};

bool starts_with_any(const std::string& entry, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (entry.size() > n.size() && entry.compare(0, n.size(), n) == 0 && entry[n.size()] == '=')
      return true;
  return false;
}

std::string format_seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

std::string ranks_word(int n) { return n == 1 ? "1 rank" : std::to_string(n) + " ranks"; }

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, int signal_fd)
      : options_(options), signal_fd_(signal_fd) {}
  ~Supervisor() { kill_all_now(); }

  void start(const std::string& path, const comm::StoreServer& store, const comm::Secret& secret) {
    std::vector<std::string> ours = {
        "BRAID_RANK",       "BRAID_WORLD_SIZE",   "BRAID_LOCAL_RANK", "BRAID_LOCAL_WORLD_SIZE",
        "BRAID_STORE_ADDR", "BRAID_STORE_HOSTED", "BRAID_SECRET"};
    if (options_.timeout) ours.push_back("BRAID_TIMEOUT_S");
    if (options_.transport) ours.push_back("BRAID_TRANSPORT");
    std::vector<std::string> base;
    for (char** e = environ; *e != nullptr; ++e)
      if (!starts_with_any(*e, ours)) base.emplace_back(*e);
    const std::string n = std::to_string(options_.ranks);
    base.push_back("BRAID_WORLD_SIZE=" + n);
    base.push_back("BRAID_LOCAL_WORLD_SIZE=" + n);
    base.push_back("BRAID_STORE_ADDR=127.0.0.1:" + std::to_string(store.port()));
    base.push_back("BRAID_STORE_HOSTED=1");
    base.push_back("BRAID_SECRET=" + secret.hex());
    if (options_.timeout) base.push_back("BRAID_TIMEOUT_S=" + format_seconds(*options_.timeout));
    if (options_.transport)
      base.push_back("BRAID_TRANSPORT=" +
                     std::string(comm::transport_kind_name(*options_.transport)));

    ChildSpec spec;
    spec.path = path;
    spec.argv = options_.command;
    spec.reset_signals = {SIGINT, SIGTERM, SIGCHLD, SIGPIPE};
    // Signals stay blocked across fork so no handler of ours runs in a child before exec;
    // the child restores the mask it had before.
    sigset_t block;
    sigemptyset(&block);
    for (int s : SignalGuard::kCaught) sigaddset(&block, s);
    for (int r = 0; r < options_.ranks; ++r) {
      spec.env = base;
      spec.env.push_back("BRAID_RANK=" + std::to_string(r));
      spec.env.push_back("BRAID_LOCAL_RANK=" + std::to_string(r));
      ::pthread_sigmask(SIG_BLOCK, &block, &spec.mask);
      ChildProcess proc;
      try {
        proc = spawn_child(spec);
      } catch (...) {
        ::pthread_sigmask(SIG_SETMASK, &spec.mask, nullptr);
        throw;
      }
      ::pthread_sigmask(SIG_SETMASK, &spec.mask, nullptr);
      auto& rank = ranks_.emplace_back();
      rank.proc = proc;
      const std::string prefix = "[rank " + std::to_string(r) + "] ";
      rank.out = std::make_unique<OutputPrefixer>(prefix, fd_sink(options_.out_fd));
      rank.err = std::make_unique<OutputPrefixer>(prefix, fd_sink(options_.err_fd));
    }
  }

  LaunchResult supervise() {
    std::optional<Clock::time_point> drain_until;
    while (true) {
      const bool all_exited = running() == 0;
      if (all_exited && !drain_until) drain_until = Clock::now() + kDrainLimit;
      if (all_exited && ((!any_pipe_open() && !has_children()) || Clock::now() >= *drain_until))
        break;

      std::vector<pollfd> fds = {{signal_fd_, POLLIN, 0}};
      std::vector<std::pair<Rank*, bool>> owners = {{nullptr, false}};
      for (Rank& r : ranks_) {
        for (const bool is_out : {true, false}) {
          const int fd = is_out ? r.proc.out_fd : r.proc.err_fd;
          if (fd < 0) continue;
          fds.push_back({fd, POLLIN, 0});
          owners.emplace_back(&r, is_out);
        }
      }
      int wait_ms = -1;
      if (kill_at_ && !killed_) wait_ms = ms_until(*kill_at_);
      if (drain_until)
        wait_ms = wait_ms < 0 ? ms_until(*drain_until) : std::min(wait_ms, ms_until(*drain_until));
      const int ready = ::poll(fds.data(), fds.size(), wait_ms);
      if (ready < 0 && errno != EINTR)
        BRAID_THROW(IoError, "launch: poll failed: ", std::strerror(errno));
      if (ready > 0) {
        for (size_t i = 1; i < fds.size(); ++i)
          if (fds[i].revents != 0) read_output(*owners[i].first, owners[i].second);
        if (fds[0].revents != 0) handle_signals();
      }
      if (kill_at_ && !killed_ && Clock::now() >= *kill_at_) {
        killed_count_ = running();
        signal_all(SIGKILL);
        killed_ = true;
      }
    }
    for (Rank& r : ranks_) {
      close_output(r, true);
      close_output(r, false);
    }
    return result();
  }

 private:
  static int ms_until(Clock::time_point t) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(t - Clock::now()).count();
    return left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : static_cast<int>(left);
  }

  int running() const {
    int n = 0;
    for (const Rank& r : ranks_) n += r.exited ? 0 : 1;
    return n;
  }
  bool any_pipe_open() const {
    for (const Rank& r : ranks_)
      if (r.proc.out_fd >= 0 || r.proc.err_fd >= 0) return true;
    return false;
  }
  // Orphans adopted as subreaper, still alive or not yet reaped.
  static bool has_children() {
    siginfo_t info{};
    return ::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0;
  }
  void signal_all(int signo) {
    for (const Rank& r : ranks_)
      if (!r.exited) ::kill(-r.proc.pid, signo);
  }
  // Teardown after an error: nothing of ours may outlive the launcher.
  void kill_all_now() {
    for (Rank& r : ranks_) {
      if (!r.exited) {
        ::kill(-r.proc.pid, SIGKILL);
        while (::waitpid(r.proc.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        r.exited = true;
      }
      for (int* fd : {&r.proc.out_fd, &r.proc.err_fd})
        if (*fd >= 0) ::close(*fd), *fd = -1;
    }
  }

  void begin_stopping(int signo) {
    stopped_ = running();
    signal_all(signo);
    kill_at_ = Clock::now() + options_.grace;
  }

  void handle_signals() {
    unsigned char buf[64];
    ssize_t n;
    bool child = false;
    while ((n = ::read(signal_fd_, buf, sizeof buf)) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        const int signo = buf[i];
        if (signo == SIGCHLD) {
          child = true;
        } else if (!kill_at_) {
          interrupted_by_ = signo;
          begin_stopping(signo);
        } else if (!killed_) {
          // Asked again while stopping: stop waiting for the grace period.
          if (interrupted_by_ == 0 && !failed_) interrupted_by_ = signo;
          killed_count_ = running();
          signal_all(SIGKILL);
          killed_ = true;
        }
      }
    }
    if (child) reap();
  }

  // Looks at every exited child without reaping it first (WNOWAIT). The launcher is a
  // child subreaper, so processes a rank orphaned come here too and are simply reaped.
  void reap() {
    while (true) {
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
      const pid_t pid = info.si_pid;
      size_t i = 0;
      while (i < ranks_.size() && (ranks_[i].exited || ranks_[i].proc.pid != pid)) ++i;
      if (i < ranks_.size()) {
        Rank& r = ranks_[i];
        if (info.si_code == CLD_EXITED)
          r.code = info.si_status;
        else
          r.signal = info.si_status;
        // Still unreaped, so the group id is ours: take down what the rank left behind.
        ::kill(-pid, SIGKILL);
        r.exited = true;
        if (r.failed() && !kill_at_) {
          failed_ = static_cast<int>(i);
          begin_stopping(SIGTERM);
        }
      }
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }

  void read_output(Rank& r, bool is_out) {
    int& fd = is_out ? r.proc.out_fd : r.proc.err_fd;
    char buf[65536];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      (is_out ? r.out : r.err)->feed(std::string_view(buf, static_cast<size_t>(n)));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      close_output(r, is_out);
    }
  }

  void close_output(Rank& r, bool is_out) {
    int& fd = is_out ? r.proc.out_fd : r.proc.err_fd;
    if (fd < 0) return;
    (is_out ? r.out : r.err)->finish();
    ::close(fd);
    fd = -1;
  }

  LaunchResult result() const {
    LaunchResult res;
    std::string stopped;
    if (failed_) {
      const Rank& r = ranks_[static_cast<size_t>(*failed_)];
      res.exit_code = r.signal != 0 ? 128 + r.signal : r.code;
      res.message = "braid launch: rank " + std::to_string(*failed_) + " " + r.how();
      if (stopped_ > 0)
        res.message += stopped_ == 1 ? "; stopped the other rank"
                                     : "; stopped the other " + ranks_word(stopped_);
    } else if (interrupted_by_ != 0) {
      res.exit_code = 128 + interrupted_by_;
      res.message = "braid launch: interrupted by " + signal_name(interrupted_by_) + "; stopped " +
                    ranks_word(stopped_);
    } else {
      return res;
    }
    if (killed_count_ > 0)
      res.message += " (" + std::to_string(killed_count_) + " did not stop within " +
                     format_seconds(options_.grace) + " s and got SIGKILL)";
    return res;
  }

  const LaunchOptions& options_;
  int signal_fd_;
  std::vector<Rank> ranks_;
  std::optional<int> failed_;                 // the first rank that failed
  int interrupted_by_ = 0;                    // SIGINT or SIGTERM received by the launcher
  int stopped_ = 0;                           // ranks running when stopping began
  std::optional<Clock::time_point> kill_at_;  // set once stopping began
  bool killed_ = false;
  int killed_count_ = 0;
};

}  // namespace

std::string signal_name(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

LaunchResult launch(const LaunchOptions& options) {
  BRAID_CHECK(options.ranks >= 1, "launch: -n must be at least 1, got ", options.ranks);
  if (options.command.empty())
    BRAID_THROW(Error, "braid launch: no command to run; usage: braid launch -n N -- CMD ARGS...");
  const char* path_env = ::getenv("PATH");
  const std::string path = resolve_command(
      options.command[0], path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin");

  SignalGuard signals;
  // Orphans of the ranks become the launcher's children, to be reaped rather than left
  // as zombies under an init that may not reap.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  struct SubreaperOff {
    ~SubreaperOff() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } subreaper_off;
  const comm::Secret secret = comm::Secret::generate();
  comm::StoreServerOptions store_options;
  store_options.host = "127.0.0.1";
  store_options.port = 0;
  store_options.secret = secret;
  comm::StoreServer store(std::move(store_options));

  Supervisor supervisor(options, signals.read_fd());
  supervisor.start(path, store, secret);
  return supervisor.supervise();
}

}  // namespace braid::launch
