// ProgressUnit: what one turn of Trainer::run's loop does, which differs by strategy. The
// loop (trainer_run.cpp) owns what every run shares: events and their observers, the
// evaluation that may converge, checkpoints every checkpoint_every units, the end at the
// run's total or stop_at_step, stop requests, announced stops, the final checkpoint and
// Stopped. A unit owns the work and its figures:
//
//   step    an optimizer step on the next batch, epochs as periods (trainer_step_unit.cpp)
//   round   a round of federated averaging on a parameter-server worker (trainer_fedavg.cpp)
//   update  one poll of a parameter-server evaluator: an evaluation once the servers applied
//           enough updates (trainer_evaluator.cpp)
//
// A unit works on its Trainer's state (a friend): step_ counts the units reached. Built
// and called on the trainer's thread, for one run() only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/timer.h"
#include "train/run_events.h"

namespace braid::train {

class Trainer;

class ProgressUnit {
 public:
  // What advance() did.
  enum class Advance {
    unit,        // a unit of progress
    period_end,  // no unit: a period (the step unit's epoch) ran out of data; go on
    over,        // nothing is left to do
  };
  enum class FinalCheckpoint {
    unless_saved,  // unless the run saved this step already, or took no step
    always,
    never,  // this rank keeps no model of its own (the evaluator)
  };

  virtual ~ProgressUnit() = default;

  // The run's facts; a unit logs its own announcement, as each always did.
  virtual RunStarted start() = 0;
  // metrics.jsonl's file name under config.out, or null where this rank writes no outputs.
  virtual const char* metrics_file() const = 0;
  // The run reached its end before it started (a resumed run at its total): no unit runs.
  virtual bool already_done() { return false; }
  virtual Advance advance() = 0;
  // The logged window when one ends with the last unit (it then starts a new one).
  virtual std::optional<StepDone> report(const Stopwatch& run) = 0;
  // Whether to evaluate after the last unit.
  virtual bool eval_due() const = 0;
  // Null where this rank does not evaluate. `when`: "step", "epoch" (a period's end); `run`
  // times the run (Evaluated::run_seconds).
  virtual std::optional<Evaluated> evaluate(const char* when, const Stopwatch& run) = 0;
  // Whether a stop rule may decide on this evaluation, and whether a decision ends the run
  // (the evaluator decides once, then scores on until the workers are gone).
  virtual bool may_decide() const { return true; }
  virtual bool ends_on_convergence() const { return true; }
  // Ends the period after its last unit or a stop. False: this unit has no periods; true:
  // the loop evaluates (eval_every 0) and checkpoints (checkpoint_every 0) there.
  virtual bool close_period() { return false; }
  // Whether the last unit reached the run's total or stop_at_step.
  virtual bool reached_end() const = 0;
  // Whether stop requests (SIGINT/SIGTERM), checkpoint_every and announced stops apply.
  virtual bool stoppable() const { return true; }
  // Why an announced stop leaves the run unfinished; empty: converged.
  virtual std::string unfinished_reason() const = 0;
  virtual FinalCheckpoint final_checkpoint() const { return FinalCheckpoint::unless_saved; }
  // The step RunOutcome reports, and the evaluator's updates for Stopped.
  virtual int64_t outcome_step() const = 0;
  virtual std::optional<int64_t> updates() const { return std::nullopt; }
};

std::unique_ptr<ProgressUnit> make_step_unit(Trainer& trainer, int64_t stop_at_step);
std::unique_ptr<ProgressUnit> make_fedavg_round_unit(Trainer& trainer, int64_t stop_at_round);
std::unique_ptr<ProgressUnit> make_evaluator_poll_unit(Trainer& trainer);

}  // namespace braid::train
