// `braid train --model graph.json` as a user runs it: a graph spec (a residual add and a
// concat) trains under `braid launch -n 2` (DDP), writes a checkpoint whose tensors carry
// the node names, and a run stopped at step 4 and resumed to 8 ends with the bits of a run
// that went to 8 at once; ZeRO stage 3 trains it too. The pipeline and tensor-parallel
// strategies, which cut a chain into stages or by width, refuse a graph with one line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "same_checkpoint.h"
#include "temp_dir.h"

namespace {

using braid::testing::read_bytes;
using braid::testing::run_braid;
using braid::testing::same_checkpoint;
using braid::testing::TempDir;

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  output: " << text << "\n  lacks:  " << part;
}

std::string graph_flags(const TempDir& tmp) {
  std::ofstream(tmp.file("graph.json")) << R"({"input": [28, 28, 1], "nodes": [
      {"name": "stem", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
      {"name": "a", "type": "relu"},
      {"name": "b", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
      {"name": "sum", "type": "add", "inputs": ["a", "b"]},
      {"name": "cat", "type": "concat", "inputs": ["sum", "stem"]},
      {"name": "pool", "type": "maxpool2d", "kernel": 4},
      {"name": "flat", "type": "flatten"},
      {"name": "logits", "type": "linear", "out_features": 10}],
    "output": "logits"})";
  return "--model " + tmp.file("graph.json") +
         " --batch 16 --optimizer adam --lr 0.003 --schedule constant --threads 1 "
         "--eval-batches 2 --log-every 100 ";
}

std::string launch2(const std::string& args) {
  return "launch -n 2 -- " + std::string(BRAID_BINARY) + " train " + args;
}

TEST(GraphCli, GraphModelTrainsUnderDdpAndResumesToTheUninterruptedRunsBits) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string flags = graph_flags(tmp) + "--checkpoint-every 4 ";
  braid::testing::BraidResult r =
      run_braid(launch2(flags + "--steps 8 --out " + tmp.file("straight")));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "strategy ddp"));
  EXPECT_TRUE(contains(r.output, "[rank 0] done: 8 steps"));
  const std::string weights = read_bytes(tmp.file("straight/checkpoint/model.safetensors"));
  for (const char* name : {"\"stem.weight\"", "\"b.bias\"", "\"logits.weight\""})
    EXPECT_TRUE(contains(weights.substr(0, 2000), name));

  r = run_braid(launch2(flags + "--steps 4 --out " + tmp.file("stopped")));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train --resume " +
                tmp.file("stopped") + " --steps 8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "at step 4"));
  EXPECT_TRUE(same_checkpoint(tmp.file("stopped/checkpoint"), tmp.file("straight/checkpoint")));

  r = run_braid("eval --checkpoint " + tmp.file("straight") + " --model " + tmp.file("graph.json"));
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST(GraphCli, PipelineAndTensorParallelRefuseAGraphModel) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  braid::testing::BraidResult r = run_braid(launch2(
      graph_flags(tmp) + "--pipeline.stages 2 --micro-batches 2 --steps 2 --out " + tmp.file("p")));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "model 'Graph' cannot be cut into stages"));
  r = run_braid(launch2(graph_flags(tmp) + "--tensor-parallel 2 --steps 2 --out " + tmp.file("t")));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "tensor parallel: model 'Graph' cannot be cut by width"));
}

// ZeRO stage 3 gathers each node's parameters as the graph announces them.
TEST(GraphCli, TrainsUnderZeroStage3) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const braid::testing::BraidResult r =
      run_braid(launch2(graph_flags(tmp) + "--zero-stage 3 --steps 4 --out " + tmp.file("z")));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "strategy zero"));
  EXPECT_TRUE(contains(r.output, "[rank 0] done: 4 steps"));
}

}  // namespace
