// EvaluatorPollUnit: Trainer::run's unit on the evaluator of a parameter-server job (braid
// launch --evaluator, or an "evaluator" task in TF_CONFIG). It keeps reading the servers'
// model and scores it on the whole evaluation split each time the servers applied another
// eval_every steps' worth of updates (0: an epoch's; a step is one update in sync mode and W
// in async and ssp), and once more when the workers are done: a unit is one such
// evaluation. It makes the run's convergence decisions (stop.*), which reach the workers
// through the servers, and writes its records to OUT/evaluator.jsonl, beside the chief's
// metrics.jsonl. It trains nothing, so it saves no checkpoint and no stop request ends it:
// it ends when the workers are gone.
#include <chrono>
#include <thread>

#include "core/log.h"
#include "parallel/ps_evaluator.h"
#include "train/progress_unit.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

// How often the evaluator looks at the servers' progress between evaluations.
constexpr std::chrono::milliseconds kPollEvery{100};

}  // namespace

class EvaluatorPollUnit : public ProgressUnit {
 public:
  explicit EvaluatorPollUnit(Trainer& t)
      : t_(t), ev_(dynamic_cast<parallel::PsEvaluator*>(t.strategy_.get())) {
    BRAID_CHECK(ev_ && t.ps_, "run_evaluator: this trainer is not a parameter-server evaluator");
    BRAID_CHECK(t.config_.strategy == "ps", "an evaluator serves strategy ps; strategy ",
                t.config_.strategy, " evaluates on its chief");
    const TrainConfig& c = t.config_;
    per_step_ = c.ps.mode == "sync" ? 1 : t.ps_->workers;
    const int64_t steps_per_epoch = std::max<int64_t>(1, t.batches_per_epoch() / t.ps_->workers);
    every_ = (c.eval_every > 0 ? c.eval_every : steps_per_epoch) * per_step_;
  }

  RunStarted start() override {
    // The evaluator keeps no optimizer: the servers do.
    return {.model_kind = std::string(t_.module().kind()),
            .parameters = t_.params().count(),
            .total = 0,
            .unit = "update",
            .epochs = t_.config_.epochs,
            .batch = t_.config_.batch,
            .data_ranks = t_.world_,
            .world = t_.world_,
            .optimizer = "",
            .strategy = std::string(t_.strategy_->name())};
  }

  const char* metrics_file() const override { return "evaluator.jsonl"; }

  // Polls until the servers applied enough updates for an evaluation, or the workers are
  // gone (scoring what they left, when it is new).
  Advance advance() override {
    if (polled_) {
      if (over_) return Advance::over;
      std::this_thread::sleep_for(kPollEvery);
    }
    polled_ = true;
    while (true) {
      ev_->synchronize();
      over_ = ev_->live_workers() == 0;
      if (ev_->version() >= evaluated_ + every_ || (over_ && ev_->version() > evaluated_)) {
        evaluated_ = ev_->version();
        return Advance::unit;
      }
      if (over_) return Advance::over;
      std::this_thread::sleep_for(kPollEvery);
    }
  }

  std::optional<StepDone> report(const Stopwatch&) override { return std::nullopt; }
  bool eval_due() const override { return true; }

  std::optional<Evaluated> evaluate(const char*, const Stopwatch& run) override {
    Evaluated e = t_.evaluated(over_ ? "final" : "step", evaluated_ / per_step_, run);
    e.updates = evaluated_;
    return e;
  }

  // Not after the servers stopped the run (a lost worker in sync mode); after its own
  // decision it scores on until the workers are gone.
  bool may_decide() const override { return !ev_->stopped(); }
  bool ends_on_convergence() const override { return false; }
  bool reached_end() const override { return false; }
  bool stoppable() const override { return false; }
  std::string unfinished_reason() const override { return ""; }
  FinalCheckpoint final_checkpoint() const override { return FinalCheckpoint::never; }
  int64_t outcome_step() const override { return evaluated_ / per_step_; }
  std::optional<int64_t> updates() const override { return evaluated_; }

 private:
  Trainer& t_;
  parallel::PsEvaluator* ev_;
  int64_t per_step_ = 1;  // updates the servers apply per worker step
  int64_t every_ = 1;     // updates between evaluations
  int64_t evaluated_ = 0;
  bool over_ = false;  // the last poll found no worker left
  bool polled_ = false;
};

std::unique_ptr<ProgressUnit> make_evaluator_poll_unit(Trainer& trainer) {
  return std::make_unique<EvaluatorPollUnit>(trainer);
}

}  // namespace braid::train
