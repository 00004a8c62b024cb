// `braid launch` with real processes (the braid binary running sh): prefixed output, the
// environment it gives ranks, a failing or killed rank stopping the others (a stopped one
// continued so it can stop; the job's last line repeating the failure in a rank's own
// words), SIGINT to the launcher stopping everyone, a signal delivered twice (as `timeout`
// does) forwarded once with the grace period honoured, and commands that cannot run. Ranks
// announce themselves on stdout, so the tests wait for those lines, never for time.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "launch/braid_process.h"
#include "launch/output_prefixer.h"

namespace {

// The launcher as a child of the test, with its stdout and stderr on pipes.
class Launcher {
 public:
  explicit Launcher(const std::vector<std::string>& args) {
    int out[2], err[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    std::vector<std::string> all = {BRAID_BINARY, "launch"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    fds_[0] = out[0];
    fds_[1] = err[0];
  }
  ~Launcher() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      finish();
    }
  }

  // Reads until stdout holds `count` lines containing `word` (or the launcher closes it).
  void wait_for_lines(const std::string& word, int count) {
    while (occurrences(out_, word) < count && pump()) {
    }
  }
  void signal(int signo) { ::kill(pid_, signo); }

  // Reads everything, reaps the launcher; exit code or 128 + signal.
  int finish() {
    while (pump()) {
    }
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  std::string both() const { return "stdout:\n" + out_ + "stderr:\n" + err_; }

  static int occurrences(const std::string& s, const std::string& word) {
    int n = 0;
    for (size_t p = s.find(word); p != std::string::npos; p = s.find(word, p + 1)) ++n;
    return n;
  }

 private:
  // One poll round; false once both pipes are closed.
  bool pump() {
    std::vector<pollfd> p;
    for (int fd : fds_)
      if (fd >= 0) p.push_back({fd, POLLIN, 0});
    if (p.empty()) return false;
    if (::poll(p.data(), p.size(), -1) < 0) return errno == EINTR;
    for (const pollfd& q : p) {
      if (q.revents == 0) continue;
      const int i = q.fd == fds_[0] ? 0 : 1;
      char buf[4096];
      const ssize_t n = ::read(q.fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? out_ : err_).append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds_[i]);
        fds_[i] = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  std::string out_, err_;
};

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// The pids ranks printed as "pid N"; after the launcher returns none may be alive.
std::vector<pid_t> printed_pids(const std::string& out) {
  std::vector<pid_t> pids;
  for (size_t p = out.find("pid "); p != std::string::npos; p = out.find("pid ", p + 1)) {
    int pid = 0;
    if (std::sscanf(out.c_str() + p, "pid %d", &pid) == 1) pids.push_back(pid);
  }
  return pids;
}

void expect_all_gone(const std::vector<pid_t>& pids) {
  for (pid_t p : pids)
    EXPECT_TRUE(::kill(p, 0) != 0 && errno == ESRCH) << "process " << p << " outlived the launcher";
}

TEST(Launch, ThreeRanksPrintPrefixedLinesAndExitZero) {
  Launcher l(
      {"-n", "3", "--", "sh", "-c", "echo hello from $BRAID_RANK; echo err from $BRAID_RANK >&2"});
  ASSERT_EQ(l.finish(), 0) << l.both();
  const std::vector<std::string> out = lines(l.out()), err = lines(l.err());
  EXPECT_EQ(std::set<std::string>(out.begin(), out.end()),
            (std::set<std::string>{"[rank 0] hello from 0", "[rank 1] hello from 1",
                                   "[rank 2] hello from 2"}))
      << l.both();
  EXPECT_EQ(out.size(), 3u) << l.both();
  EXPECT_EQ(
      std::set<std::string>(err.begin(), err.end()),
      (std::set<std::string>{"[rank 0] err from 0", "[rank 1] err from 1", "[rank 2] err from 2"}))
      << l.both();
}

TEST(Launch, RanksGetBraidsVariables) {
  Launcher l(
      {"-n", "3", "--timeout", "7", "--transport", "tcp", "--", "sh", "-c",
       "echo $BRAID_RANK $BRAID_WORLD_SIZE $BRAID_LOCAL_RANK $BRAID_LOCAL_WORLD_SIZE "
       "$BRAID_STORE_HOSTED ${#BRAID_SECRET} $BRAID_TIMEOUT_S $BRAID_TRANSPORT $BRAID_STORE_ADDR"});
  ASSERT_EQ(l.finish(), 0) << l.both();
  std::set<std::string> addrs;
  int matched = 0;
  for (const std::string& line : lines(l.out())) {
    int prefix_rank = -1, rank = -2, local_rank = -3, port = 0, end = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d] %d 3 %d 3 1 64 7.000 tcp 127.0.0.1:%d%n",
                          &prefix_rank, &rank, &local_rank, &port, &end),
              4)
        << line;
    EXPECT_EQ(static_cast<size_t>(end), line.size()) << line;
    EXPECT_EQ(prefix_rank, rank) << line;
    EXPECT_EQ(prefix_rank, local_rank) << line;
    addrs.insert(std::to_string(port));
    ++matched;
  }
  EXPECT_EQ(matched, 3);
  EXPECT_EQ(addrs.size(), 1u) << "every rank must get the same store";
}

TEST(Launch, LinesNeverInterleaveAndAnUnfinishedLastLineIsKept) {
  // Each line is written in three pieces; ranks race each other.
  Launcher l(
      {"-n", "4", "--", "sh", "-c",
       "i=0; while [ $i -lt 200 ]; do printf 'line %s ' $i; printf 'of rank %s' $BRAID_RANK; "
       "echo ' end'; i=$((i+1)); done; printf 'no newline %s' $BRAID_RANK"});
  ASSERT_EQ(l.finish(), 0) << l.both();
  std::vector<std::string> expected;
  for (int r = 0; r < 4; ++r) {
    const std::string prefix = "[rank " + std::to_string(r) + "] ";
    for (int i = 0; i < 200; ++i)
      expected.push_back(prefix + "line " + std::to_string(i) + " of rank " + std::to_string(r) +
                         " end");
    expected.push_back(prefix + "no newline " + std::to_string(r));
  }
  std::vector<std::string> got = lines(l.out());
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected) << "lines were mangled:\n" << l.out();
  EXPECT_EQ(l.out().back(), '\n');
}

TEST(Launch, FailingRankStopsTheOthersAndIsNamed) {
  const auto start = std::chrono::steady_clock::now();
  Launcher l({"-n", "4", "--", "sh", "-c",
              "echo pid $$; if [ $BRAID_RANK = 2 ]; then exit 3; fi; exec sleep 30"});
  const int code = l.finish();
  EXPECT_EQ(code, 3) << l.both();
  EXPECT_NE(l.err().find("braid launch: rank 2 exited with code 3"), std::string::npos) << l.both();
  EXPECT_NE(l.err().find("stopped the other"), std::string::npos) << l.both();
  expect_all_gone(printed_pids(l.out()));
  // A correctness bound, not a speed one: unstopped ranks would sleep their 30 s.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(25));
}

TEST(Launch, StoppedCountNamesEveryRankStillRunning) {
  // Every rank has exec'd before supervision starts and the others never exit on their
  // own, so all three are running when rank 1's exit is seen.
  Launcher l(
      {"-n", "4", "--", "sh", "-c", "if [ $BRAID_RANK = 1 ]; then exit 5; fi; exec sleep 30"});
  EXPECT_EQ(l.finish(), 5) << l.both();
  EXPECT_NE(l.err().find("rank 1 exited with code 5; stopped the other 3 ranks"), std::string::npos)
      << l.both();
}

TEST(Launch, RankKilledBySignalIsNamed) {
  Launcher l({"-n", "2", "--", "sh", "-c",
              "echo pid $$; if [ $BRAID_RANK = 1 ]; then kill -9 $$; fi; exec sleep 30"});
  EXPECT_EQ(l.finish(), 128 + 9) << l.both();
  EXPECT_NE(l.err().find("rank 1 was killed by signal 9 (SIGKILL); stopped the other rank"),
            std::string::npos)
      << l.both();
  expect_all_gone(printed_pids(l.out()));
}

// The job ends with the failure in the ranks' own words: the failed rank's last line on
// stderr, or, when it died of a signal without a word, the line of the rank that failed
// after it (a survivor of a dead peer names it).
TEST(Launch, LastLineRepeatsTheFailedRanksError) {
  Launcher l({"-n", "2", "--", "sh", "-c",
              "if [ $BRAID_RANK = 1 ]; then echo 'rank 1: bad input' >&2; echo done >&2; "
              "echo 'rank 1: gave up' >&2; echo '  ' >&2; exit 4; fi; exec sleep 30"});
  EXPECT_EQ(l.finish(), 4) << l.both();
  const std::vector<std::string> err = lines(l.err());
  ASSERT_FALSE(err.empty()) << l.both();
  EXPECT_NE(err.back().find("braid launch: rank 1 exited with code 4; stopped the other rank"),
            std::string::npos)
      << l.both();
  EXPECT_TRUE(
      braid::testing::contains(err.back(), ". Last line rank 1 wrote to stderr: rank 1: gave up"))
      << l.both();
}

TEST(Launch, RankKilledBySignalEndsWithTheSurvivorsError) {
  Launcher l({"-n", "2", "--", "sh", "-c",
              "if [ $BRAID_RANK = 1 ]; then echo 'about to go' >&2; echo ready pid $$; exec "
              "sleep 30; fi; trap 'echo \"rank 0: peer rank 1 died\" >&2; exit 2' TERM; "
              "echo ready pid $$; while :; do sleep 0.1; done"});
  l.wait_for_lines("ready", 2);
  int victim = 0;
  for (const std::string& line : lines(l.out()))
    std::sscanf(line.c_str(), "[rank 1] ready pid %d", &victim);
  ASSERT_GT(victim, 0) << l.both();
  ::kill(victim, SIGKILL);
  EXPECT_EQ(l.finish(), 128 + SIGKILL) << l.both();
  const std::vector<std::string> err = lines(l.err());
  ASSERT_FALSE(err.empty()) << l.both();
  EXPECT_NE(err.back().find("braid launch: rank 1 was killed by signal 9 (SIGKILL)"),
            std::string::npos)
      << l.both();
  EXPECT_TRUE(braid::testing::contains(err.back(),
                                       ". Rank 0 then exited with code 2; the last line it "
                                       "wrote to stderr: rank 0: peer rank 1 died"))
      << l.both();
  EXPECT_FALSE(braid::testing::contains(err.back(), "about to go")) << l.both();
}

// A stopped rank (SIGSTOP) gets SIGCONT after SIGTERM, so it stops now rather than at the
// end of the grace period: without it the job below lasts the whole 30 s grace period,
// and its message says the rank got SIGKILL.
TEST(Launch, StoppedRankIsContinuedSoItStopsWithinTheGracePeriod) {
  Launcher l({"-n", "2", "--grace", "30", "--", "sh", "-c",
              "if [ $BRAID_RANK = 1 ]; then echo stopping pid $$; kill -STOP $$; exec sleep 30; "
              "fi; trap 'exit 3' USR1; echo ready pid $$; while :; do sleep 0.1; done"});
  l.wait_for_lines("pid", 2);
  int stopping = 0, ready = 0;
  for (const std::string& line : lines(l.out())) {
    std::sscanf(line.c_str(), "[rank 1] stopping pid %d", &stopping);
    std::sscanf(line.c_str(), "[rank 0] ready pid %d", &ready);
  }
  ASSERT_GT(stopping, 0) << l.both();
  ASSERT_GT(ready, 0) << l.both();
  // Rank 0 fails only once rank 1 is stopped.
  const std::string status = "/proc/" + std::to_string(stopping) + "/stat";
  for (;;) {
    FILE* f = std::fopen(status.c_str(), "r");
    ASSERT_NE(f, nullptr) << "rank 1 is gone: " << l.both();
    char state = 0;
    const int got = std::fscanf(f, "%*d (%*[^)]) %c", &state);
    std::fclose(f);
    if (got == 1 && state == 'T') break;
    ::sched_yield();
  }
  ::kill(ready, SIGUSR1);
  EXPECT_EQ(l.finish(), 3) << l.both();
  EXPECT_NE(l.err().find("rank 0 exited with code 3; stopped the other rank (rank 1 stopped by "
                         "itself within "),
            std::string::npos)
      << l.both();
  EXPECT_EQ(l.err().find("SIGKILL"), std::string::npos) << l.both();
  expect_all_gone(printed_pids(l.out()));
}

TEST(Launch, SigintToTheLauncherStopsEveryone) {
  Launcher l({"-n", "3", "--", "sh", "-c", "echo ready pid $$; exec sleep 30"});
  l.wait_for_lines("ready", 3);
  ASSERT_EQ(Launcher::occurrences(l.out(), "ready"), 3) << l.both();
  l.signal(SIGINT);
  EXPECT_EQ(l.finish(), 128 + SIGINT) << l.both();
  EXPECT_NE(l.err().find("braid launch: interrupted by SIGINT; stopped 3 ranks"), std::string::npos)
      << l.both();
  expect_all_gone(printed_pids(l.out()));
}

TEST(Launch, RanksIgnoringSigtermAreKilledAfterTheGracePeriod) {
  Launcher l({"-n", "2", "--grace", "1", "--", "sh", "-c",
              "trap '' TERM INT; echo ready pid $$; while :; do sleep 1; done"});
  l.wait_for_lines("ready", 2);
  l.signal(SIGTERM);
  EXPECT_EQ(l.finish(), 128 + SIGTERM) << l.both();
  EXPECT_NE(l.err().find("interrupted by SIGTERM; stopped 2 ranks (ranks 0, 1 did not stop "
                         "within the 1.000 s grace period and got SIGKILL)"),
            std::string::npos)
      << l.both();
  expect_all_gone(printed_pids(l.out()));
}

// Ranks that save their work on SIGTERM: the handler takes a while, then exits 0.
constexpr const char* kSavesOnSigterm =
    "trap 'sleep 0.5; echo handled $BRAID_RANK; exit 0' TERM; echo ready pid $$; "
    "while :; do sleep 0.1; done";

void expect_stopped_by_themselves(const std::string& out) {
  EXPECT_TRUE(braid::testing::contains(out, "[rank 0] handled 0")) << out;
  EXPECT_TRUE(braid::testing::contains(out, "[rank 1] handled 1")) << out;
  EXPECT_TRUE(braid::testing::contains(
      out,
      "braid launch: interrupted by SIGTERM; stopped 2 ranks (ranks 0, 1 stopped by "
      "themselves within "))
      << out;
  EXPECT_FALSE(braid::testing::contains(out, "SIGKILL")) << out;
}

TEST(Launch, SigtermToTheLauncherAndItsGroupIsForwardedOnce) {
  // What `timeout` does when time is up: the signal to the launcher, then the same to its
  // process group, which holds the launcher. Before, the echo killed the ranks at once.
  braid::testing::Process l({BRAID_BINARY, "launch", "-n", "2", "--", "sh", "-c", kSavesOnSigterm},
                            {}, /*own_group=*/true);
  ASSERT_TRUE(l.wait_for("ready", 2)) << l.output();
  ::kill(l.pid(), SIGTERM);
  ::kill(-l.pid(), SIGTERM);
  EXPECT_EQ(l.finish(), 128 + SIGTERM) << l.output();
  expect_stopped_by_themselves(l.output());
  expect_all_gone(printed_pids(l.output()));
}

TEST(Launch, UnderTimeoutRanksFinishTheirHandler) {
  if (::access("/usr/bin/timeout", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/timeout";
  braid::testing::Process l({"/usr/bin/timeout", "-s", "TERM", "1", BRAID_BINARY, "launch", "-n",
                             "2", "--", "sh", "-c", kSavesOnSigterm});
  EXPECT_EQ(l.finish(), 124) << l.output();  // timeout's "time ran out"
  if (braid::testing::Process::occurrences(l.output(), "ready") < 2)
    GTEST_SKIP() << "the ranks had not started when timeout fired (a loaded machine):\n"
                 << l.output();
  expect_stopped_by_themselves(l.output());
}

TEST(Launch, ASignalFromSomeoneElseWhileStoppingKillsAtOnce) {
  braid::testing::Process l({BRAID_BINARY, "launch", "-n", "2", "--grace", "30", "--", "sh", "-c",
                             "trap '' TERM INT; echo ready pid $$; while :; do sleep 0.1; done"});
  ASSERT_TRUE(l.wait_for("ready", 2)) << l.output();
  ::kill(l.pid(), SIGTERM);
  ASSERT_TRUE(l.wait_for("waiting up to 30.000 s")) << l.output();
  // A second sender (a person pressing Ctrl-C again, a scheduler): not an echo.
  const pid_t launcher = l.pid();
  const pid_t other = ::fork();
  if (other == 0) {
    ::kill(launcher, SIGTERM);
    ::_exit(0);
  }
  ::waitpid(other, nullptr, 0);
  EXPECT_EQ(l.finish(), 128 + SIGTERM) << l.output();
  EXPECT_TRUE(braid::testing::contains(
      l.output(), "stopped 2 ranks (ranks 0, 1 got SIGKILL at once when SIGTERM came again after"))
      << l.output();
  expect_all_gone(printed_pids(l.output()));
}

TEST(Launch, RankKilledFromOutsideNamesTheOomKillerOnlyAsAPossibility) {
  Launcher l({"-n", "2", "--", "sh", "-c", "echo ready pid $$; exec sleep 30"});
  l.wait_for_lines("ready", 2);
  int rank = -1, pid = 0;
  ASSERT_EQ(std::sscanf(l.out().c_str(), "[rank %d] ready pid %d", &rank, &pid), 2) << l.both();
  ::kill(pid, SIGKILL);  // as a person or a watchdog would: no memory involved
  EXPECT_EQ(l.finish(), 128 + SIGKILL) << l.both();
  EXPECT_NE(l.err().find("braid launch: rank " + std::to_string(rank) +
                         " was killed by signal 9 (SIGKILL); stopped the other rank"),
            std::string::npos)
      << l.both();
  EXPECT_NE(l.err().find("OOM killer"), std::string::npos) << l.both();
  EXPECT_EQ(l.err().find("likely cause"), std::string::npos) << l.both();
}

TEST(Launch, RanksGetTorchrunsVariablesAndAFreshJobId) {
  // Inherited values must not leak through: the launcher's own win.
  ::setenv("RANK", "99", 1);
  ::setenv("WORLD_SIZE", "100", 1);
  const std::string script =
      "echo $BRAID_RANK $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $BRAID_JOB_ID";
  Launcher first({"-n", "3", "--", "sh", "-c", script});
  Launcher second({"-n", "3", "--", "sh", "-c", script});
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  std::set<std::string> ids_of_each[2];
  Launcher* launchers[2] = {&first, &second};
  for (int j = 0; j < 2; ++j) {
    ASSERT_EQ(launchers[j]->finish(), 0) << launchers[j]->both();
    int matched = 0;
    for (const std::string& line : lines(launchers[j]->out())) {
      int prefix = -1, braid_rank = -2, rank = -3, world = 0, local = -4, local_world = 0;
      char id[128] = {};
      ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d] %d %d %d %d %d %127s", &prefix, &braid_rank,
                            &rank, &world, &local, &local_world, id),
                7)
          << line;
      EXPECT_EQ(braid_rank, prefix) << line;
      EXPECT_EQ(rank, prefix) << line;
      EXPECT_EQ(local, prefix) << line;
      EXPECT_EQ(world, 3) << line;
      EXPECT_EQ(local_world, 3) << line;
      ids_of_each[j].insert(id);
      ++matched;
    }
    EXPECT_EQ(matched, 3);
    EXPECT_EQ(ids_of_each[j].size(), 1u) << "every rank of a job must get the same id";
  }
  EXPECT_NE(*ids_of_each[0].begin(), *ids_of_each[1].begin()) << "each job needs its own id";
}

TEST(Launch, LeftoverProcessesOfARankAreKilled) {
  // The rank exits 0 but leaves a background process holding its stdout.
  Launcher l({"-n", "1", "--", "sh", "-c", "sleep 30 & echo pid $!"});
  EXPECT_EQ(l.finish(), 0) << l.both();
  expect_all_gone(printed_pids(l.out()));
}

TEST(Launch, CommandThatCannotRunIsNamed) {
  Launcher missing({"-n", "2", "--", "no-such-braid-command"});
  EXPECT_EQ(missing.finish(), 1) << missing.both();
  EXPECT_NE(missing.err().find("cannot run 'no-such-braid-command'"), std::string::npos)
      << missing.both();
  Launcher not_exec({"-n", "2", "--", BRAID_SOURCE_DIR "/CMakeLists.txt"});
  EXPECT_EQ(not_exec.finish(), 1) << not_exec.both();
  EXPECT_NE(not_exec.err().find("CMakeLists.txt': not an executable file"), std::string::npos)
      << not_exec.both();
}

TEST(Launch, BadArgumentsAreRefused) {
  Launcher zero({"-n", "0", "--", "true"});
  EXPECT_NE(zero.finish(), 0);
  Launcher no_command({"-n", "2"});
  EXPECT_NE(no_command.finish(), 0);
  Launcher bad_transport({"-n", "2", "--transport", "carrier-pigeon", "--", "true"});
  EXPECT_NE(bad_transport.finish(), 0);
}

TEST(OutputPrefixer, CompleteLinesInOneSinkCallLongLinesInPieces) {
  std::vector<std::string> calls;
  braid::launch::OutputPrefixer p(
      "[rank 7] ", [&](std::string_view s) { calls.emplace_back(s); }, 8);
  p.feed("ab");
  EXPECT_TRUE(calls.empty());
  p.feed("c\nde\nf");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], "[rank 7] abc\n[rank 7] de\n");
  p.feed("0123456789");  // "f0123456789": a whole piece of 8 goes out, 3 bytes wait
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1], "[rank 7] f0123456\n");
  p.feed("");
  p.finish();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[2], "[rank 7] 789\n");
  p.finish();
  EXPECT_EQ(calls.size(), 3u);
}

// What the launcher quotes when a rank fails: braid's error line, even when a trailer such
// as CLI11's "Run with --help for more information." followed it.
TEST(OutputPrefixer, RemembersBraidsErrorLineOverATrailer) {
  braid::launch::OutputPrefixer p("[rank 0] ", [](std::string_view) {});
  p.feed("just output\n");
  EXPECT_EQ(p.error_line(), "just output");  // no error line: the last line
  p.feed("braid: error: --batch: 1 required INT missing\nRun with --help for more information.\n");
  EXPECT_EQ(p.last_line(), "Run with --help for more information.");
  EXPECT_EQ(p.error_line(), "braid: error: --batch: 1 required INT missing");
  p.feed("braid: timeout: rank 1 timed out\n\n");
  EXPECT_EQ(p.error_line(), "braid: timeout: rank 1 timed out");
}

TEST(Launch, TheHeadlineQuotesTheRanksErrorNotATrailerAfterIt) {
  Launcher l({"-n", "2", "--", "sh", "-c",
              "if [ $BRAID_RANK = 1 ]; then echo 'braid: error: --batch: 1 required INT missing' "
              ">&2; echo 'Run with --help for more information.' >&2; exit 114; fi; "
              "exec sleep 30"});
  EXPECT_EQ(l.finish(), 114) << l.both();
  const std::vector<std::string> err = lines(l.err());
  ASSERT_FALSE(err.empty()) << l.both();
  EXPECT_TRUE(braid::testing::contains(
      err.back(), "wrote to stderr: braid: error: --batch: 1 required INT missing"))
      << l.both();
  EXPECT_FALSE(braid::testing::contains(err.back(), "Run with --help")) << l.both();
}

// braid itself says a bad flag in one line, which is what the launcher repeats.
TEST(Launch, ABadFlagOfARankIsQuotedInTheHeadline) {
  Launcher l({"-n", "2", "--", BRAID_BINARY, "train", "--model", "mlp", "--batch"});
  EXPECT_NE(l.finish(), 0) << l.both();
  const std::vector<std::string> err = lines(l.err());
  ASSERT_FALSE(err.empty()) << l.both();
  EXPECT_TRUE(braid::testing::contains(err.back(), "wrote to stderr: braid: error: --batch: "))
      << l.both();
  EXPECT_TRUE(braid::testing::contains(err.back(), "(braid train --help lists the flags)"))
      << l.both();
  EXPECT_FALSE(braid::testing::contains(l.both(), "Run with --help")) << l.both();
}

TEST(OutputPrefixer, RemembersTheLastLineThatIsNotBlank) {
  braid::launch::OutputPrefixer p("[rank 0] ", [](std::string_view) {});
  EXPECT_EQ(p.last_line(), "");
  p.feed("first\nbraid: error: it failed\n \t\n\nunfinished");
  EXPECT_EQ(p.last_line(), "braid: error: it failed");
  p.finish();
  EXPECT_EQ(p.last_line(), "unfinished");
  p.feed(std::string(3 * braid::launch::OutputPrefixer::kLastLineBytes, 'x') + "\n");
  EXPECT_EQ(p.last_line(), std::string(braid::launch::OutputPrefixer::kLastLineBytes, 'x'));
}

}  // namespace
