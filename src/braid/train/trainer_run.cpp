// Trainer::run: one loop for every strategy. The unit of progress (progress_unit.h) does the
// work; this loop decides, the same way for each, when to evaluate and whether that
// converged, when to checkpoint and when the run ends, and publishes what happened
// (run_events.h).
#include <cmath>
#include <filesystem>

#include "core/log.h"
#include "data/loader.h"
#include "parallel/strategy.h"
#include "train/metrics_observer.h"
#include "train/progress_observer.h"
#include "train/progress_unit.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace braid::train {

void Trainer::add_observer(std::shared_ptr<RunObserver> observer) {
  observers_.subscribe(std::move(observer));
}

std::unique_ptr<ProgressUnit> Trainer::make_unit(int64_t stop_at_step) {
  if (config_.strategy == "fedavg") return make_fedavg_round_unit(*this, stop_at_step);
  if (ps_ && ps_->is_evaluator(rank_)) return make_evaluator_poll_unit(*this);
  return make_step_unit(*this, stop_at_step);
}

RunOutcome Trainer::run(int64_t stop_at_step) {
  BRAID_CHECK(train_loader_, "run: this trainer was built without data");
  const std::unique_ptr<ProgressUnit> unit = make_unit(stop_at_step);
  // Only the rank that writes outputs (the evaluator too) writes records and progress lines.
  RunEvents events;
  const char* metrics_file = unit->metrics_file();
  if (metrics_file) {
    std::filesystem::create_directories(config_.out);
    events.subscribe(std::make_shared<MetricsObserver>(config_.out + "/" + metrics_file));
    events.subscribe(std::make_shared<ProgressObserver>());
  }
  for (const auto& o : observers_.observers()) events.subscribe(o);
  try {
    return run_units(*unit, events, metrics_file != nullptr);
  } catch (const std::exception& e) {
    events.publish(Failed{step_, e.what()});
    throw;
  }
}

Evaluated Trainer::evaluated(const char* when, int64_t step, const Stopwatch& run) {
  Stopwatch w;
  const EvalResult r = evaluate(config_.eval_batches);
  const bool lm = model_.task == Task::language_model;
  Evaluated e;
  e.when = when;
  e.step = step;
  e.epoch = epoch_;
  e.loss = r.loss;
  e.samples = r.samples;
  // Accuracy only where the loss classifies: a regression run has none to report.
  const bool classifies = !lm && !r.mse && !r.label_accuracy;
  if (lm)
    e.bits_per_byte = r.loss / std::log(2.0);
  else if (classifies)
    e.accuracy = r.accuracy;
  e.mse = r.mse;
  e.mae = r.mae;
  e.label_accuracy = r.label_accuracy;
  if (average_) {
    const EvalResult a = evaluate_average(config_.eval_batches);
    e.ema_loss = a.loss;
    if (classifies) e.ema_accuracy = a.accuracy;
  }
  e.seconds = w.elapsed();
  // Since the run started, this evaluation included: the clock of time-to-accuracy.
  e.run_seconds = run.elapsed();
  return e;
}

RunOutcome Trainer::run_units(ProgressUnit& unit, const RunEvents& events, bool writer) {
  const RunStarted started = unit.start();
  events.publish(started);
  if (membership_) events.publish(*membership_);
  membership_.reset();
  const std::string checkpoint_dir = config_.out + "/checkpoint";
  Stopwatch run_watch;
  int64_t checkpointed_step = -1;
  auto checkpoint = [&] {
    Stopwatch w;
    checkpoint_now();
    checkpointed_step = step_;
    events.publish(Checkpointed{step_, checkpoint_dir, w.elapsed()});
  };
  // Invariant: under single, ddp and local_sgd every rank evaluates the same tallies summed
  // over the ranks (the same bits), and StopRules decides on those alone, so every rank
  // stops at the same step with no message of its own. A strategy where only the chief
  // evaluates carries the decision (announce_stop, stop_announced).
  std::string stop_rule, stop_reason, unfinished;
  int stopped_by = 0;
  auto converged = [&](const std::optional<Evaluated>& e) {
    if (!e) return false;
    events.publish(*e);
    if (!stop_rule.empty() || !unit.may_decide()) return false;
    const EvalResult r{.loss = e->loss,
                       .accuracy = e->accuracy.value_or(0),
                       .samples = e->samples,
                       .mse = e->mse,
                       .mae = e->mae,
                       .label_accuracy = e->label_accuracy};
    const std::optional<StopDecision> d = stop_rules_.observe(r, e->step);
    if (!d) return false;
    stop_rule = d->rule;
    stop_reason = d->reason;
    events.publish(Converged{d->rule, d->reason, e->step});
    if (!writer) log_info(d->reason);
    strategy_->announce_stop(e->step);
    return unit.ends_on_convergence();
  };
  const int64_t first_step = step_;
  bool done = unit.already_done();
  while (!done) {
    const ProgressUnit::Advance advanced = unit.advance();
    if (advanced == ProgressUnit::Advance::over) break;
    if (advanced == ProgressUnit::Advance::unit) {
      if (const std::optional<StepDone> s = unit.report(run_watch)) events.publish(*s);
      if (unit.eval_due() && converged(unit.evaluate("step", run_watch))) {
        done = true;
      } else if (unit.stoppable()) {
        if (config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0) checkpoint();
        // A step boundary: the only place a stop request is honoured, so the checkpoint
        // below is exactly the state an uninterrupted run had after this step. Ranks agree
        // on it: a signal reaches them at different steps, and a rank that stopped alone
        // would leave the others waiting in the next step's allreduce.
        if (unit.reached_end() || (stopped_by = agreed_stop()) != 0) {
          done = true;
        } else if (strategy_->stop_announced()) {
          // The chief's convergence decision, where it travels (parameter servers), or the
          // end of a sync job that lost a worker.
          unfinished = unit.unfinished_reason();
          if (unfinished.empty()) {
            stop_rule = "announced";
            log_info("stopping at ", started.unit, " ", step_,
                     ": the run was judged converged (by the chief or the evaluator)");
          } else {
            log_warn("stopping at ", started.unit, " ", step_, " of ", started.total, ": ",
                     unfinished);
          }
          done = true;
        }
      }
      if (!done) continue;
    }
    // A period (an epoch) ended, or the run did inside one.
    if (!unit.close_period()) continue;
    if (stopped_by != 0 || !stop_rule.empty() || !unfinished.empty())
      break;  // no evaluation after a stop
    if (config_.eval_every == 0 && converged(unit.evaluate("epoch", run_watch))) break;
    if (config_.checkpoint_every == 0) checkpoint();
  }
  drain_vote();
  if (regroup_) {
    // Not an end: the elastic driver commits this step and carries on in the next round.
    regroup_ = false;
    if (timeline_.enabled()) write_timeline();
    RunOutcome out;
    out.step = step_;
    out.regroup = true;
    out.leaving = leaving_;
    leaving_ = false;
    return out;
  }
  switch (unit.final_checkpoint()) {
    case ProgressUnit::FinalCheckpoint::unless_saved:
      // Whatever checkpoint_every says, the run's last step is saved.
      if (checkpointed_step != step_ && step_ != first_step) checkpoint();
      break;
    case ProgressUnit::FinalCheckpoint::always:
      checkpoint();
      break;
    case ProgressUnit::FinalCheckpoint::never:
      break;
  }
  if (timeline_.enabled()) write_timeline();
  strategy_->finish();
  Stopped stopped;
  stopped.how = !unfinished.empty()  ? StopHow::unfinished
                : stopped_by != 0    ? StopHow::signal
                : !stop_rule.empty() ? StopHow::converged
                                     : StopHow::done;
  stopped.rule = stop_rule;
  stopped.reason = !unfinished.empty() ? unfinished : stop_reason;
  stopped.signal = stopped_by;
  stopped.step = unit.outcome_step();
  stopped.total = started.total;
  stopped.run_seconds = run_watch.elapsed();
  if (unit.final_checkpoint() != ProgressUnit::FinalCheckpoint::never)
    stopped.checkpoint_dir = checkpoint_dir;
  stopped.updates = unit.updates();
  events.publish(stopped);
  return {stopped.step, stopped_by, stop_rule, unfinished};
}

}  // namespace braid::train
