// The `loss` keys of braid train (train/loss_setup.h): class weights from a config weigh the
// loss as PyTorch's weighted mean says, float .npy labels train a multi-label model, a
// regression evaluation summed over two ranks equals one process's, and every way a loss
// cannot fit the data, the model or the strategy is refused naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <mutex>

#include "comm/group.h"
#include "comm/inproc_ranks.h"
#include "parallel/strategy.h"
#include "temp_dir.h"
#include "test_files.h"
#include "train/loss_setup.h"
#include "train/strategy_setup.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

using braid::testing::TempDir;
using nlohmann::json;
using testing::contains;
using testing::error_of;

// A format 1.0 .npy file, as numpy.save writes it.
template <typename T>
void write_npy(const std::string& path, const std::string& descr, const std::string& shape,
               const std::vector<T>& v) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(dict.size() & 0xFF), static_cast<char>(dict.size() >> 8)};
  out.write(len, 2);
  out << dict;
  out.write(reinterpret_cast<const char*>(v.data()),
            static_cast<std::streamsize>(v.size() * sizeof(T)));
}

constexpr int64_t kN = 256, kF = 4, kK = 3;

// Features [N, 4] of normals; targets [N, 3] with label k = (feature k > 0): a multi-label
// task a small MLP learns. The same rows in train and test files.
void write_multilabel(const std::string& dir, const std::string& target_descr = "<f4") {
  std::vector<float> x(kN * kF), y(kN * kK);
  Rng rng(3);
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t f = 0; f < kF; ++f) x[static_cast<size_t>(i * kF + f)] = rng.normal();
    for (int64_t k = 0; k < kK; ++k)
      y[static_cast<size_t>(i * kK + k)] = x[static_cast<size_t>(i * kF + k)] > 0 ? 1.0f : 0.0f;
  }
  const std::string n = std::to_string(kN);
  write_npy(dir + "/x.npy", "<f4", "(" + n + ", 4)", x);
  if (target_descr == "<i8") {
    write_npy(dir + "/y.npy", "<i8", "(" + n + ",)", std::vector<int64_t>(kN, 1));
  } else {
    write_npy(dir + "/y.npy", "<f4", "(" + n + ", 3)", y);
  }
}

TrainConfig npy_config(const std::string& dir, int64_t outputs) {
  TrainConfig c;
  c.model = json{{"input", {kF}},
                 {"layers",
                  {{{"type", "linear"}, {"out_features", 16}},
                   {{"type", "relu"}},
                   {{"type", "linear"}, {"out_features", outputs}}}}};
  c.dataset = "npy";
  c.npy = {dir + "/x.npy", dir + "/y.npy", dir + "/x.npy", dir + "/y.npy"};
  c.batch = 32;
  c.optimizer.name = "adam";
  c.optimizer.lr = 0.01;
  c.log_every = 1000;
  c.out = dir + "/out";
  return c;
}

// CrossEntropyLoss(weight=w) on two rows by hand: sum_i w[y_i] l_i / sum_i w[y_i].
TEST(LossConfig, ClassWeightsFromTheConfigWeighTheLossByHand) {
  const TrainConfig c = config_from_json(json{{"model", "mlp"},
                                              {"loss_class_weights", {1.0, 3.0}},
                                              {"dataset", "npy"},
                                              {"npy", {"a", "b", "c", "d"}}});
  const auto loss = step_options(c).loss;
  ASSERT_TRUE(loss);
  Tensor logits = Tensor::empty({2, 2}, DType::f32, MemCategory::activations);
  const float x[] = {2.0f, 0.0f, 0.5f, 1.5f};
  std::copy(x, x + 4, logits.f32());
  Tensor labels = Tensor::empty({2}, DType::i32, MemCategory::data);
  labels.data<int32_t>()[0] = 0;
  labels.data<int32_t>()[1] = 1;
  // Row 0, class 0: log(1 + e^-2); row 1, class 1: log(1 + e^-1).
  const double l0 = std::log1p(std::exp(-2.0)), l1 = std::log1p(std::exp(-1.0));
  const double expected = (1 * l0 + 3 * l1) / (1 + 3);
  Tensor grad;
  const nn::LossResult r = loss->compute(logits, labels, &grad, 1.0f);
  EXPECT_NEAR(r.loss, expected, 1e-6);
  EXPECT_NE(std::abs(r.loss - (l0 + l1) / 2), 0.0) << "the weights changed nothing";
  // d/dx1 of row 1: w (softmax - onehot) / sum w = 3 (sigmoid(1) - 1) / 4 on its class.
  EXPECT_NEAR(grad.f32()[3], 3.0 * (1.0 / (1.0 + std::exp(-1.0)) - 1.0) / 4.0, 1e-6);
  // The default builds no loss object: the strategies' own cross-entropy, as before.
  EXPECT_FALSE(step_options(config_from_json(json{{"model", "mlp"}})).loss);
  EXPECT_EQ(step_options(config_from_json(json{{"model", "mlp"},
                                               {"loss", "huber"},
                                               {"huber_delta", 0.5},
                                               {"dataset", "npy"},
                                               {"npy", {"a", "b", "c", "d"}}}))
                .loss->name(),
            "huber");
}

TEST(LossConfig, KeysThatDoNotGoTogetherAreRefused) {
  const json npy{{"dataset", "npy"}, {"npy", {"a", "b", "c", "d"}}};
  auto with = [&](json extra) {
    json j = npy;
    j.update(extra);
    return error_of([&] { config_from_json(j); });
  };
  EXPECT_TRUE(contains(with({{"loss", "mse"}, {"label_smoothing", 0.1}}),
                       "label_smoothing 0.1 smooths cross-entropy's class targets, but loss is "
                       "mse; drop label_smoothing"));
  EXPECT_TRUE(contains(with({{"loss", "l1"}, {"loss_class_weights", {1, 2}}}),
                       "but loss is l1; drop loss_class_weights"));
  EXPECT_TRUE(contains(with({{"loss", "mes"}}), "did you mean 'mse'?"));
  EXPECT_TRUE(contains(with({{"huber_delta", 0}}), "'huber_delta' must be positive"));
  EXPECT_TRUE(contains(with({{"loss_class_weights", {1, -2}}}),
                       "'loss_class_weights' must be a list of numbers, each >= 0"));
  EXPECT_TRUE(contains(with({{"csv_targets", {"y"}}}), "but loss is cross_entropy"));
  EXPECT_TRUE(contains(error_of([] {
                         config_from_json(json{{"loss", "mse"}});
                       }),
                       "which datasets npy (float labels) and csv give, not 'fashion-mnist'"));
  // Strategies that end in their own cross-entropy refuse another loss, by name.
  for (const char* s : {"pipeline", "tensor", "mesh", "fedavg"}) {
    TrainConfig c = config_from_json(npy);
    c.strategy = s;
    c.loss = "mse";
    EXPECT_TRUE(contains(error_of([&] { check_strategy(c, 2, std::nullopt); }),
                         std::string("strategy '") + s +
                             "' trains with the built-in cross-entropy only, not loss mse"));
  }
}

TEST(LossConfig, DataAndModelThatDoNotFitTheLossAreRefused) {
  const TempDir dir;
  write_multilabel(dir.path());
  TrainConfig c = npy_config(dir.path(), 10);
  c.loss = "bce_with_logits";
  EXPECT_TRUE(contains(error_of([&] { Trainer t(c); }),
                       "loss bce_with_logits: the model outputs 10 values per sample but the "
                       "training targets have 3; end the model in {\"type\": \"linear\", "
                       "\"out_features\": 3}"));
  c = npy_config(dir.path(), kK);  // float targets under cross_entropy
  EXPECT_TRUE(contains(error_of([&] { Trainer t(c); }),
                       "loss cross_entropy takes class labels, but the training targets are "
                       "numbers"));
  write_multilabel(dir.path(), "<i8");  // class labels under mse
  c.loss = "mse";
  EXPECT_TRUE(contains(error_of([&] { Trainer t(c); }), "save the npy labels as float32"));
  c.loss = "cross_entropy";
  c.loss_class_weights = {1, 2};
  EXPECT_TRUE(contains(error_of([&] { Trainer t(c); }),
                       "loss_class_weights holds 2 weights but the model has 3 classes"));
}

TEST(LossConfig, MultiLabelBceTrainsOnFloatNpyTargets) {
  const TempDir dir;
  write_multilabel(dir.path());
  TrainConfig c = npy_config(dir.path(), kK);
  c.loss = "bce_with_logits";
  c.epochs = 15;
  Trainer t(c);
  const EvalResult before = t.evaluate();
  t.run();
  const EvalResult after = t.evaluate();
  ASSERT_TRUE(after.label_accuracy);
  EXPECT_FALSE(after.mse);
  EXPECT_EQ(after.samples, kN);
  EXPECT_LT(after.loss, 0.5 * before.loss);
  EXPECT_GT(*after.label_accuracy, 0.95);
  EXPECT_GT(*after.label_accuracy, *before.label_accuracy);
}

// The same initial weights (same seed) scored by one process and by two DDP ranks, each on
// its shard: the summed MSE and MAE are one process's, up to the order of summation.
TEST(LossConfig, RegressionEvaluationOverTwoRanksEqualsOneProcess) {
  const TempDir dir;
  write_multilabel(dir.path());  // the 0/1 targets as regression targets
  TrainConfig c = npy_config(dir.path(), kK);
  c.loss = "mse";
  // One sample a batch: a sample's outputs are then the same bits in every process (a GEMM
  // of another batch size may round differently), and what differs is only the order of
  // the sums.
  c.batch = 1;
  Trainer single(c);
  const EvalResult one = single.evaluate();
  ASSERT_TRUE(one.mse && one.mae);
  EXPECT_FALSE(one.label_accuracy);
  EXPECT_NEAR(one.loss, *one.mse, 1e-6 * *one.mse);  // the mse loss is the MSE
  std::vector<EvalResult> ranks(2);
  c.strategy = "ddp";
  comm::testing::rethrow_first(comm::testing::run_group(2, [&](comm::Group& world) {
    Trainer t(c, world.split(0, world.rank()));
    ranks[static_cast<size_t>(world.rank())] = t.evaluate();
  }));
  for (const EvalResult& r : ranks) {
    EXPECT_EQ(r.samples, kN);
    ASSERT_TRUE(r.mse && r.mae);
    EXPECT_NEAR(*r.mse, *one.mse, 1e-12 * *one.mse);
    EXPECT_NEAR(*r.mae, *one.mae, 1e-12 * *one.mae);
  }
  EXPECT_EQ(*ranks[0].mse, *ranks[1].mse);  // the same bits on every rank
}

}  // namespace
}  // namespace braid::train
