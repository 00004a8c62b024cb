// StopRules: a run's convergence decisions (the stop.* keys), taken on its evaluations.
//
//   stop.target          the metric reached the target: accuracy >= target, loss <= target
//   stop.patience        P evaluations in a row without improving on the best so far
//                        (the first evaluation sets the best; improving means strictly)
//   stop.min_rel_change  |loss - previous loss| / previous loss < threshold, the losses of
//                        two consecutive evaluations
//
// stop.metric picks what target and patience watch (auto: accuracy for classification,
// loss for a language model); min_rel_change always watches the loss. The model's own
// evaluation counts, not the weight average's.
//
// Pure: it sees results and steps and says when and why to stop; the trainer carries the
// decision out. Invariant (the trainer relies on it so that ranks agree without a
// message): observe() is a function of the config, the state and the results alone, so
// ranks that observe the same bits decide alike at the same evaluation. The state (best,
// evaluations since it, previous loss) is part of the checkpoint, so a resumed run keeps
// counting where the interrupted one was. Not thread-safe; copyable.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "train/config.h"
#include "train/loss_setup.h"
#include "train/model_spec.h"

namespace braid::train {

struct EvalResult;  // trainer.h

struct StopDecision {
  std::string rule;    // the key of the rule that fired: "stop.target", "stop.patience", ...
  std::string reason;  // one line: "stop.target: accuracy 0.9012 >= 0.9 at step 940"
};

class StopRules {
 public:
  // Throws braid::Error naming the key when the rules do not fit the task: an accuracy
  // for a language model, an accuracy target above 1, an unknown metric, a negative value.
  // `loss`: what the training loss makes of the model (loss_setup.h); a regression loss is
  // watched by its loss (auto), mse or mae, never an accuracy.
  StopRules(const TrainConfig::StopRules& config, Task task,
            LossTask loss = LossTask::classification);

  bool enabled() const;                                  // any rule set
  const std::string& metric() const { return metric_; }  // "accuracy", "loss", "mse", "mae"

  // Records the evaluation made after `step`; returns the rule it fires, if any. When
  // several fire at once, the first of target, patience, min_rel_change.
  std::optional<StopDecision> observe(const EvalResult& result, int64_t step);

  // {"metric", "best", "best_step", "evals_without_improvement", "previous_loss"}; a value
  // not yet seen is null.
  nlohmann::json state() const;
  // Restores state(). Null (a checkpoint older than the rules) starts afresh; a state kept
  // for another metric keeps the previous loss and starts the best afresh. A malformed state
  // is an Error naming `file` and the field.
  void load(const nlohmann::json& state, const std::string& file);

 private:
  bool improves(double value) const;

  TrainConfig::StopRules config_;
  std::string metric_;
  std::optional<double> best_;
  int64_t best_step_ = 0;
  int64_t evals_without_improvement_ = 0;
  std::optional<double> previous_loss_;
};

}  // namespace braid::train
