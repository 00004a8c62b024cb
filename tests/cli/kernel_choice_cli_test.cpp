// The run-time kernel choices from a user's side (core/gemm_choice.h, nn/conv_choice.h,
// train/kernel_record.h, train/job_kernels.h, train/kernel_cache.h): timed by a process
// alone and said once; recorded in the checkpoint; replayed with kernel_choices (bitwise
// the recorded run, nothing timed) and on --resume; kept in the kernel cache, which the
// next identical run chooses from alike; decided by the fixed rule in deterministic mode,
// so that runs and world sizes give one run's bits with nothing forced; forced with
// BRAID_GEMM and BRAID_CONV; a bad record or value is an error naming it.
// (The suite forces both for the braid processes it starts and turns the cache off,
// tests/kernel_env.cpp; these tests set their own.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

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

// Nothing forced, as a user runs braid: no BRAID_GEMM or BRAID_CONV at all, and the kernel
// cache in `dir`.
std::string unforced(const std::string& dir) {
  return "env -u BRAID_GEMM -u BRAID_CONV BRAID_KERNEL_CACHE=" + dir + " BRAID_TIMEOUT_S=60";
}

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
  EXPECT_TRUE(has_text(r.output, " by the fixed rule, the rest recorded or cached): oneDNN for "))
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

// Deterministic mode with nothing forced: two ranks give one rank's bits, and a run
// repeated gives them again, although the kernels would time differently in each process
// (the mlp's 1024-wide products are near ties between the libraries). A timed run first
// fills the kernel cache, which deterministic runs leave out.
TEST(KernelChoiceCli, DeterministicMlpIsOneRunsBitsAtEveryWorldSizeWithNothingForced) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string env = unforced(tmp.file("cache"));
  const std::string flags =
      "train --model mlp --schedule constant --threads 1 --eval-batches 2 --log-every 100 "
      "--optimizer adamw --lr 0.001 --steps 6 ";
  // The deterministic runs' shapes (micro-batches of 64), timed and cached.
  auto r = run_braid(flags + "--batch 64 --out " + tmp.file("timed"), env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(tmp.file("cache"))) << "the timed run kept no kernel cache";

  const std::string det = flags + "--deterministic ";
  const std::string one = det + "--strategy single --batch 128 --accumulate-steps 2 --out ";
  r = run_braid(one + tmp.file("one"), env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "(0 timed on this CPU, 8 by the fixed rule")) << r.output;
  r = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " " + det + "--batch 64 --out " +
                    tmp.file("two"),
                env);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_braid(one + tmp.file("again"), env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(same_checkpoint(tmp.file("one/checkpoint"), tmp.file("two/checkpoint")));
  EXPECT_TRUE(same_checkpoint(tmp.file("one/checkpoint"), tmp.file("again/checkpoint")));
}

// The same for convolutions: the cnn's second layer is a near tie between im2col + GEMM and
// the direct kernels.
TEST(KernelChoiceCli, DeterministicCnnIsOneRunsBitsOnTwoRanksWithNothingForced) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string env = unforced(tmp.file("cache"));
  const std::string det =
      "train --model cnn --schedule constant --threads 1 --eval-batches 1 --log-every 100 "
      "--optimizer adamw --lr 0.001 --steps 3 --deterministic ";
  auto r = run_braid(
      det + "--strategy single --batch 64 --accumulate-steps 2 --out " + tmp.file("one"), env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "convolution: direct for 1 of 2 geometries (0 timed")) << r.output;
  r = run_braid("launch -n 2 -- " + std::string(BRAID_BINARY) + " " + det + "--batch 32 --out " +
                    tmp.file("two"),
                env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(same_checkpoint(tmp.file("one/checkpoint"), tmp.file("two/checkpoint")));
}

// The kernel cache as a user meets it: a timed run writes it (a file with its magic), the
// same run again takes every choice from it (nothing timed, the same bits), a corrupt cache
// is warned about and rewritten, never fatal, and BRAID_KERNEL_CACHE=off keeps none.
TEST(KernelChoiceCli, TheKernelCacheMakesTheNextRunChooseAlikeAndSurvivesCorruption) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string env = unforced(tmp.file("cache"));
  const std::string flags = "train " + run_flags(tmp) + "--steps 3 --out ";
  auto r = run_braid(flags + tmp.file("a"), env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(has_text(r.output, "(0 timed")) << r.output;
  std::vector<std::string> files = tmp.list("cache");
  ASSERT_EQ(files.size(), 2u);  // kernels-<machine>.json and its .lock
  const std::string cache = tmp.file("cache/" + files[0]);
  ASSERT_TRUE(files[0].starts_with("kernels-") && files[0].ends_with(".json")) << files[0];
  const auto file = nlohmann::json::parse(std::ifstream(cache));
  EXPECT_EQ(file["magic"], "braid-kernel-cache");
  EXPECT_GE(file["choices"]["gemm"].size(), 1u);
  EXPECT_GE(file["choices"]["conv"].size(), 1u);

  r = run_braid(flags + tmp.file("b"), env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "(0 timed on this CPU, 0 by the fixed rule")) << r.output;
  EXPECT_TRUE(same_checkpoint(tmp.file("a/checkpoint"), tmp.file("b/checkpoint")));

  std::ofstream(cache) << R"({"magic": "braid-kernel-cache", "version": 1, "choi)";
  r = run_braid(flags + tmp.file("c"), env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_text(r.output, "is not JSON")) << r.output;
  EXPECT_TRUE(has_text(r.output, "timed again and the file rewritten")) << r.output;
  EXPECT_FALSE(has_text(r.output, "(0 timed")) << r.output;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(cache))["magic"], "braid-kernel-cache");

  const std::string off =
      "env -u BRAID_GEMM -u BRAID_CONV BRAID_KERNEL_CACHE=off HOME=" + tmp.file("home") +
      " XDG_CACHE_HOME=" + tmp.file("xdg");
  r = run_braid(flags + tmp.file("d"), off);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(tmp.file("home")));
  EXPECT_FALSE(std::filesystem::exists(tmp.file("xdg")));
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
