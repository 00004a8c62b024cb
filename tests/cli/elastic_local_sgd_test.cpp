// Issue 29: elastic local SGD under `braid launch --min-ranks`. The ranks' replicas differ
// between averages, so commits are taken at averages only (Strategy::replicas_agree),
// where any rank's state is every rank's; a lost rank rolls the others back to the last
// one.
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
using braid::testing::TempDir;

constexpr int kPeriod = 4;

// Deterministic local SGD (averages every 4 steps, plain SGD: no optimizer state that the
// ranks would hold apart): a job that lost a random rank went on from the last average and
// ends with the bits of an undisturbed job that took the same change at the same step: 4
// ranks up to it, then 3 ranks resumed from its checkpoint.
TEST(ElasticLocalSgd, JobThatLostARankGoesOnFromTheLastAverageAsTheSameChangeUndisturbed) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::string args = braid::testing::tiny_mlp_flags(tmp);
  args.replace(args.find("--batch 16"), 10, "--batch 10 --global-batch 40");
  args += "--optimizer sgd --optimizer.momentum 0 --strategy local_sgd --local-sgd.period " +
          std::to_string(kPeriod) + " --deterministic --epochs 10 ";
  auto job =
      elastic_launch({"-n", "4", "--min-ranks", "2", "--max-restarts", "0"},
                     args + "--slow-step-ms 2 --max-steps 3000 --out " + tmp.file("elastic"));
  HangGuard guard(job->pid(), kHangLimit);
  const int victim = static_cast<int>(rng() % 4);
  const pid_t pid = rank_pid(*job, victim);
  ASSERT_GT(pid, 0) << job->output();
  ASSERT_TRUE(job->wait_for("[rank 0] epoch 1/")) << job->output();
  let_it_compute(pid, 5 + static_cast<long>(rng() % 20));
  ASSERT_EQ(::kill(pid, SIGKILL), 0) << job->output();
  ASSERT_EQ(job->finish(), 0) << job->output();
  ASSERT_FALSE(guard.fired()) << job->output();
  const std::string tag = "elastic: round 2: 3 ranks (";
  const size_t at = job->output().find(tag);
  ASSERT_NE(at, std::string::npos) << job->output();
  long step = 0;
  ASSERT_EQ(std::sscanf(job->output().c_str() + job->output().find(") at step ", at),
                        ") at step %ld", &step),
            1);
  ASSERT_GT(step, 0);
  EXPECT_EQ(step % kPeriod, 0) << "went on from step " << step << ", not an average";

  const std::string reference = tmp.file("reference");
  const auto first =
      braid::testing::run_braid("launch -n 4 -- " + std::string(BRAID_BINARY) + " train " + args +
                                "--max-steps " + std::to_string(step) + " --out " + reference);
  ASSERT_EQ(first.code, 0) << first.output;
  const auto second =
      braid::testing::run_braid("launch -n 3 -- " + std::string(BRAID_BINARY) + " train " + args +
                                "--max-steps 3000 --resume " + reference);
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_TRUE(
      braid::testing::same_checkpoint(tmp.file("elastic/checkpoint"), reference + "/checkpoint"))
      << "killed rank " << victim << "; went on from step " << step << "\n"
      << job->output();
}

}  // namespace
