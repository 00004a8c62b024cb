// `braid train --deepspeed ds.json` as a user runs it under `braid launch -n 2`: the same
// bits as the braid config it maps to, and a key both --config and --deepspeed set to
// different values refused naming both files.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "same_checkpoint.h"
#include "temp_dir.h"

namespace {

using braid::testing::BraidResult;
using braid::testing::run_braid;
using braid::testing::same_checkpoint;
using braid::testing::TempDir;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The tiny MLP of tiny_mlp.h, without its --batch (the DeepSpeed file sets the batch).
std::string flags(const TempDir& tmp) {
  std::ofstream(tmp.file("tiny_mlp.json")) << R"({"input": [28, 28, 1], "layers": [
      {"type": "flatten"}, {"type": "linear", "out_features": 32}, {"type": "relu"},
      {"type": "linear", "out_features": 10}]})";
  return "--model " + tmp.file("tiny_mlp.json") +
         " --schedule constant --threads 1 --eval-batches 4 --log-every 100 --deterministic "
         "--steps 8 --eval-every 8 --checkpoint-every 8 ";
}

BraidResult launch2(const std::string& args) {
  return run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " train " + args,
                   "BRAID_TIMEOUT_S=60");
}

// The last evaluation record of a run's metrics.jsonl.
nlohmann::json last_eval(const std::string& run_dir) {
  nlohmann::json last;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json rec = nlohmann::json::parse(line);
    if (rec.value("event", "") == "eval") last = rec;
  }
  return last;
}

TEST(DeepSpeedCli, SameBitsAsTheBraidConfigItMapsTo) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  // 32 samples a step over 2 ranks, each in 2 micro-batches of 8.
  std::ofstream(tmp.file("ds.json")) << R"({
    "train_batch_size": 32, "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 2,
    "optimizer": {"type": "Adam", "params": {"lr": 0.003, "weight_decay": 0.01}},
    "gradient_clipping": 1.0, "steps_per_print": 10})";
  std::ofstream(tmp.file("braid.json")) << R"({
    "batch": 16, "accumulate_steps": 2,
    "optimizer": {"name": "adamw", "lr": 0.003, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                  "weight_decay": 0.01},
    "clip_grad_norm": 1.0})";
  BraidResult r =
      launch2(flags(tmp) + "--deepspeed " + tmp.file("ds.json") + " --out " + tmp.file("ds"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "'steps_per_print' changes nothing")) << r.output;
  r = launch2(flags(tmp) + "--config " + tmp.file("braid.json") + " --out " + tmp.file("braid"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(same_checkpoint(tmp.file("ds/checkpoint"), tmp.file("braid/checkpoint")));
  const nlohmann::json a = last_eval(tmp.file("ds")), b = last_eval(tmp.file("braid"));
  ASSERT_TRUE(a.contains("loss")) << a.dump();
  EXPECT_EQ(a["loss"], b["loss"]);
  EXPECT_EQ(a.value("accuracy", -1.0), b.value("accuracy", -1.0));

  // The same keys in both files agree: accepted; a disagreement names both files.
  r = launch2(flags(tmp) + "--config " + tmp.file("braid.json") + " --deepspeed " +
              tmp.file("ds.json") + " --out " + tmp.file("both"));
  EXPECT_EQ(r.code, 0) << r.output;
  std::ofstream(tmp.file("other.json")) << R"({"optimizer": {"lr": 0.01}})";
  r = launch2(flags(tmp) + "--config " + tmp.file("other.json") + " --deepspeed " +
              tmp.file("ds.json") + " --out " + tmp.file("clash"));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "optimizer.lr")) << r.output;
  EXPECT_TRUE(contains(r.output, "other.json")) << r.output;
  EXPECT_TRUE(contains(r.output, "ds.json")) << r.output;
}

TEST(DeepSpeedCli, BatchMismatchAtRunTimeNamesAllThree) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  std::ofstream(tmp.file("ds.json")) << R"({"train_batch_size": 32,
    "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2})";
  // Right for 2 ranks, wrong for 1.
  const BraidResult r = run_braid("train " + flags(tmp) + "--deepspeed " + tmp.file("ds.json") +
                                  " --out " + tmp.file("one"));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "train_batch_size 32")) << r.output;
  EXPECT_TRUE(contains(r.output, "1 rank")) << r.output;
}

}  // namespace
