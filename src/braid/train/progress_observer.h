// ProgressObserver: a run's events as the progress line a person watches (metrics.h's
// Progress): the window's figures redrawn in place, evaluations, a convergence decision and
// how the run ended as lines that stay. Tests and people's scripts grep these lines ("done: ",
// "converged (", "stopped by", "unfinished at step", "eval  step"), so their wording is kept.
#pragma once

#include <string>

#include "train/metrics.h"
#include "train/run_events.h"

namespace braid::train {

class ProgressObserver : public RunObserver {
 public:
  ProgressObserver() : progress_(true) {}

  void on_run_started(const RunStarted& e) override;
  void on_step_done(const StepDone& e) override;
  void on_evaluated(const Evaluated& e) override;
  void on_converged(const Converged& e) override;
  void on_stopped(const Stopped& e) override;

 private:
  Progress progress_;
  std::string unit_ = "step";
  int64_t total_ = 0;
  int64_t epochs_ = 0;
};

}  // namespace braid::train
