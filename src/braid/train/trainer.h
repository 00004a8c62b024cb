// Trainer: the training loop of one rank. Builds the model, hands it to a strategy
// (parallel/strategy.h: one process, DDP, ...) that owns parameters, gradients, optimizer
// and communication, and keeps the rest: data, the schedule, logging, evaluation and when
// to checkpoint. Resumes from a checkpoint bit-for-bit.
//
// The step reuses every buffer it touched on the first step (caches, logits gradient,
// optimizer state): the steady state allocates nothing.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/timeline.h"
#include "core/timer.h"
#include "nn/module.h"
#include "nn/params.h"
#include "parallel/ps_protocol.h"
#include "train/config.h"
#include "train/data_setup.h"
#include "train/model_spec.h"
#include "train/name_map.h"
#include "train/run_events.h"
#include "train/stop_rules.h"
#include "train/train_commit.h"
#include "train/weight_average.h"

namespace braid::comm {
class Group;
}
namespace braid::data {
struct Batch;
class Loader;
struct LoaderState;
}  // namespace braid::data
namespace braid::parallel {
class GroupStatsReducer;
class Strategy;
}  // namespace braid::parallel
namespace braid::optim {
class Optimizer;
class Schedule;
}  // namespace braid::optim

namespace braid::train {

class ProgressUnit;

struct StepTimes {
  double data_wait = 0, forward = 0, backward = 0, optimizer = 0, total = 0;
  double communication_exposed = 0;  // communication compute did not hide
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // classification only
  int64_t samples = 0;
  // Regression losses (mse, l1, huber): over every predicted element.
  std::optional<double> mse, mae;
  // bce_with_logits: the fraction of elements on the right side of 0.
  std::optional<double> label_accuracy;
};

// How Trainer::run ended.
struct RunOutcome {
  int64_t step = 0;     // the step reached
  int stop_signal = 0;  // nonzero: stopped early by this signal (stop_signal.h), checkpoint saved
  // Nonempty: converged, a finished run (stop_rules.h): the key of the rule that fired
  // here ("stop.target", ...), or "announced" where the strategy carried another rank's.
  std::string stop_rule;
  // Nonempty: the run ended before its end without converging, for this reason (another
  // worker of a sync parameter-server job left it); its checkpoint is saved. A failure.
  std::string unfinished;
  // The ranks agreed to end the run at this step boundary to change the job's membership
  // (set_step_boundary): no checkpoint was written, and the run is not over.
  bool regroup = false;
  // With regroup: this rank leaves the job (it alone, not every rank, asked to stop).
  bool leaving = false;
};

class Trainer {
 public:
  // With load_data = false no dataset is read (benchmarks and tests feed batches).
  // `rank` is this process's rank in its job: only rank 0 writes outputs (checkpoints,
  // metrics, progress lines), so ranks that run the same loop never race on one file.
  explicit Trainer(const TrainConfig& config, bool load_data = true, int rank = 0);
  // A rank of a job over `group` (its world): the strategy (config.strategy) runs over it,
  // each rank reads its shard of the data, and evaluation is summed over the ranks.
  // `data`, where given, keeps the datasets read for the next trainer of this process.
  Trainer(const TrainConfig& config, std::shared_ptr<comm::Group> group, bool load_data = true,
          DataCache* data = nullptr);
  // A worker of a parameter-server job over the world group `world` (workers first, then
  // servers: `ps`): it trains on its shard of the data as a rank of ps.workers, and only
  // the chief (worker 0) evaluates, over the whole evaluation split, and writes outputs.
  Trainer(const TrainConfig& config, std::shared_ptr<comm::Group> world, parallel::PsLayout ps,
          bool load_data = true);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains until the configured epochs or max_steps, evaluating, logging and
  // checkpointing into config.out as configured. A positive `stop_at_step` ends the run
  // early at that step (with a checkpoint), as an interruption would, without changing
  // anything the configuration derives from the total (the schedule). A stop request
  // (stop_signal.h: SIGINT/SIGTERM under a StopOnSignal) does the same at the next step
  // boundary, and the outcome names the signal. A convergence rule (config.stop) that
  // fires on an evaluation ends the run there as a finished one. The run always ends with
  // a checkpoint of its last step.
  //
  // One loop (trainer_run.cpp) over the strategy's unit of progress (progress_unit.h): an
  // optimizer step, a federated round (strategy fedavg: rounds stand in for steps), or a
  // parameter-server evaluator's poll. What happens is published as events (run_events.h)
  // to the observers: on the rank that writes outputs, metrics.jsonl and the progress line.
  RunOutcome run(int64_t stop_at_step = 0);
  // Subscribes `observer` to the events of the runs that start after this, on this rank,
  // after the built-in ones (metrics.jsonl, then the progress line).
  void add_observer(std::shared_ptr<RunObserver> observer);
  // One optimisation step on `batch` (this rank's share); returns its loss.
  double train_step(const data::Batch& batch);
  // Steps skipped so far by fp16's loss scaler (an inf or NaN gradient); 0 without one.
  int64_t skipped_steps() const;
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
  // Loads weights only (a PyTorch state_dict in safetensors, or a checkpoint dir), a file's
  // names mapped by `rename` first (train/name_map.h).
  void load_weights(const std::string& path, const NameMap& rename = {});
  // A restarted worker of a parameter-server job goes on at `step` (the servers' answer,
  // PsWorker::rejoin): the step, epoch and data position this rank has in a run that
  // reached that step, with no checkpoint of its own (the model is the servers').
  void continue_at(int64_t step);

  // The training state in memory (train_commit.h), taken on every rank at a step boundary
  // (a collective where the strategy must gather: local SGD, ZeRO), and put back on every
  // rank of a job, this trainer's world size, global batch and strategy whatever the
  // commit's were: the loader's place is a sample of the epoch, not a step.
  void commit(TrainCommit& into);
  void restore(const TrainCommit& from);
  // Elastic training: make the strategy's steps transactional where it can (see
  // Strategy::make_transactional), so that commit() copies almost nothing.
  void make_transactional(bool on = true);
  // Completes `commit` from this trainer before it goes (after its run ended or failed):
  // a live commit takes the parameters and optimizer state it left here; where steps
  // completed after it (a failure in an evaluation or a checkpoint), those are committed.
  void seal_commit(TrainCommit& commit);
  // `fn(step)` runs on every rank at every step boundary of run(), after the step. A true
  // return asks for the run to end there to change the job's membership: once every rank
  // agreed (through the stop vote, so one step later, alike everywhere), run() returns with
  // RunOutcome::regroup and writes no checkpoint. Elastic training commits here.
  void set_step_boundary(std::function<bool(int64_t step)> fn) { step_boundary_ = std::move(fn); }
  // Published by the next run() right after it starts (the elastic driver's new round).
  void note_membership(const MembershipChanged& change) { membership_ = change; }
  // The learning-rate schedule x `factor`, every step of it (elastic.scale_lr: a round's
  // ranks / the launch's, the linear scaling rule): its base lr and min_lr scaled, so
  // warm-up and decay keep their shape. Under optimizer.base_batch the base lr already
  // follows the global batch, which such a round changes by the same factor: there only
  // min_lr is scaled here. Call before run().
  void set_lr_scale(double factor);

  const TrainConfig& config() const { return config_; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  parallel::Strategy& strategy() { return *strategy_; }
  bool writes_outputs() const { return rank_ == 0; }
  const BuiltModel& model() const { return model_; }
  // How the data was read, for OUT/data.json (DataLoaders::record); null when nothing to say.
  const nlohmann::json& data_record() const { return data_record_; }
  nn::ParamSet& params();
  const nn::ParamSet& params() const;
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
  // The position commits and checkpoints record: step, epoch, loader, stop rules, ...
  nlohmann::json position_json() const;
  // commit() of a strategy that shards its state (TrainCommit::mine, left).
  void commit_shards(TrainCommit& into, std::string position);
  struct ResumePosition {
    int64_t position = 0;  // batches of this rank into the epoch (after the offset)
    int64_t offset = 0;    // the loader's sample offset (data::LoaderState::offset)
    int64_t samples = 0;   // samples of the epoch's global order before it
    bool moved = false;    // the checkpoint's world size or batch differ from this run's
  };
  ResumePosition position_here(const nlohmann::json& train_state, const std::string& file) const;
  int64_t global_batch() const;  // samples of one step over every rank
  // The steps of this world's whole epoch that `state` stands after: its position, plus
  // the step an offset's shifted grid may have lost. So step = epoch x batches per epoch +
  // this + step_offset_ holds across the epoch's end, offset or not.
  int64_t steps_into_epoch(const data::LoaderState& state) const;
  void warn_if_horizon_changed(const nlohmann::json& train_state, const std::string& dir) const;

  void init(bool load_data, DataCache* data = nullptr);
  // Saves <out>/checkpoint through .partial (every rank calls it; rank 0 writes).
  void checkpoint_now();
  // run()'s units of progress work on the trainer's state.
  // The units' evaluation record: the model evaluated now, as of `step`, timed, with the
  // weight average's too where the run keeps one; `run` is the run's clock.
  Evaluated evaluated(const char* when, int64_t step, const Stopwatch& run);
  friend class StepUnit;
  friend class FedAvgRoundUnit;
  friend class EvaluatorPollUnit;
  std::unique_ptr<ProgressUnit> make_unit(int64_t stop_at_step);
  // run()'s loop, publishing to `events`; `writer`: this rank writes outputs.
  RunOutcome run_units(ProgressUnit& unit, const RunEvents& events, bool writer);
  // agreed_stop's answer when the ranks agreed to regroup (set_step_boundary).
  static constexpr int kRegroup = -1;
  int agreed_stop();  // the stop request every rank agrees on (0: none; kRegroup)
  void check_worker_timeout() const;
  void drain_vote();
  void write_timeline();
  nn::Module& module();
  optim::Optimizer& optimizer();

  TrainConfig config_;
  std::shared_ptr<comm::Group> group_;    // null: one process
  std::optional<parallel::PsLayout> ps_;  // a parameter-server job (group_ is its world)
  int rank_ = 0;
  int world_ = 1;
  // Ranks that each take a share of the batch (the global batch is batch x data_world_, or
  // global_batch): world_, except under a pipeline, whose stages all see one batch.
  int data_world_ = 1;
  std::shared_ptr<parallel::GroupStatsReducer> batchnorm_reducer_;  // sync_batchnorm
  BuiltModel model_;  // its module belongs to the strategy
  std::unique_ptr<parallel::Strategy> strategy_;
  std::unique_ptr<optim::Schedule> schedule_;
  std::unique_ptr<data::Loader> train_loader_, eval_loader_;
  nlohmann::json data_record_;
  std::unique_ptr<WeightAverage> average_;
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  // step_ - (loader epoch x batches per epoch + loader position): nonzero once a resume
  // moved the run to another world size or batch mid-run (checkpointed).
  int64_t step_offset_ = 0;
  bool resume_mid_epoch_ = false;
  double lr_scale_ = 1;             // set_lr_scale
  bool kernels_described_ = false;  // the kernel choices were logged
  bool loader_started_ = false;     // the loader was restored to a position inside epoch_
  StepTimes times_;
  // agreed_stop's vote in flight: signal, requesting ranks, ranks asking to regroup.
  double votes_[3] = {0, 0, 0};
  bool regroup_ = false;  // the ranks agreed to regroup (agreed_stop returned kRegroup)
  bool leaving_ = false;  // with regroup_: this rank asked to stop while others did not
  std::function<bool(int64_t)> step_boundary_;
  std::optional<MembershipChanged> membership_;
  bool transactional_ = false;  // make_transactional() succeeded
  int my_vote_ = 0;
  bool vote_pending_ = false;
  Timeline timeline_;
  RunEvents observers_;  // add_observer's
  // After model_: its task decides the watched metric. Checkpointed with the train state.
  StopRules stop_rules_{config_.stop, model_.task, loss_task(config_)};
};

}  // namespace braid::train
