// The one-process strategy: forward, loss, backward and update, with no communication.
// Without clipping, each range's update runs the moment backward reports it final, while
// its gradient is still in cache (the same bits as one update after backward: updates are
// per parameter). Clipping needs the global norm first, so it updates after backward.
// Accumulation over micro-batches adds their gradients before the one update; in
// deterministic mode each micro-batch's gradient is summed in order in a buffer of its own,
// as a distributed run sums ranks, so an N-rank deterministic run with the same global
// batch gives the same bits.
#pragma once

#include <vector>

#include "parallel/micro_batches.h"
#include "parallel/strategy.h"
#include "parallel/tree_sum.h"

namespace braid::parallel {

class SingleProcess : public Strategy {
 public:
  SingleProcess(std::unique_ptr<nn::Module> module, StepOptions options);

  std::string_view name() const override { return "single"; }
  double step(const data::Batch& batch, float lr, int64_t step) override;

 private:
  MicroBatches micro_;
  TreeSum micro_sum_;        // deterministic accumulation (tree_sum.h)
  bool update_now_ = false;  // the listener updates (the last micro-batch's backward)
  float lr_ = 0;
  double update_seconds_ = 0;
};

}  // namespace braid::parallel
