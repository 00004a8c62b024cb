// Pipeline parallelism as a user runs it: `pipeline.stages 2` under `braid launch -n 2`,
// real processes. In deterministic mode the checkpoint is byte for byte one process's
// accumulating the same micro-batches (so PyTorch loads it as it loads any braid
// checkpoint), a run stopped halfway resumes as one process to the same bytes, and a stage
// killed with kill -9 makes the other fail at once naming it.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/fault_helpers.h"
#include "fashion_mnist_data.h"
#include "launch/braid_process.h"
#include "run_braid.h"
#include "same_checkpoint.h"
#include "temp_dir.h"
#include "tiny_mlp.h"

namespace {

using braid::testing::BraidResult;
using braid::testing::HangGuard;
using braid::testing::has_text;
using braid::testing::Process;
using braid::testing::run_braid;
using braid::testing::same_checkpoint;
using braid::testing::TempDir;

std::string flags(const TempDir& tmp) {
  return braid::testing::tiny_mlp_flags(tmp) +
         "--optimizer adamw --lr 0.003 --deterministic --checkpoint-every 6 ";
}

BraidResult launch2(const std::string& args) {
  return run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train " + args,
                   "BRAID_TIMEOUT_S=60");
}

TEST(PipelineCli, CheckpointIsOneProcessAccumulatingAndResumesAsOneProcess) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  for (const char* schedule : {"gpipe", "1f1b"}) {
    const std::string out = tmp.file(std::string("pipe_") + schedule);
    const BraidResult r = launch2(flags(tmp) + "--pipeline.stages 2 --micro-batches 4 " +
                                  "--pipeline.schedule " + schedule + " --steps 12 --out " + out);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(has_text(r.output, "strategy pipeline"));
    // Where the cut falls depends on the layers' measured times: only its start is fixed.
    EXPECT_TRUE(has_text(r.output, "cut by measured time: stage 0: 0"));
  }
  BraidResult r = run_braid("train " + flags(tmp) + "--accumulate-steps 4 --steps 12 --out " +
                            tmp.file("single"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(same_checkpoint(tmp.file("pipe_gpipe/checkpoint"), tmp.file("single/checkpoint")));
  EXPECT_TRUE(same_checkpoint(tmp.file("pipe_1f1b/checkpoint"), tmp.file("single/checkpoint")));

  r = launch2(flags(tmp) + "--pipeline.stages 2 --micro-batches 4 --recompute --steps 6 --out " +
              tmp.file("half"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_braid("train --resume " + tmp.file("half") +
                " --steps 12 --strategy single --pipeline.stages 0 --no-pipeline.recompute "
                "--accumulate-steps 4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "at step 6"));
  EXPECT_TRUE(same_checkpoint(tmp.file("half/checkpoint"), tmp.file("single/checkpoint")));
}

TEST(PipelineCli, StagesOtherThanTheJobsRanksAreAnErrorNamingBoth) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  BraidResult r = launch2(flags(tmp) + "--pipeline.stages 3 --steps 2 --out " + tmp.file("x"));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(
      has_text(r.output, "pipeline.stages is 3 and tensor_parallel 1 but the job has 2 ranks"));
  r = launch2(flags(tmp) + "--strategy ddp --pipeline.stages 2 --steps 2 --out " + tmp.file("y"));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "use strategy pipeline, tensor or mesh"));
}

// More micro-batches than a batch cut evenly into is refused before a step, in the terms
// the user set (it was reported as "accumulate_steps = 64").
TEST(PipelineCli, MicroBatchesThatDoNotDivideTheBatchNameBoth) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  for (const char* micro : {"64", "5"}) {
    const BraidResult r = launch2(flags(tmp) + "--pipeline.stages 2 --pipeline.micro-batches " +
                                  micro + " --steps 2 --out " + tmp.file(micro));
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_TRUE(
        has_text(r.output, std::string("pipeline.micro_batches is ") + micro + " but batch is 16"))
        << r.output;
    EXPECT_TRUE(has_text(r.output, "or pipeline.micro_batches to ")) << r.output;
    EXPECT_FALSE(has_text(r.output, "accumulate_steps")) << r.output;
  }
}

std::string gpt_flags() {
  return "--model gpt-tiny --dataset text --seq-len 32 --batch 4 --threads 1 --eval-batches 2 "
         "--log-every 100 --optimizer adamw --lr 0.003 --overwrite ";
}

// Tensor parallelism and a data x tensor mesh write the one-process checkpoint, which a
// one-process run resumes.
TEST(PipelineCli, TensorParallelAndMeshCheckpointsResumeAsOneProcess) {
  const TempDir tmp;
  BraidResult r = launch2(gpt_flags() + "--tensor-parallel 2 --steps 4 --out " + tmp.file("tp"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "strategy tensor"));
  r = run_braid("train --resume " + tmp.file("tp") +
                " --steps 6 --strategy single "
                "--tensor-parallel 0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "at step 4"));
  r = run_braid("launch -n 4 -- " + std::string(BRAID_BINARY) + " train " + gpt_flags() +
                    "--mesh.data 2 --mesh.tensor 2 --steps 2 --out " + tmp.file("mesh"),
                "BRAID_TIMEOUT_S=60");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "mesh: 2 data x 2 tensor x 1 pipeline"));
  EXPECT_TRUE(has_text(r.output, "batch 4 x 2 ranks"));  // two data replicas
  r = run_braid("train --resume " + tmp.file("mesh") +
                " --steps 3 --strategy single --mesh.data 0 "
                "--mesh.tensor 0 --batch 8");
  ASSERT_EQ(r.code, 0) << r.output;
}

// kill -9 of stage 1 while the CNN trains: stage 0 fails at once (its deadline is 120 s)
// naming rank 1 as dead, and the launcher ends the job naming the signal.
TEST(PipelineCli, AKilledStageFailsTheOtherNamingIt) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string script = "echo pid $$; exec " + std::string(BRAID_BINARY) +
                             " train --config " BRAID_SOURCE_DIR
                             "/configs/cnn.json --batch 64 --max-steps 400 --log-every 2 "
                             "--threads 1 --pipeline.stages 2 --micro-batches 4 --out " +
                             tmp.file("out");
  Process job({BRAID_BINARY, "launch", "-n", "2", "--", "sh", "-c", script},
              std::map<std::string, std::string>{{"BRAID_TIMEOUT_S", "120"}});
  HangGuard guard(job.pid(), std::chrono::seconds(60));
  ASSERT_TRUE(job.wait_for("[rank 1] pid ")) << job.output();
  const std::string& out = job.output();
  const std::string tag = "[rank 1] pid ";
  const int victim = std::stoi(out.substr(out.find(tag) + tag.size()));
  ASSERT_TRUE(job.wait_for("[rank 0] epoch 1/")) << job.output();
  braid::testing::let_it_compute(victim, 5);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const int code = job.finish();
  ASSERT_FALSE(guard.fired()) << "the job hung after stage 1 died:\n" << job.output();
  EXPECT_EQ(code, 128 + SIGKILL) << job.output();
  EXPECT_TRUE(has_text(job.output(), "rank 1 (process " + std::to_string(victim) + ") died"));
  EXPECT_TRUE(has_text(job.output(), "braid launch: rank 1 was killed by signal 9 (SIGKILL)"));
}

}  // namespace
