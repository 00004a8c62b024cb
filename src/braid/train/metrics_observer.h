// MetricsObserver: a run's events as metrics.jsonl records (MetricsLog), one JSON object a
// line. The records and their keys are a format others read (tests, bench/*.sh, people's
// scripts), so they stay as they were when each loop wrote its own: "train" (and fp16's
// "loss_scale"), "eval" and "stop", with the keys of the run's unit (RunStarted::unit).
#pragma once

#include <string>

#include "train/metrics.h"
#include "train/run_events.h"

namespace braid::train {

class MetricsObserver : public RunObserver {
 public:
  // Appends to `path` (created if missing).
  explicit MetricsObserver(const std::string& path);

  void on_run_started(const RunStarted& e) override;
  void on_step_done(const StepDone& e) override;
  void on_evaluated(const Evaluated& e) override;
  void on_converged(const Converged& e) override;
  void on_membership_changed(const MembershipChanged& e) override;

 protected:
  // Every record goes through here (a subclass may add to each).
  virtual void emit(nlohmann::json record) { log_.write(record); }

 private:
  MetricsLog log_;
  std::string unit_ = "step";
};

}  // namespace braid::train
