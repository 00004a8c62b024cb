// Issue 29: elastic DDP jobs as real processes under `braid launch --min-ranks ...`: ranks
// killed with kill -9 (rank 0 included) are restarted while the others go on, a rank asked
// to stop alone leaves, processes started by hand join, a stopped rank is left out after the
// rendezvous timeout, and a job with too few ranks left fails naming why.
//
// Each rank runs through `sh -c 'echo pid $$; exec braid train ...'`, so the test learns
// every rank's pid (a restart prints its own line again). A hang guard kills the launcher
// when a job outlives a generous bound.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli/elastic_job.h"
#include "cli/fault_helpers.h"
#include "cli/run_braid.h"
#include "cli/same_checkpoint.h"
#include "cli/tiny_mlp.h"
#include "fashion_mnist_data.h"
#include "launch/braid_process.h"
#include "temp_dir.h"

namespace {

using braid::testing::elastic_launch;
using braid::testing::HangGuard;
using braid::testing::has_text;
using braid::testing::kHangLimit;
using braid::testing::let_it_compute;
using braid::testing::Process;
using braid::testing::rank_pid;
using braid::testing::TempDir;
using braid::testing::train_command;

// A run long enough to be killed several times on a loaded machine; checkpoints at its end.
std::string run_args(const TempDir& tmp, int64_t steps) {
  std::string flags = braid::testing::tiny_mlp_flags(tmp);
  // 12 x the ranks of every test here is shared evenly by every membership it goes through.
  flags.replace(flags.find("--batch 16"), 10, "--batch 12");
  // A millisecond's sleep a step keeps a run's length in the test's hands on any machine.
  // Checkpoints every 100 steps, so a kill may land in one's writing too.
  return flags +
         "--optimizer sgd --epochs 100 --slow-step-ms 1 --checkpoint-every 100 --max-steps " +
         std::to_string(steps) + " --out " + tmp.file("run");
}

// kill -9 of random ranks at random points of their steps, rank 0 among them: every kill
// is reported with its restart, the survivors roll back and go on in a new round, the
// restarted process takes the state from a live rank and joins, and the job ends as a
// finished run with its checkpoint.
TEST(Elastic, KilledRanksRankZeroIncludedAreRestartedAndTheJobFinishes) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto job =
      elastic_launch({"-n", "4", "--min-ranks", "2", "--max-restarts", "3"}, run_args(tmp, 9000));
  HangGuard guard(job->pid(), kHangLimit);
  ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
  // Rank 0 first (it hosts nothing, writes the outputs), then two random ranks.
  std::vector<int> victims = {0, static_cast<int>(rng() % 4), static_cast<int>(rng() % 4)};
  std::map<int, int> incarnation;
  for (size_t k = 0; k < victims.size(); ++k) {
    const int slot = victims[k];
    const pid_t pid = rank_pid(*job, slot, ++incarnation[slot]);
    ASSERT_GT(pid, 0) << job->output();
    let_it_compute(pid, 5 + static_cast<long>(rng() % 20));
    ASSERT_EQ(::kill(pid, SIGKILL), 0) << "rank " << slot << " ended early:\n" << job->output();
    // Its report, then a round of the survivors; the next kill waits for the restart to be
    // back in (a round of 4 again).
    ASSERT_TRUE(job->wait_for("restarting it (restart " + std::to_string(k + 1) + " of 3)"))
        << job->output();
    ASSERT_TRUE(job->wait_for(": 4 ranks\n", static_cast<int>(k) + 1)) << job->output();
  }
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << "the elastic job hung:\n" << job->output();
  EXPECT_EQ(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "rolling back to step"));
  EXPECT_TRUE(has_text(job->output(), "done: 9000 steps"));
  EXPECT_TRUE(std::ifstream(tmp.file("run/checkpoint/state.json")).good());
  // Every new round is in the metrics.
  std::ifstream metrics(tmp.file("run/metrics.jsonl"));
  const std::string records((std::istreambuf_iterator<char>(metrics)),
                            std::istreambuf_iterator<char>());
  EXPECT_GE(std::count_if(records.begin(), records.end(), [](char c) { return c == '\n'; }), 3);
  EXPECT_TRUE(has_text(records, R"("event":"membership")")) << records;
}

// Deterministic mode: a job that lost a random rank (rank 0 included) at a random point of a
// step and went on with 3 ranks ends with the bits of an undisturbed job that took the same
// membership change at the same step: 4 ranks up to it, then 3 ranks resumed from its
// checkpoint. The global batch (40) is shared unevenly by 3 (14, 13, 13). The rollback,
// the state taken from a survivor, the re-sharded data and the regrouped sums must all be
// exact for the bits to agree.
TEST(Elastic, DeterministicJobThatLostARankEqualsTheSameMembershipChangeUndisturbed) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::string args = braid::testing::tiny_mlp_flags(tmp);
  args.replace(args.find("--batch 16"), 10, "--batch 10 --global-batch 40");
  args += "--optimizer sgd --deterministic --epochs 10 ";
  auto job =
      elastic_launch({"-n", "4", "--min-ranks", "2", "--max-restarts", "0"},
                     args + "--max-steps 4000 --slow-step-ms 2 --out " + tmp.file("elastic"));
  const int victim = braid::testing::kill_a_random_rank_and_finish(*job, 4, rng);
  ASSERT_GE(victim, 0);
  const long step = braid::testing::round_step(job->output(), 2);
  ASSERT_GT(step, 0) << job->output();
  ASSERT_LT(step, 4000);
  EXPECT_TRUE(braid::testing::same_as_stop_and_resume(tmp.file("elastic/checkpoint"), 4, args, 3,
                                                      args + "--max-steps 4000 ", step,
                                                      tmp.file("reference")))
      << "killed rank " << victim << "; went on from step " << step << "\n"
      << job->output();
}

// Every rank killed at once: the restarted processes hold no state, so the new round goes
// on from the run's last checkpoint (every 100 steps), not from scratch.
TEST(Elastic, EveryRankLostAtOnceGoesOnFromTheRunsCheckpoint) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job =
      elastic_launch({"-n", "2", "--min-ranks", "1", "--max-restarts", "2"}, run_args(tmp, 3000));
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t a = rank_pid(*job, 0), b = rank_pid(*job, 1);
  ASSERT_GT(a, 0) << job->output();
  ASSERT_GT(b, 0) << job->output();
  // A checkpoint exists (step 100 was saved before step 200's progress line).
  ASSERT_TRUE(job->wait_for("epoch 1/100  step 200/")) << job->output();
  ::kill(a, SIGKILL);
  ::kill(b, SIGKILL);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_EQ(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(),
                       "holds the training state; resuming from the run's "
                       "checkpoint"))
      << job->output();
  // It went on from a saved step (100 or later), not from step 0.
  const size_t at = job->output().find("elastic: round 2: ");
  ASSERT_NE(at, std::string::npos) << job->output();
  long step = 0;
  ASSERT_EQ(std::sscanf(job->output().c_str() + job->output().find(") at step ", at),
                        ") at step %ld", &step),
            1);
  EXPECT_GE(step, 100) << job->output();
  EXPECT_EQ(step % 100, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "done: 3000 steps")) << job->output();
}

// SIGTERM to one rank alone: it leaves at a step boundary (exit 0), the others regroup
// without it and finish; nothing is restarted.
TEST(Elastic, ARankAskedToStopAloneLeavesAndTheOthersFinish) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job =
      elastic_launch({"-n", "3", "--min-ranks", "2", "--max-restarts", "3"}, run_args(tmp, 3000));
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t leaver = rank_pid(*job, 1);
  ASSERT_GT(leaver, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
  ASSERT_EQ(::kill(leaver, SIGTERM), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_EQ(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "1.0 leaves the job at step"));
  EXPECT_TRUE(has_text(job->output(), "elastic round 2: 2 ranks"));
  EXPECT_FALSE(has_text(job->output(), "restarting"));
  EXPECT_TRUE(has_text(job->output(), "done: 3000 steps"));
}

// Two ranks, then two processes started by hand with the job's join file: each joins the
// running job at a step boundary, taking its state from a live rank, and all four finish.
TEST(Elastic, ProcessesStartedByHandJoinTheRunningJob) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string join_file = tmp.file("join.env");
  auto job = elastic_launch({"-n", "2", "--max-ranks", "4", "--join-file", join_file},
                            run_args(tmp, 4000));
  HangGuard guard(job->pid(), kHangLimit);
  ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
  const auto vars = braid::testing::read_join_file(join_file);
  ASSERT_TRUE(vars.count("BRAID_SECRET") && vars.count("BRAID_STORE_ADDR")) << join_file;
  std::vector<std::unique_ptr<Process>> guests;
  for (int g = 0; g < 2; ++g) {
    guests.push_back(std::make_unique<Process>(
        std::vector<std::string>{"/bin/sh", "-c", train_command(run_args(tmp, 4000))}, vars));
    ASSERT_TRUE(job->wait_for(": " + std::to_string(3 + g) + " ranks\n")) << job->output();
  }
  for (auto& g : guests) EXPECT_EQ(g->finish(), 0) << g->output();
  EXPECT_EQ(job->finish(), 0) << job->output();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_TRUE(has_text(job->output(), "elastic round 3: 4 ranks"));
  EXPECT_TRUE(has_text(job->output(), "done: 4000 steps"));
}

// A process started by hand with another learning rate: refused alone before it asks for a
// place (exit non-zero, naming the key), while the job's members train on untouched.
TEST(Elastic, AProcessStartedWithAnotherConfigIsRefusedAloneAndTheJobGoesOn) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string join_file = tmp.file("join.env");
  auto job = elastic_launch({"-n", "2", "--max-ranks", "3", "--join-file", join_file},
                            run_args(tmp, 3000));
  HangGuard guard(job->pid(), kHangLimit);
  ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
  const auto vars = braid::testing::read_join_file(join_file);
  Process guest({"/bin/sh", "-c", train_command(run_args(tmp, 3000) + " --lr 0.5")}, vars);
  EXPECT_NE(guest.finish(), 0) << guest.output();
  EXPECT_TRUE(
      has_text(guest.output(), "another config than the elastic job it joins: optimizer.lr"))
      << guest.output();
  EXPECT_EQ(job->finish(), 0) << job->output();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_FALSE(has_text(job->output(), "elastic round 2")) << job->output();
  EXPECT_TRUE(has_text(job->output(), "done: 3000 steps")) << job->output();
}

// A rank stopped with SIGSTOP: the others time out waiting for it (BRAID_TIMEOUT_S 3), ask
// for a new round, and the round closes without it after the rendezvous timeout; the
// launcher kills it and restarts it.
TEST(Elastic, AStoppedRankIsLeftOutAfterTheRendezvousTimeoutAndRestarted) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = elastic_launch(
      {"-n", "3", "--min-ranks", "2", "--max-restarts", "1", "--rendezvous-timeout", "1"},
      run_args(tmp, 4000), {{"BRAID_TIMEOUT_S", "3"}});
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t staller = rank_pid(*job, 2);
  ASSERT_GT(staller, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
  let_it_compute(staller, 5);
  ASSERT_EQ(::kill(staller, SIGSTOP), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_EQ(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "stopped making progress"));
  EXPECT_TRUE(has_text(job->output(), "silent past the rendezvous timeout: killed"));
  EXPECT_TRUE(has_text(job->output(), "rank 2 was killed by signal 9 (SIGKILL); restarting it"));
  EXPECT_TRUE(has_text(job->output(), "done: 4000 steps"));
}

// With no restarts left and fewer ranks than --min-ranks, the job fails, saying why.
TEST(Elastic, TooFewRanksLeftFailTheJobNamingWhy) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job =
      elastic_launch({"-n", "2", "--min-ranks", "2", "--max-restarts", "0"}, run_args(tmp, 20000));
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t victim = rank_pid(*job, 1);
  ASSERT_GT(victim, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_NE(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "no restarts left")) << job->output();
  EXPECT_TRUE(has_text(job->output(), "fewer than the 2 the job needs (--min-ranks)"))
      << job->output();
}

// torchrun's restart contract: a process started with TORCHELASTIC_RESTART_COUNT > 0 goes
// on from its run's own last checkpoint, with no --resume on its command line (which is the
// first start's, --overwrite included).
TEST(Elastic, ARestartUnderTorchrunsCountResumesFromTheRunsCheckpoint) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string args = braid::testing::tiny_mlp_flags(tmp) +
                           "--optimizer sgd --epochs 10 --overwrite --out " + tmp.file("run");
  const auto first = braid::testing::run_braid("train " + args + " --max-steps 120");
  ASSERT_EQ(first.code, 0) << first.output;
  const auto restarted = braid::testing::run_braid("train " + args + " --max-steps 300",
                                                   "TORCHELASTIC_RESTART_COUNT=1");
  ASSERT_EQ(restarted.code, 0) << restarted.output;
  EXPECT_TRUE(has_text(restarted.output,
                       "restart 1 under torchrun (TORCHELASTIC_RESTART_COUNT): "
                       "resuming from " +
                           tmp.file("run/checkpoint")));
  EXPECT_TRUE(has_text(restarted.output, "resumed from")) << restarted.output;
  EXPECT_TRUE(has_text(restarted.output, "done: 300 steps")) << restarted.output;
  // The metrics of the first start are kept (--overwrite was that start's).
  std::ifstream metrics(tmp.file("run/metrics.jsonl"));
  const std::string records((std::istreambuf_iterator<char>(metrics)),
                            std::istreambuf_iterator<char>());
  EXPECT_TRUE(has_text(records, R"("step":100)")) << records;
}

// The same under torchrun's own elastic agent, where the machine has it (python3-torch):
// a rank killed mid-run makes torchrun restart every worker, and braid resumes by itself.
TEST(Elastic, UnderTorchrunsElasticAgentAKilledRankResumesFromTheCheckpoint) {
  REQUIRE_FASHION_MNIST();
  if (::system("command -v torchrun > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "torchrun is not installed (Debian's python3-torch)";
  const TempDir tmp;
  const std::string args = braid::testing::tiny_mlp_flags(tmp) +
                           "--optimizer sgd --epochs 10 --slow-step-ms 2 --checkpoint-every 50 "
                           "--max-steps 1500 --out " +
                           tmp.file("run");
  // Debian's torch 1.13 under Python 3.11 cannot parse its own defaults of --redirects and
  // --tee (0); 1 is what it can.
  std::vector<std::string> argv = {"/bin/sh", "-c",
                                   "exec torchrun --nnodes 1:1 --nproc_per_node 2 --max_restarts 2 "
                                   "--redirects 1 --tee 1 --rdzv_backend c10d --rdzv_endpoint "
                                   "127.0.0.1:0 --no_python " +
                                       std::string(BRAID_BINARY) + " train " + args};
  // torchrun gives no secret; a user sets one for braid's connections.
  Process job(argv, {{"BRAID_SECRET", "0123456789abcdef0123456789abcdef"}});
  HangGuard guard(job.pid(), kHangLimit);
  ASSERT_TRUE(job.wait_for("epoch 1/10  step 200/")) << job.output();
  // A worker: a child of this torchrun (other tests may run braid at the same time).
  FILE* pgrep =
      ::popen(("pgrep -P " + std::to_string(job.pid()) + " -f ' train ' | head -1").c_str(), "r");
  long victim = 0;
  ASSERT_EQ(std::fscanf(pgrep, "%ld", &victim), 1);
  ::pclose(pgrep);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(::kill(static_cast<pid_t>(victim), SIGKILL), 0);
  const int code = job.finish();
  ASSERT_FALSE(guard.fired()) << job.output();
  EXPECT_EQ(code, 0) << job.output();
  EXPECT_TRUE(has_text(job.output(), "restart 1 under torchrun")) << job.output();
  EXPECT_TRUE(has_text(job.output(), "done: 1500 steps")) << job.output();
}

}  // namespace
