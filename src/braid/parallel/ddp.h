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
// - A bucket crosses the wire through the reducer's codec (gradient_reducer.h, codec.h):
//   fp32 by default; bf16/fp16 casts (rounded into a 16-bit buffer shared like the
//   gradients, summed in fp32 and rounded back, widened before the update); or a
//   compressing codec with error feedback. Not with deterministic mode (its exchange is
//   fp32).
// - Uneven shares of a global batch (DdpOptions::global_batch): each rank's gradient is
//   weighted by its share (share_weight.h) in the loss gradient's scale, so the reduced
//   gradient is the mean over the global batch; with equal shares the weight is 1.
// - Buffers (BatchNorm's running statistics) are broadcast from rank 0 before each step,
//   as PyTorch's broadcast_buffers.
// - Priority scheduling with partition_bytes 0: the partition is tuned on the first steps
//   (partition_tuner.h) and logged.
// Nothing is allocated per step. Errors from the progress thread (a dead or stalled peer,
// a mismatched call) surface from step() naming the bucket.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "comm/shared_buffer.h"
#include "core/timer.h"
#include "parallel/data_parallel.h"
#include "parallel/partition_tuner.h"

namespace braid::parallel {

struct DdpOptions : DataParallelOptions {
  // Gradients in memory every rank on the host maps (off: private memory, for tests).
  bool shared_gradients = true;
  // Parameters there too (strategies that average parameters: local SGD).
  bool shared_parameters = false;
};

class Ddp : public DataParallel {
 public:
  Ddp(std::unique_ptr<nn::Module> module, StepOptions options, std::shared_ptr<comm::Group> group,
      DdpOptions ddp = {});
  ~Ddp() override;

  std::string_view name() const override { return "ddp"; }
  double step(const data::Batch& batch, float lr, int64_t step) override;
  // The update waits for every bucket's allreduce (it is no longer fused into backward):
  // a rank lost mid-step leaves the parameters and optimizer state as they were.
  bool make_transactional(bool on = true) override {
    settle();
    transactional_ = on;
    return true;
  }
  void sync_parameters() override;
  void synchronize() override { settle(); }
  void gather_for_checkpoint() override { settle(); }
  void load_optimizer_state(const optim::NamedTensors& state) override;
  void settle() override;

  using Bucket = GradientReducer::Bucket;
  const std::vector<Bucket>& buckets() const { return reducer_->buckets(); }
  // The step's communication with no compute beside it: every bucket's allreduce started
  // at once, as a backward that took no time would, then waited for. Leaves the gradient
  // buffer reduced; the next step zeroes it. For the overlap figure of `braid bench train`.
  // Returns its seconds.
  double communicate_alone();
  // The partition tuner (priority scheduling, partition_bytes 0); null otherwise.
  const PartitionTuner* partition_tuner() const { return tuner_ ? &*tuner_ : nullptr; }

 protected:
  void start_bucket(size_t i) override;
  void before_backward(int p) override;

 private:
  // Priority scheduling: the next forward is about to read [begin, end): the buckets there
  // are waited for and updated first.
  void update_before_use(int64_t begin, int64_t end);
  void update_bucket(size_t i);
  // Measures the step that ended and sets the next step's partition (tuner_).
  void tune_partition();
  DdpOptions ddp_;
  comm::SharedBuffer shared_grads_;
  comm::SharedBuffer shared_params_;
  std::vector<comm::SharedBuffer> shared_wire_;  // the codec's, when the gradients are shared
  std::vector<std::shared_ptr<Buffer>> private_wire_;
  bool transactional_ = false;  // make_transactional(): no update fused into backward
  int64_t last_step_ = 0;       // communicate_alone() runs past a codec's warm-up
  // Priority scheduling: the last step's buckets not yet updated, and its rate.
  bool pending_ = false;
  float pending_lr_ = 0;
  std::vector<char> updated_;
  size_t updated_count_ = 0;
  // Priority scheduling with a partition tuned at run time, and the time since the last
  // step began.
  std::optional<PartitionTuner> tuner_;
  Stopwatch since_step_;
};

}  // namespace braid::parallel
