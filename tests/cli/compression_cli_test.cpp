// Gradient compression as a user runs it: a DDP job with a codec records what crossed the
// wire in metrics.jsonl and on the progress line; a codec where nothing crosses a
// data-parallel axis is refused, saying why.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "same_checkpoint.h"
#include "temp_dir.h"

namespace {

using braid::testing::run_braid;
using braid::testing::same_checkpoint;
using braid::testing::TempDir;

TEST(CompressionCli, AJobRecordsItsCodecsBytesRatioAndErrorFeedback) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const auto r = run_braid(std::string("launch -n 2 -- ") + BRAID_BINARY +
                           " train --model mlp --steps 20 --batch 32 --log-every 10 --threads 1"
                           " --compression.codec int8 --out " +
                           tmp.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("int8 3.9x fewer bytes"), std::string::npos) << r.output;
  nlohmann::json last;
  std::ifstream in(tmp.path() + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json rec = nlohmann::json::parse(line);
    if (rec.value("event", "") == "train") last = rec;
  }
  ASSERT_FALSE(last.is_null()) << "no train record";
  EXPECT_EQ(last.value("codec", ""), "int8") << last.dump();
  // A byte and a scale per 256 floats against 4 bytes: just under 4.
  EXPECT_GT(last.value("compression_ratio", 0.0), 3.8) << last.dump();
  EXPECT_LT(last.value("compression_ratio", 0.0), 4.0) << last.dump();
  EXPECT_GT(last.value("wire_bytes", 0.0), 0.0) << last.dump();
  EXPECT_GT(last.value("error_feedback_norm", 0.0), 0.0) << last.dump();
}

// 1-bit Adam stopped at its freeze step and resumed compresses from the checkpoint's moments
// (the codec's copies of m and v are the optimizer's), so it goes on with the bits of the
// run that never stopped: at the freeze the error memory is zero either way.
TEST(CompressionCli, OnebitAdamResumedAtItsFreezeGoesOnBitwise) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string launch = std::string("launch -n 2 -- ") + BRAID_BINARY + " train ";
  const std::string flags =
      "--model mlp --batch 32 --threads 1 --schedule constant --optimizer.name onebit_adam "
      "--optimizer.lr 0.001 --optimizer.weight-decay 0.01 --compression.codec onebit_adam "
      "--compression.freeze-step 4 ";
  auto r = run_braid(launch + flags + "--steps 10 --out " + tmp.file("straight"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_braid(launch + flags + "--steps 4 --out " + tmp.file("half"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_braid(launch + "--resume " + tmp.file("half") + " --steps 10");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("at step 4"), std::string::npos) << r.output;
  EXPECT_TRUE(same_checkpoint(tmp.file("half/checkpoint"), tmp.file("straight/checkpoint")));
}

TEST(CompressionCli, ACodecWithNoDataAxisIsRefusedSayingWhy) {
  const TempDir tmp;
  const auto r =
      run_braid("train --model mlp --steps 1 --compression.codec sign --out " + tmp.path());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("compresses what crosses a data-parallel axis"), std::string::npos)
      << r.output;
}

TEST(CompressionCli, OnebitAdamUnderZeroIsRefusedSayingWhy) {
  const TempDir tmp;
  const auto r = run_braid(std::string("launch -n 2 -- ") + BRAID_BINARY +
                           " train --model mlp --steps 1 --zero-stage 1 --optimizer.name "
                           "onebit_adam --compression.codec onebit_adam --out " +
                           tmp.path());
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("runs under strategy ddp without zero_stage"), std::string::npos)
      << r.output;
}

}  // namespace
