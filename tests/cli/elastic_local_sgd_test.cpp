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
using braid::testing::round_step;
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
                     args + "--max-steps 3000 --slow-step-ms 2 --out " + tmp.file("elastic"));
  const int victim = braid::testing::kill_a_random_rank_and_finish(*job, 4, rng);
  ASSERT_GE(victim, 0);
  const long step = round_step(job->output(), 2);
  ASSERT_GT(step, 0) << job->output();
  EXPECT_EQ(step % kPeriod, 0) << "went on from step " << step << ", not an average";
  EXPECT_TRUE(braid::testing::same_as_stop_and_resume(tmp.file("elastic/checkpoint"), 4, args, 3,
                                                      args + "--max-steps 3000 ", step,
                                                      tmp.file("reference")))
      << "killed rank " << victim << "; went on from step " << step << "\n"
      << job->output();
}

}  // namespace
