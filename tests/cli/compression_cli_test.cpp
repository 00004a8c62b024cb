// Gradient compression as a user runs it: a DDP job with a codec records what crossed the
// wire in metrics.jsonl and on the progress line; a codec where nothing crosses a
// data-parallel axis is refused, saying why.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

// The train records of a run's metrics.jsonl, in order.
std::vector<nlohmann::json> train_records(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json rec = nlohmann::json::parse(line);
    if (rec.value("event", "") == "train") out.push_back(std::move(rec));
  }
  return out;
}

// A train record of a run with codec int8: a byte and a scale per 256 floats against 4
// bytes, just under 4 times fewer.
void expect_int8_record(const nlohmann::json& rec) {
  EXPECT_EQ(rec.value("codec", ""), "int8") << rec.dump();
  EXPECT_GT(rec.value("compression_ratio", 0.0), 3.8) << rec.dump();
  EXPECT_LT(rec.value("compression_ratio", 0.0), 4.0) << rec.dump();
}

TEST(CompressionCli, AJobRecordsItsCodecsBytesRatioAndErrorFeedback) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const auto r = run_braid(std::string("launch -n 2 -- ") + BRAID_BINARY +
                           " train --model mlp --steps 20 --batch 32 --log-every 10 --threads 1"
                           " --compression.codec int8 --out " +
                           tmp.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("int8 3.9x fewer bytes"), std::string::npos) << r.output;
  const std::vector<nlohmann::json> train = train_records(tmp.path());
  ASSERT_FALSE(train.empty()) << "no train record";
  const nlohmann::json& last = train.back();
  expect_int8_record(last);
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

BraidResult launch_ps(const std::string& flags) {
  return run_braid(
      std::string("launch --servers 2 --workers 2 -- ") + BRAID_BINARY + " train " + flags,
      "BRAID_TIMEOUT_S=30");
}

// Parameter-server pushes through top-k of every float carry the fp32 pushes, so a sync run
// (deterministic: the servers sum in worker order) ends with the same model and the same
// servers' state bit for bit; a wrong range, offset or size on either side would not.
TEST(CompressionCli, PsPushesThroughTopkOfEveryFloatEqualFp32Pushes) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string flags = braid::testing::tiny_mlp_flags(tmp) +
                            "--optimizer adam --lr 0.003 --strategy ps --ps.mode sync --steps 20 ";
  BraidResult r = launch_ps(flags + "--out " + tmp.file("fp32"));
  ASSERT_EQ(r.code, 0) << r.output;
  r = launch_ps(flags +
                "--compression.codec topk --compression.topk-ratio 1 "
                "--compression.topk-momentum 0 --out " +
                tmp.file("topk"));
  ASSERT_EQ(r.code, 0) << r.output;
  // (index, value) of every float: twice fp32's bytes.
  EXPECT_NE(r.output.find("topk 0.5x fewer bytes"), std::string::npos) << r.output;
  for (const char* file :
       {"model.safetensors", "ps-server-0.safetensors", "ps-server-1.safetensors"}) {
    const std::string a = braid::testing::read_bytes(tmp.file("fp32/checkpoint/") + file);
    ASSERT_FALSE(a.empty()) << file;
    EXPECT_TRUE(a == braid::testing::read_bytes(tmp.file("topk/checkpoint/") + file))
        << file << " differs";
  }
}

// int8 pushes: a byte a float and a scale per 256 on the wire, recorded in metrics.jsonl,
// and the run learns (the servers decode what the workers encoded).
TEST(CompressionCli, PsPushesInInt8RecordTheirRatioAndTrain) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const BraidResult r = launch_ps(
      "--model mlp --batch 32 --threads 1 --strategy ps --steps 60 --log-every 20 "
      "--compression.codec int8 --out " +
      tmp.path());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<nlohmann::json> train = train_records(tmp.path());
  ASSERT_GE(train.size(), 2u) << r.output;
  expect_int8_record(train.back());
  EXPECT_GT(train.back().value("error_feedback_norm", 0.0), 0.0) << train.back().dump();
  EXPECT_LT(train.back().value("loss", 9.0), 0.8 * train.front().value("loss", 0.0))
      << "the loss fell: " << train.front().dump() << " then " << train.back().dump();
}

// Federated averaging pushes each worker's change through the codec too; its round records
// say so.
TEST(CompressionCli, FedAvgRoundsRecordTheirPushesCodec) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const BraidResult r = launch_ps(
      "--model mlp --threads 1 --strategy fedavg --fedavg.rounds 2 --compression.codec int8 "
      "--out " +
      tmp.path());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<nlohmann::json> rounds = train_records(tmp.path());
  ASSERT_FALSE(rounds.empty()) << r.output;
  expect_int8_record(rounds.back());
}

TEST(CompressionCli, PowerSgdUnderAParameterServerIsRefusedSayingWhy) {
  const TempDir tmp;
  const BraidResult r = launch_ps(
      "--model mlp --steps 1 --strategy ps --compression.codec powersgd --out " + tmp.path());
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("allreduces its factors among the workers"), std::string::npos)
      << r.output;
}

TEST(CompressionCli, PriorityWhereNothingIsScheduledIsRefusedSayingWhy) {
  const TempDir tmp;
  const auto r = run_braid(
      "train --model mlp --steps 1 --strategy pipeline --scheduler.priority "
      "--out " +
      tmp.path());
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("strategies ddp, ps and fedavg, not 'pipeline'"), std::string::npos)
      << r.output;
}

}  // namespace
