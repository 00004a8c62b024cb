// RMSprop (non-centered), as torch.optim.RMSprop (PyTorch 1.13):
//   g = g + wd * p                          (decay segments only)
//   s = alpha * s + (1 - alpha) * g * g
//   b = momentum * b + g / (sqrt(s) + eps); p = p - lr * b      (momentum > 0; b starts at 0)
//   p = p - lr * g / (sqrt(s) + eps)                            (momentum == 0)
// State: "square_avg" (s), "momentum_buffer" (b, only when momentum > 0).
#pragma once

#include "optim/optimizer.h"

namespace braid::optim {

struct RmsPropOptions {
  float alpha = 0.99f;
  float eps = 1e-8f;
  float momentum = 0;
  float weight_decay = 0;
};

class RmsProp final : public Optimizer {
 public:
  RmsProp(std::vector<Segment> segments, int64_t buffer_size, const RmsPropOptions& options = {});
  std::string_view name() const override { return "rmsprop"; }

 protected:
  void update(float* params, const float* grads, float lr, int64_t step,
              std::span<const Segment> segments) override;

 private:
  RmsPropOptions options_;
  float* square_avg_ = nullptr;
  float* momentum_ = nullptr;
};

}  // namespace braid::optim
