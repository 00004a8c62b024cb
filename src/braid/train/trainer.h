// Trainer: the single-process training loop. Builds the model, its flat buffers, the
// optimizer, the schedule and the data loaders from a TrainConfig; runs steps
// (forward, fused loss, backward, clipping, update), evaluates, logs metrics and writes
// checkpoints; resumes from one bit-for-bit.
//
// The step reuses every buffer it touched on the first step (caches, logits gradient,
// optimizer state): the steady state allocates nothing.
#pragma once

#include <memory>
#include <string>

#include "nn/module.h"
#include "nn/params.h"
#include "train/config.h"
#include "train/model_spec.h"
#include "train/weight_average.h"

namespace braid::data {
struct Batch;
class Loader;
}  // namespace braid::data
namespace braid::optim {
class Optimizer;
class Schedule;
}  // namespace braid::optim

namespace braid::train {

struct StepTimes {
  double data_wait = 0, forward = 0, backward = 0, optimizer = 0, total = 0;
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // classification only
  int64_t samples = 0;
};

class Trainer {
 public:
  // With load_data = false no dataset is read (benchmarks and tests feed batches).
  explicit Trainer(const TrainConfig& config, bool load_data = true);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains until the configured epochs or max_steps, evaluating, logging and
  // checkpointing into config.out as configured. A positive `stop_at_step` ends the run
  // early at that step (with a checkpoint), as an interruption would, without changing
  // anything the configuration derives from the total (the schedule).
  void run(int64_t stop_at_step = 0);
  // One optimisation step on `batch`; returns its loss.
  double train_step(const data::Batch& batch);
  // One step on the loader's next batch (starting the next epoch when one ends); returns
  // the seconds spent waiting for the batch. For benchmarks.
  double train_one_batch();
  EvalResult evaluate(int64_t max_batches = 0);
  // The same on the weight average (config.ema_decay > 0), leaving the model as it was.
  EvalResult evaluate_average(int64_t max_batches = 0);
  const WeightAverage* weight_average() const { return average_.get(); }

  void save_checkpoint(const std::string& dir) const;
  // Restores weights, optimizer state, step, epoch, RNG and sampler position.
  void load_checkpoint(const std::string& dir);
  // Loads weights only (a PyTorch state_dict in safetensors, or a checkpoint dir).
  void load_weights(const std::string& path);

  const TrainConfig& config() const { return config_; }
  const BuiltModel& model() const { return model_; }
  nn::ParamSet& params() { return params_; }
  int64_t global_step() const { return step_; }
  const StepTimes& last_step_times() const { return times_; }
  double flops_per_step() const;  // forward + backward, for GFLOP/s figures
  // A synthetic batch of the model's input shape (benchmarks without data).
  void fill_random_batch(data::Batch& batch, uint64_t seed) const;

 private:
  float learning_rate() const;
  int64_t batches_per_epoch() const;

  TrainConfig config_;
  BuiltModel model_;
  nn::ParamSet params_;
  std::unique_ptr<nn::Cache> cache_;
  Tensor dlogits_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  std::unique_ptr<data::Loader> train_loader_, eval_loader_;
  std::unique_ptr<WeightAverage> average_;
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  bool resume_mid_epoch_ = false;
  bool loader_started_ = false;  // the loader was restored to a position inside epoch_
  StepTimes times_;
  // A Sequential model without gradient clipping updates each layer's parameters right
  // after that layer's backward, while its gradient is still in cache (the same bits as
  // one update after backward). Clipping needs the global norm first, so it steps after.
  bool update_in_backward_ = false;
  bool in_step_ = false;  // the hook updates only inside train_step's backward
  float step_lr_ = 0;
  double hook_seconds_ = 0;
};

}  // namespace braid::train
