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

// How Trainer::run ended.
struct RunOutcome {
  int64_t step = 0;     // the step reached
  int stop_signal = 0;  // nonzero: stopped early by this signal (stop_signal.h), checkpoint saved
};

class Trainer {
 public:
  // With load_data = false no dataset is read (benchmarks and tests feed batches).
  // `rank` is this process's rank in its job: only rank 0 writes outputs (checkpoints,
  // metrics, progress lines), so ranks that run the same loop never race on one file.
  explicit Trainer(const TrainConfig& config, bool load_data = true, int rank = 0);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains until the configured epochs or max_steps, evaluating, logging and
  // checkpointing into config.out as configured. A positive `stop_at_step` ends the run
  // early at that step (with a checkpoint), as an interruption would, without changing
  // anything the configuration derives from the total (the schedule). A stop request
  // (stop_signal.h: SIGINT/SIGTERM under a StopOnSignal) does the same at the next step
  // boundary, and the outcome names the signal. The run always ends with a checkpoint of
  // its last step.
  RunOutcome run(int64_t stop_at_step = 0);
  // One optimisation step on `batch`; returns its loss.
  double train_step(const data::Batch& batch);
  // One step on the loader's next batch (starting the next epoch when one ends); returns
  // the seconds spent waiting for the batch. For benchmarks.
  double train_one_batch();
  EvalResult evaluate(int64_t max_batches = 0);
  // The same on the weight average (config.ema_decay > 0), leaving the model as it was.
  EvalResult evaluate_average(int64_t max_batches = 0);
  const WeightAverage* weight_average() const { return average_.get(); }

  // Only on the rank that writes outputs (rank 0).
  void save_checkpoint(const std::string& dir) const;
  // Restores weights, optimizer state, step, epoch, RNG and sampler position. `path` is a
  // checkpoint or a run directory (find_checkpoint_dir). The recorded position is checked
  // against the data (step = loader epoch x batches per epoch + loader position) before
  // anything changes; a cosine schedule resumed over another horizon warns.
  void load_checkpoint(const std::string& path);
  // Loads weights only (a PyTorch state_dict in safetensors, or a checkpoint dir).
  void load_weights(const std::string& path);

  const TrainConfig& config() const { return config_; }
  int rank() const { return rank_; }
  bool writes_outputs() const { return rank_ == 0; }
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
  // The steps the schedule spans (its horizon): max_steps, else epochs x batches per epoch.
  int64_t schedule_steps() const;
  std::unique_ptr<optim::Schedule> make_schedule(int64_t total_steps) const;
  void check_position(const nlohmann::json& train_state, const std::string& dir) const;
  void warn_if_horizon_changed(const nlohmann::json& train_state, const std::string& dir) const;

  TrainConfig config_;
  int rank_ = 0;
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
