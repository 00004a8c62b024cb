// Issue 16, point 7: no silent hang, named faults. A 2-rank DDP `braid train` under `braid
// launch`, as real processes: a rank killed with kill -9 mid-training, a rank that stops
// (SIGSTOP), two ranks with different models. The other rank fails naming the rank, the
// collective and the bucket, and the launcher's last line repeats that error.
//
// Each rank runs through `sh -c 'echo pid $$; exec braid train ...'`, so the test learns
// every rank's pid (exec keeps it) from the "[rank i] pid N" lines. A hang guard kills the
// launcher when a job outlives a generous bound: the tests wait for lines and exits, and
// the bound only turns a hang into a failure.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli/fault_helpers.h"
#include "fashion_mnist_data.h"
#include "launch/braid_process.h"
#include "temp_dir.h"

namespace {

using braid::testing::HangGuard;
using braid::testing::has_text;
using braid::testing::last_line;
using braid::testing::let_it_compute;
using braid::testing::Process;
using braid::testing::TempDir;

// `braid launch -n 2 -- sh -c 'echo pid $$; exec braid train ARGS'` with BRAID_TIMEOUT_S.
// `train_args` is shell text: it may use $BRAID_RANK.
std::unique_ptr<Process> launch_two_ranks(const std::string& train_args,
                                          const std::string& timeout_s) {
  const std::string script =
      "echo pid $$; exec " + std::string(BRAID_BINARY) + " train " + train_args;
  return std::make_unique<Process>(
      std::vector<std::string>{BRAID_BINARY, "launch", "-n", "2", "--", "sh", "-c", script},
      std::map<std::string, std::string>{{"BRAID_TIMEOUT_S", timeout_s}});
}

// The pid rank `rank` printed, after waiting for its line; 0 if the output ended first.
pid_t rank_pid(Process& p, int rank) {
  const std::string tag = "[rank " + std::to_string(rank) + "] pid ";
  if (!p.wait_for(tag)) return 0;
  int pid = 0;
  const std::string& out = p.output();
  if (std::sscanf(out.c_str() + out.find(tag) + tag.size(), "%d", &pid) != 1) return 0;
  return pid;
}

// The CNN at batch 128: a step takes tens of milliseconds of compute against well under a
// millisecond between a rank's gradient allreduce and its next collective (the per-step
// stop vote), so a rank killed or stopped after a few steps is, all but surely, one the
// other waits for in a gradient bucket's allreduce. 225,034 parameters: one bucket.
std::string cnn_args(const TempDir& tmp) {
  return "--config " BRAID_SOURCE_DIR
         "/configs/cnn.json --batch 128 --max-steps 200 "
         "--log-every 2 --threads 1 --overwrite --out " +
         tmp.file("out");
}

// Sends SIGKILL to a rank the test stopped, unless disarmed once the launcher has reaped
// it: a failing assertion must not leave a stopped process behind.
struct StoppedRank {
  pid_t pid = 0;
  ~StoppedRank() {
    if (pid > 0) ::kill(pid, SIGKILL);
  }
};

constexpr auto kHangLimit = std::chrono::seconds(60);

// kill -9 of rank 1 mid-training: rank 0 fails at once (its deadline is 120 s, so no
// timeout can be what ends it) naming rank 1 as dead and the collective it waited in; the
// launcher's last line says rank 1 was killed by SIGKILL and repeats rank 0's error. On a
// loaded machine the kill sometimes lands in rank 1's per-step stop vote ("sum over ranks
// failed: rank 1 ... died", or the next bucket's "allreduce of gradient bucket 0 was not
// run: sum over ranks failed before it: ... rank 1 ... died"); that run must be named as
// well, and the job is run again (up to 5 times) until a kill lands in a gradient
// allreduce, whose error must name the bucket.
TEST(TrainFaults, RankKilledMidTrainingIsNamedByTheOtherAndByTheLauncher) {
  REQUIRE_FASHION_MNIST();
  bool in_bucket = false;
  for (int attempt = 0; attempt < 5 && !in_bucket; ++attempt) {
    const TempDir tmp;
    auto job = launch_two_ranks(cnn_args(tmp), "120");
    HangGuard guard(job->pid(), kHangLimit);
    const pid_t victim = rank_pid(*job, 1);
    ASSERT_GT(victim, 0) << job->output();
    ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();  // training is under way
    let_it_compute(victim, 7);
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    const int code = job->finish();
    ASSERT_FALSE(guard.fired()) << "the job hung after rank 1 died:\n" << job->output();
    EXPECT_EQ(code, 128 + SIGKILL) << job->output();

    const std::string dead = "rank 1 (process " + std::to_string(victim) + ") died";
    const std::string tag = "[rank 0] braid: I/O error: ";
    const size_t at = job->output().find(tag);
    ASSERT_NE(at, std::string::npos) << job->output();
    const std::string error =
        job->output().substr(at + 9, job->output().find('\n', at) - at - 9);  // without "[rank 0] "
    EXPECT_TRUE(has_text(error, dead));
    in_bucket =
        has_text(error, "allreduce of gradient bucket 0 failed: rank 0 was waiting for rank 1");
    const std::string last = last_line(job->output());
    EXPECT_TRUE(has_text(last, "braid launch: rank 1 was killed by signal 9 (SIGKILL)"));
    EXPECT_TRUE(has_text(
        last, "Rank 0 then exited with code 2; the last line it wrote to stderr: " + error));
  }
  EXPECT_TRUE(in_bucket) << "no kill landed in a gradient allreduce in 5 runs";
}

// Rank 1 stopped (SIGSTOP) mid-training: rank 0 gives up at its 3 s deadline naming rank
// 1 as alive but absent and the collective; the launcher ends with that line, and the
// stopped rank is continued and stopped rather than waited out (25 s grace). As above, a
// stop that lands in the per-step stop vote is named too, and the job runs again until a
// stop lands in a gradient allreduce, whose error must name the bucket.
TEST(TrainFaults, StoppedRankTimesTheOtherOutNamingItAndTheBucket) {
  REQUIRE_FASHION_MNIST();
  bool in_bucket = false;
  for (int attempt = 0; attempt < 5 && !in_bucket; ++attempt) {
    const TempDir tmp;
    auto job = launch_two_ranks(cnn_args(tmp), "3");
    HangGuard guard(job->pid(), kHangLimit);
    StoppedRank stopped;
    const pid_t staller = rank_pid(*job, 1);
    ASSERT_GT(staller, 0) << job->output();
    ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
    let_it_compute(staller, 7);
    ASSERT_EQ(::kill(staller, SIGSTOP), 0);
    stopped.pid = staller;
    ASSERT_TRUE(job->wait_for("braid launch: ")) << job->output();
    stopped.pid = 0;  // the launcher continued it and has reaped it
    const int code = job->finish();
    ASSERT_FALSE(guard.fired()) << "the job hung after rank 1 stopped:\n" << job->output();
    EXPECT_EQ(code, 3) << job->output();  // braid's exit code for a timeout

    const std::string tag = "[rank 0] braid: timeout: ";
    const size_t at = job->output().find(tag);
    ASSERT_NE(at, std::string::npos) << job->output();
    const std::string error =
        job->output().substr(at + 9, job->output().find('\n', at) - at - 9);  // without "[rank 0] "
    EXPECT_TRUE(has_text(error, "rank 0 timed out after 3"));
    EXPECT_TRUE(has_text(error, "rank 1"));
    in_bucket =
        has_text(error, "allreduce of gradient bucket 0 failed: rank 0 timed out after 3") &&
        has_text(error, "waiting for rank 1 to enter allreduce #") &&
        has_text(error, "rank 1 is alive but has not got there");
    const std::string last = last_line(job->output());
    // The headline blames the rank that stopped, not the one that gave up waiting for it.
    EXPECT_TRUE(has_text(last,
                         "braid launch: rank 1 stopped making progress (its process was stopped: "
                         "SIGSTOP or SIGTSTP): rank 0 exited with code 3 after waiting for it"))
        << last;
    EXPECT_TRUE(has_text(last, "Last line rank 0 wrote to stderr: " + error));
    // Continued by the launcher, not left stopped until the grace period's SIGKILL.
    EXPECT_FALSE(has_text(last, "grace period and got SIGKILL"));
  }
  EXPECT_TRUE(in_bucket) << "no stop landed in a gradient allreduce in 5 runs";
}

// Rank 0 and rank 1 are given different models: the config check at start (before the
// layout check could) fails on both at once, long before the 120 s deadline, and the
// launcher ends with the error naming both ranks' models.
TEST(TrainFaults, DifferentModelsFailAtOnceNamingBothRanks) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  for (const int width : {32, 16})
    std::ofstream(tmp.file("mlp" + std::to_string(width == 32 ? 0 : 1) + ".json"))
        << R"({"input": [28, 28, 1], "layers": [{"type": "flatten"}, )"
        << R"({"type": "linear", "out_features": )" << width
        << R"(}, {"type": "relu"}, {"type": "linear", "out_features": 10}]})";
  auto job = launch_two_ranks("--model " + tmp.path() +
                                  "/mlp$BRAID_RANK.json --batch 16 --max-steps 20 --threads 1 "
                                  "--out " +
                                  tmp.file("out"),
                              "120");
  HangGuard guard(job->pid(), kHangLimit);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the job waited on different models:\n" << job->output();
  EXPECT_EQ(code, 1) << job->output();
  const std::string named =
      "braid: error: the ranks of this job were started with different configs: rank 1 "
      "differs in model (rank 0: {\"input\":[28,28,1],\"layers\":[{\"type\":\"flatten\"},"
      "{\"out_features\":32,";
  EXPECT_TRUE(has_text(job->output(), named)) << job->output();
  const std::string last = last_line(job->output());
  EXPECT_TRUE(has_text(last, " exited with code 1")) << last;
  EXPECT_TRUE(has_text(last, "wrote to stderr: " + named)) << last;
  EXPECT_FALSE(has_text(job->output(), "timed out")) << job->output();
}

}  // namespace
