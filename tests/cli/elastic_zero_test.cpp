// Issue 29: elastic ZeRO (stages 1-3) as real processes under `braid launch --min-ranks`.
// Each rank holds only its shard of the state, so a commit keeps a copy of its left
// neighbour's shard too (train/shard_recovery.h): one rank lost (rank 0 included) loses
// nothing, and the next round puts the whole state together from the survivors' shards.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <random>
#include <string>

#include "cli/elastic_job.h"
#include "cli/fault_helpers.h"
#include "cli/run_braid.h"
#include "cli/same_checkpoint.h"
#include "cli/tiny_mlp.h"
#include "fashion_mnist_data.h"
#include "temp_dir.h"

namespace {

using braid::testing::elastic_launch;
using braid::testing::HangGuard;
using braid::testing::has_text;
using braid::testing::kHangLimit;
using braid::testing::let_it_compute;
using braid::testing::rank_pid;
using braid::testing::round_step;
using braid::testing::TempDir;

std::string zero_args(const TempDir& tmp, int stage) {
  std::string args = braid::testing::tiny_mlp_flags(tmp);
  // 40 samples a step shared by 4 ranks, then unevenly by 3 (14, 13, 13).
  args.replace(args.find("--batch 16"), 10, "--batch 10 --global-batch 40");
  return args + "--optimizer adam --lr 0.001 --zero-stage " + std::to_string(stage) +
         " --epochs 10 ";
}

// Deterministic ZeRO-3 (Adam, whose moments are sharded with the parameters): a job that
// lost a random rank (rank 0 included) at a random point of a step and went on with 3 ranks
// ends with the bits of an undisturbed job that took the same change at the same step: 4
// ranks up to it, then 3 ranks resumed from its checkpoint. The lost rank's shard must come
// back whole from its neighbour's copy, and the whole state be cut again for 3 ranks.
TEST(ElasticZero, Stage3JobThatLostARankEqualsTheSameMembershipChangeUndisturbed) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::string args = zero_args(tmp, 3) + "--deterministic ";
  auto job =
      elastic_launch({"-n", "4", "--min-ranks", "2", "--max-restarts", "0"},
                     args + "--max-steps 3000 --slow-step-ms 2 --out " + tmp.file("elastic"));
  const int victim = braid::testing::kill_a_random_rank_and_finish(*job, 4, rng);
  ASSERT_GE(victim, 0);
  const long step = round_step(job->output(), 2);
  ASSERT_GT(step, 0) << job->output();
  ASSERT_LT(step, 3000);
  EXPECT_FALSE(has_text(job->output(), "resuming from the run's checkpoint")) << job->output();
  EXPECT_TRUE(braid::testing::same_as_stop_and_resume(tmp.file("elastic/checkpoint"), 4, args, 3,
                                                      args + "--max-steps 3000 ", step,
                                                      tmp.file("reference")))
      << "killed rank " << victim << "; went on from step " << step << "\n"
      << job->output();
}

// Stage 2, kill -9 of rank 0 and then of a random rank, each restarted: every round but the
// first takes a newcomer that holds no shard; the job finishes from its in-memory commits.
TEST(ElasticZero, Stage2KilledRanksAreRestartedAndTheJobFinishesFromItsShards) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto job = elastic_launch({"-n", "4", "--min-ranks", "2", "--max-restarts", "2"},
                            zero_args(tmp, 2) +
                                "--slow-step-ms 1 --checkpoint-every 100 "
                                "--max-steps 6000 --out " +
                                tmp.file("run"));
  HangGuard guard(job->pid(), kHangLimit);
  ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
  const int victims[2] = {0, static_cast<int>(rng() % 4)};
  int incarnation[4] = {0, 0, 0, 0};
  for (int k = 0; k < 2; ++k) {
    const int slot = victims[k];
    const pid_t pid = rank_pid(*job, slot, ++incarnation[slot]);
    ASSERT_GT(pid, 0) << job->output();
    let_it_compute(pid, 5 + static_cast<long>(rng() % 20));
    ASSERT_EQ(::kill(pid, SIGKILL), 0) << "rank " << slot << " ended early:\n" << job->output();
    ASSERT_TRUE(job->wait_for("restarting it (restart " + std::to_string(k + 1) + " of 2)"))
        << job->output();
    ASSERT_TRUE(job->wait_for(": 4 ranks\n", k + 1)) << job->output();
  }
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_EQ(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "rolling back to step")) << job->output();
  EXPECT_FALSE(has_text(job->output(), "resuming from the run's checkpoint")) << job->output();
  EXPECT_TRUE(has_text(job->output(), "done: 6000 steps")) << job->output();
}

// Two neighbours lost together take both copies of one shard with them: no member holds a
// whole commit, and the round says so and goes on from the run's checkpoint (every 100
// steps), not from scratch.
TEST(ElasticZero, NeighboursLostTogetherGoOnFromTheRunsCheckpoint) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = elastic_launch({"-n", "4", "--min-ranks", "2", "--max-restarts", "0"},
                            zero_args(tmp, 1) +
                                "--slow-step-ms 1 --checkpoint-every 100 "
                                "--max-steps 3000 --out " +
                                tmp.file("run"));
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t a = rank_pid(*job, 1), b = rank_pid(*job, 2);
  ASSERT_GT(a, 0) << job->output();
  ASSERT_GT(b, 0) << job->output();
  ASSERT_TRUE(job->wait_for("epoch 1/10  step 200/")) << job->output();
  ::kill(a, SIGKILL);
  ::kill(b, SIGKILL);
  const int code = job->finish();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_EQ(code, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "hold no whole commit")) << job->output();
  const long step = round_step(job->output(), 2);
  EXPECT_GE(step, 100) << job->output();
  EXPECT_EQ(step % 100, 0) << job->output();
  EXPECT_TRUE(has_text(job->output(), "done: 3000 steps")) << job->output();
}

}  // namespace
