// Adagrad, as torch.optim.Adagrad (PyTorch 1.13). At step t (1-based):
//   g = g + wd * p                          (decay segments only)
//   s = s + g * g                           (s starts at initial_accumulator_value)
//   p = p - lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps)
// State: "sum" (s).
#pragma once

#include "optim/optimizer.h"

namespace braid::optim {

struct AdagradOptions {
  float eps = 1e-10f;
  float lr_decay = 0;
  float initial_accumulator_value = 0;
  float weight_decay = 0;
};

class Adagrad final : public Optimizer {
 public:
  Adagrad(std::vector<Segment> segments, int64_t buffer_size, const AdagradOptions& options = {});
  std::string_view name() const override { return "adagrad"; }

 protected:
  void update(float* params, const float* grads, float lr, int64_t step,
              std::span<const Segment> segments) override;

 private:
  AdagradOptions options_;
  float* sum_ = nullptr;
};

}  // namespace braid::optim
