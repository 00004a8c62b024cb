#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "comm/group.h"
#include "core/gemm_bf16.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/eval_tally.h"
#include "data/loader.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "parallel/strategy.h"
#include "train/data_setup.h"
#include "train/job_kernels.h"
#include "train/kernel_cache.h"
#include "train/kernel_record.h"
#include "train/loss_setup.h"
#include "train/stop_signal.h"
#include "train/strategy_setup.h"

namespace braid::train {
namespace {

// The forward randomness of evaluation (dropout is off in eval mode; kept for layers
// that might draw).
constexpr uint64_t kForwardStream = 2;
// slow_step_random's draws (a benchmark's), one stream per rank from here up.
constexpr uint64_t kSlowStepStream = uint64_t{1} << 58;

}  // namespace

Trainer::Trainer(const TrainConfig& config, bool load_data, int rank)
    : config_(config), rank_(rank), model_(build_model(config.model, config.seq_len)) {
  BRAID_CHECK(rank >= 0, "Trainer: rank must be >= 0, got ", rank);
  init(load_data);
}

Trainer::Trainer(const TrainConfig& config, std::shared_ptr<comm::Group> group, bool load_data,
                 DataCache* data)
    : config_(config),
      group_(std::move(group)),
      rank_(group_ ? group_->rank() : 0),
      world_(group_ ? group_->size() : 1),
      batchnorm_reducer_(batchnorm_reducer(config, group_)),
      model_(build_model(config.model, config.seq_len, ModelBuildOptions{batchnorm_reducer_})) {
  init(load_data, data);
}

Trainer::Trainer(const TrainConfig& config, std::shared_ptr<comm::Group> world,
                 parallel::PsLayout ps, bool load_data)
    : config_(config),
      group_(std::move(world)),
      ps_(ps),
      rank_(group_ ? group_->rank() : 0),
      world_(ps.workers),
      model_(build_model(config.model, config.seq_len)) {
  BRAID_CHECK(group_ && (ps.is_worker(rank_) || ps.is_evaluator(rank_)),
              "Trainer: a parameter-server job's trainer runs on a worker (ranks 0..",
              ps.workers - 1, ") or the evaluator (rank ", ps.workers + ps.servers, ")");
  init(load_data);
}

void Trainer::init(bool load_data, DataCache* data) {
  validate(config_);
  // Model parallelism: the ranks of one model-parallel group work on the same batch, the
  // data axis's replicas on their shares.
  const std::optional<parallel::MeshShape> mesh = ps_ ? std::nullopt : mesh_shape(config_, world_);
  data_world_ = mesh ? mesh->data : world_;
  const int data_rank = mesh ? (rank_ / mesh->tensor) % mesh->data : rank_;
  // One table on every rank (job_kernels.h). A restarted parameter-server worker joins a
  // running job, in no collective: it chooses alone (its products need not match the
  // others' bit for bit: each worker's gradients are its own).
  const bool restarted = ps_ && ps_->incarnation > 0;
  start_job_kernels(config_, restarted ? nullptr : group_.get());
  // The data checks read the model, which then moves into the strategy.
  if (load_data) {
    // Without a group a rank runs alone over all the data (rank only decides who writes).
    // The evaluator of a parameter-server job reads the data as one process would.
    // The chief of a parameter-server job evaluates the whole split alone.
    const bool evaluator = ps_ && ps_->is_evaluator(rank_);
    DataLoaders loaders = make_loaders(
        config_, model_,
        evaluator ? DataPlacement{}
                  : DataPlacement{.rank = group_ ? data_rank : 0,
                                  .world = data_world_,
                                  .evaluate_whole_split = ps_.has_value() && rank_ == 0,
                                  // Every rank holds the whole model when it evaluates.
                                  .eval_rank = group_ ? rank_ : 0,
                                  .eval_world = world_,
                                  .cache = data});
    train_loader_ = std::move(loaders.train);
    eval_loader_ = std::move(loaders.eval);
    data_record_ = std::move(loaders.record);
  }
  strategy_ = make_strategy(config_, std::move(model_.module), group_, batchnorm_reducer_, ps_);
  if (config_.ema_decay > 0)
    average_ = std::make_unique<WeightAverage>(params(), config_.ema_decay);
  schedule_ = make_schedule(schedule_steps());
}

nn::ParamSet& Trainer::params() { return strategy_->params(); }
const nn::ParamSet& Trainer::params() const { return strategy_->params(); }
nn::Module& Trainer::module() { return strategy_->module(); }
optim::Optimizer& Trainer::optimizer() { return strategy_->optimizer(); }

Trainer::~Trainer() = default;

int64_t Trainer::batches_per_epoch() const {
  return train_loader_ ? train_loader_->batches_per_epoch() : 0;
}

int64_t Trainer::schedule_steps() const {
  return config_.max_steps > 0 ? config_.max_steps
                               : config_.epochs * std::max<int64_t>(1, batches_per_epoch());
}

void Trainer::set_lr_scale(double factor) {
  BRAID_CHECK(factor > 0 && std::isfinite(factor), "learning-rate scale must be > 0, got ", factor);
  lr_scale_ = factor;
  schedule_ = make_schedule(schedule_steps());
}

std::unique_ptr<optim::Schedule> Trainer::make_schedule(int64_t total_steps) const {
  double lr = config_.optimizer.lr;
  // Linear scaling by the global batch: every rank's batch makes one step.
  if (config_.optimizer.base_batch > 0)
    lr = optim::scaled_lr(static_cast<float>(lr), global_batch(), config_.optimizer.base_batch);
  else
    lr *= lr_scale_;  // in double, as a config holding the scaled lr would give it
  optim::ScheduleConfig sc;
  sc.name = config_.schedule.name;
  sc.warmup_steps = config_.schedule.warmup_steps;
  sc.warmup_type = config_.schedule.warmup_type;
  sc.warmup_start_ratio = config_.schedule.warmup_start_ratio;
  sc.min_ratio = config_.schedule.min_ratio;
  sc.lag_steps = config_.schedule.lag_steps;
  sc.step_size = config_.schedule.step_size;
  sc.gamma = static_cast<float>(config_.schedule.gamma);
  sc.min_lr = static_cast<float>(config_.schedule.min_lr * lr_scale_);
  sc.total_steps = config_.schedule.total_steps > 0 ? config_.schedule.total_steps : total_steps;
  return optim::make_schedule(sc, static_cast<float>(lr));
}

int64_t Trainer::skipped_steps() const {
  const optim::LossScaler* s = strategy_->loss_scaler();
  return s ? s->skipped() : 0;
}

float Trainer::learning_rate() const { return schedule_->lr(step_); }

double Trainer::train_step(const data::Batch& batch) {
  const double loss = strategy_->step(batch, learning_rate(), step_);
  // Every kernel of a step has been chosen by now (train/kernel_record.h): said once.
  if (!kernels_described_ && writes_outputs()) {
    std::string kernels = describe_kernel_choices();
    if (config_.precision == "bf16")
      kernels += std::string(kernels.empty() ? "" : "; ") + "bf16 products on " +
                 bf16_gemm_path_name(bf16_gemm_path());
    log_info(kernels);
  }
  if (!kernels_described_) save_kernel_measurements();  // for the next job (kernel_cache.h)
  kernels_described_ = true;
  if (config_.slow_step_ms > 0) {
    // Drawn per (rank, step): a benchmark's jitter, apart from every stream training uses.
    const double ms = config_.slow_step_random
                          ? 2.0 * config_.slow_step_ms *
                                Rng(config_.seed, kSlowStepStream + static_cast<uint64_t>(rank_))
                                    .fork(static_cast<uint64_t>(step_))
                                    .uniform()
                          : config_.slow_step_ms;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  }
  const parallel::StepTimes& t = strategy_->last_times();
  times_.forward = t.forward;
  times_.backward = t.backward;
  times_.optimizer = t.optimizer;
  times_.communication_exposed = t.communication_exposed;
  if (average_) {
    Stopwatch watch;
    strategy_->settle();  // the weight average reads every update of this step
    average_->update(params());
    times_.optimizer += watch.lap();
  }
  ++step_;
  return loss;
}

double Trainer::train_one_batch() {
  BRAID_CHECK(train_loader_, "train_one_batch: this trainer was built without data");
  if (!loader_started_) train_loader_->start_epoch(epoch_);
  loader_started_ = true;
  const double before = train_loader_->wait_seconds();
  const data::Batch* batch = train_loader_->next();
  if (!batch) {
    train_loader_->start_epoch(++epoch_);
    batch = train_loader_->next();
  }
  const double waited = train_loader_->wait_seconds() - before;
  train_step(*batch);
  return waited;
}

void Trainer::fill_random_batch(data::Batch& batch, uint64_t seed) const {
  std::vector<int64_t> dims{config_.batch};
  for (int i = 0; i < model_.sample_shape.rank(); ++i) dims.push_back(model_.sample_shape[i]);
  Rng rng(seed);
  batch.size = config_.batch;
  batch.inputs = Tensor::empty(Shape(dims), model_.input_dtype, MemCategory::data);
  if (model_.input_dtype == DType::i32) {
    int32_t* x = batch.inputs.data<int32_t>();
    for (int64_t i = 0; i < batch.inputs.numel(); ++i)
      x[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(model_.num_classes)));
  } else {
    float* x = batch.inputs.f32();
    for (int64_t i = 0; i < batch.inputs.numel(); ++i) x[i] = rng.normal();
  }
  const Shape target_shape = model_.task == Task::language_model
                                 ? Shape{config_.batch, model_.sample_shape[0]}
                                 : Shape{config_.batch};
  if (loss_task(config_) != LossTask::classification) {
    // Numeric targets, one per output: 0 or 1, which suits every such loss.
    batch.targets =
        Tensor::empty({config_.batch, model_.num_classes}, DType::f32, MemCategory::data);
    float* v = batch.targets.f32();
    for (int64_t i = 0; i < batch.targets.numel(); ++i) v[i] = rng.below(2) ? 1.0f : 0.0f;
    return;
  }
  batch.targets = Tensor::empty(target_shape, DType::i32, MemCategory::data);
  int32_t* t = batch.targets.data<int32_t>();
  for (int64_t i = 0; i < batch.targets.numel(); ++i)
    t[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(model_.num_classes)));
}

EvalResult Trainer::evaluate(int64_t max_batches) {
  BRAID_CHECK(eval_loader_, "evaluate: this trainer was built without data");
  strategy_->synchronize();
  auto cache = module().make_cache();
  const nn::ForwardContext ctx{nn::Mode::eval, Rng(config_.seed, kForwardStream),
                               step_options(config_).precision};
  data::EvalTally tally;
  const LossTask task = loss_task(config_);
  int64_t batches = 0;
  eval_loader_->start_epoch(0);
  while (const data::Batch* b = eval_loader_->next()) {
    const Tensor& logits = module().forward(b->inputs, *cache, ctx);
    const auto& loss = strategy_->options().loss;
    const nn::LossResult r = loss ? loss->compute(logits, b->targets, nullptr, 1.0f)
                                  : nn::softmax_cross_entropy(logits, b->targets, nullptr);
    tally.add_batch(r.loss, r.correct, r.count);
    if (task != LossTask::classification)
      tally.add_errors(logits.f32(), b->targets.f32(), logits.numel());
    if (max_batches > 0 && ++batches >= max_batches) break;
  }
  // Each rank evaluated its own shard: the sum counts every sample once, on every rank.
  if (world_ > 1 && !ps_) {
    std::array<double, data::EvalTally::kPacked> packed = tally.pack();
    strategy_->sum_over_ranks(packed.data(), packed.size(), "evaluation tally");
    tally = data::EvalTally::unpack(packed);
  }
  save_kernel_measurements();  // evaluation's shapes too
  EvalResult out;
  out.samples = tally.count;
  out.loss = tally.loss();
  out.accuracy = tally.accuracy();
  if (task == LossTask::regression) {
    out.mse = tally.mse();
    out.mae = tally.mae();
  } else if (task == LossTask::multi_label) {
    out.label_accuracy = tally.label_accuracy();
  }
  return out;
}

EvalResult Trainer::evaluate_average(int64_t max_batches) {
  BRAID_CHECK(average_, "evaluate_average: this run keeps no weight average (ema_decay is 0)");
  struct SwapBack {
    WeightAverage& average;
    nn::ParamSet& params;
    ~SwapBack() { average.swap_with(params); }
  };
  average_->swap_with(params());
  const SwapBack restore{*average_, params()};
  return evaluate(max_batches);
}

double Trainer::flops_per_step() const {
  std::vector<int64_t> dims{config_.batch};
  for (int i = 0; i < model_.sample_shape.rank(); ++i) dims.push_back(model_.sample_shape[i]);
  const Shape in(dims);
  const double forward = strategy_->module().forward_flops(in);
  // Backward costs twice the forward (the dx and dW products), except that the first
  // layer's dx is never computed: count only the work done, as PyTorch's figures do.
  double skipped = 0;
  if (const auto* seq = dynamic_cast<const nn::Sequential*>(&strategy_->module())) {
    Shape s = in;
    for (size_t i = 0; i < seq->size() && skipped == 0; ++i) {
      skipped = (*seq)[i].forward_flops(s);
      s = (*seq)[i].output_shape(s);
    }
  }
  return 3.0 * forward - skipped;
}

// Each rank writes its part; once all have (the sum is a barrier), rank 0 merges them.
void Trainer::write_timeline() {
  timeline_.stop();
  strategy_->set_timeline(nullptr);
  const std::string& path = config_.timeline;
  timeline_.write(world_ > 1 ? rank_trace_path(path, rank_) : path, rank_);
  if (world_ == 1) return;
  double written = 1;
  strategy_->sum_over_ranks(&written, 1, "timeline written");
  if (rank_ == 0) merge_rank_traces(path, world_);
}

// The ranks vote at every step boundary without waiting for each other: the vote cast
// after step t is counted after step t + 1 (it travels while that step runs), so a stop
// lands one step later on every rank alike, and no step boundary becomes a barrier.
int Trainer::agreed_stop() {
  const int requested = stop_requested();
  const bool wants_regroup = step_boundary_ && step_boundary_(step_);
  if (world_ == 1 || !strategy_->ranks_step_together()) {
    if (requested == 0 && wants_regroup) regroup_ = true;
    return requested != 0 ? requested : wants_regroup ? kRegroup : 0;
  }
  int agreed = 0;
  if (vote_pending_) {
    strategy_->finish_sum_over_ranks();
    vote_pending_ = false;
    // Sum of the requests' signal numbers and of the count of requesting ranks: any
    // rank's request stops all; the signal reported is one that was received.
    // In an elastic job (a step boundary hook is set) a stop asked of some ranks, not all,
    // is theirs alone: they leave, and the others regroup without them.
    if (step_boundary_ && votes_[1] != 0 && votes_[1] < world_) {
      regroup_ = true;
      leaving_ = my_vote_ != 0;
      return kRegroup;
    }
    if (votes_[1] != 0) agreed = my_vote_ != 0 ? my_vote_ : static_cast<int>(votes_[0] / votes_[1]);
    // A stop wins over a regroup: the run ends either way, and a stop saves it.
    if (agreed == 0 && votes_[2] != 0) {
      regroup_ = true;
      return kRegroup;
    }
  }
  if (agreed != 0) return agreed;
  my_vote_ = requested;
  votes_[0] = static_cast<double>(requested);
  votes_[1] = requested != 0 ? 1.0 : 0.0;
  votes_[2] = wants_regroup ? 1.0 : 0.0;
  strategy_->start_sum_over_ranks(votes_, 3, "stop vote after the step");
  vote_pending_ = true;
  return 0;
}

// A vote still travelling when the run ends is collected, so nothing is left in flight.
void Trainer::drain_vote() {
  if (!vote_pending_) return;
  strategy_->finish_sum_over_ranks();
  vote_pending_ = false;
}

// A new checkpoint is complete on disk before the previous one goes: a crash at any point
// leaves at least one whole, verifiable checkpoint (checkpoint, .previous or .partial).
void Trainer::checkpoint_now() {
  namespace fs = std::filesystem;
  // Every rank, writer or not: synchronize() is collective, and the decision to save at the
  // end of a run must be the same on every rank.
  strategy_->synchronize();
  strategy_->gather_for_checkpoint();
  if (!writes_outputs()) return;
  const std::string final_dir = config_.out + "/checkpoint";
  const std::string partial = final_dir + ".partial", previous = final_dir + ".previous";
  fs::remove_all(partial);
  save_checkpoint(partial);
  if (fs::exists(final_dir)) {
    fs::remove_all(previous);
    fs::rename(final_dir, previous);
  }
  fs::rename(partial, final_dir);
  fs::remove_all(previous);
}

// A parameter-server worker whose servers would count it lost while it computes one step
// (ps.worker_timeout_s below a step's time) fails at once, saying so, rather than leaving
// the servers to drop every worker mid-step.
void Trainer::check_worker_timeout() const {
  if (!ps_ || config_.ps.worker_timeout_s <= 0) return;
  const double computing = times_.forward + times_.backward + times_.optimizer;
  BRAID_CHECK(computing < config_.ps.worker_timeout_s, "ps.worker_timeout_s is ",
              config_.ps.worker_timeout_s, " s, but one step computes for ", computing,
              " s on worker ", rank_,
              ": the servers would count workers lost while they compute; set it well above a "
              "step's time (e.g. ",
              std::max(1.0, std::ceil(10 * computing)),
              "), or leave it 0 (half the job's deadline)");
}

}  // namespace braid::train
