// What a job prints, as a log file or a terminal receives it: info lines once (rank 0),
// warnings from any rank, and the progress line redrawn in place only for a person at a
// terminal, never in a pipe or under Open MPI (whose ranks write stdout to a
// pseudo-terminal and stderr to a pipe).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "temp_dir.h"
#include "tiny_mlp.h"

namespace {

using braid::testing::BraidResult;
using braid::testing::run_braid;
using braid::testing::TempDir;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  return CPU_COUNT(&set);
}

// The tiny MLP (tiny_mlp.h's model) for 6 steps, a progress line after each.
std::string train_args(const TempDir& tmp, const std::string& out, int threads = 1) {
  braid::testing::tiny_mlp_flags(tmp);  // writes the model spec
  return "train --model " + tmp.file("tiny_mlp.json") +
         " --batch 16 --schedule constant --optimizer sgd --lr 0.05 --steps 6 --log-every 1 "
         "--eval-batches 1 --threads " +
         std::to_string(threads) + " --out " + tmp.file(out);
}

// Two ranks under braid launch, everything on pipes: rank 1 says no info line, but its
// warnings (threads beyond the cores, on every rank) still come; no escape codes.
TEST(LogOutputCli, UnderALauncherOnlyRankZeroSaysInfoAndPipesGetPlainLines) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string threads = std::to_string(usable_cores() + 1);
  const BraidResult r = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " " +
                                      train_args(tmp, "run", usable_cores() + 1),
                                  "BRAID_TIMEOUT_S=60");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "[rank 0] [braid I] ")) << r.output;
  EXPECT_FALSE(has(r.output, "[rank 1] [braid I] ")) << r.output;
  EXPECT_TRUE(has(r.output, "[rank 1] [braid W] threads " + threads + " exceeds")) << r.output;
  EXPECT_TRUE(has(r.output, "[rank 0] [braid W] threads " + threads + " exceeds")) << r.output;
  EXPECT_FALSE(has(r.output, "\r")) << r.output;
  EXPECT_FALSE(has(r.output, "\x1b")) << r.output;
  EXPECT_TRUE(has(r.output, "[rank 0] epoch 1/1  step 6/6")) << r.output;

  // BRAID_LOG names a level for every rank alike: rank 1's info lines are back.
  const BraidResult all =
      run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " " + train_args(tmp, "all"),
                "BRAID_TIMEOUT_S=60 BRAID_LOG=info");
  ASSERT_EQ(all.code, 0) << all.output;
  EXPECT_TRUE(has(all.output, "[rank 1] [braid I] ")) << all.output;
}

// A braid process with stdout on a raw pseudo-terminal and stderr on a pipe or the same
// terminal; what each received.
struct TtyRun {
  int code = -1;
  std::string tty, err;
};

TtyRun run_on_tty(const std::vector<std::string>& args, bool stderr_on_tty) {
  TtyRun run;
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  EXPECT_GE(master, 0);
  EXPECT_EQ(::grantpt(master), 0);
  EXPECT_EQ(::unlockpt(master), 0);
  const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  EXPECT_GE(slave, 0);
  termios raw{};
  ::tcgetattr(slave, &raw);
  ::cfmakeraw(&raw);  // bytes as written: no "\n" -> "\r\n" of a terminal's output
  ::tcsetattr(slave, TCSANOW, &raw);
  int err[2];
  EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
  std::vector<std::string> all = args;
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(slave, 1);
    ::dup2(stderr_on_tty ? slave : err[1], 2);
    ::close(master);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(slave);
  ::close(err[1]);
  int fds[2] = {master, err[0]};
  while (fds[0] >= 0 || fds[1] >= 0) {
    std::vector<pollfd> p;
    for (int fd : fds)
      if (fd >= 0) p.push_back({fd, POLLIN, 0});
    if (::poll(p.data(), p.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (const pollfd& q : p) {
      if (q.revents == 0) continue;
      const int i = q.fd == fds[0] ? 0 : 1;
      char buf[4096];
      const ssize_t n = ::read(q.fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? run.tty : run.err).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {  // a terminal whose last writer left: EIO
        ::close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// Open MPI gives each rank a pseudo-terminal for stdout and a pipe for stderr, whatever
// mpirun's own output is: the progress line must not redraw there. At a terminal (both
// streams) it still does.
TEST(LogOutputCli, ProgressRedrawsInPlaceOnlyWhenStdoutAndStderrAreATerminal) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto args = [&](const std::string& out) {
    std::vector<std::string> v = {BRAID_BINARY};
    std::string a = train_args(tmp, out) + " ";
    for (size_t at = 0, sp; (sp = a.find(' ', at)) != std::string::npos; at = sp + 1)
      if (sp > at) v.push_back(a.substr(at, sp - at));
    return v;
  };
  const TtyRun mpi_like = run_on_tty(args("a"), /*stderr_on_tty=*/false);
  ASSERT_EQ(mpi_like.code, 0) << mpi_like.tty << mpi_like.err;
  EXPECT_TRUE(has(mpi_like.tty, "epoch 1/1  step 6/6")) << mpi_like.tty;
  EXPECT_FALSE(has(mpi_like.tty, "\r")) << mpi_like.tty;
  EXPECT_FALSE(has(mpi_like.tty, "\x1b")) << mpi_like.tty;

  const TtyRun person = run_on_tty(args("b"), /*stderr_on_tty=*/true);
  ASSERT_EQ(person.code, 0) << person.tty;
  EXPECT_TRUE(has(person.tty, "\r\x1b[Kepoch 1/1  step 6/6")) << person.tty;
}

}  // namespace
