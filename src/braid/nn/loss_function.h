// A training loss behind one interface: the strategies end every forward pass through it, so
// a task's loss (or a user's own, written against this class) trains under every strategy
// that calls Strategy::forward_loss (single, DDP and its ZeRO stages, local SGD, the parameter
// servers' workers) with nothing else changed. Without one, a strategy uses cross-entropy with
// its label smoothing, as before.
//
// Each loss returns the mean over what it counts and, on request, writes grad_scale times its
// gradient with respect to the prediction (the trainer's loss scale and 1/micro-batches come
// in grad_scale). Regression and multi-label losses take f32 targets of the prediction's
// element count; their LossResult counts rows and no "correct" ones.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "nn/loss.h"

namespace braid::nn {

class LossFunction {
 public:
  virtual ~LossFunction() = default;
  virtual std::string_view name() const = 0;
  // pred: the model's output; targets: the batch's. dpred, when not null, is ensure()d to
  // pred's shape and receives grad_scale * d(loss)/d(pred).
  virtual LossResult compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                             float grad_scale) const = 0;
  // Whether LossResult::correct means something (an argmax against a class label).
  virtual bool classifies() const { return false; }
};

// torch.nn.CrossEntropyLoss(weight=w, ignore_index=-1, label_smoothing=eps): i32 labels.
// With class weights the mean is sum_i w[y_i] l_i / sum_i w[y_i], as PyTorch's; weights and
// label smoothing together are refused (PyTorch's weighted smoothing is not built).
class CrossEntropyLoss final : public LossFunction {
 public:
  explicit CrossEntropyLoss(float label_smoothing = 0, std::vector<float> class_weights = {});
  std::string_view name() const override { return "cross_entropy"; }
  LossResult compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                     float grad_scale) const override;
  bool classifies() const override { return true; }

 private:
  float label_smoothing_;
  std::vector<float> weights_;
};

// torch.nn.MSELoss(): mean of (pred - target)^2 over every element.
class MseLoss final : public LossFunction {
 public:
  std::string_view name() const override { return "mse"; }
  LossResult compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                     float grad_scale) const override;
};

// torch.nn.L1Loss(): mean of |pred - target|; the gradient at 0 is 0, as PyTorch's sign.
class L1Loss final : public LossFunction {
 public:
  std::string_view name() const override { return "l1"; }
  LossResult compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                     float grad_scale) const override;
};

// torch.nn.HuberLoss(delta): 0.5 d^2 where |d| < delta, else delta (|d| - delta / 2), the mean
// over every element; quadratic near 0, so a few outliers do not dominate as under MSE.
class HuberLoss final : public LossFunction {
 public:
  explicit HuberLoss(float delta = 1.0f);
  std::string_view name() const override { return "huber"; }
  LossResult compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                     float grad_scale) const override;

 private:
  float delta_;
};

// torch.nn.BCEWithLogitsLoss(): independent binary labels (multi-label), targets in [0, 1];
// max(x, 0) - x t + log(1 + exp(-|x|)), which never overflows, meaned over every element.
class BceWithLogitsLoss final : public LossFunction {
 public:
  std::string_view name() const override { return "bce_with_logits"; }
  LossResult compute(const Tensor& pred, const Tensor& targets, Tensor* dpred,
                     float grad_scale) const override;
};

// By name: cross_entropy (with label smoothing and class weights), mse, l1, huber (delta),
// bce_with_logits; an Error listing them otherwise.
std::shared_ptr<const LossFunction> make_loss(const std::string& name, float label_smoothing = 0,
                                              std::vector<float> class_weights = {},
                                              float huber_delta = 1.0f);

}  // namespace braid::nn
