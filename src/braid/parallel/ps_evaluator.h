// The evaluator of a parameter-server job (its last rank, PsLayout::evaluators): a strategy
// that never trains. synchronize() pulls the servers' current parameters (whatever step the
// workers are at), so the trainer's evaluate() scores the live model off the workers' path;
// announce_stop() stops every worker at its next step boundary (the servers answer their
// pulls with the stop); finish() tells the servers it is done, which it does once a pull
// shows no worker left. One thread drives the world group.
#pragma once

#include <memory>
#include <vector>

#include "comm/group.h"
#include "parallel/ps_protocol.h"
#include "parallel/strategy.h"

namespace braid::parallel {

class PsEvaluator : public Strategy {
 public:
  PsEvaluator(std::unique_ptr<nn::Module> module, StepOptions options,
              std::shared_ptr<comm::Group> world, PsLayout layout);
  ~PsEvaluator() override;

  std::string_view name() const override { return "ps-evaluator"; }
  // The evaluator takes no steps: braid::Error.
  double step(const data::Batch& batch, float lr, int64_t step) override;
  void synchronize() override;
  bool ranks_step_together() const override { return false; }
  void announce_stop(int64_t step) override;
  void finish();

  // From the last synchronize(): the fewest updates any server has applied, the workers
  // still training, and whether a stop was announced.
  int64_t version() const { return version_; }
  int64_t live_workers() const { return live_workers_; }
  bool stopped() const { return stop_at_ >= 0; }

 private:
  void request(int server, PsRequestKind kind, int64_t step);

  std::shared_ptr<comm::Group> world_;
  PsLayout layout_;
  std::vector<KeyRange> ranges_;
  std::vector<PsPullReply> replies_;
  int64_t version_ = 0;
  int64_t live_workers_ = 0;
  int64_t stop_at_ = -1;
  bool finished_ = false;
};

}  // namespace braid::parallel
