// The run-time kernel choices from a user's side (core/gemm_choice.h, nn/conv_choice.h,
// train/kernel_record.h): timed by default and said once; recorded in the checkpoint;
// replayed with kernel_choices (bitwise the recorded run, nothing timed) and on --resume;
// forced with BRAID_GEMM and BRAID_CONV; a bad record or value is an error naming it.
// (The suite forces both for the braid processes it starts, tests/kernel_env.cpp; these
// tests set their own.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "fashion_mnist_data.h"
#include "run_braid.h"
#include "same_checkpoint.h"
#include "temp_dir.h"

namespace {

using braid::testing::run_braid;
using braid::testing::same_checkpoint;
using braid::testing::TempDir;

// Both choices timed, whatever the suite forces.
const char* const kTimed = "BRAID_GEMM=auto BRAID_CONV=auto";

bool has_text(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A small convolutional model, so convolution choices are made and recorded too.
std::string run_flags(const TempDir& tmp) {
  std::ofstream(tmp.file("tiny_cnn.json")) << R"({"input": [28, 28, 1], "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3}, {"type": "relu"},
      {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"},
      {"type": "linear", "out_features": 10}]})";
  return "--model " + tmp.file("tiny_cnn.json") +
         " --batch 16 --schedule constant --threads 1 --eval-batches 4 --log-every 100 "
         "--optimizer adam --lr 0.003 ";
}

// The checkpoint's record of convolution choices (state.json's train_state.kernels.conv).
nlohmann::json recorded_conv(const std::string& run) {
  std::ifstream in(run + "/checkpoint/state.json");
  return nlohmann::json::parse(in)["train_state"]["kernels"]["conv"];
}

TEST(KernelChoiceCli, TimedChoicesAreRecordedAndAReplayIsBitwiseTheRun) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string a = tmp.file("a"), b = tmp.file("b");
  auto r = run_braid("train " + run_flags(tmp) + "--steps 8 --out " + a, kTimed);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, " timed on this CPU, the rest recorded): oneDNN for "))
      << r.output;
  EXPECT_FALSE(has_text(r.output, "(0 timed")) << r.output;
  EXPECT_TRUE(has_text(r.output, "; convolution: direct for ")) << r.output;
  const nlohmann::json conv = recorded_conv(a);
  ASSERT_GE(conv.size(), 1u) << conv.dump();
  EXPECT_GT(conv[0]["gemm_us"].get<double>(), 0) << conv.dump();

  // Replayed: nothing is timed, and the weights are the recorded run's bits.
  r = run_braid("train " + run_flags(tmp) + "--steps 8 --kernel-choices " + a + " --out " + b,
                kTimed);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "(0 timed on this CPU")) << r.output;
  EXPECT_TRUE(same_checkpoint(a + "/checkpoint", b + "/checkpoint"));
  // The replayed convolution choices were not timed again.
  for (const auto& c : recorded_conv(b)) EXPECT_EQ(c["gemm_us"].get<double>(), 0) << c.dump();

  // Resumed: the checkpoint's choices again.
  r = run_braid("train --resume " + a + " --steps 12", kTimed);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "(0 timed on this CPU")) << r.output;
}

TEST(KernelChoiceCli, BraidGemmAndBraidConvForceOneChoice) {
  REQUIRE_FASHION_MNIST();
  const std::pair<const char*, const char*> forced[] = {{"openblas", "direct"}, {"onednn", "gemm"}};
  for (const auto& [library, algorithm] : forced) {
    const TempDir tmp;
    const auto r = run_braid("train " + run_flags(tmp) + "--steps 3 --out " + tmp.file("out"),
                             std::string("BRAID_GEMM=") + library + " BRAID_CONV=" + algorithm);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(has_text(r.output, std::string("GEMMs on ") + library + " (BRAID_GEMM); " +
                                       "convolutions " + algorithm + " (BRAID_CONV)"))
        << r.output;
  }
}

TEST(KernelChoiceCli, BadValuesAreErrorsNamingThem) {
  const TempDir tmp;
  auto r = run_braid("train --model mlp --steps 1", "BRAID_GEMM=mkl");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has_text(r.output, "BRAID_GEMM: GEMM library 'mkl'")) << r.output;
  EXPECT_TRUE(has_text(r.output, "openblas or onednn")) << r.output;
  r = run_braid("train --model mlp --steps 1", "BRAID_CONV=winograd");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has_text(r.output, "BRAID_CONV: convolution algorithm 'winograd'")) << r.output;
  EXPECT_TRUE(has_text(r.output, "gemm or direct")) << r.output;

  const std::string record = tmp.file("choices.json");
  std::ofstream(record) << R"({"gemm": [{"m": 4, "n": 4, "k": 4, "trans_a": false,
                                            "trans_b": false, "library": "mkl"}]})";
  r = run_braid("train --model mlp --steps 1 --kernel-choices " + record, kTimed);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "gemm[0]: 'library' is 'mkl'")) << r.output;

  r = run_braid("train --model mlp --steps 1 --kernel-choices " + tmp.file("missing.json"), kTimed);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has_text(r.output, "kernel_choices: cannot read")) << r.output;
}

}  // namespace
