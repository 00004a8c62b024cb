// Optimizer: updates a flat fp32 parameter buffer from a flat gradient buffer of the same
// layout, range by range (Segment), with the learning rate passed in each step so any
// schedule can drive it.
//
// The state (momentum, moments, ...) is a set of flat fp32 buffers over the same layout,
// allocated once in the constructor (MemCategory::optimizer) and never in step(). Every
// update is expressed per segment, so a ZeRO shard is just an optimizer built over the
// segments (rebased to the shard) that the rank owns, with buffer_size the shard's size.
//
// Semantics follow PyTorch 1.13's torch.optim update formulas; weight decay applies only
// to segments with decay = true (PyTorch's parameter groups with weight_decay = 0 for the
// rest). Each subclass header cites its formula.
//
// Not thread-safe; one thread steps an optimizer. Copying is deleted (state is large).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "optim/segment.h"

namespace braid::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates params[s.offset, s.offset + s.numel) for every segment from grads at the same
  // offsets, with learning rate lr (>= 0, finite), then counts the step. Both pointers
  // address buffers of at least buffer_size floats. Allocates nothing.
  void step(float* params, const float* grads, float lr);
  // The same step in parts, for an update fused into backward: each call updates the
  // segments inside [begin, end) (floats into the buffers: a range reported final, which
  // must not cut a segment) as soon as their gradients are final, and finish_step() counts
  // the step once every segment was updated exactly once. The result is bitwise step()'s.
  void step_range(float* params, const float* grads, float lr, int64_t begin, int64_t end);
  void finish_step();

  virtual std::string_view name() const = 0;  // "sgd", "adam", ...

  // The state for a checkpoint: PyTorch-style names ("exp_avg", "momentum_buffer", ...)
  // with flat f32 tensors of Shape{buffer_size}, then "step" as an i64 tensor of Shape{}.
  // The f32 tensors share memory with the optimizer: they stay valid after it is destroyed
  // and change on the next step, so copy them if you need a snapshot.
  virtual NamedTensors state() const;
  // Loads a state() result (in any order). Every name must be present exactly once, with
  // the same dtype and shape; a missing, unexpected or mismatched tensor is a braid::Error
  // naming it (and both shapes), and leaves this optimizer unchanged.
  virtual void load_state(const NamedTensors& state);

  int64_t steps() const { return steps_; }
  const std::vector<Segment>& segments() const { return segments_; }  // by offset
  int64_t buffer_size() const { return buffer_size_; }

 protected:
  // Validates the segments against buffer_size (see validate_segments).
  Optimizer(std::vector<Segment> segments, int64_t buffer_size);

  // The update of `segments` (all of segments_, or a run of them); `step` is the 1-based
  // number of this step (steps() + 1).
  virtual void update(float* params, const float* grads, float lr, int64_t step,
                      std::span<const Segment> segments) = 0;

  // Allocates a zero-filled state buffer of buffer_size floats, registered under `name`
  // for state()/load_state(). Call from the constructor only.
  float* add_state(std::string name);

  std::vector<Segment> segments_;
  int64_t buffer_size_ = 0;

 private:
  NamedTensors state_;
  int64_t steps_ = 0;
  size_t segments_stepped_ = 0;  // of the step in parts under way
};

// Every option of every optimizer: the one form an option takes from a config file or a
// flag (train::TrainConfig::optimizer, settings.cpp's table) to make_optimizer. Each
// optimizer reads the ones it names and checks their ranges (an error names the optimizer,
// the key and the value); the rest it ignores. Doubles, as the config holds them (a
// config round-trips exactly); make_optimizer rounds each to the optimizer's float.
struct OptimizerConfig {
  std::string name = "sgd";  // sgd, adam, adamw, rmsprop, adagrad, lars, lamb, onebit_adam
  // Read by the trainer's learning-rate schedule, not by the optimizer (step() takes the
  // rate of each step): the peak rate, and > 0: linear scaling lr * batch / base_batch.
  double lr = 0.01;
  int64_t base_batch = 0;
  // sgd, rmsprop, lars; adam, adamw, lamb (whose betas are their momentum) and adagrad
  // ignore it. 0.9, as every recipe and a bare `--optimizer.name sgd` run; set 0 for
  // plain SGD.
  double momentum = 0.9;
  bool nesterov = false;    // sgd, lars (needs momentum > 0)
  double weight_decay = 0;  // all; L2 in the gradient, decoupled for adamw and lamb
  double beta1 = 0.9;       // adam, adamw, lamb, onebit_adam
  double beta2 = 0.999;     // adam, adamw, lamb, onebit_adam
  // 0: PyTorch's default for the optimizer (1e-8; adagrad 1e-10; lamb 1e-6, as the
  // paper's reference implementation). adam, adamw, rmsprop, adagrad, lamb,
  // onebit_adam.
  double eps = 0;
  double alpha = 0.99;                   // rmsprop smoothing constant
  double lr_decay = 0;                   // adagrad (no config key)
  double initial_accumulator_value = 0;  // adagrad (no config key)
  double trust_coefficient = 0.001;      // lars eta
  // onebit_adam: Adam steps before the variance freezes and the momentum arrives compressed
  // (the codec's compression.freeze_step must be the same).
  int64_t freeze_step = 100;
  // lamb (optim/lamb.h): "paper" (You et al., Algorithm 2) or "deepspeed" (FusedLamb's
  // update, what a ds_config's Lamb runs); the trust ratio's bounds (0: none above) and
  // whether the moments' bias is corrected.
  std::string lamb_form = "paper";
  double min_trust = 0;
  double max_trust = 0;
  bool bias_correction = true;
};

// The names make_optimizer accepts, in the order listed in its error message.
const std::vector<std::string_view>& optimizer_names();

// Builds the optimizer `config.name` over the segments. An unknown name is a braid::Error
// listing the accepted names.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<Segment> segments, int64_t buffer_size);

namespace detail {
// Range checks shared by the optimizers: throw "<optimizer>: <key> = <value> must be <what>".
void check_non_negative(std::string_view optimizer, std::string_view key, float value);
void check_unit_interval(std::string_view optimizer, std::string_view key, float value);  // [0,1)
}  // namespace detail

}  // namespace braid::optim
