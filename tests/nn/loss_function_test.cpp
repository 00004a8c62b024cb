// The losses behind nn::LossFunction: values against PyTorch's formulas worked by hand, and
// every gradient against central finite differences of the loss itself (in double, on a
// handful of elements, with a step that keeps rounding far below the tolerance).
#include "nn/loss_function.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/error.h"

namespace braid::nn {
namespace {

Tensor f32(const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(shape);
  for (size_t i = 0; i < values.size(); ++i) t.f32()[i] = values[i];
  return t;
}

Tensor labels(const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(values.size())}, DType::i32);
  for (size_t i = 0; i < values.size(); ++i) t.data<int32_t>()[i] = values[i];
  return t;
}

// The loss's gradient (times grad_scale) against (L(x + h) - L(x - h)) / 2h per element.
void expect_gradient(const LossFunction& loss, Tensor pred, const Tensor& targets,
                     float grad_scale = 1.0f) {
  Tensor grad;
  loss.compute(pred, targets, &grad, grad_scale);
  const double h = 1e-2;
  for (int64_t i = 0; i < pred.numel(); ++i) {
    const float keep = pred.f32()[i];
    pred.f32()[i] = static_cast<float>(keep + h);
    const double up = loss.compute(pred, targets, nullptr, 1).loss;
    pred.f32()[i] = static_cast<float>(keep - h);
    const double down = loss.compute(pred, targets, nullptr, 1).loss;
    pred.f32()[i] = keep;
    EXPECT_NEAR(grad.f32()[i], grad_scale * (up - down) / (2 * h), 2e-3)
        << loss.name() << ", element " << i;
  }
}

TEST(LossFunction, RegressionLossesMatchTorchsFormulas) {
  const Tensor pred = f32(Shape{3, 1}, {1, 2, 3});
  const Tensor target = f32(Shape{3}, {1, 1, 1});  // [N] targets for an [N, 1] prediction
  EXPECT_NEAR(MseLoss().compute(pred, target, nullptr, 1).loss, 5.0 / 3, 1e-12);
  EXPECT_NEAR(L1Loss().compute(pred, target, nullptr, 1).loss, 1.0, 1e-12);
  // d = 0, 1, 2 with delta 1: 0, 1 * (1 - 0.5), 1 * (2 - 0.5).
  EXPECT_NEAR(HuberLoss(1).compute(pred, target, nullptr, 1).loss, 2.0 / 3, 1e-12);
  // delta 3: every d is inside, 0.5 d^2: (0 + 0.5 + 2) / 3.
  EXPECT_NEAR(HuberLoss(3).compute(pred, target, nullptr, 1).loss, 2.5 / 3, 1e-12);
  const LossResult r = MseLoss().compute(pred, target, nullptr, 1);
  EXPECT_EQ(r.count, 3);
  EXPECT_EQ(r.correct, 0);
}

TEST(LossFunction, BceWithLogitsIsStableAndMatchesTorch) {
  // x = 0, t = 1: log 2. x = 100, t = 0: 100 (no overflow). x = -100, t = 0: ~0.
  const Tensor pred = f32(Shape{1, 3}, {0, 100, -100});
  const Tensor target = f32(Shape{1, 3}, {1, 0, 0});
  const double want = (std::log(2.0) + 100.0 + std::log1p(std::exp(-100.0))) / 3;
  EXPECT_NEAR(BceWithLogitsLoss().compute(pred, target, nullptr, 1).loss, want, 1e-9);
  EXPECT_THROW(BceWithLogitsLoss().compute(pred, f32(Shape{1, 3}, {2, 0, 0}), nullptr, 1), Error)
      << "a target outside [0, 1]";
}

TEST(LossFunction, WeightedCrossEntropyIsTheWeightedMeanAsPytorchs) {
  const Tensor logits = f32(Shape{3, 2}, {1, 0, 0, 2, 5, 5});
  const Tensor y = labels({0, 1, -1});  // the third row is ignored
  // Row losses: log(1 + e^-1) and log(1 + e^-2); weights 1 and 3.
  const double l0 = std::log1p(std::exp(-1.0)), l1 = std::log1p(std::exp(-2.0));
  const LossResult r = CrossEntropyLoss(0, {1, 3}).compute(logits, y, nullptr, 1);
  EXPECT_NEAR(r.loss, (1 * l0 + 3 * l1) / 4, 1e-9);
  EXPECT_EQ(r.count, 2);
  EXPECT_EQ(r.correct, 2);
  // Equal weights: the plain mean, as the unweighted loss gives.
  EXPECT_NEAR(CrossEntropyLoss(0, {2, 2}).compute(logits, y, nullptr, 1).loss,
              CrossEntropyLoss().compute(logits, y, nullptr, 1).loss, 1e-6);
  EXPECT_THROW(CrossEntropyLoss(0.1f, {1, 1}), Error) << "weights with smoothing";
  EXPECT_THROW(CrossEntropyLoss(0, {1, 1, 1}).compute(logits, y, nullptr, 1), Error)
      << "three weights for two classes";
}

TEST(LossFunction, EveryGradientIsTheLossesOwn) {
  const Tensor pred = f32(Shape{2, 3}, {0.3f, -1.2f, 2.0f, 0.7f, 0.1f, -0.4f});
  const Tensor target = f32(Shape{2, 3}, {0.5f, -1.0f, 0.25f, 1.0f, 0.0f, 0.5f});
  expect_gradient(MseLoss(), pred, target, 0.5f);
  expect_gradient(L1Loss(), pred, target);
  expect_gradient(HuberLoss(0.5f), pred, target);
  const Tensor bits = f32(Shape{2, 3}, {1, 0, 1, 0, 0.5f, 1});
  expect_gradient(BceWithLogitsLoss(), pred, bits, 2.0f);
  expect_gradient(CrossEntropyLoss(0, {0.5f, 2, 1}), pred, labels({2, 1}), 0.25f);
  expect_gradient(CrossEntropyLoss(0.1f), pred, labels({0, 2}));
}

TEST(LossFunction, WrongTargetsAreRefusedNamingBoth) {
  try {
    MseLoss().compute(f32(Shape{2, 2}, {0, 0, 0, 0}), f32(Shape{3}, {0, 0, 0}), nullptr, 1);
    FAIL() << "sizes differ";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 2]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MseLoss().compute(f32(Shape{2, 1}, {0, 0}), labels({0, 1}), nullptr, 1), Error)
      << "class labels for a regression loss";
  EXPECT_THROW(make_loss("hinge"), Error);
  EXPECT_THROW(make_loss("mse", 0.1f), Error) << "smoothing belongs to cross_entropy";
  EXPECT_EQ(make_loss("huber", 0, {}, 2.0f)->name(), "huber");
}

}  // namespace
}  // namespace braid::nn
