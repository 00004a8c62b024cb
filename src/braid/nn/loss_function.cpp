#include "nn/loss_function.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace braid::nn {
namespace {

// Regression targets: f32, one per predicted element (any shape of that size, so [N] targets
// go with an [N, 1] prediction).
void check_targets(std::string_view loss, const Tensor& pred, const Tensor& targets) {
  BRAID_CHECK(pred.dtype() == DType::f32 && targets.dtype() == DType::f32, loss,
              ": prediction and targets must be f32, got ", dtype_name(pred.dtype()), " ",
              pred.shape().str(), " and ", dtype_name(targets.dtype()), " ", targets.shape().str(),
              " (class labels need cross_entropy)");
  BRAID_CHECK(pred.numel() == targets.numel(), loss, ": the prediction ", pred.shape().str(),
              " and the targets ", targets.shape().str(), " differ in size");
}

float* gradient_of(const Tensor& pred, Tensor* dpred) {
  if (dpred == nullptr) return nullptr;
  dpred->ensure(pred.shape(), DType::f32, MemCategory::activation_grads);
  return dpred->f32();
}

int64_t rows_of(const Tensor& pred) { return pred.rank() == 0 ? 1 : pred.shape()[0]; }

// One pass over the elements: loss(d) summed in double, grad * loss'(d) written to g.
template <typename Term>
LossResult elementwise(const Tensor& pred, const Tensor& targets, Tensor* dpred, float grad_scale,
                       Term term) {
  const int64_t n = pred.numel();
  const float* x = pred.f32();
  const float* t = targets.f32();
  float* g = gradient_of(pred, dpred);
  const float grad = n > 0 ? grad_scale / static_cast<float>(n) : 0.0f;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    float slope = 0;
    total += term(x[i], t[i], slope);
    if (g) g[i] = grad * slope;
  }
  return {
      .loss = n > 0 ? total / static_cast<double>(n) : 0.0, .correct = 0, .count = rows_of(pred)};
}

}  // namespace

CrossEntropyLoss::CrossEntropyLoss(float label_smoothing, std::vector<float> class_weights)
    : label_smoothing_(label_smoothing), weights_(std::move(class_weights)) {
  BRAID_CHECK(weights_.empty() || label_smoothing_ == 0,
              "cross_entropy: class weights with label smoothing are not built; drop one");
  for (size_t c = 0; c < weights_.size(); ++c)
    BRAID_CHECK(std::isfinite(weights_[c]) && weights_[c] >= 0, "cross_entropy: class weight ", c,
                " is ", weights_[c], "; weights are finite and >= 0");
}

LossResult CrossEntropyLoss::compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                                     float grad_scale) const {
  if (weights_.empty())
    return softmax_cross_entropy(pred, targets, dpred,
                                 {.grad_scale = grad_scale, .label_smoothing = label_smoothing_});
  BRAID_CHECK(pred.dtype() == DType::f32 && pred.rank() >= 2,
              "cross_entropy: logits must be f32 [..., C], got ", dtype_name(pred.dtype()), " ",
              pred.shape().str());
  const int64_t classes = pred.shape()[-1], rows = pred.numel() / classes;
  BRAID_CHECK(static_cast<int64_t>(weights_.size()) == classes, "cross_entropy: ", weights_.size(),
              " class weights for ", classes, " classes");
  BRAID_CHECK(targets.dtype() == DType::i32 && targets.numel() == rows,
              "cross_entropy: labels must be i32, one per row of ", pred.shape().str(), ", got ",
              dtype_name(targets.dtype()), " ", targets.shape().str());
  const int32_t* y = targets.data<int32_t>();
  LossResult result;
  double weight_sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (y[r] == -1) continue;
    BRAID_CHECK(y[r] >= 0 && y[r] < classes, "cross_entropy: label ", y[r], " in row ", r,
                " is outside [0, ", classes, ") (-1 marks an ignored row)");
    weight_sum += weights_[static_cast<size_t>(y[r])];
    ++result.count;
  }
  float* g = gradient_of(pred, dpred);
  const float* x = pred.f32();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * classes;
    float* gr = g ? g + r * classes : nullptr;
    if (y[r] == -1) {
      if (gr) std::fill(gr, gr + classes, 0.0f);
      continue;
    }
    const float m = *std::max_element(xr, xr + classes);
    double s = 0;
    for (int64_t c = 0; c < classes; ++c) s += std::exp(static_cast<double>(xr[c]) - m);
    const double w = weights_[static_cast<size_t>(y[r])];
    total += w * (std::log(s) - (static_cast<double>(xr[y[r]]) - m));
    if (std::find(xr, xr + y[r], m) == xr + y[r] && xr[y[r]] == m) ++result.correct;
    if (gr) {
      // d/dx of w (log-sum-exp - x_y) / sum of weights: w (softmax - onehot) / sum.
      const double k = weight_sum > 0 ? grad_scale * w / weight_sum : 0.0;
      for (int64_t c = 0; c < classes; ++c)
        gr[c] = static_cast<float>(k * std::exp(static_cast<double>(xr[c]) - m) / s);
      gr[y[r]] -= static_cast<float>(k);
    }
  }
  result.loss = weight_sum > 0 ? total / weight_sum : 0.0;
  return result;
}

LossResult MseLoss::compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                            float grad_scale) const {
  check_targets(name(), pred, targets);
  return elementwise(pred, targets, dpred, grad_scale, [](float x, float t, float& slope) {
    const float d = x - t;
    slope = 2 * d;
    return static_cast<double>(d) * d;
  });
}

LossResult L1Loss::compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                           float grad_scale) const {
  check_targets(name(), pred, targets);
  return elementwise(pred, targets, dpred, grad_scale, [](float x, float t, float& slope) {
    const float d = x - t;
    slope = d > 0 ? 1.0f : d < 0 ? -1.0f : 0.0f;
    return std::abs(static_cast<double>(d));
  });
}

HuberLoss::HuberLoss(float delta) : delta_(delta) {
  BRAID_CHECK(std::isfinite(delta) && delta > 0, "huber: delta must be > 0, got ", delta);
}

LossResult HuberLoss::compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                              float grad_scale) const {
  check_targets(name(), pred, targets);
  const float delta = delta_;
  return elementwise(pred, targets, dpred, grad_scale, [delta](float x, float t, float& slope) {
    const float d = x - t;
    if (std::abs(d) < delta) {
      slope = d;
      return 0.5 * d * d;
    }
    slope = d > 0 ? delta : -delta;
    return static_cast<double>(delta) * (std::abs(static_cast<double>(d)) - 0.5 * delta);
  });
}

LossResult BceWithLogitsLoss::compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                                      float grad_scale) const {
  check_targets(name(), pred, targets);
  const float* t = targets.f32();
  for (int64_t i = 0; i < targets.numel(); ++i)
    BRAID_CHECK(t[i] >= 0 && t[i] <= 1, "bce_with_logits: target ", i, " is ", t[i],
                "; targets are in [0, 1]");
  return elementwise(pred, targets, dpred, grad_scale, [](float x, float t, float& slope) {
    const double xd = x;
    slope = static_cast<float>(1.0 / (1.0 + std::exp(-xd)) - t);
    return std::max(xd, 0.0) - xd * t + std::log1p(std::exp(-std::abs(xd)));
  });
}

std::shared_ptr<const LossFunction> make_loss(const std::string& name, float label_smoothing,
                                              std::vector<float> class_weights, float huber_delta) {
  if (name == "cross_entropy")
    return std::make_shared<CrossEntropyLoss>(label_smoothing, std::move(class_weights));
  BRAID_CHECK(label_smoothing == 0 && class_weights.empty(), "loss '", name,
              "': label smoothing and class weights belong to cross_entropy");
  if (name == "mse") return std::make_shared<MseLoss>();
  if (name == "l1") return std::make_shared<L1Loss>();
  if (name == "huber") return std::make_shared<HuberLoss>(huber_delta);
  if (name == "bce_with_logits") return std::make_shared<BceWithLogitsLoss>();
  BRAID_THROW(Error, "loss '", name,
              "': expected cross_entropy, mse, l1, huber or bce_with_logits");
}

}  // namespace braid::nn
