// Adam and AdamW, as torch.optim.Adam / torch.optim.AdamW (PyTorch 1.13, amsgrad off).
// At step t (1-based), with g the gradient:
//   g = g + wd * p                          (Adam, decay segments only: L2 in the gradient)
//   p = p * (1 - lr * wd)                   (AdamW, decay segments only: decoupled decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// State: "exp_avg" (m), "exp_avg_sq" (v).
#pragma once

#include "optim/optimizer.h"

namespace braid::optim {

struct AdamOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
  bool decoupled_weight_decay = false;  // true: AdamW
};

class Adam final : public Optimizer {
 public:
  Adam(std::vector<Segment> segments, int64_t buffer_size, const AdamOptions& options = {});
  std::string_view name() const override {
    return options_.decoupled_weight_decay ? "adamw" : "adam";
  }

 protected:
  void update(float* params, const float* grads, float lr, int64_t step,
              std::span<const Segment> segments) override;

 private:
  AdamOptions options_;
  float* exp_avg_ = nullptr;
  float* exp_avg_sq_ = nullptr;
};

}  // namespace braid::optim
