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
// Form::deepspeed is DeepSpeed's FusedLamb (deepspeed/ops/lamb, its CUDA kernel), which a
// ds_config's "optimizer": {"type": "Lamb"} runs. It differs from the paper's in three ways:
//   u = m / (sqrt(v) + eps) + wd * p       (raw moments: the correction moves to the step)
//   p = p - lr * sqrt(1 - beta2^t) / (1 - beta1^t) * clamp(||p|| / ||u||) * u
// and every segment takes the ratio, decay or not (FusedLamb adapts every tensor; weight
// decay still skips decay = false segments, as braid's every optimizer does). In both forms
// the ratio is clamped to [min_trust, max_trust] (FusedLamb's min_coeff, max_coeff) and is 1
// where ||p|| or the update's norm is 0; bias_correction = false drops 1 - beta^t.
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
  enum class Form : uint8_t { paper, deepspeed };
  Form form = Form::paper;
  bool bias_correction = true;
  float min_trust = 0;
  float max_trust = 0;  // 0: no upper bound
};

class Lamb final : public Optimizer {
 public:
  Lamb(std::vector<Segment> segments, int64_t buffer_size, const LambOptions& options = {});
  std::string_view name() const override { return "lamb"; }

 protected:
  void update(float* params, const float* grads, float lr, int64_t step,
              std::span<const Segment> segments) override;

 private:
  // ||p|| / ||r|| clamped to [min_trust, max_trust]; 1 when either norm is 0.
  double trust_ratio(double p_sq, double r_sq) const;

  LambOptions options_;
  float* exp_avg_ = nullptr;
  float* exp_avg_sq_ = nullptr;
};

}  // namespace braid::optim
