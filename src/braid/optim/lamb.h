// LAMB: layer-wise adaptive moments (You et al. 2019, "Large Batch Optimization for Deep
// Learning: Training BERT in 76 minutes", Algorithm 2 as in v3 onwards). At step t
// (1-based), per segment, with norms over the segment in double:
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   r = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + wd * p
//   p = p - lr * ||p|| / ||r|| * r          (ratio 1 when ||p|| or ||r|| is 0)
// Segments with decay = false (biases, normalisation) take wd = 0 and ratio 1, as the
// reference implementation excludes them from both weight decay and layer adaptation.
// State: "exp_avg" (m), "exp_avg_sq" (v).
//
// A segment is one layer: a ZeRO shard that splits a tensor must give the trust ratio the
// whole tensor's norms, which this class does not do yet.
#pragma once

#include "optim/optimizer.h"

namespace braid::optim {

struct LambOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-6f;
  float weight_decay = 0;
};

class Lamb final : public Optimizer {
 public:
  Lamb(std::vector<Segment> segments, int64_t buffer_size, const LambOptions& options = {});
  std::string_view name() const override { return "lamb"; }

 protected:
  void update(float* params, const float* grads, float lr, int64_t step,
              std::span<const Segment> segments) override;

 private:
  LambOptions options_;
  float* exp_avg_ = nullptr;
  float* exp_avg_sq_ = nullptr;
};

}  // namespace braid::optim
