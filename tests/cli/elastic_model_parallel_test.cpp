// Issue 29: elastic pipelines and tensor parallelism under `braid launch --min-ranks N
// --max-restarts K`. A mesh is cut for its size, so a lost rank ends the step on every rank
// and the round waits for its restart; the commit (gathered to rank 0, a copy on rank 1)
// comes from whichever of the two survived, and the mesh is rebuilt with the restarted
// process in it.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
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
using braid::testing::Process;
using braid::testing::rank_pid;
using braid::testing::TempDir;

class ElasticModelParallel : public ::testing::TestWithParam<const char*> {};

// Deterministic mode, 2 ranks: a random rank killed at a random point of a step is
// restarted, the mesh rebuilt, and the run ends with the bits of the same run undisturbed
// (the world is the same, so nothing else may differ: the rollback and the state taken
// from the surviving holder must be exact).
TEST_P(ElasticModelParallel, ARestartedRankRebuildsTheMeshAndTheRunIsTheUndisturbedOne) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::string args = braid::testing::tiny_mlp_flags(tmp) +
                           "--optimizer adam --lr 0.001 --strategy " + GetParam() +
                           " --pipeline.micro-batches 2 --deterministic --epochs 10 "
                           "--max-steps 2500 ";
  auto job = elastic_launch({"-n", "2", "--min-ranks", "2", "--max-restarts", "1"},
                            args + "--slow-step-ms 2 --out " + tmp.file("elastic"));
  const int victim = braid::testing::kill_a_random_rank_and_finish(*job, 2, rng);
  ASSERT_GE(victim, 0);
  ASSERT_TRUE(has_text(job->output(), "elastic: round 2: 2 ranks")) << job->output();
  EXPECT_FALSE(has_text(job->output(), "resuming from the run's checkpoint")) << job->output();

  const std::string reference = tmp.file("reference");
  const auto undisturbed = braid::testing::run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) +
                                                     " train " + args + "--out " + reference);
  ASSERT_EQ(undisturbed.code, 0) << undisturbed.output;
  EXPECT_TRUE(
      braid::testing::same_checkpoint(tmp.file("elastic/checkpoint"), reference + "/checkpoint"))
      << "killed rank " << victim << "\n"
      << job->output();
}

INSTANTIATE_TEST_SUITE_P(Strategies, ElasticModelParallel, ::testing::Values("pipeline", "tensor"));

// A spare process started by hand waits beside the full job (asking no regroup), and takes
// the place of a rank killed with no restart left: the mesh is rebuilt with it and the run
// ends with the undisturbed run's bits.
TEST(ElasticModelParallelRounds, ASpareTakesALostStagesPlace) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string args = braid::testing::tiny_mlp_flags(tmp) +
                           "--optimizer adam --lr 0.001 --strategy pipeline --deterministic "
                           "--epochs 10 --max-steps 2500 ";
  const std::string join_file = tmp.file("join.env");
  auto job = elastic_launch({"-n", "2", "--min-ranks", "2", "--max-ranks", "2", "--max-restarts",
                             "0", "--join-file", join_file},
                            args + "--slow-step-ms 2 --out " + tmp.file("elastic"));
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t victim = rank_pid(*job, 1);
  ASSERT_GT(victim, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
  const auto vars = braid::testing::read_join_file(join_file);
  Process spare(
      {"/bin/sh", "-c",
       braid::testing::train_command(args + "--slow-step-ms 2 --out " + tmp.file("elastic"))},
      vars);
  let_it_compute(victim, 40);  // the spare has asked by then, and no round came of it
  EXPECT_FALSE(has_text(job->output(), "elastic round 2")) << job->output();
  ASSERT_EQ(::kill(victim, SIGKILL), 0) << job->output();
  EXPECT_EQ(job->finish(), 0) << job->output();
  EXPECT_EQ(spare.finish(), 0) << spare.output();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_TRUE(has_text(job->output(), "elastic round 2: 2 ranks")) << job->output();
  const auto undisturbed =
      braid::testing::run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train " + args +
                                "--out " + tmp.file("reference"));
  ASSERT_EQ(undisturbed.code, 0) << undisturbed.output;
  EXPECT_TRUE(braid::testing::same_checkpoint(tmp.file("elastic/checkpoint"),
                                              tmp.file("reference/checkpoint")))
      << job->output();
}

// A mesh cannot shrink: with no restart to wait for, the round fails naming what to do.
TEST(ElasticModelParallelRounds, AMeshLeftShortOfRanksFailsSayingWhatItNeeds) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto job = elastic_launch({"-n", "3", "--min-ranks", "2", "--max-restarts", "0"},
                            braid::testing::tiny_mlp_flags(tmp) +
                                "--optimizer sgd --strategy pipeline --epochs 10 --slow-step-ms 1 "
                                "--max-steps 20000 --out " +
                                tmp.file("run"));
  HangGuard guard(job->pid(), kHangLimit);
  const pid_t pid = rank_pid(*job, 2);
  ASSERT_GT(pid, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
  ASSERT_EQ(::kill(pid, SIGKILL), 0) << job->output();
  EXPECT_NE(job->finish(), 0) << job->output();
  ASSERT_FALSE(guard.fired()) << job->output();
  EXPECT_TRUE(has_text(job->output(), "needs all 3 ranks in every round")) << job->output();
}

}  // namespace
