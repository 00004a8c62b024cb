// A checkpoint loads at any world size: a run on 4 ranks, resumed on 2, then on 1, over
// the same global batch (4 x 4, 2 x 8 with 2 micro-batches, 1 x 16 with 4), sees the same
// samples in the same steps as one uninterrupted run, and in deterministic mode ends with
// the same bits (parallel/tree_sum.h). Ranks are threads over the in-process transport,
// each with its own Trainer on real Fashion-MNIST.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace braid::train
