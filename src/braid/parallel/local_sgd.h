// Local SGD and post-local SGD: every rank takes optimizer steps on its own batches with
// no communication, and every `period` (H) steps the ranks replace their parameters by
// the average over ranks (Stich 2018, "Local SGD converges fast and communicates little";
// Lin et al. 2018, "Don't use large mini-batches, use local SGD"). Communication falls by
// a factor H against DDP, at the price of ranks drifting apart between averages.
//
// - Post-local SGD: the first `start_step` steps are synchronous DDP steps (gradients
//   averaged every step, bucketed and overlapped with backward), then local steps begin.
//   Lin et al. found this recovers DDP's accuracy where local SGD from the start loses some.
// - Each rank keeps its own optimizer state (momentum, Adam's moments) between averages,
//   as in the papers; BatchNorm's running statistics are averaged with the parameters.
// - The average is an allreduce of the flat parameter buffer, which lives in memory every
//   rank on the host maps, so it reads peers' parameters in place. Every rank ends it with
//   the same bits (every allreduce algorithm leaves identical results on all ranks).
// - Averaging at step t means after the local update of step t when (t + 1 - start_step)
//   is a multiple of H: a function of the global step, so a resumed run averages where an
//   uninterrupted one did.
// - synchronize() averages parameters, buffers and optimizer state at once: the trainer
//   calls it before it evaluates or saves, so what it evaluates and checkpoints is one
//   model (the checkpoint then resumes bitwise at this world size: every rank restarts
//   from the state all of them held). These extra averages are part of the run.
// - Uneven shares of a global batch (DdpOptions::global_batch): a local step is the rank's
//   own mean over its share, and the averages weight each rank by its share, w n_r / G
//   (share_weight.h), as federated averaging weights clients by their samples; so with
//   H = 1 and plain SGD a step is DDP's weighted one. Equal shares: the plain mean, bit for
//   bit. The DDP steps before start_step weight gradients as DDP does.
// - Averages go through a gradient reducer over the parameters (gradient_reducer.h), in
//   DDP's buckets. With the fp32 codec the shared parameters are summed in place; with a
//   compressing codec what crosses the wire is each rank's change since the last average
//   (its local steps' update), compressed with error feedback, and every rank adds the mean
//   change to the last average: the parameters stay identical on every rank.
// Accumulation over micro-batches works as under DDP; clipping applies to each rank's own
// gradient. Nothing is allocated per step.
#pragma once

#include <cstdint>
#include <memory>

#include "parallel/ddp.h"

namespace braid::parallel {

struct LocalSgdOptions {
  int period = 8;          // H: local steps between averages (1: every step)
  int64_t start_step = 0;  // the first local step; steps before are DDP steps (post-local SGD)
};

class LocalSgd : public Ddp {
 public:
  LocalSgd(std::unique_ptr<nn::Module> module, StepOptions options,
           std::shared_ptr<comm::Group> group, LocalSgdOptions local, DdpOptions ddp = {});

  std::string_view name() const override { return "local_sgd"; }
  double step(const data::Batch& batch, float lr, int64_t step) override;
  void synchronize() override;
  // Also moves a compressing codec's anchor to the parameters every rank now holds.
  void sync_parameters() override;
  // Elastic training: an average rewrites the parameters in place, so a rank lost inside one
  // leaves them half averaged; commits copy the state at the averages instead.
  bool make_transactional(bool on = true) override {
    (void)on;
    Ddp::make_transactional(false);
    return false;
  }
  bool replicas_agree(int64_t steps_done) const override {
    return steps_done <= local_.start_step || (steps_done - local_.start_step) % local_.period == 0;
  }

  // Parameter averages so far (from steps, not synchronize()).
  int64_t averages() const { return averages_; }
  const LocalSgdOptions& local_options() const { return local_; }

 private:
  double local_step(const data::Batch& batch, float lr, int64_t step);
  // Replaces the parameters and float buffers (and with `optimizer_state`, the optimizer's
  // float state) by their mean over ranks.
  void average(bool optimizer_state);

  // Sums the (weighted) floats of `values`, laid out as the parameters, over ranks in the
  // averager's buckets.
  void sum_parameters_over_ranks(float* values);

  LocalSgdOptions local_;
  int64_t averages_ = 0;
  std::unique_ptr<GradientReducer> averager_;
  // A compressing codec: the parameters at the last average, and this rank's change since.
  Tensor anchor_, change_;
  std::vector<Tensor> wire_;
};

}  // namespace braid::parallel
