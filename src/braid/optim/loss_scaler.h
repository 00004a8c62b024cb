// Dynamic loss scaling for fp16 training, with DeepSpeed's semantics (DynamicLossScaler):
// the loss gradient is multiplied by scale() so small gradients survive fp16's range; a
// step whose gradients hold an inf or NaN is skipped (the weights never see it) and
// counted; on an overflow the scale halves, but only once `hysteresis` overflows have been
// seen since the last growth (the first ones only spend the hysteresis); after `window`
// steps without an overflow it doubles. Defaults: 2^16, window 1000, hysteresis 2, never
// below 1.
//
// Every rank of a data-parallel job decides on the same reduced gradients, so every rank
// skips the same steps and keeps the same scale. The state goes into checkpoints.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

namespace braid::optim {

struct LossScalerConfig {
  float initial_scale = 65536.0f;  // 2^16
  float factor = 2.0f;
  int64_t window = 1000;  // clean steps before the scale grows
  int hysteresis = 2;     // overflows before the scale shrinks
  float min_scale = 1.0f;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config = {});

  float scale() const { return scale_; }
  // True when any of `grads` is inf or NaN.
  static bool has_overflow(std::span<const float> grads);
  // Records one step's outcome and moves the scale; returns whether the step must be
  // skipped (it overflowed).
  bool update(bool overflow);

  int64_t steps() const { return iteration_; }
  int64_t skipped() const { return skipped_; }

  nlohmann::json state() const;
  // `source` names the file for errors.
  void load(const nlohmann::json& state, const std::string& source);

 private:
  LossScalerConfig config_;
  float scale_;
  int hysteresis_left_;
  int64_t iteration_ = 0;
  int64_t last_overflow_ = -1;
  int64_t skipped_ = 0;
};

}  // namespace braid::optim
