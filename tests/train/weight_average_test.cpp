// The weight average against a hand-computed EMA, its swap with the model, and in the
// trainer: evaluation leaves the model untouched, the checkpoint's ema.safetensors holds
// exactly what was evaluated, and resume carries the average bit for bit.
#include "train/weight_average.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/loader.h"
#include "fashion_mnist_data.h"
#include "test_files.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

struct SmallModel {
  nn::ParamSet params;
  nn::ParamSet::Id w = 0;
  Tensor running = Tensor::empty({2});
  Tensor counter = Tensor::empty({}, DType::i64);
  SmallModel() {
    w = params.declare("0.weight", {3}, true);
    params.declare_buffer("1.running_mean", running);
    params.declare_buffer("1.num_batches_tracked", counter);
    params.allocate();
  }
  void set(float base) {
    for (int i = 0; i < 3; ++i) params.param(w).f32()[i] = base + static_cast<float>(i);
    running.f32()[0] = -base;
    running.f32()[1] = 2 * base;
    *counter.data<int64_t>() = static_cast<int64_t>(base);
  }
};

TEST(WeightAverage, FollowsTheWarmedUpExponentialAverage) {
  SmallModel m;
  m.set(1.0f);
  const double decay = 0.5;
  WeightAverage avg(m.params, decay);
  std::vector<double> w = {1, 2, 3}, r = {-1, 2};
  const float bases[] = {3.0f, -2.0f, 5.0f, 4.0f};
  for (int n = 0; n < 4; ++n) {
    m.set(bases[n]);
    avg.update(m.params);
    // d = min(decay, (1 + n) / (10 + n)): 0.1, 0.18.., 0.25, then the decay 0.5 binds.
    const double d = std::min(decay, (1.0 + n) / (10.0 + n));
    for (int i = 0; i < 3; ++i) w[i] = d * w[i] + (1 - d) * (bases[n] + i);
    r[0] = d * r[0] + (1 - d) * -bases[n];
    r[1] = d * r[1] + (1 - d) * 2 * bases[n];
  }
  EXPECT_EQ(avg.updates(), 4);
  const auto& s = avg.state_dict();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].name, "0.weight");
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(s[0].tensor.f32()[i], w[i], 1e-5) << i;
  EXPECT_NEAR(s[1].tensor.f32()[0], r[0], 1e-5);
  EXPECT_NEAR(s[1].tensor.f32()[1], r[1], 1e-5);
  EXPECT_EQ(*s[2].tensor.data<int64_t>(), 4);  // a counter follows the model, not averaged
}

TEST(WeightAverage, SwapExchangesModelAndAverage) {
  SmallModel m;
  m.set(1.0f);
  WeightAverage avg(m.params, 0.9);
  m.set(7.0f);
  avg.update(m.params);
  const float averaged = avg.state_dict()[0].tensor.f32()[0];
  ASSERT_NE(averaged, 7.0f);
  avg.swap_with(m.params);
  EXPECT_EQ(m.params.param(m.w).f32()[0], averaged);
  EXPECT_EQ(avg.state_dict()[0].tensor.f32()[0], 7.0f);
  avg.swap_with(m.params);
  EXPECT_EQ(m.params.param(m.w).f32()[0], 7.0f);
  EXPECT_EQ(m.running.f32()[0], -7.0f);
}

TEST(WeightAverage, LoadChecksNamesAndShapes) {
  SmallModel m;
  WeightAverage avg(m.params, 0.9);
  std::vector<NamedTensor> wrong = {{"0.weight", Tensor::empty({4})},
                                    {"1.running_mean", Tensor::empty({2})},
                                    {"1.num_batches_tracked", Tensor::empty({}, DType::i64)}};
  try {
    avg.load(wrong, 3, "test average");
    FAIL() << "a wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'0.weight' has shape"), std::string::npos) << e.what();
  }
  EXPECT_EQ(avg.updates(), 0);
  wrong[0].tensor = Tensor::empty({3});
  wrong[0].tensor.f32()[1] = 42.0f;
  avg.load(wrong, 3, "test average");
  EXPECT_EQ(avg.updates(), 3);
  EXPECT_EQ(avg.state_dict()[0].tensor.f32()[1], 42.0f);
}

TrainConfig ema_config(const std::string& out, int64_t steps) {
  TrainConfig c;
  c.model = "cnn-bn";  // batch norm: the running statistics are averaged too
  c.batch = 32;
  c.max_steps = steps;
  c.out = out;
  c.log_every = 5;
  c.eval_batches = 2;
  c.optimizer.lr = 0.05;
  c.ema_decay = 0.9;
  c.seed = 5;
  return c;
}

std::vector<unsigned char> bytes_of(const std::vector<NamedTensor>& tensors) {
  std::vector<unsigned char> out;
  for (const NamedTensor& t : tensors) {
    const auto* p = static_cast<const unsigned char*>(t.tensor.raw());
    out.insert(out.end(), p, p + t.tensor.nbytes());
  }
  return out;
}

TEST(WeightAverage, TrainerEvaluatesTheAverageAndResumesItBitForBit) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string& dir = tmp.path();
  Trainer straight(ema_config(dir + "/straight", 12));
  straight.run();
  ASSERT_NE(straight.weight_average(), nullptr);
  EXPECT_EQ(straight.weight_average()->updates(), 12);

  Trainer first(ema_config(dir + "/first", 12));
  first.run(/*stop_at_step=*/5);
  Trainer resumed(ema_config(dir + "/resumed", 12));
  resumed.load_checkpoint(dir + "/first/checkpoint");
  resumed.run();
  EXPECT_EQ(bytes_of(straight.weight_average()->state_dict()),
            bytes_of(resumed.weight_average()->state_dict()));
  const std::vector<float> live(straight.params().params(),
                                straight.params().params() + straight.params().size());

  // Evaluating the average leaves the model as it was, and differs from the model's.
  const EvalResult on_average = straight.evaluate_average(2);
  EXPECT_EQ(std::memcmp(live.data(), straight.params().params(), live.size() * sizeof(float)), 0);
  EXPECT_NE(on_average.loss, straight.evaluate(2).loss);

  // ema.safetensors is the average: loaded as plain weights, it evaluates the same.
  Trainer reader(ema_config(dir + "/reader", 12));
  reader.load_weights(dir + "/straight/checkpoint/ema.safetensors");
  EXPECT_EQ(reader.evaluate(2).loss, on_average.loss);

  // Without a decay there is no average and no ema.safetensors.
  TrainConfig plain = ema_config(dir + "/plain", 2);
  plain.ema_decay = 0;
  Trainer without(plain);
  without.run();
  EXPECT_EQ(without.weight_average(), nullptr);
  EXPECT_FALSE(fs::exists(dir + "/plain/checkpoint/ema.safetensors"));
  EXPECT_THROW(without.evaluate_average(), Error);
}

TEST(WeightAverage, ResumeWithoutAnAverageStartsItAndACorruptOneIsRefused) {
  REQUIRE_FASHION_MNIST();
  const TempDir tmp;
  const std::string& dir = tmp.path();
  TrainConfig plain = ema_config(dir + "/plain", 3);
  plain.ema_decay = 0;
  Trainer(plain).run();
  Trainer late(ema_config(dir + "/late", 6));
  late.load_checkpoint(dir + "/plain/checkpoint");
  ASSERT_NE(late.weight_average(), nullptr);
  EXPECT_EQ(late.weight_average()->updates(), 0);
  const Tensor& first = late.weight_average()->state_dict()[0].tensor;
  EXPECT_EQ(std::memcmp(first.raw(), late.params().params(), first.nbytes()), 0);

  Trainer(ema_config(dir + "/ema", 3)).run();
  const std::string ema_file = dir + "/ema/checkpoint/ema.safetensors";
  std::string bytes = testing::read_bytes(ema_file);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x5a);
  testing::write_bytes(ema_file, bytes);
  Trainer reader(ema_config(dir + "/reader", 6));
  try {
    reader.load_checkpoint(dir + "/ema/checkpoint");
    FAIL() << "a corrupt ema.safetensors was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ema.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::train
