#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/log.h"
#include "core/timer.h"
#include "data/loader.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/data_setup.h"
#include "train/metrics.h"
#include "train/stop_signal.h"

namespace braid::train {
namespace {

std::vector<optim::Segment> segments_of(const nn::ParamSet& params) {
  std::vector<optim::Segment> out;
  for (const auto& p : params.layout()) out.push_back({p.name, p.offset, p.numel(), p.decay});
  return out;
}

optim::OptimizerConfig optimizer_config(const OptimizerSettings& s) {
  optim::OptimizerConfig c;
  c.name = s.name;
  c.momentum = static_cast<float>(s.momentum);
  c.nesterov = s.nesterov;
  c.weight_decay = static_cast<float>(s.weight_decay);
  c.beta1 = static_cast<float>(s.beta1);
  c.beta2 = static_cast<float>(s.beta2);
  if (s.eps > 0) c.eps = static_cast<float>(s.eps);
  c.alpha = static_cast<float>(s.alpha);
  c.trust_coefficient = static_cast<float>(s.trust_coefficient);
  // Adaptive methods take momentum from their betas; only these read `momentum`.
  if (s.name != "sgd" && s.name != "rmsprop" && s.name != "lars") c.momentum = 0;
  return c;
}

// Streams for the counter-based RNG: one purpose each, so adding a consumer never shifts
// another's numbers.
constexpr uint64_t kInitStream = 1;
constexpr uint64_t kForwardStream = 2;

}  // namespace

Trainer::Trainer(const TrainConfig& config, bool load_data, int rank)
    : config_(config), rank_(rank), model_(build_model(config.model, config.seq_len)) {
  BRAID_CHECK(rank >= 0, "Trainer: rank must be >= 0, got ", rank);
  validate(config_);
  model_.module->declare(params_, "");
  params_.allocate();
  Rng init_rng(config_.seed, kInitStream);
  model_.module->init(init_rng);
  cache_ = model_.module->make_cache();

  optimizer_ = optim::make_optimizer(optimizer_config(config_.optimizer), segments_of(params_),
                                     params_.size());
  if (auto* seq = dynamic_cast<nn::Sequential*>(model_.module.get());
      seq && config_.clip_grad_norm == 0) {
    update_in_backward_ = true;
    seq->set_backward_hook([this](nn::ParamSet::Id first, nn::ParamSet::Id end) {
      if (!in_step_) return;
      Stopwatch watch;
      optimizer_->step_segments(params_.params(), params_.grads(first, end), step_lr_, first, end);
      hook_seconds_ += watch.lap();
    });
  }
  if (config_.ema_decay > 0) average_ = std::make_unique<WeightAverage>(params_, config_.ema_decay);
  if (load_data) {
    DataLoaders loaders = make_loaders(config_, model_);
    train_loader_ = std::move(loaders.train);
    eval_loader_ = std::move(loaders.eval);
  }
  schedule_ = make_schedule(schedule_steps());
}

Trainer::~Trainer() = default;

int64_t Trainer::batches_per_epoch() const {
  return train_loader_ ? train_loader_->batches_per_epoch() : 0;
}

int64_t Trainer::schedule_steps() const {
  return config_.max_steps > 0 ? config_.max_steps
                               : config_.epochs * std::max<int64_t>(1, batches_per_epoch());
}

std::unique_ptr<optim::Schedule> Trainer::make_schedule(int64_t total_steps) const {
  double lr = config_.optimizer.lr;
  if (config_.optimizer.base_batch > 0)
    lr = optim::scaled_lr(static_cast<float>(lr), config_.batch, config_.optimizer.base_batch);
  optim::ScheduleConfig sc;
  sc.name = config_.schedule.name;
  sc.warmup_steps = config_.schedule.warmup_steps;
  sc.step_size = config_.schedule.step_size;
  sc.gamma = static_cast<float>(config_.schedule.gamma);
  sc.min_lr = static_cast<float>(config_.schedule.min_lr);
  sc.total_steps = total_steps;
  return optim::make_schedule(sc, static_cast<float>(lr));
}

float Trainer::learning_rate() const { return schedule_->lr(step_); }

double Trainer::train_step(const data::Batch& batch) {
  Stopwatch watch;
  const nn::ForwardContext ctx{
      nn::Mode::train, Rng(config_.seed, kForwardStream, 0).fork(static_cast<uint64_t>(step_))};
  params_.zero_grads();
  const Tensor& logits = model_.module->forward(batch.inputs, *cache_, ctx);
  const nn::LossResult loss =
      nn::softmax_cross_entropy(logits, batch.targets, &dlogits_,
                                {.label_smoothing = static_cast<float>(config_.label_smoothing)});
  times_.forward = watch.lap();
  if (update_in_backward_) {
    step_lr_ = learning_rate();
    hook_seconds_ = 0;
    in_step_ = true;
    model_.module->backward(dlogits_, *cache_, /*need_dx=*/false);
    in_step_ = false;
    optimizer_->finish_step();
    times_.backward = watch.lap() - hook_seconds_;
    times_.optimizer = hook_seconds_;
  } else {
    model_.module->backward(dlogits_, *cache_, /*need_dx=*/false);
    times_.backward = watch.lap();
    if (config_.clip_grad_norm > 0)
      optim::clip_grad_norm(params_.grads(), optimizer_->segments(),
                            static_cast<float>(config_.clip_grad_norm));
    optimizer_->step(params_.params(), params_.grads(), learning_rate());
    times_.optimizer = watch.lap();
  }
  if (average_) {
    average_->update(params_);
    times_.optimizer += watch.lap();
  }
  ++step_;
  return loss.loss;
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
  batch.targets = Tensor::empty(target_shape, DType::i32, MemCategory::data);
  int32_t* t = batch.targets.data<int32_t>();
  for (int64_t i = 0; i < batch.targets.numel(); ++i)
    t[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(model_.num_classes)));
}

EvalResult Trainer::evaluate(int64_t max_batches) {
  BRAID_CHECK(eval_loader_, "evaluate: this trainer was built without data");
  auto cache = model_.module->make_cache();
  const nn::ForwardContext ctx{nn::Mode::eval, Rng(config_.seed, kForwardStream)};
  double loss_sum = 0;
  int64_t correct = 0, count = 0, batches = 0;
  eval_loader_->start_epoch(0);
  while (const data::Batch* b = eval_loader_->next()) {
    const Tensor& logits = model_.module->forward(b->inputs, *cache, ctx);
    const nn::LossResult r = nn::softmax_cross_entropy(logits, b->targets, nullptr);
    loss_sum += r.loss * static_cast<double>(r.count);
    correct += r.correct;
    count += r.count;
    if (max_batches > 0 && ++batches >= max_batches) break;
  }
  EvalResult out;
  out.samples = count;
  out.loss = count ? loss_sum / static_cast<double>(count) : 0;
  out.accuracy = count ? static_cast<double>(correct) / static_cast<double>(count) : 0;
  return out;
}

EvalResult Trainer::evaluate_average(int64_t max_batches) {
  BRAID_CHECK(average_, "evaluate_average: this run keeps no weight average (ema_decay is 0)");
  struct SwapBack {
    WeightAverage& average;
    nn::ParamSet& params;
    ~SwapBack() { average.swap_with(params); }
  };
  average_->swap_with(params_);
  const SwapBack restore{*average_, params_};
  return evaluate(max_batches);
}

double Trainer::flops_per_step() const {
  std::vector<int64_t> dims{config_.batch};
  for (int i = 0; i < model_.sample_shape.rank(); ++i) dims.push_back(model_.sample_shape[i]);
  const Shape in(dims);
  const double forward = model_.module->forward_flops(in);
  // Backward costs twice the forward (the dx and dW products), except that the first
  // layer's dx is never computed: count only the work done, as PyTorch's figures do.
  double skipped = 0;
  if (const auto* seq = dynamic_cast<const nn::Sequential*>(model_.module.get())) {
    Shape s = in;
    for (size_t i = 0; i < seq->size() && skipped == 0; ++i) {
      skipped = (*seq)[i].forward_flops(s);
      s = (*seq)[i].output_shape(s);
    }
  }
  return 3.0 * forward - skipped;
}

RunOutcome Trainer::run(int64_t stop_at_step) {
  BRAID_CHECK(train_loader_, "run: this trainer was built without data");
  const bool writer = writes_outputs();
  if (writer) std::filesystem::create_directories(config_.out);
  MetricsLog metrics = writer ? MetricsLog(config_.out + "/metrics.jsonl") : MetricsLog();
  Progress progress(writer);
  const int64_t per_epoch = batches_per_epoch();
  const int64_t total_steps = config_.max_steps > 0
                                  ? std::min(config_.max_steps, config_.epochs * per_epoch)
                                  : config_.epochs * per_epoch;
  log_info("model ", model_.module->kind(), ": ", params_.count(), " parameters; ", total_steps,
           " steps of batch ", config_.batch, "; optimizer ", optimizer_->name());
  Stopwatch run_watch;
  double window_loss = 0, window_seconds = 0;
  int64_t window_steps = 0;
  const bool is_lm = model_.task == Task::language_model;
  auto sample_unit = is_lm ? "tokens/s" : "samples/s";
  const double per_step_samples =
      static_cast<double>(config_.batch) * (is_lm ? static_cast<double>(config_.seq_len) : 1.0);

  auto evaluate_and_log = [&](const char* when) {
    Stopwatch w;
    const EvalResult r = evaluate(config_.eval_batches);
    nlohmann::json rec = {{"event", "eval"},       {"when", when},   {"step", step_},
                          {"epoch", epoch_},       {"loss", r.loss}, {"samples", r.samples},
                          {"seconds", w.elapsed()}};
    std::string line = detail::concat("eval  step ", step_, "  loss ", r.loss);
    if (!is_lm) {
      rec["accuracy"] = r.accuracy;
      line += detail::concat("  accuracy ", r.accuracy);
    } else {
      rec["bits_per_byte"] = r.loss / std::log(2.0);
    }
    if (average_) {
      const EvalResult a = evaluate_average(config_.eval_batches);
      rec["ema_loss"] = a.loss;
      line += detail::concat("  ema loss ", a.loss);
      if (!is_lm) {
        rec["ema_accuracy"] = a.accuracy;
        line += detail::concat("  ema accuracy ", a.accuracy);
      }
      rec["seconds"] = w.elapsed();
    }
    metrics.write(rec);
    progress.print(line);
  };
  // A new checkpoint is complete on disk before the previous one goes: a crash at any
  // point leaves at least one whole, verifiable checkpoint (checkpoint, .previous or
  // .partial).
  const std::string checkpoint_dir = config_.out + "/checkpoint";
  int64_t checkpointed_step = -1;
  auto checkpoint = [&] {
    namespace fs = std::filesystem;
    if (!writer) return;
    const std::string& final_dir = checkpoint_dir;
    const std::string partial = final_dir + ".partial", previous = final_dir + ".previous";
    fs::remove_all(partial);
    save_checkpoint(partial);
    if (fs::exists(final_dir)) {
      fs::remove_all(previous);
      fs::rename(final_dir, previous);
    }
    fs::rename(partial, final_dir);
    fs::remove_all(previous);
    checkpointed_step = step_;
  };

  int stopped_by = 0;
  const int64_t first_step = step_;
  bool done = step_ >= total_steps;
  while (!done && epoch_ < config_.epochs) {
    if (!resume_mid_epoch_) train_loader_->start_epoch(epoch_);
    resume_mid_epoch_ = false;
    while (true) {
      Stopwatch step_watch;
      const double wait_before = train_loader_->wait_seconds();
      const data::Batch* batch = train_loader_->next();
      if (!batch) break;
      const double loss = train_step(*batch);
      times_.data_wait = train_loader_->wait_seconds() - wait_before;
      times_.total = step_watch.elapsed();
      BRAID_CHECK(std::isfinite(loss), "training diverged: loss is ", loss, " at step ", step_,
                  "; lower the learning rate (optimizer.lr) or enable clip_grad_norm");
      window_loss += loss;
      window_seconds += times_.total;
      ++window_steps;
      if (step_ % config_.log_every == 0 || step_ == total_steps) {
        const double rate = per_step_samples * static_cast<double>(window_steps) / window_seconds;
        const double eta = static_cast<double>(total_steps - step_) * window_seconds /
                           static_cast<double>(window_steps);
        const double mean_loss = window_loss / static_cast<double>(window_steps);
        metrics.write({{"event", "train"},
                       {"step", step_},
                       {"epoch", epoch_},
                       {"loss", mean_loss},
                       {"lr", learning_rate()},
                       {sample_unit, rate},
                       {"seconds", run_watch.elapsed()}});
        progress.update(detail::concat("epoch ", epoch_ + 1, "/", config_.epochs, "  step ", step_,
                                       "/", total_steps, "  loss ", mean_loss, "  ",
                                       static_cast<int64_t>(rate), " ", sample_unit, "  ETA ",
                                       format_duration(eta)));
        window_loss = window_seconds = 0;
        window_steps = 0;
      }
      if (config_.eval_every > 0 && step_ % config_.eval_every == 0) evaluate_and_log("step");
      if (config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0) checkpoint();
      if (step_ >= total_steps || step_ == stop_at_step) {
        done = true;
        break;
      }
      // A step boundary: the only place a stop request is honoured, so the checkpoint
      // below is exactly the state an uninterrupted run had after this step. (A
      // distributed strategy must first agree on the step across ranks.)
      if ((stopped_by = stop_requested()) != 0) {
        done = true;
        break;
      }
    }
    const bool epoch_finished = train_loader_->state().position >= per_epoch;
    if (epoch_finished) ++epoch_;
    if (stopped_by != 0) break;  // within the grace period: no evaluation
    if (config_.eval_every == 0) evaluate_and_log("epoch");
    if (config_.checkpoint_every == 0) checkpoint();
  }
  // Whatever checkpoint_every says, the run's last step is saved.
  if (checkpointed_step != step_ && step_ != first_step) checkpoint();
  if (stopped_by != 0)
    progress.print(detail::concat("stopped by ", signal_name(stopped_by), " at step ", step_, "/",
                                  total_steps, ": checkpoint in ", checkpoint_dir,
                                  "; continue with: braid train --resume ", checkpoint_dir));
  else
    progress.print(detail::concat("done: ", step_, " steps in ",
                                  format_duration(run_watch.elapsed()), "; checkpoint in ",
                                  checkpoint_dir));
  return {step_, stopped_by};
}

}  // namespace braid::train
