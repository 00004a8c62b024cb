// DDP: synchronous data parallelism over allreduce, as torch.nn.parallel.
// DistributedDataParallel, on the strategy seam.
//
// - At start every rank checks that all hold the same model layout (a hash of every
//   parameter's name, shape and offset, allgathered: a different model is an error naming
//   both ranks at once, not a hang), then takes rank 0's parameters and buffers.
// - Gradients live in one flat buffer that is itself the communication buffer: in memory
//   every rank on the host maps (comm::allocate_shared), so the allreduce reads peers'
//   buffers in place. It is cut into buckets in reverse layer order, the first of 1 MiB,
//   the rest of bucket_bytes (PyTorch's 1 MiB and 25 MiB; a bucket_bytes below 1 MiB caps
//   the first too). When backward reports the last
//   range of a bucket final, the bucket's allreduce starts on the group's progress thread
//   while backward goes on with earlier layers.
// - After backward the compute thread waits for each bucket in order, averages it and,
//   without clipping, updates that bucket's parameters at once (the optimizer overlaps the
//   later buckets' communication). With clipping it waits for all, takes the global norm
//   of the reduced gradients and then updates.
// - Accumulation: micro-batches before the last communicate nothing.
// - Deterministic mode sums every bucket in rank order (ranks exchange their shares with
//   an all-to-all, each rank adds the N copies of its share in order 0, 1, ..., then an
//   allgather), so N ranks give the bits of one process accumulating N micro-batches.
// - comm_dtype bf16 or f16: each bucket is rounded into a 16-bit communication buffer (shared
//   like the gradients) as it becomes final and reduced there, half the bytes on the wire;
//   every addition is done in fp32 and rounded back (core/reduce.h), so with 2 ranks the
//   sum is rounded once. The result is widened back into the fp32 gradients before the
//   update. Not with deterministic mode (its exchange is fp32).
// - Uneven shares of a global batch (DdpOptions::global_batch): each rank's gradient is
//   weighted by its share (share_weight.h) in the loss gradient's scale, so the reduced
//   gradient is the mean over the global batch; with equal shares the weight is 1.
// - Buffers (BatchNorm's running statistics) are broadcast from rank 0 before each step,
//   as PyTorch's broadcast_buffers.
// Nothing is allocated per step. Errors from the progress thread (a dead or stalled peer,
// a mismatched call) surface from step() naming the bucket.
#pragma once

#include <memory>
#include <vector>

#include "comm/progress_engine.h"
#include "comm/shared_buffer.h"
#include "parallel/group_stats_reducer.h"
#include "parallel/micro_batches.h"
#include "parallel/strategy.h"
#include "parallel/tree_sum.h"

namespace braid::comm {
class Group;
}

namespace braid::parallel {

struct DdpOptions {
  size_t bucket_bytes = size_t{25} << 20;
  size_t first_bucket_bytes = size_t{1} << 20;
  // SyncBatchNorm: the reducer the model's BatchNorm layers were built with, over this
  // group; its reductions then run on the progress thread, in order with the buckets.
  std::shared_ptr<GroupStatsReducer> batchnorm_reducer;
  // Gradients in memory every rank on the host maps (off: private memory, for tests).
  bool shared_gradients = true;
  // Parameters there too (strategies that average parameters: local SGD).
  bool shared_parameters = false;
  // The gradients' type on the wire: f32, bf16 or f16.
  DType comm_dtype = DType::f32;
  // > 0: the samples of a step over every rank, which the ranks share unevenly where the
  // world does not divide it (data::batch_share): step() then takes batches of this rank's
  // share and weights its gradient by it. 0: every rank's batch counts alike.
  int64_t global_batch = 0;
};

class Ddp : public Strategy {
 public:
  Ddp(std::unique_ptr<nn::Module> module, StepOptions options, std::shared_ptr<comm::Group> group,
      DdpOptions ddp = {});
  ~Ddp() override;

  std::string_view name() const override { return "ddp"; }
  double step(const data::Batch& batch, float lr, int64_t step) override;
  // The update waits for every bucket's allreduce (it is no longer fused into backward):
  // a rank lost mid-step leaves the parameters and optimizer state as they were.
  bool make_transactional(bool on = true) override {
    transactional_ = on;
    return true;
  }
  void sync_parameters() override;
  void sum_over_ranks(double* values, size_t count, const char* what) override;
  void start_sum_over_ranks(double* values, size_t count, const char* what) override;
  void finish_sum_over_ranks() override;
  int rank() const override;
  int world_size() const override;

  struct Bucket {
    int64_t begin = 0, end = 0;  // floats of the flat gradient buffer
    int64_t pending = 0;         // floats not yet reported final in this backward
    comm::Handle handle;
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // The step's communication with no compute beside it: every bucket's allreduce started
  // at once, as a backward that took no time would, then waited for. Leaves the gradient
  // buffer reduced; the next step zeroes it. For the overlap figure of `braid bench train`.
  // Returns its seconds.
  double communicate_alone();

 protected:
  // For strategies built on DDP's group, progress thread and buffers (local SGD).
  comm::ProgressEngine& engine() { return *engine_; }
  comm::Group& group() { return *group_; }
  MicroBatches& micro_batches() { return micro_; }
  // This rank's gradient weight (share_weight.h): 1 unless the shares are uneven.
  float share_weight() const { return weight_; }

 private:
  void make_buckets();
  void on_ready(int64_t begin, int64_t end);
  void start_bucket(size_t index);
  void ordered_allreduce(comm::Group& g, Bucket& b);
  // comm_dtype 16-bit: the bucket's gradients rounded into comm_, and widened back.
  void narrow_bucket(const Bucket& b);
  void widen_bucket(const Bucket& b);
  void broadcast_buffers();

  std::shared_ptr<comm::Group> group_;
  DdpOptions ddp_;
  comm::SharedBuffer shared_grads_;
  comm::SharedBuffer shared_params_;
  // comm_dtype 16-bit: the buckets' communication buffer (the flat layout, 2 bytes a float).
  comm::SharedBuffer shared_comm_;
  std::vector<uint16_t> private_comm_;
  uint16_t* comm_ = nullptr;
  std::vector<Bucket> buckets_;
  MicroBatches micro_;
  float weight_ = 1.0f;             // share_weight.h
  bool communicate_ = false;        // this backward is the step's last: buckets go out
  std::vector<float> send_, recv_;  // deterministic mode's exchange
  bool transactional_ = false;      // make_transactional(): no update fused into backward
  TreeSum micro_sum_;               // deterministic mode's sum over micro-batches
  comm::Handle pending_sum_;        // start_sum_over_ranks's
  std::unique_ptr<comm::ProgressEngine> engine_;  // last: stopped before the rest goes
};

}  // namespace braid::parallel
