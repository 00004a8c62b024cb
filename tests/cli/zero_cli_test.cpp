// ZeRO as a user runs it: `zero_stage` 1, 2 or 3 under `braid launch -n 2`, real processes.
// Its checkpoint is the full logical layout, the same file DDP writes: in deterministic mode
// the runs write the same bytes, and a stage-3 run stopped halfway resumes as one process
// (accumulating the two ranks' micro-batches) to the bits of the uninterrupted ZeRO run.
#include <gtest/gtest.h>

#include <string>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "same_checkpoint.h"
#include "temp_dir.h"
#include "tiny_mlp.h"

namespace {

using braid::testing::BraidResult;
using braid::testing::run_braid;
using braid::testing::same_checkpoint;
using braid::testing::TempDir;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string flags(const TempDir& tmp) {
  return braid::testing::tiny_mlp_flags(tmp) +
         "--optimizer adamw --lr 0.003 --deterministic --checkpoint-every 6 ";
}

BraidResult launch2(const std::string& args) {
  return run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train " + args,
                   "BRAID_TIMEOUT_S=60");
}

TEST(ZeroCli, CheckpointIsDdpsAndResumesAsOneProcessBitwise) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  BraidResult r = launch2(flags(tmp) + "--zero-stage 1 --steps 12 --out " + tmp.file("zero"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "strategy zero")) << r.output;
  r = launch2(flags(tmp) + "--steps 12 --out " + tmp.file("ddp"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(same_checkpoint(tmp.file("zero/checkpoint"), tmp.file("ddp/checkpoint")));
  for (const char* stage : {"2", "3"}) {
    const std::string out = tmp.file(std::string("zero") + stage);
    r = launch2(flags(tmp) + "--zero-stage " + stage + " --steps 12 --out " + out);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(same_checkpoint(out + "/checkpoint", tmp.file("ddp/checkpoint"))) << stage;
  }

  r = launch2(flags(tmp) + "--zero-stage 3 --steps 6 --out " + tmp.file("half"));
  ASSERT_EQ(r.code, 0) << r.output;
  // One process, the same global batch of 32 in the same two micro-batches of 16.
  r = run_braid("train --resume " + tmp.file("half") +
                " --steps 12 --strategy single --zero-stage 0 --batch 32 --accumulate-steps 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "at step 6")) << r.output;
  EXPECT_TRUE(same_checkpoint(tmp.file("half/checkpoint"), tmp.file("zero/checkpoint")));
}

TEST(ZeroCli, ZeroStageOutsideDdpIsAnErrorNamingTheStrategy) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const BraidResult r =
      run_braid("train " + flags(tmp) + "--zero-stage 1 --steps 2 --out " + tmp.file("single"));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "zero_stage")) << r.output;
  EXPECT_TRUE(contains(r.output, "strategy ddp")) << r.output;
}

}  // namespace
