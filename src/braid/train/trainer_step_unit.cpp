// StepUnit: Trainer::run's unit on every strategy that takes optimizer steps (single, DDP,
// ZeRO, local SGD, the mesh, a parameter-server worker): one step on the loader's next
// batch. Epochs are its periods; the logged window is the mean over its steps.
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/log.h"
#include "data/loader.h"
#include "optim/loss_scaler.h"
#include "parallel/strategy.h"
#include "train/progress_unit.h"
#include "train/trainer.h"

namespace braid::train {

namespace {

// The step at which the run's epochs end at this world: what is left of the epoch in
// progress, then whole epochs. Counted from the step reached, since steps taken at another
// global batch (a resume or an elastic round at another world) made epochs of other lengths.
int64_t epochs_end(const Trainer& t, const data::Loader* loader, int64_t step, int64_t epoch,
                   bool mid_epoch) {
  const int64_t epochs = t.config().epochs;
  if (!loader) return 0;  // no data: no steps
  const int64_t per_epoch = loader->batches_per_epoch();
  if (epoch >= epochs) return step;
  const int64_t left =
      mid_epoch ? loader->batches_in_epoch() - loader->state().position : per_epoch;
  return step + left + (epochs - epoch - 1) * per_epoch;
}

}  // namespace

class StepUnit : public ProgressUnit {
 public:
  StepUnit(Trainer& t, int64_t stop_at_step)
      : t_(t),
        stop_at_(stop_at_step),
        first_step_(t.step_),
        total_(std::min(
            t.config_.max_steps > 0 ? t.config_.max_steps : std::numeric_limits<int64_t>::max(),
            epochs_end(t, t.train_loader_.get(), t.step_, t.epoch_, t.resume_mid_epoch_))),
        is_lm_(t.model_.task == Task::language_model),
        per_step_samples_(static_cast<double>(t.global_batch()) *
                          (is_lm_ ? static_cast<double>(t.config_.seq_len) : 1.0)) {}

  RunStarted start() override {
    const TrainConfig& c = t_.config_;
    log_info("model ", t_.module().kind(), ": ", t_.params().count(), " parameters; ", total_,
             c.global_batch > 0
                 ? detail::concat(" steps of global batch ", c.global_batch, " over ",
                                  t_.data_world_, t_.data_world_ == 1 ? " rank" : " ranks")
                 : detail::concat(
                       " steps of batch ", c.batch,
                       t_.data_world_ > 1 ? detail::concat(" x ", t_.data_world_, " ranks") : ""),
             t_.data_world_ < t_.world_
                 ? detail::concat(" (each shared by ", t_.world_ / t_.data_world_,
                                  " model-parallel ranks)")
                 : "",
             "; optimizer ", t_.strategy_->optimizer_name(), "; strategy ", t_.strategy_->name());
    if (!c.timeline.empty()) {
      t_.timeline_.start();
      t_.strategy_->set_timeline(&t_.timeline_);
    }
    return {.model_kind = std::string(t_.module().kind()),
            .parameters = t_.params().count(),
            .total = total_,
            .unit = "step",
            .epochs = c.epochs,
            .batch = c.batch,
            .data_ranks = t_.data_world_,
            .world = t_.world_,
            .optimizer = std::string(t_.strategy_->optimizer_name()),
            .strategy = std::string(t_.strategy_->name())};
  }

  const char* metrics_file() const override {
    return t_.writes_outputs() ? "metrics.jsonl" : nullptr;
  }

  bool already_done() override {
    if (t_.step_ < total_) return false;
    if (t_.step_ > 0)
      log_info("this run already reached step ", t_.step_, " of ", total_, " (max_steps ",
               t_.config_.max_steps, ", epochs ", t_.config_.epochs,
               "): nothing to train; to extend it, resume with a larger --max-steps or --epochs");
    return true;
  }

  Advance advance() override {
    data::Loader& loader = *t_.train_loader_;
    if (!in_epoch_) {
      if (t_.epoch_ >= t_.config_.epochs) return Advance::over;
      if (!t_.resume_mid_epoch_) loader.start_epoch(t_.epoch_);
      t_.resume_mid_epoch_ = false;
      in_epoch_ = true;
    }
    StepTimes& times = t_.times_;
    Stopwatch step_watch;
    const double wait_before = loader.wait_seconds();
    const data::Batch* batch = loader.next();
    if (!batch) return Advance::period_end;
    times.data_wait = loader.wait_seconds() - wait_before;
    if (t_.timeline_.enabled()) {
      const auto waited = static_cast<int64_t>(times.data_wait * 1e9);
      t_.timeline_.record(TimelineLane::kData, "data wait", Timeline::now() - waited,
                          Timeline::now());
    }
    const int64_t skipped_before = t_.skipped_steps();
    const double loss = t_.train_step(*batch);
    times.total = step_watch.elapsed();
    if (t_.step_ == first_step_ + 1) t_.check_worker_timeout();
    // Under fp16 an overflow skips the step (the loss scaler's business), not a divergence.
    const bool skipped = t_.skipped_steps() > skipped_before;
    BRAID_CHECK(std::isfinite(loss) || skipped, "training diverged: loss is ", loss, " at step ",
                t_.step_, "; lower the learning rate (optimizer.lr) or enable clip_grad_norm");
    if (std::isfinite(loss)) window_loss_ += loss;
    window_seconds_ += times.total;
    window_comm_ += times.communication_exposed;
    window_wait_ += times.data_wait;
    const parallel::CodecReport& wire = t_.strategy_->last_codec_report();
    window_wire_bytes_ += wire.wire_bytes;
    window_dense_bytes_ += wire.dense_bytes;
    last_error_norm_ = wire.error_norm;
    ++window_steps_;
    return Advance::unit;
  }

  std::optional<StepDone> report(const Stopwatch& run) override {
    const int64_t step = t_.step_;
    if (step % t_.config_.log_every != 0 && step != total_) return std::nullopt;
    const auto n = static_cast<double>(window_steps_);
    StepDone s;
    s.step = step;
    s.epoch = t_.epoch_;
    s.loss = window_loss_ / n;
    s.lr = t_.learning_rate();
    s.rate_unit = is_lm_ ? "tokens/s" : "samples/s";
    s.rate = per_step_samples_ * n / window_seconds_;
    s.step_ms = 1e3 * window_seconds_ / n;
    s.comm_exposed_ms = 1e3 * window_comm_ / n;
    s.data_wait_ms = 1e3 * window_wait_ / n;
    s.eta_seconds = static_cast<double>(total_ - step) * window_seconds_ / n;
    s.run_seconds = run.elapsed();
    if (const optim::LossScaler* ls = t_.strategy_->loss_scaler())
      s.loss_scale = StepDone::LossScale{ls->scale(), ls->skipped()};
    if (t_.config_.compression.codec != "none" || t_.config_.comm_dtype != "fp32")
      s.wire = StepDone::Wire{
          t_.config_.comm_dtype != "fp32" ? t_.config_.comm_dtype : t_.config_.compression.codec,
          window_wire_bytes_ / n,
          window_wire_bytes_ > 0 ? window_dense_bytes_ / window_wire_bytes_ : 1.0,
          last_error_norm_};
    window_wire_bytes_ = window_dense_bytes_ = 0;
    window_loss_ = window_seconds_ = window_comm_ = window_wait_ = 0;
    window_steps_ = 0;
    return s;
  }

  bool eval_due() const override {
    return t_.config_.eval_every > 0 && t_.step_ % t_.config_.eval_every == 0;
  }

  std::optional<Evaluated> evaluate(const char* when, const Stopwatch& run) override {
    if (!t_.strategy_->evaluates()) return std::nullopt;
    return t_.evaluated(when, t_.step_, run);
  }

  bool close_period() override {
    in_epoch_ = false;
    if (t_.train_loader_->state().position >= t_.train_loader_->batches_in_epoch()) ++t_.epoch_;
    return true;
  }

  bool reached_end() const override { return t_.step_ >= total_ || t_.step_ == stop_at_; }

  std::string unfinished_reason() const override { return t_.strategy_->stop_unfinished_reason(); }

  int64_t outcome_step() const override { return t_.step_; }

 private:
  Trainer& t_;
  const int64_t stop_at_;
  const int64_t first_step_;
  const int64_t total_;
  const bool is_lm_;
  const double per_step_samples_;
  bool in_epoch_ = false;
  double window_loss_ = 0, window_seconds_ = 0, window_comm_ = 0, window_wait_ = 0;
  double window_wire_bytes_ = 0, window_dense_bytes_ = 0, last_error_norm_ = 0;
  int64_t window_steps_ = 0;
};

std::unique_ptr<ProgressUnit> make_step_unit(Trainer& trainer, int64_t stop_at_step) {
  return std::make_unique<StepUnit>(trainer, stop_at_step);
}

}  // namespace braid::train
