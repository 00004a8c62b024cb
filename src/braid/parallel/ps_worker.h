// A parameter-server worker (strategy "ps"): each step pulls every server's key range into
// its parameter buffer, runs forward and backward on its batch, and pushes each range of
// the gradient to its server, which applies it under the job's consistency rule
// (ps_shard.h). The worker holds no optimizer state that matters: the servers run the
// optimizer (the strategy's own optimizer object is never stepped).
//
// Worker 0 sends each server the initial parameters of its range at construction (every
// worker builds the model from the same seed, so all start equal anyway). The workers'
// own group (split from the world: servers take no part) carries sums over ranks
// (evaluation tallies, stop votes). finish() tells every server this worker is done; the
// destructor does it if the caller did not.
//
// This first version pulls every range before forward and pushes after backward; pulling
// the first layers first and pushing a range as soon as backward finishes it (overlap)
// come next. One thread drives the world group: the rank's compute thread.
#pragma once

#include <memory>
#include <vector>

#include "comm/group.h"
#include "parallel/micro_batches.h"
#include "parallel/ps_protocol.h"
#include "parallel/strategy.h"

namespace braid::parallel {

class PsWorker : public Strategy {
 public:
  PsWorker(std::unique_ptr<nn::Module> module, StepOptions options,
           std::shared_ptr<comm::Group> world, PsLayout layout);
  ~PsWorker() override;

  std::string_view name() const override { return "ps"; }
  double step(const data::Batch& batch, float lr, int64_t step) override;
  // Pulls the servers' current parameters (sync mode: after `step` updates).
  void pull(int64_t step);
  // Pulls the parameters after the last step this worker took (sync mode: once every
  // worker's gradient of that step is applied), so evaluation and checkpoints see the
  // servers' model, not the one this worker computed its last step on.
  void synchronize() override { pull(next_step_); }
  void sum_over_ranks(double* values, size_t count, const char* what) override;
  void start_sum_over_ranks(double* values, size_t count, const char* what) override;
  void finish_sum_over_ranks() override;
  int rank() const override { return workers_->rank(); }
  int world_size() const override { return workers_->size(); }
  // Tells every server this worker trains no more (once).
  void finish();

  const std::vector<KeyRange>& ranges() const { return ranges_; }
  // The version of each server's range that the parameters hold now.
  const std::vector<int64_t>& versions() const { return versions_; }

 private:
  void push(float lr, int64_t step);
  void request(int server, const PsRequest& r);

  std::shared_ptr<comm::Group> world_;
  std::shared_ptr<comm::Group> workers_;
  PsLayout layout_;
  std::vector<KeyRange> ranges_;
  std::vector<int64_t> versions_;
  MicroBatches micro_;
  // start_sum_over_ranks's values, summed (blocking) in finish_sum_over_ranks.
  double* pending_values_ = nullptr;
  size_t pending_count_ = 0;
  const char* pending_what_ = nullptr;
  bool finished_ = false;
  int64_t next_step_ = 0;  // the step after the last one taken
};

}  // namespace braid::parallel
