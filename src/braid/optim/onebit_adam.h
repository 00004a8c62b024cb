// 1-bit Adam's optimizer half (Tang et al. 2021, "1-bit Adam: Communication Efficient
// Large-Scale Training with Adam's Convergence Speed", arXiv:2102.02888; DeepSpeed's
// OnebitAdam). It works as a pair with the codec of the same name
// (parallel/codec_onebit_adam.h), which owns what crosses the wire.
//
// Two phases, switched by the 1-based step number t that Optimizer passes to update(), so
// step(), step_range()/finish_step() and a resumed checkpoint switch at the same step:
// - Warm-up, t <= freeze_step: exactly braid's Adam (optim/adam.h), bit for bit: the steps
//   run through an Adam object over the same segments, whose moments are this optimizer's
//   state. The codec meanwhile sends fp32 and keeps its own copies of m and v.
// - Compression, t > freeze_step: the variance v is frozen at its step-freeze_step value
//   and the gradient argument IS the new momentum m, already formed by the codec from
//   1-bit signs and averaged over ranks (the reducer's division by N). With T = freeze_step:
//     m = input                                          (stored as "exp_avg")
//     p = p (1 - lr wd) - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^T) + eps)
//
// Bias correction. DeepSpeed's OnebitAdam corrects neither moment, in either phase:
// update = exp_avg / (exp_avg_sq.sqrt() + eps), p -= lr (update + wd p). Its warm-up is
// uncorrected too, so the switch is seamless there. braid's warm-up is torch's Adam, which
// corrects both; keeping that convention after the switch keeps the step continuous: m
// keeps moving as an EMA, so it is corrected with the current t, as Adam would; v stops
// moving, so its correction stops with it, at T. (Dropping the correction at the switch,
// as a literal port would, multiplies the step by sqrt(1 - beta2^T)^-1: 3.2x at T = 100.)
// This is Adam with v and its correction frozen at step T, the paper's Algorithm 1 in
// torch's bias-corrected form.
//
// Weight decay is decoupled (AdamW's form; DeepSpeed's OnebitAdam too, p -= lr wd p beside
// the update), in both phases; L2 decay mixed into the gradient is refused. The codec
// follows v from the gradients it averages and divides its signs by the denominator the
// optimizer divides by; L2 decay would put (g + wd p)^2 into the optimizer's v and not
// the codec's. Measured: gpt-tiny with L2 decay 0.1 went to NaN 13 steps after the freeze,
// the optimizer's d for rarely seen embedding rows being thousands of times the codec's.
//
// State: "exp_avg" (m), "exp_avg_sq" (v), "step", as Adam's, so a checkpoint moves between
// the two optimizers. The codec's copy of m and its error feedback are not in it.
#pragma once

#include <cstdint>

#include "optim/adam.h"
#include "optim/optimizer.h"

namespace braid::optim {

struct OnebitAdamOptions {
  AdamOptions adam;
  int64_t freeze_step = 100;  // Adam steps before v freezes; >= 1 (v must have been formed)
};

class OnebitAdam final : public Optimizer {
 public:
  OnebitAdam(std::vector<Segment> segments, int64_t buffer_size,
             const OnebitAdamOptions& options = {});
  std::string_view name() const override { return "onebit_adam"; }
  int64_t freeze_step() const { return options_.freeze_step; }

  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;

 protected:
  void update(float* params, const float* grads, float lr, int64_t step,
              std::span<const Segment> segments) override;

 private:
  void warm_up(float* params, const float* grads, float lr, int64_t step,
               std::span<const Segment> segments);

  OnebitAdamOptions options_;
  // The warm-up's Adam; it owns m and v. It counts its own steps, one per warm-up step, so
  // a warm-up step is a step of its own in parts: `adam_segments_` of them updated so far.
  Adam adam_;
  size_t adam_segments_ = 0;
  float* exp_avg_ = nullptr;
  float* exp_avg_sq_ = nullptr;
  // While load_state() hands the step count alone to Optimizer::load_state (the only
  // setter of the count), state() lists the step alone.
  bool loading_step_ = false;
};

}  // namespace braid::optim
