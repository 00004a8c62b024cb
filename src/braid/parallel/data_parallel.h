// What every data-parallel strategy over one group shares (DDP, local SGD, ZeRO 1-3): the
// group and its progress thread, the gradient reducer (gradient_reducer.h) fed by
// backward's ready ranges, the micro-batch loop with deterministic mode's tree sum and
// uneven shares' weight, SyncBatchNorm's reductions on the progress thread, buffers
// broadcast from rank 0, sums over ranks, and the codec's per-step report. A strategy
// derives from it and says where a bucket's floats are (start_bucket) and what it does
// with the reduced gradients.
//
// Life cycle: the derived constructor declares and builds the parameters, then calls
// make_reducer() (before the engine: the codec's shared buffers are allocated over the
// group) and start_engine(); its destructor calls stop_engine() first, so no queued
// operation outlives the buffers it reads.
#pragma once

#include <memory>

#include "comm/progress_engine.h"
#include "parallel/gradient_reducer.h"
#include "parallel/group_stats_reducer.h"
#include "parallel/micro_batches.h"
#include "parallel/strategy.h"
#include "parallel/tree_sum.h"

namespace braid::comm {
class Group;
}

namespace braid::parallel {

// The options DDP and ZeRO share.
struct DataParallelOptions {
  size_t bucket_bytes = size_t{25} << 20;
  size_t first_bucket_bytes = size_t{1} << 20;
  // SyncBatchNorm: the reducer the model's BatchNorm layers were built with, over this
  // group; its reductions then run on the progress thread, in order with the buckets.
  std::shared_ptr<GroupStatsReducer> batchnorm_reducer;
  // > 0: the samples of a step over every rank, which the ranks share unevenly where the
  // world does not divide it (data::batch_share): step() then takes batches of this rank's
  // share and weights its gradient by it. 0: every rank's batch counts alike.
  int64_t global_batch = 0;
  // How gradients cross the wire (codec.h): none (fp32), bf16, fp16, int8, sign, topk,
  // powersgd, onebit_adam.
  CodecConfig codec;
  // DDP: priority scheduling of pieces (gradient_reducer.h) and each bucket's update in the
  // next forward, just before its layers (ByteScheduler).
  bool priority = false;
  size_t partition_bytes = 0;  // 0: tuned on the first steps (ddp; partition_tuner.h)
};

class DataParallel : public Strategy {
 public:
  ~DataParallel() override;

  void sum_over_ranks(double* values, size_t count, const char* what) override;
  void start_sum_over_ranks(double* values, size_t count, const char* what) override;
  void finish_sum_over_ranks() override;
  int rank() const override;
  int world_size() const override;
  const CodecReport& last_codec_report() const override { return codec_report_; }

  const GradientReducer& reducer() const { return *reducer_; }

 protected:
  DataParallel(std::unique_ptr<nn::Module> module, StepOptions options,
               std::shared_ptr<comm::Group> group, DataParallelOptions common);

  // After the parameters are laid out: cuts the buckets and sizes the codec, whose wire
  // buffers come from `wire` (collective when shared).
  void make_reducer(ReducerOptions options, const WireAllocator& wire);
  // Starts the progress thread, hands it SyncBatchNorm's reductions and the reducer, and
  // listens to backward's ready ranges.
  void start_engine();
  void stop_engine();
  // Deterministic mode's sum over micro-batches (tree_sum.h), where the strategy
  // accumulates them before the ranks' sum.
  void use_micro_tree() {
    if (options_.deterministic && options_.accumulate_steps > 1)
      micro_sum_ = TreeSum(params_.size(), static_cast<int>(options_.accumulate_steps));
  }

  // Zeroes the gradients, then forward and backward of each micro-batch of `batch`. The
  // last one's backward starts the buckets (every one's, with `every_micro`); deterministic
  // mode sums them in the fixed tree. Returns the mean loss.
  double run_micro_batches(const data::Batch& batch, int64_t step, bool every_micro);
  // Hooks around each micro-batch p of run_micro_batches (ZeRO stage 2's window).
  virtual void before_micro(int p) { (void)p; }
  virtual void after_micro(int p) { (void)p; }
  // After micro-batch p's forward, before its backward writes the gradients (DDP's deferred
  // updates are applied by then).
  virtual void before_backward(int p) { (void)p; }
  // Bucket i is complete: start its exchange.
  virtual void start_bucket(size_t i) = 0;
  // Backward reports [begin, end) final (ZeRO stage 3 also prefetches there).
  virtual void on_ready(int64_t begin, int64_t end);
  // The codec's numbers for this step, into last_codec_report() and the timeline.
  void publish_codec_report();

  void broadcast_buffers();
  // 1 / the number of terms in each reduced gradient (ranks, or ranks x micro-batches in
  // deterministic mode).
  float average_factor() const;

  comm::ProgressEngine& engine() { return *engine_; }
  comm::Group& group() { return *group_; }
  MicroBatches& micro_batches() { return micro_; }
  // This rank's gradient weight (share_weight.h): 1 unless the shares are uneven.
  float share_weight() const { return weight_; }

  std::shared_ptr<comm::Group> group_;
  DataParallelOptions common_;
  std::unique_ptr<GradientReducer> reducer_;
  MicroBatches micro_;
  TreeSum micro_sum_;         // deterministic mode's sum over micro-batches
  float weight_ = 1.0f;       // share_weight.h
  bool communicate_ = false;  // this backward is one whose buckets go out
  CodecReport codec_report_;
  comm::Handle pending_sum_;  // start_sum_over_ranks's
  std::unique_ptr<comm::ProgressEngine> engine_;
};

}  // namespace braid::parallel
