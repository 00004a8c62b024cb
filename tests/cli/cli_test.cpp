// The braid executable as a user runs it: exit codes, error lines, outputs on disk.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using braid::testing::TempDir;

using Result = braid::testing::BraidResult;
using braid::testing::run_braid;

TEST(Cli, UnknownConfigKeyIsOneClearLineAndExitCode1) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  std::ofstream(dir + "/c.json") << R"({"model": "mlp", "optimiser": {"lr": 0.1}})";
  const Result r = run_braid("train --config " + dir + "/c.json");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("unknown key 'optimiser'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("c.json"), std::string::npos) << r.output;
}

TEST(Cli, MalformedConfigAndMissingFilesAreNamed) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  std::ofstream(dir + "/c.json") << R"({"model": "mlp",)";
  Result r = run_braid("train --config " + dir + "/c.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("not valid JSON"), std::string::npos) << r.output;
  r = run_braid("train --config " + dir + "/missing.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("missing.json"), std::string::npos) << r.output;
  r = run_braid("eval --checkpoint " + dir + "/nothing");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("no state.json"), std::string::npos) << r.output;
}

TEST(Cli, BadFlagValueNamesTheKey) {
  const Result r = run_braid("train --model mlp --batch 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("'batch' must be positive"), std::string::npos) << r.output;
}

TEST(Cli, TrainThenEvalTheCheckpoint) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string& dir = tmp.path();
  Result r =
      run_braid("train --model mlp --steps 30 --batch 64 --lr 0.05 --eval-every 30 --out " + dir);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/metrics.jsonl"));
  EXPECT_TRUE(fs::exists(dir + "/checkpoint/model.safetensors"));
  r = run_braid("eval --checkpoint " + dir + "/checkpoint");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("over 10000 samples"), std::string::npos) << r.output;
  // A corrupted checkpoint is refused with the file named.
  {
    std::fstream f(dir + "/checkpoint/model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  r = run_braid("eval --checkpoint " + dir + "/checkpoint");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
}

}  // namespace
