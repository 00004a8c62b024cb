// `braid train`'s settings as a user meets them: every key a flag with help, bad values
// refused before anything runs with exit code 1 and the key named (never "internal
// error", exit 70), unknown flags and keys answered with the closest valid one, and the
// threads bounded.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "temp_dir.h"
#include "train/settings.h"

namespace {

using braid::testing::TempDir;

using Result = braid::testing::BraidResult;
using braid::testing::run_braid;

void expect_refused(const std::string& args, const std::string& message) {
  const Result r = run_braid(args);
  EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << args << "\n" << r.output;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(SettingsCli, BadFlagValuesAreRefusedNamingTheKey) {
  const std::string batch = "'batch' must be positive and at most 2147483647 (an integer), got ";
  expect_refused("train --model mlp --batch 2.5", batch + "2.5");
  expect_refused("train --model mlp --batch 1e20", batch + "1e+20");
  expect_refused("train --model mlp --batch 4294967296", batch + "4294967296");
  expect_refused("train --model mlp --batch big", batch + "\"big\"");
  expect_refused("train --model mlp --lr 1e400",
                 "'optimizer.lr' must be positive (a finite number), got 1e400");
  expect_refused("train --model mlp --lr nan", "'optimizer.lr' must be positive");
  // Old spellings reach the same keys.
  expect_refused("train --warmup -1", "'schedule.warmup_steps' must be >= 0");
  expect_refused("train --clip -1", "'clip_grad_norm' must be >= 0");
  expect_refused("train --crop-pad 5000", "'augment_crop_pad' must be >= 0 and at most 1024");
  expect_refused("train --steps -1", "'max_steps' must be >= 0");
  // Bucket sizes that became 0 bytes or overflowed size_t in the strategy.
  expect_refused("train --bucket-mb 1e-9",
                 "'bucket_mb' must be in [0.001, 1048576] (a number), got 1e-09");
  expect_refused("train --bucket-mb 1e30",
                 "'bucket_mb' must be in [0.001, 1048576] (a number), got 1e+30");
  expect_refused("train --optimizer adamww",
                 "'optimizer.name' is \"adamww\"; did you mean 'adamw'?");
}

TEST(SettingsCli, BadConfigFilesAreRefusedNamingTheKeyOrLayer) {
  const TempDir tmp;
  const std::string dir = tmp.path();
  auto config = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return "train --config " + dir + "/" + name;
  };
  expect_refused(config("lr.json", R"({"optimizer": {"lr": 1e400}})"), "not valid JSON");
  expect_refused(config("array.json", "[1, 2]"), "the top level must be a JSON object");
  expect_refused(config("array.json", "[1, 2]") + " --epochs 2",
                 "the top level must be a JSON object");
  expect_refused(config("batch.json", R"({"batch": 4294967296})"), "'batch' must be positive");
  expect_refused(config("fraction.json", R"({"batch": 2.5})"), "got 2.5");
  expect_refused(config("no_flatten.json", R"({"model": {"input": [28, 28, 1], "layers": [
                   {"type": "conv2d", "out_channels": 8, "kernel": 3},
                   {"type": "linear", "out_features": 10}]}})"),
                 "model: layer 1 (linear) expects input [batch, features] or [batch, time, "
                 "features], got [1, 26, 26, 8] from layer 0 (conv2d)");
  expect_refused(config("huge.json", R"({"model": {"input": [28, 28, 1], "layers": [
                   {"type": "flatten"}, {"type": "linear", "out_features": 100000000000}]}})"),
                 "layer 1 (linear): 'out_features' must be an integer in [1, 2147483647]");
  std::ofstream(dir + "/spec.json") << R"({"input": [4], "layers": [{"type": "relu"},
                   {"type": "linear", "out_features": 2000000000000}]})";
  expect_refused("train --model " + dir + "/spec.json", "layer 1 (linear): 'out_features'");
}

TEST(SettingsCli, UnknownFlagsAndKeysSuggestTheClosest) {
  expect_refused("train --max-step 5", "unknown flag '--max-step'; did you mean '--max-steps'?");
  expect_refused("train --learning-rate=0.1", "unknown flag '--learning-rate'");
  expect_refused("train --optimizer.lrr 0.1", "did you mean '--optimizer.lr'?");
  expect_refused("train stray", "unexpected argument 'stray'");
  const TempDir tmp;
  std::ofstream(tmp.path() + "/c.json") << R"({"max_step": 3})";
  expect_refused("train --config " + tmp.path() + "/c.json",
                 "unknown key 'max_step'; did you mean 'max_steps'?");
}

TEST(SettingsCli, HelpListsEveryKeyWithItsHelp) {
  const Result r = run_braid("train --help");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const braid::train::Setting& s : braid::train::settings()) {
    EXPECT_NE(r.output.find(braid::train::flag_names(s).front()), std::string::npos) << s.key;
    EXPECT_NE(r.output.find(s.help.substr(0, 30)), std::string::npos) << s.key;
  }
  EXPECT_NE(r.output.find("cnn: batch 128"), std::string::npos) << r.output;
}

int usable_cores() {
  cpu_set_t set;
  sched_getaffinity(0, sizeof(set), &set);
  return CPU_COUNT(&set);
}

// --threads 100000 segfaulted; 64 threads on 2 cores ran 9 s a step without a word.
TEST(SettingsCli, ThreadsAreBoundedAndOversubscriptionWarnsOnce) {
  expect_refused("train --threads 100000",
                 "'threads' must be positive and at most 1024 (an integer), got 100000");
  expect_refused("bench train --model mlp --synthetic --threads 100000",
                 "threads must be in [1, 1024], got 100000");
  const std::string bench =
      "bench train --model mlp --synthetic --batch 2 --steps 1 --warmup 0 --threads ";
  Result r = run_braid(bench + std::to_string(usable_cores() + 1));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "exceeds the " + std::to_string(usable_cores()) + " cores"), 1u)
      << r.output;
  r = run_braid(bench + std::to_string(usable_cores()));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "exceeds"), 0u) << r.output;
}

// The flags land on their keys, under the model's recipe (OUT/config.json is the
// resolved config).
TEST(SettingsCli, FlagsOverrideTheModelsRecipe) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string out = tmp.path() + "/run";
  const Result r = run_braid(
      "train --model cnn-bn --max-steps 1 --batch 8 --eval-batches 1 "
      "--no-augment-flip --lr 0.01 --warmup 3 --optimizer.nesterov --out " +
      out);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(out + "/config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  EXPECT_EQ(c["batch"], 8);
  EXPECT_EQ(c["max_steps"], 1);
  EXPECT_EQ(c["augment_flip"], false);
  EXPECT_EQ(c["optimizer"]["lr"], 0.01);
  EXPECT_EQ(c["optimizer"]["nesterov"], true);
  EXPECT_EQ(c["schedule"]["warmup_steps"], 3);
  // The recipe's other values stay.
  EXPECT_EQ(c["label_smoothing"], 0.1);
  EXPECT_EQ(c["optimizer"]["weight_decay"], 1e-4);
  EXPECT_EQ(c["schedule"]["name"], "cosine");
}

}  // namespace
