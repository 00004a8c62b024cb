// Trainer::run_evaluator: the evaluator of a parameter-server job (braid launch --evaluator,
// or an "evaluator" task in TF_CONFIG). It keeps reading the servers' model and scores it on
// the whole evaluation split each time the servers applied another eval_every steps' worth
// of updates (0: an epoch's; a step is one update in sync mode and W in async and ssp), and
// once more when the workers are done. It makes the run's convergence decisions (stop.*),
// which reach the workers through the servers, and writes its records to
// OUT/evaluator.jsonl, beside the chief's metrics.jsonl.
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/log.h"
#include "core/timer.h"
#include "data/loader.h"
#include "parallel/ps_evaluator.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace braid::train {
namespace {

// How often the evaluator looks at the servers' progress between evaluations.
constexpr std::chrono::milliseconds kPollEvery{100};

}  // namespace

RunOutcome Trainer::run_evaluator() {
  auto* ev = dynamic_cast<parallel::PsEvaluator*>(strategy_.get());
  BRAID_CHECK(ev && ps_, "run_evaluator: this trainer is not a parameter-server evaluator");
  BRAID_CHECK(config_.strategy == "ps", "an evaluator serves strategy ps; strategy ",
              config_.strategy, " evaluates on its chief");
  std::filesystem::create_directories(config_.out);
  MetricsLog metrics(config_.out + "/evaluator.jsonl");
  Progress progress(true);
  // Updates the servers apply per worker step, and steps between evaluations.
  const int64_t per_step = config_.ps.mode == "sync" ? 1 : ps_->workers;
  const int64_t steps_per_epoch = std::max<int64_t>(1, batches_per_epoch() / ps_->workers);
  const int64_t every = (config_.eval_every > 0 ? config_.eval_every : steps_per_epoch) * per_step;
  Stopwatch run_watch;
  int64_t evaluated = 0;
  std::string stop_rule;
  while (true) {
    ev->synchronize();
    const bool over = ev->live_workers() == 0;
    if (ev->version() >= evaluated + every || (over && ev->version() > evaluated)) {
      evaluated = ev->version();
      const int64_t step = evaluated / per_step;
      Stopwatch w;
      const EvalResult r = evaluate(config_.eval_batches);
      metrics.write({{"event", "eval"},
                     {"step", step},
                     {"updates", evaluated},
                     {"loss", r.loss},
                     {"accuracy", r.accuracy},
                     {"samples", r.samples},
                     {"seconds", w.elapsed()},
                     {"run_seconds", run_watch.elapsed()}});
      progress.print(
          detail::concat("eval  step ", step, "  loss ", r.loss, "  accuracy ", r.accuracy));
      if (!ev->stopped() && stop_rule.empty()) {
        if (const std::optional<StopDecision> d = stop_rules_.observe(r, step)) {
          stop_rule = d->rule;
          metrics.write(
              {{"event", "stop"}, {"rule", d->rule}, {"reason", d->reason}, {"step", step}});
          progress.print(d->reason);
          ev->announce_stop(step);
        }
      }
    }
    if (over) break;
    std::this_thread::sleep_for(kPollEvery);
  }
  ev->finish();
  progress.print(detail::concat("evaluator done after ", evaluated, " updates in ",
                                format_duration(run_watch.elapsed())));
  RunOutcome outcome;
  outcome.step = evaluated / per_step;
  outcome.stop_rule = stop_rule;
  return outcome;
}

}  // namespace braid::train
