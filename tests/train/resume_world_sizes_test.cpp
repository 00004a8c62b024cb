// A checkpoint loads at any world size: a run on 4 ranks, resumed on 2, then on 1, over
// the same global batch (4 x 4, 2 x 8 with 2 micro-batches, 1 x 16 with 4), sees the same
// samples in the same steps as one uninterrupted run, and in deterministic mode ends with
// the same bits (parallel/tree_sum.h). Ranks are threads over the in-process transport,
// each with its own Trainer on real Fashion-MNIST.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>

#include "comm/group.h"
#include "comm/inproc_ranks.h"
#include "fashion_mnist_data.h"
#include "temp_dir.h"
#include "test_files.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using braid::testing::TempDir;
using nlohmann::json;

// Convolution and dropout (randomness per micro-batch); no batch norm, whose running
// statistics DDP takes from rank 0 alone.
TrainConfig config(const std::string& out, int ranks) {
  TrainConfig c;
  c.model = json::parse(R"({"input": [28, 28, 1], "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3, "stride": 2}, {"type": "relu"},
      {"type": "flatten"}, {"type": "dropout", "p": 0.2},
      {"type": "linear", "out_features": 10}]})");
  c.batch = 16 / ranks;
  c.accumulate_steps = 4 / ranks;
  c.deterministic = true;
  c.strategy = ranks > 1 ? "ddp" : "single";
  c.max_steps = 12;
  c.out = out;
  c.log_every = 100;
  c.eval_batches = 1;
  c.optimizer.name = "adamw";
  c.optimizer.lr = 1e-3;
  c.optimizer.weight_decay = 0.01;
  c.schedule.name = "cosine";
  c.schedule.warmup_steps = 3;
  c.augment_flip = true;
  c.seed = 11;
  return c;
}

std::vector<float> params_of(Trainer& t) {
  return {t.params().params(), t.params().params() + t.params().size()};
}

// `ranks` trainers, resumed from `from` (unless empty), run to `stop_at`; rank 0's
// parameters.
std::vector<float> run_on(int ranks, const std::string& out, const std::string& from,
                          int64_t stop_at) {
  std::vector<float> params;
  std::mutex mu;
  comm::testing::rethrow_first(comm::testing::run_group(ranks, [&](comm::Group& world) {
    Trainer t(config(out, ranks), world.split(0, world.rank()));
    if (!from.empty()) t.load_checkpoint(from);
    t.run(stop_at);
    EXPECT_EQ(t.global_step(), stop_at);
    if (world.rank() == 0) {
      const std::lock_guard lock(mu);
      params = params_of(t);
    }
  }));
  return params;
}

TEST(ResumeAcrossWorldSizes, FourThenTwoThenOneRankEqualsOneRunBitwise) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string dir = tmp.path();
  Trainer straight(config(dir + "/straight", 1));
  straight.run();
  const std::vector<float> want = params_of(straight);

  run_on(4, dir + "/four", "", 4);
  run_on(2, dir + "/two", dir + "/four", 8);
  const std::vector<float> got = run_on(1, dir + "/one", dir + "/two", 12);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// Another global batch continues from the same sample: 3 steps of 2 x 8 end at sample 48,
// which is batch 2 of 24 for one rank; one more step ends at sample 72.
TEST(ResumeAcrossWorldSizes, AnotherGlobalBatchContinuesFromTheSameSample) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string dir = tmp.path();
  run_on(2, dir + "/two", "", 3);
  TrainConfig c = config(dir + "/one", 1);
  c.batch = 24;
  c.accumulate_steps = 1;
  Trainer t(c);
  t.load_checkpoint(dir + "/two");
  t.run(/*stop_at_step=*/4);
  json state;
  std::ifstream(dir + "/one/checkpoint/state.json") >> state;
  const json& loader = state["train_state"]["loader"];
  EXPECT_EQ(loader["position"], 3) << loader.dump();
  EXPECT_EQ(loader["samples"], 72) << loader.dump();
  EXPECT_EQ(loader["world_size"], 1) << loader.dump();
}

// A global batch that does not divide the checkpoint's sample count is refused, naming
// both and what to do; nothing is loaded.
TEST(ResumeAcrossWorldSizes, AGlobalBatchThatDoesNotFitIsRefused) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string dir = tmp.path();
  run_on(2, dir + "/two", "", 3);  // 3 steps of 16: sample 48
  TrainConfig c = config(dir + "/other", 1);
  c.batch = 20;
  c.accumulate_steps = 1;
  Trainer t(c);
  const std::string e = testing::error_of([&] { t.load_checkpoint(dir + "/two"); });
  EXPECT_TRUE(testing::contains(e, "stopped at sample 48 of its epoch (2 ranks x batch 8)")) << e;
  EXPECT_TRUE(testing::contains(e, "1 ranks x batch 20 = 20")) << e;
  EXPECT_EQ(t.global_step(), 0);
}

// global_batch 10 while ranks come and go: 4 ranks (shares 3, 3, 2, 2) for 4 steps, 3 ranks
// (4, 3, 3) for 4 more, 4 again for the last 4, each resuming the one before's checkpoint at
// the same step. Every step trains on the same 10 samples as one process at global_batch 10,
// each counted 1/10 (parallel/share_weight.h), so the parameters agree up to the order of
// the sums: within 1e-5 of the largest after 12 steps of SGD with momentum. A step whose
// samples differ, or an unweighted mean over ranks, moves them by 1e-3 or more. No dropout,
// whose draws follow the ranks.
TrainConfig elastic_config(const std::string& out) {
  TrainConfig c = config(out, 1);
  c.model = json::parse(R"({"input": [28, 28, 1], "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3, "stride": 2}, {"type": "relu"},
      {"type": "flatten"}, {"type": "linear", "out_features": 10}]})");
  c.batch = 128;  // not used: global_batch decides
  c.global_batch = 10;
  c.accumulate_steps = 1;
  c.deterministic = false;
  c.optimizer.name = "sgd";
  c.optimizer.lr = 0.05;
  c.optimizer.momentum = 0.9;
  return c;
}

std::vector<float> run_elastic(int ranks, const std::string& out, const std::string& from,
                               int64_t stop_at) {
  std::vector<float> params;
  std::mutex mu;
  comm::testing::rethrow_first(comm::testing::run_group(ranks, [&](comm::Group& world) {
    TrainConfig c = elastic_config(out);
    c.strategy = ranks > 1 ? "ddp" : "single";
    Trainer t(c, world.split(0, world.rank()));
    if (!from.empty()) t.load_checkpoint(from);
    t.run(stop_at);
    EXPECT_EQ(t.global_step(), stop_at);
    if (world.rank() == 0) {
      const std::lock_guard lock(mu);
      params = params_of(t);
    }
  }));
  return params;
}

TEST(ResumeAcrossWorldSizes, GlobalBatchKeepsItsStepsWhileRanksComeAndGo) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string dir = tmp.path();
  Trainer straight(elastic_config(dir + "/straight"));
  straight.run(12);
  const std::vector<float> want = params_of(straight);

  run_elastic(4, dir + "/four", "", 4);
  run_elastic(3, dir + "/three", dir + "/four", 8);
  const std::vector<float> got = run_elastic(4, dir + "/again", dir + "/three", 12);
  ASSERT_EQ(got.size(), want.size());
  float scale = 0;
  for (const float x : want) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5f * scale) << "parameter float " << i;
  json state;
  std::ifstream(dir + "/again/checkpoint/state.json") >> state;
  const json& loader = state["train_state"]["loader"];
  EXPECT_EQ(loader["position"], 12) << loader.dump();
  EXPECT_EQ(loader["samples"], 120) << loader.dump();
  EXPECT_EQ(loader["global_batch"], 10) << loader.dump();
}

// What a global batch cannot do is refused on every rank before training, naming the key.
TEST(ResumeAcrossWorldSizes, GlobalBatchRefusalsNameTheKey) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  auto first_error = [&](int ranks, const TrainConfig& c) {
    const auto errors = comm::testing::run_group(
        ranks, [&](comm::Group& world) { Trainer t(c, world.split(0, world.rank())); });
    return comm::testing::message(errors[0]);
  };
  TrainConfig c = elastic_config(tmp.path() + "/refused");
  c.strategy = "ddp";
  c.global_batch = 2;
  std::string e = first_error(3, c);
  EXPECT_TRUE(testing::contains(e, "global_batch 2 cannot give each of 3 data-parallel ranks"))
      << e;
  c.global_batch = 10;
  c.accumulate_steps = 2;
  e = first_error(3, c);
  EXPECT_TRUE(testing::contains(e, "shares of 4 and 3 samples, which accumulate_steps 2")) << e;
  c.accumulate_steps = 1;
  c.strategy = "fedavg";
  c.global_batch = 12;
  e = testing::error_of([&] { Trainer t(c); });
  EXPECT_TRUE(testing::contains(e, "strategy fedavg trains each client at 'batch'")) << e;
}

}  // namespace
}  // namespace braid::train
