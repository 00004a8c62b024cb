// The supervision loop is one thread polling the ranks' output pipes and a self-pipe fed
// by the signal handlers (launch/signal_relay.h). An elastic job's side (member ids,
// restarts, rounds, other hosts' agents) is launch/elastic_agent.h's. A SIGCHLD makes the
// loop look at every exited child with waitid(WNOWAIT): while an exited rank is not yet
// reaped its pid cannot be reused, so killing its process group (whatever it left running)
// cannot hit a stranger; then it is reaped. The launcher is a child subreaper, so what a
// rank orphans is reaped here too, and the loop ends once the ranks are gone, their pipes
// closed and no child is left (or after kDrainLimit).
#include "launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>

#include "comm/blame.h"
#include "comm/membership.h"
#include "core/error.h"
#include "launch/child_process.h"
#include "launch/output_prefixer.h"
#include "launch/ps_restart_policy.h"
#include "launch/rank_process.h"
#include "launch/signal_relay.h"

extern char** environ;

namespace braid::launch {
namespace {

using Clock = std::chrono::steady_clock;

// After every rank has exited, how long to wait for pipes still held open, or adopted
// children still alive, when something escaped its rank's process group (setsid).
constexpr std::chrono::milliseconds kDrainLimit{2000};

// Parameter-server jobs: how long a worker may run on after every server exited (it sent
// `done` just before they finished) before the launcher stops it as unable to progress.
constexpr std::chrono::milliseconds kStrandedGrace{30000};

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, int signal_fd, OomWatch& oom)
      : options_(options), signal_fd_(signal_fd), oom_(oom) {}
  ~Supervisor() { kill_all_now(); }

  // `elastic`: an elastic job's agent side (it outlives the Supervisor); null otherwise.
  void start(const std::string& path, const std::string& store_address, const comm::Secret& secret,
             const std::string& job_id, ElasticAgent* elastic) {
    path_ = path;
    elastic_ = elastic;
    // braid's own variables come first for braid's ranks (launch/env.h); torchrun's are
    // set too, with the same values, for programs that only know those.
    std::vector<std::string> ours = {"BRAID_RANK",
                                     "BRAID_WORLD_SIZE",
                                     "BRAID_LOCAL_RANK",
                                     "BRAID_LOCAL_WORLD_SIZE",
                                     "BRAID_STORE_ADDR",
                                     "BRAID_STORE_HOSTED",
                                     "BRAID_SECRET",
                                     "BRAID_JOB_ID",
                                     "RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_RANK",
                                     "LOCAL_WORLD_SIZE",
                                     "BRAID_PS_RESTARTS",
                                     "BRAID_RESTART_COUNT"};
    if (options_.timeout) ours.push_back("BRAID_TIMEOUT_S");
    if (options_.transport) ours.push_back("BRAID_TRANSPORT");
    std::vector<std::string> base;
    for (char** e = environ; *e != nullptr; ++e)
      if (!starts_with_any(*e, ours)) base.emplace_back(*e);
    // An agent of a job over several hosts: the world is every agent's ranks.
    const std::string world = std::to_string(elastic_ ? elastic_->place().world : options_.ranks);
    const std::string local = std::to_string(options_.ranks);
    for (const char* name : {"BRAID_WORLD_SIZE=", "WORLD_SIZE="}) base.push_back(name + world);
    for (const char* name : {"BRAID_LOCAL_WORLD_SIZE=", "LOCAL_WORLD_SIZE="})
      base.push_back(name + local);
    base.push_back("BRAID_STORE_ADDR=" + store_address);
    base.push_back("BRAID_STORE_HOSTED=1");
    base.push_back("BRAID_SECRET=" + secret.hex());
    base.push_back("BRAID_JOB_ID=" + job_id);
    if (options_.timeout) base.push_back("BRAID_TIMEOUT_S=" + format_seconds(*options_.timeout));
    if (options_.transport)
      base.push_back("BRAID_TRANSPORT=" +
                     std::string(comm::transport_kind_name(*options_.transport)));
    if (elastic_) base.push_back("BRAID_ELASTIC=1");
    if (ps_restarts_enabled()) {
      base.push_back("BRAID_PS_RESTARTS=" + std::to_string(options_.ps_max_restarts));
      ps_restarts_ = std::make_unique<PsRestartPolicy>(options_.ps_max_restarts, store_address,
                                                       secret, job_id);
    }
    if (elastic_ && !options_.elastic->join_file.empty()) write_join_file(base);
    base_env_ = std::move(base);
    for (int r = 0; r < options_.ranks; ++r) spawn(r, 0);
  }

  // The ranks' shared variables that let a process started by hand join (see ElasticOptions).
  void write_join_file(const std::vector<std::string>& base) const {
    const std::string& path = options_.elastic->join_file;
    std::string text;
    for (const std::string& v : base)
      for (const char* name :
           {"BRAID_STORE_ADDR=", "BRAID_STORE_HOSTED=", "BRAID_SECRET=", "BRAID_JOB_ID=",
            "BRAID_ELASTIC=", "BRAID_WORLD_SIZE=", "BRAID_TIMEOUT_S=", "BRAID_TRANSPORT="})
        if (v.rfind(name, 0) == 0) text += v + "\n";
    // braid's convention names a rank beside the world size; an elastic job's rounds give
    // the joining process its real one.
    text += "BRAID_RANK=0\n";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
      BRAID_THROW(IoError, "braid launch: cannot write --join-file '", path,
                  "': ", std::strerror(errno));
    const ssize_t n = ::write(fd, text.data(), text.size());
    ::close(fd);
    if (n != static_cast<ssize_t>(text.size()))
      BRAID_THROW(IoError, "braid launch: cannot write --join-file '", path, "'");
  }

  // Starts rank `slot` (again, when `incarnation` > 0: an elastic job's restart).
  void spawn(int slot, int incarnation) {
    ChildSpec spec;
    spec.path = path_;
    spec.argv = options_.command;
    spec.reset_signals = {SIGINT, SIGTERM, SIGCHLD, SIGPIPE};
    // Signals stay blocked across fork so no handler of ours runs in a child before exec;
    // the child restores the mask it had before.
    sigset_t block;
    sigemptyset(&block);
    for (int s : SignalRelay::kCaught) sigaddset(&block, s);
    {
      const int r = slot;
      spec.env = base_env_;
      const std::string rank = std::to_string(first_rank() + r);
      for (const char* name : {"BRAID_RANK=", "RANK="}) spec.env.push_back(name + rank);
      for (const char* name : {"BRAID_LOCAL_RANK=", "LOCAL_RANK="})
        spec.env.push_back(name + std::to_string(r));
      if (options_.servers > 0) {
        const int workers = workers_of_ps_job();
        const bool worker = r < workers;
        const bool evaluator = options_.evaluator && r == options_.ranks - 1;
        spec.env.push_back(std::string("BRAID_ROLE=") + (worker      ? "worker"
                                                         : evaluator ? "evaluator"
                                                                     : "ps"));
        spec.env.push_back("BRAID_ROLE_INDEX=" + std::to_string(worker      ? r
                                                                : evaluator ? 0
                                                                            : r - workers));
        spec.env.push_back("BRAID_NUM_WORKERS=" + std::to_string(workers));
        spec.env.push_back("BRAID_NUM_SERVERS=" + std::to_string(options_.servers));
        spec.env.push_back(std::string("BRAID_NUM_EVALUATORS=") + (options_.evaluator ? "1" : "0"));
      }
      if (elastic_) {
        spec.env.push_back("BRAID_ELASTIC_MEMBER=" + elastic_->member_id(r, incarnation));
        spec.env.push_back("BRAID_RESTART_COUNT=" + std::to_string(incarnation));
      }
      if (ps_restarts_enabled())
        spec.env.push_back("BRAID_RESTART_COUNT=" + std::to_string(incarnation));
      ::pthread_sigmask(SIG_BLOCK, &block, &spec.mask);
      ChildProcess proc;
      try {
        proc = spawn_child(spec);
      } catch (...) {
        ::pthread_sigmask(SIG_SETMASK, &spec.mask, nullptr);
        throw;
      }
      ::pthread_sigmask(SIG_SETMASK, &spec.mask, nullptr);
      auto& entry = ranks_.emplace_back();
      entry.proc = proc;
      entry.slot = r;
      entry.incarnation = incarnation;
      if (elastic_) entry.member = elastic_->member_id(r, incarnation);
      // Appended piecewise: "[" + label(r) trips GCC 12's -Wrestrict false positive.
      std::string prefix(1, '[');
      prefix.append(label(r)).append("] ");
      entry.out = std::make_unique<OutputPrefixer>(prefix, fd_sink(options_.out_fd));
      entry.err = std::make_unique<OutputPrefixer>(prefix, fd_sink(options_.err_fd));
    }
  }

  LaunchResult supervise() {
    std::optional<Clock::time_point> drain_until;
    while (true) {
      // The agent hosting an elastic job's store outlives its own ranks while other hosts'
      // may still use it.
      const bool all_exited =
          running() == 0 && (!elastic_ || kill_at_ || !elastic_->others_running());
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
      // An elastic job's coordinator looks at the open round every few milliseconds: a
      // recovery waits on it.
      if (elastic_ && !kill_at_) wait_ms = wait_ms < 0 ? 5 : std::min(wait_ms, 5);
      if (servers_done_at_ && !kill_at_) {
        // Look at the workers left running again when their grace ends (and now and then
        // for one that gets stopped meanwhile).
        const int check = std::min(ms_until(*servers_done_at_ + kStrandedGrace), 500);
        wait_ms = wait_ms < 0 ? check : std::min(wait_ms, check);
      }
      if (stranded_kill_at_) {
        const int check = ms_until(*stranded_kill_at_);
        wait_ms = wait_ms < 0 ? check : std::min(wait_ms, check);
      }
      const int ready = ::poll(fds.data(), fds.size(), wait_ms);
      if (ready < 0 && errno != EINTR)
        BRAID_THROW(IoError, "launch: poll failed: ", std::strerror(errno));
      if (ready > 0) {
        for (size_t i = 1; i < fds.size(); ++i)
          if (fds[i].revents != 0) read_output(*owners[i].first, owners[i].second);
        if (fds[0].revents != 0) handle_signals();
      }
      if (kill_at_ && !killed_ && Clock::now() >= *kill_at_) kill_now(0);
      coordinate();
      stop_stranded_workers();
      if (stranded_kill_at_ && Clock::now() >= *stranded_kill_at_) {
        for (Rank& r : ranks_)
          if (r.stranded && !r.exited) ::kill(-r.proc.pid, SIGKILL);
        stranded_kill_at_.reset();
      }
    }
    for (Rank& r : ranks_) {
      close_output(r, true);
      close_output(r, false);
    }
    if (elastic_) elastic_->finish();
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
  int workers_of_ps_job() const {
    return options_.ranks - options_.servers - (options_.evaluator ? 1 : 0);
  }
  bool is_worker_of_ps_job(size_t i) const {
    return options_.servers > 0 && ranks_[i].slot < workers_of_ps_job();
  }
  bool ps_restarts_enabled() const { return options_.servers > 0 && options_.ps_max_restarts > 0; }
  // The latest process of `slot` (a restart's, if it was restarted).
  size_t current(int slot) const {
    size_t at = 0;
    for (size_t i = 0; i < ranks_.size(); ++i)
      if (ranks_[i].slot == slot) at = i;
    return at;
  }
  // A parameter-server job's worker or server that failed: restarted when the policy says
  // so (the return), else the decision "none" is logged for the survivors.
  bool restart_ps_rank(size_t i) {
    Rank& r = ranks_[i];
    if (options_.evaluator && r.slot == options_.ranks - 1) return false;
    const bool restart = ps_restarts_->decide(r.slot, r.incarnation, r.signal != 0);
    if (!ps_restarts_->error().empty())
      say("braid launch: cannot record the fate of " + name_of(i) +
          " in the job's store, so it is not restarted: " + ps_restarts_->error());
    if (!restart) return false;
    r.absorbed = true;
    respawn_.push_back(r.slot);
    say("braid launch: " + name_of(i) + " " + r.how() + "; restarting it (restart " +
        std::to_string(ps_restarts_->used()) + " of " + std::to_string(ps_restarts_->max()) +
        (is_worker_of_ps_job(i) ? "); it rejoins the job and the servers count it again"
                                : "); it reloads its range from the run's last checkpoint and "
                                  "the workers reconnect to it"));
    return true;
  }
  // ranks_[i]'s label: its slot's, and which restart it is.
  std::string name_of(size_t i) const {
    const Rank& r = ranks_[i];
    return label(r.slot) +
           (r.incarnation > 0 ? " (restart " + std::to_string(r.incarnation) + ")" : "");
  }
  // An agent's first rank in its job's first round (0 but on a multi-host job's agents).
  int first_rank() const { return elastic_ ? elastic_->place().first_rank : 0; }
  // "rank 3", or in a parameter-server job "worker 1" / "ps 0" / "evaluator".
  std::string label(int r) const {
    if (options_.servers == 0) return "rank " + std::to_string(first_rank() + r);
    const int workers = workers_of_ps_job();
    if (options_.evaluator && r == options_.ranks - 1) return "evaluator";
    return r < workers ? "worker " + std::to_string(r) : "ps " + std::to_string(r - workers);
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

  // Sends `signo` once to every running rank and starts the grace period. SIGCONT
  // follows (as systemd does): a stopped rank (SIGSTOP, a job-control stop) would leave
  // `signo` pending and only die of the SIGKILL at the end of the grace period.
  void begin_stopping(int signo) {
    stop_began_ = Clock::now();
    stop_signal_ = signo;
    for (Rank& r : ranks_) r.running_at_stop = !r.exited;
    stopped_ = running();
    signal_all(signo);
    signal_all(SIGCONT);
    kill_at_ = *stop_began_ + options_.grace;
  }

  // SIGKILL to every rank still running: the grace period ended (`signo` 0) or `signo`
  // came while stopping.
  void kill_now(int signo) {
    kill_signal_ = signo;
    killed_after_ = Clock::now() - *stop_began_;
    for (Rank& r : ranks_)
      if (!r.exited) r.sent_sigkill = true;
    signal_all(SIGKILL);
    killed_ = true;
  }

  void say(const std::string& line) {
    const std::string text = line + "\n";
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(options_.err_fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

  void handle_signals() {
    SignalRecord buf[16];
    ssize_t n;
    bool child = false;
    while ((n = ::read(signal_fd_, buf, sizeof buf)) > 0) {
      for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(SignalRecord); ++i) {
        const SignalRecord& sig = buf[i];
        if (sig.signo == SIGCHLD) {
          child = true;
        } else if (!kill_at_) {
          request_ = sig;
          interrupted_by_ = sig.signo;
          begin_stopping(sig.signo);
          say("braid launch: " + signal_name(sig.signo) + " received: forwarded it to " +
              ranks_word(stopped_) + "; waiting up to " + format_seconds(options_.grace) +
              " s for them to stop (signal again to kill them now)");
        } else if (request_ && is_echo(*request_, sig)) {
          // The same request delivered twice (see kEchoWindow): the ranks already have it.
        } else if (!killed_) {
          if (interrupted_by_ == 0 && !failed_) interrupted_by_ = sig.signo;
          kill_now(sig.signo);
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
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) break;
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
        r.exited_at = Clock::now();
        if (r.stranded) {
          // Stopped by the launcher after the servers finished: already reported.
        } else if (ps_restarts_ && r.failed() && !kill_at_ && restart_ps_rank(i)) {
          // Started again below, once the reaping is done.
        } else if (r.failed() && !kill_at_ && is_worker_of_ps_job(i)) {
          lost_workers_.push_back(name_of(i) + " " + r.how());
          const std::string line = "braid launch: " + lost_workers_.back() +
                                   "; the servers decide whether the job goes on without it "
                                   "(ps.mode async and ssp do, sync fails naming it)\n";
          [[maybe_unused]] ssize_t n = ::write(options_.err_fd, line.data(), line.size());
        } else if (elastic_ && r.signal != 0 && !kill_at_) {
          absorb(i);
        } else if (r.failed() && !kill_at_) {
          failed_ = static_cast<int>(i);
          // Read the kernel's records now, while they are fresh, and which ranks are
          // stopped (SIGSTOP) before the SIGCONT that follows the SIGTERM.
          if (r.signal == SIGKILL) failure_note_ = oom_.explain_sigkill(pid);
          for (Rank& other : ranks_)
            if (!other.exited) other.state_at_failure = process_state(other.proc.pid);
          begin_stopping(SIGTERM);
        }
      }
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      stop_stranded_workers();
    }
    for (const int slot : respawn_) spawn(slot, ++incarnations_[slot]);
    respawn_.clear();
  }

  // An elastic job's rank died of a signal: the others go on without it (they meet in a
  // new round), and it is restarted while restarts are left (launch/elastic_agent.h).
  void absorb(size_t i) {
    Rank& r = ranks_[i];
    r.absorbed = true;
    std::string line;
    if (elastic_->restart_after_kill(name_of(i), r.how(), line)) respawn_.push_back(r.slot);
    say(line);
    if (running() == 0 && respawn_.empty()) all_lost_ = static_cast<int>(i);
  }

  // Every local rank of an elastic job is gone for good. On one host, or on an agent that
  // does not host the store, that ends this launcher; the agent hosting the store stays up
  // while other hosts' ranks may go on, and fails only when none of them finished.
  void check_all_lost() {
    if (!all_lost_ || failed_ || kill_at_ || elastic_->others_running()) return;
    const bool multi_host = elastic_->place().node >= 0;
    if (multi_host && elastic_->others_finished()) return;
    failed_ = *all_lost_;
    line_for_failure_ = !multi_host ? "every rank of the elastic job is gone"
                        : elastic_->coordinates()
                            ? "every rank of the elastic job is gone, on every host"
                            : "this host's ranks are all gone and it has no restarts left "
                              "(--max-restarts counts per host); the other hosts go on";
  }

  // An elastic job's rounds and agents (launch/elastic_agent.h): members left out of a
  // round are killed (and restarted); an agent cut off from the job gives up.
  void coordinate() {
    if (!elastic_ || kill_at_) return;
    std::vector<std::string> live, gone;
    for (const Rank& r : ranks_) (r.exited ? gone : live).push_back(r.member);
    const AgentActions actions = elastic_->tick(live, gone, [&](const std::string& member) {
      for (const Rank& r : ranks_)
        if (r.member == member) return r.exited ? comm::Liveness::gone : comm::Liveness::alive;
      return comm::Liveness::unknown;
    });
    for (const std::string& line : actions.lines) say(line);
    for (const std::string& m : actions.kill)
      for (const Rank& r : ranks_)
        if (r.member == m && !r.exited) ::kill(-r.proc.pid, SIGKILL);
    if (!actions.fail.empty()) give_up(actions.fail);
    check_all_lost();
  }

  // This agent can no longer take part in its job (cut off from the store): its ranks are
  // killed at once, since they can neither finish nor save, and the launch fails saying why.
  void give_up(const std::string& why) {
    agent_failure_ = why;
    stop_began_ = Clock::now();
    for (Rank& r : ranks_) r.running_at_stop = !r.exited;
    stopped_ = running();
    kill_at_ = stop_began_;
    kill_now(0);
  }

  // A parameter-server job whose servers (and evaluator) have all exited: a worker still
  // running can make no more progress. One whose process is stopped would wait forever, so
  // it is stopped and named at once; any other gets kStrandedGrace to exit by itself (it
  // told the servers it was done just before they finished, or its own deadline will end
  // it). Whether the job failed is decided by the workers' and servers' own exits.
  void stop_stranded_workers() {
    if (options_.servers == 0 || kill_at_) return;
    const int workers = workers_of_ps_job();
    std::vector<int> running;
    // A server restarting counts as running: its slot is started again after the reaping.
    if (!respawn_.empty()) return;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].slot >= workers && !ranks_[i].exited) return;  // a server still runs
      if (ranks_[i].slot < workers && !ranks_[i].exited && !ranks_[i].stranded)
        running.push_back(int(i));
    }
    if (running.empty()) return;
    if (!servers_done_at_) servers_done_at_ = Clock::now();
    const bool grace_over = Clock::now() >= *servers_done_at_ + kStrandedGrace;
    std::vector<int> stranded;
    for (const int w : running) {
      Rank& r = ranks_[static_cast<size_t>(w)];
      r.state_at_failure = process_state(r.proc.pid);
      // 'T' only: a tracing stop ('t') is a debugger, or LeakSanitizer checking at exit.
      if (grace_over || r.state_at_failure == 'T') stranded.push_back(w);
    }
    if (stranded.empty()) return;
    std::string names;
    for (const int w : stranded) {
      Rank& r = ranks_[static_cast<size_t>(w)];
      r.stranded = true;
      names += (names.empty() ? "" : ", ") + label(r.slot) + state_note(r);
      lost_workers_.push_back(label(r.slot) +
                              " could make no progress after every server finished" +
                              state_note(r) + "; the launcher stopped it");
    }
    // Only these: a worker that said done may still be exiting, and must exit by itself.
    for (const int w : stranded) {
      ::kill(-ranks_[static_cast<size_t>(w)].proc.pid, SIGTERM);
      ::kill(-ranks_[static_cast<size_t>(w)].proc.pid, SIGCONT);
    }
    stranded_kill_at_ = Clock::now() + options_.grace;
    say("braid launch: every server has finished, and " + names +
        " cannot make progress without them: stopping " + (stranded.size() == 1 ? "it" : "them"));
  }

  // " (its process was stopped)" for a rank that was stopped (SIGSTOP, SIGTSTP) when looked
  // at; empty otherwise.
  static std::string state_note(const Rank& r) {
    return r.state_at_failure == 'T' ? " (its process was stopped: SIGSTOP or SIGTSTP)" : "";
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

  // How the ranks running when stopping began ended: by themselves (within how long), or
  // by the launcher's SIGKILL (and why). Empty when none was running.
  std::string stop_details() const {
    std::vector<int> by_themselves, killed;
    Clock::duration longest{0};
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const Rank& r = ranks_[i];
      if (!r.running_at_stop) continue;
      if (r.killed_by_launcher()) {
        killed.push_back(static_cast<int>(i));
      } else {
        by_themselves.push_back(static_cast<int>(i));
        if (r.exited) longest = std::max(longest, r.exited_at - *stop_began_);
      }
    }
    std::vector<std::string> parts;
    if (!by_themselves.empty())
      parts.push_back(rank_list(by_themselves) + " stopped by " +
                      (by_themselves.size() == 1 ? "itself" : "themselves") + " within " +
                      format_seconds(longest) + " s of " + signal_name(stop_signal_));
    if (!killed.empty()) {
      if (kill_signal_ == 0)
        parts.push_back(rank_list(killed) + " did not stop within the " +
                        format_seconds(options_.grace) + " s grace period and got SIGKILL");
      else
        parts.push_back(rank_list(killed) + " got SIGKILL at once when " +
                        signal_name(kill_signal_) + (request_ ? " came again" : " arrived") +
                        " after " + format_seconds(killed_after_) + " s");
    }
    if (parts.empty()) return "";
    std::string s = " (";
    for (size_t i = 0; i < parts.size(); ++i) s += (i == 0 ? "" : "; ") + parts[i];
    return s + ")";
  }

  // The rank the failed rank's error blames for making no progress (comm/blame.h), when
  // that is another rank of this job.
  std::optional<int> blamed(size_t failed) const {
    const Rank& f = ranks_[failed];
    if (f.signal != 0) return std::nullopt;
    const std::optional<int> who = comm::find_no_progress(f.err->last_line());
    if (!who || *who == static_cast<int>(failed) || *who >= static_cast<int>(ranks_.size()))
      return std::nullopt;
    return who;
  }

  // A parameter-server job that went on without failed workers: it failed all the same
  // when its chief (worker 0, which saves the run) or every worker failed.
  // A restarted slot is judged by its latest process.
  std::optional<size_t> failed_worker_that_fails_the_job() const {
    if (options_.servers == 0) return std::nullopt;
    const int workers = workers_of_ps_job();
    int failed = 0;
    for (int w = 0; w < workers; ++w) {
      const Rank& r = ranks_[current(w)];
      failed += r.failed() || r.stranded;
    }
    const Rank& chief = ranks_[current(0)];
    if (chief.failed() || chief.stranded) return current(0);
    if (failed == workers) return current(workers - 1);
    return std::nullopt;
  }

  LaunchResult result() const {
    LaunchResult res;
    res.lost_workers = lost_workers_;
    if (!agent_failure_.empty()) {
      res.exit_code = 1;
      res.message = agent_failure_;
      return res;
    }
    if (failed_) {
      const Rank& r = ranks_[static_cast<size_t>(*failed_)];
      res.exit_code = r.signal != 0 ? 128 + r.signal : r.code;
      if (const std::optional<int> b = blamed(static_cast<size_t>(*failed_))) {
        // The headline names the rank that stopped making progress, not the one that gave
        // up waiting for it.
        const Rank& culprit = ranks_[static_cast<size_t>(*b)];
        res.message = "braid launch: " + label(*b) + " stopped making progress" +
                      state_note(culprit) + ": " + name_of(static_cast<size_t>(*failed_)) + " " +
                      r.how() + " after waiting for it";
      } else {
        res.message = "braid launch: " + name_of(static_cast<size_t>(*failed_)) + " " + r.how();
        if (!line_for_failure_.empty()) res.message += ": " + line_for_failure_;
      }
      if (stopped_ > 0)
        res.message += stopped_ == 1 ? "; stopped the other rank"
                                     : "; stopped the other " + ranks_word(stopped_);
    } else if (const std::optional<size_t> w = failed_worker_that_fails_the_job()) {
      const Rank& r = ranks_[*w];
      res.exit_code = r.stranded ? 128 + SIGTERM : r.signal != 0 ? 128 + r.signal : r.code;
      if (res.exit_code == 0) res.exit_code = 1;
      res.message =
          "braid launch: the job failed: " +
          std::string(r.slot == 0 ? "its chief, worker 0, "
                                  : "every worker failed; the last, " + name_of(*w) + ", ") +
          (r.stranded ? "could make no progress after every server finished" : r.how());
      if (!r.stranded && r.signal == 0 && !r.err->last_line().empty())
        res.message += ". Last line " + name_of(*w) + " wrote to stderr: " + r.err->last_line();
      return res;
    } else if (interrupted_by_ != 0) {
      res.exit_code = 128 + interrupted_by_;
      res.message = "braid launch: interrupted by " + signal_name(interrupted_by_) + "; stopped " +
                    ranks_word(stopped_);
    } else {
      return res;
    }
    res.message += stop_details();
    if (!failure_note_.empty()) res.message += ". " + failure_note_;
    if (failed_) res.message += error_line(static_cast<size_t>(*failed_));
    // A server that failed because the chief did: the chief's own words too.
    const Rank& chief = ranks_[current(0)];
    if (failed_ && options_.servers > 0 && !is_worker_of_ps_job(static_cast<size_t>(*failed_)) &&
        chief.failed() && chief.signal == 0 && !chief.err->last_line().empty())
      res.message += ". Worker 0 had failed before; the last line it wrote to stderr: " +
                     chief.err->last_line();
    return res;
  }

  // What explains the failure in the ranks' own words, so the job ends with it: the last
  // line the failed rank wrote to stderr; when it has none (killed by a signal, it said
  // nothing), that of the first other rank that then failed by itself, such as a
  // survivor's "allreduce of gradient bucket 0 failed: ... rank 1 (process N) died".
  std::string error_line(size_t failed) const {
    const Rank& f = ranks_[failed];
    if (f.signal == 0 && !f.err->error_line().empty())
      return ". Last line " + name_of(failed) + " wrote to stderr: " + f.err->error_line();
    const Rank* first = nullptr;
    for (const Rank& r : ranks_)
      if (&r != &f && r.exited && r.signal == 0 && r.code != 0 && !r.err->error_line().empty() &&
          (first == nullptr || r.exited_at < first->exited_at))
        first = &r;
    if (first == nullptr) return "";
    std::string who = name_of(static_cast<size_t>(first - ranks_.data()));
    who[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(who[0])));
    return ". " + who + " then " + first->how() +
           "; the last line it wrote to stderr: " + first->err->error_line();
  }

  const LaunchOptions& options_;
  std::string path_;
  std::vector<std::string> base_env_;  // every rank's environment but its own place
  ElasticAgent* elastic_ = nullptr;    // elastic jobs
  std::optional<int> all_lost_;        // elastic jobs: the last local rank lost for good
  std::string agent_failure_;          // elastic jobs: why this agent gave up on its job
  std::map<int, int> incarnations_;    // slot -> restarts so far
  std::vector<int> respawn_;           // slots to restart once the reaping loop is done
  std::string line_for_failure_;       // elastic jobs: why the job failed, when no rank said
  int signal_fd_;
  OomWatch& oom_;
  std::vector<Rank> ranks_;
  std::optional<int> failed_;                     // the first rank that failed
  std::vector<std::string> lost_workers_;         // parameter-server jobs: workers that failed
  std::unique_ptr<PsRestartPolicy> ps_restarts_;  // parameter-server jobs with restarts
  std::string failure_note_;                      // why it may have died (SIGKILL)
  std::optional<SignalRecord> request_;           // the signal that asked the launcher to stop
  int interrupted_by_ = 0;                        // SIGINT or SIGTERM received by the launcher
  int stopped_ = 0;                               // ranks running when stopping began
  int stop_signal_ = 0;                           // what they were sent then
  std::optional<Clock::time_point> stop_began_;
  std::optional<Clock::time_point> kill_at_;           // set once stopping began
  std::optional<Clock::time_point> servers_done_at_;   // ps jobs: when every server had exited
  std::optional<Clock::time_point> stranded_kill_at_;  // SIGKILL for stranded workers still up
  bool killed_ = false;
  int kill_signal_ = 0;  // 0: the grace period ran out
  Clock::duration killed_after_{0};
};

}  // namespace

LaunchResult supervise_ranks(const LaunchOptions& options, const RankStart& start, int signal_fd,
                             OomWatch& oom) {
  Supervisor supervisor(options, signal_fd, oom);
  supervisor.start(start.path, start.store_address, start.secret, start.job_id, start.elastic);
  return supervisor.supervise();
}

}  // namespace braid::launch
