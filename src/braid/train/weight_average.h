// WeightAverage: an exponential moving average of a model's weights and buffers (the
// "EMA" of Polyak averaging, as timm's ModelEmaV2 or torch.optim.swa_utils.AveragedModel
// with an EMA function). Evaluating the average instead of the last iterate smooths out
// the noise of the final SGD steps and usually generalises a little better.
//
// It keeps its own copy of every tensor of the model's state_dict: parameters (a flat
// copy of the parameter buffer) and buffers (BatchNorm's running statistics are averaged
// too; integer counters are copied). After step n (0-based count of updates) the average
// moves with rate 1 - d, where d = min(decay, (1 + n) / (10 + n)): early averages forget
// the random initialisation quickly, as TensorFlow's ExponentialMovingAverage does with
// num_updates.
//
// The update is a fixed elementwise sequence in fp32, so runs and resumes stay bitwise
// reproducible; the count of updates is part of the checkpoint's training state.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/params.h"
#include "train/safetensors.h"

namespace braid::train {

class WeightAverage {
 public:
  // Starts the average at the current weights. 0 < decay < 1.
  WeightAverage(const nn::ParamSet& params, double decay);

  // Folds the model's current weights and buffers into the average.
  void update(const nn::ParamSet& params);
  // Exchanges the model's weights and buffers with the average (twice restores both).
  void swap_with(nn::ParamSet& params);

  // The average under the model's state_dict names (views into this object).
  const std::vector<NamedTensor>& state_dict() const { return state_; }
  int64_t updates() const { return updates_; }
  double decay() const { return decay_; }
  // Replaces the average with checked `tensors` (names, shapes and dtypes must match the
  // model's exactly) and the update count; `source` names them in errors.
  void load(const std::vector<NamedTensor>& tensors, int64_t updates, const std::string& source);

 private:
  double decay_;
  int64_t updates_ = 0;
  Tensor flat_;                     // same layout as the flat parameter buffer
  std::vector<NamedTensor> state_;  // views into flat_, then owned buffer copies
  size_t param_count_ = 0;          // state_[0, param_count_) are parameters
};

}  // namespace braid::train
