// ZeRO stages 1 and 2 (Rajbhandari et al. 2019; DeepSpeed's "zero_stage") on the strategy
// seam: data parallelism whose optimizer state (stage 1) and gradients (stage 2) are
// sharded across the ranks.
//
// - Gradients are cut into DDP's buckets (buckets.h). Each bucket of L floats is cut into
//   N chunks of C = ceil(L / N) floats and rank r owns chunk r of every bucket, so every
//   rank owns about 1/N of every layer range and the work stays balanced.
// - When backward reports a bucket final, its reduce-scatter starts on the progress thread
//   (rank r receives the sum of chunk r) while backward goes on with earlier layers.
// - Each rank keeps the optimizer state of its chunks only: one optimizer per chunk, over
//   the pieces of the parameters inside it (an elementwise update does not care where a
//   parameter was cut). Adam's 8 bytes a parameter become 8/N.
// - After backward each chunk is averaged and updated in place in the parameters (which
//   every rank keeps whole, for forward), and the bucket is all-gathered so every rank
//   holds every update before the next forward. A reduce-scatter plus an all-gather move
//   what one allreduce moves: DDP's bytes.
// - Clipping takes the global norm as the sum over ranks of the chunks' squares; fp16's
//   loss scaling skips a step when any rank's chunks overflow (agreed over ranks).
// - Deterministic mode sums each chunk in rank order (an all-to-all and the fixed tree of
//   tree_sum.h, as DDP's deterministic exchange), so a run is bitwise DDP's deterministic
//   run (without clipping, whose norm is summed in another order).
// - Stage 2 keeps no flat gradient buffer: a bucket's gradients live in a slot of a small
//   window (ParamSet::set_grad_locator) from backward's first write to them until their
//   reduce-scatter is done, and the slot then serves a later bucket; a backward that
//   needs a slot while every slot is being reduced waits for the oldest. What a rank keeps
//   is its reduced chunks, 1/N of the gradients. With accumulation every micro-batch is
//   reduced (as DeepSpeed's stage 2), its chunks added up; deterministic mode is refused
//   there (its order sums a rank's micro-batches before the ranks').
// - Checkpoints hold the full logical layout: gather_for_checkpoint() gathers every
//   chunk's state to rank 0, and loading takes each rank's chunks from the full state.
//
// The last chunk of a bucket is padded up to C. Its reduce-scatter reads the C - L % C
// floats just above the bucket (gradients already final; a read only) and its all-gather
// writes the parameters there with the last rank's values, which are already this step's:
// buckets all-gather in order, the one above first, one at a time. The flat buffers get N
// floats of tail for the first bucket's pad.
//
// Uneven shares of a global batch (ZeroOptions::global_batch) weight each rank's gradient
// by its share in the loss gradient's scale (share_weight.h), as DDP's.
// LARS and LAMB scale each parameter by its whole norm, which no chunk sees: refused.
// Nothing is allocated per step.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "comm/progress_engine.h"
#include "parallel/data_parallel.h"

namespace braid::comm {
class Group;
}

namespace braid::parallel {

// The bucket sizes, SyncBatchNorm's reducer, uneven shares and the codec as DDP's
// (data_parallel.h). A codec reduce-scatters natively where it can (the casts) and else
// runs its allreduce and keeps this rank's chunk: the same bits as under DDP.
struct ZeroOptions : DataParallelOptions {
  int stage = 1;
};

class Zero : public DataParallel {
 public:
  Zero(std::unique_ptr<nn::Module> module, StepOptions options, std::shared_ptr<comm::Group> group,
       ZeroOptions zero = {});
  ~Zero() override;

  std::string_view name() const override { return "zero"; }
  double step(const data::Batch& batch, float lr, int64_t step) override;
  void sync_parameters() override;
  void gather_for_checkpoint() override;
  // Stage 3: every rank materializes the whole flat parameters (evaluation, checkpoints
  // and loading read and write them there) until the next step.
  void synchronize() override;
  void prepare_to_load() override;

  std::string_view optimizer_name() const override;
  optim::NamedTensors optimizer_state() const override;
  optim::NamedTensors optimizer_state_layout() const override;
  // Elastic training (zero_shard.cpp): this rank's chunks of every bucket are its shard.
  bool shards_state() const override { return true; }
  void cut_shard(StateShard& into) const override;
  void pass_shard_on(const StateShard& mine, StateShard& from_left) override;
  void finish_passing_shard(bool quietly) override;
  void load_optimizer_state(const optim::NamedTensors& state) override;

  // One bucket and this rank's chunk of it.
  struct Bucket {
    int64_t begin = 0, end = 0;  // floats of the flat buffers
    int64_t chunk = 0;           // C: floats per rank's chunk, the last one padded
    int64_t mine = 0;            // floats of this rank's chunk that are parameters
    int64_t shard_offset = 0;    // where this rank's chunk sits in the shard buffers
    std::unique_ptr<optim::Optimizer> optimizer;  // over this rank's chunk
    comm::Handle gathered;
    int64_t chunk_begin(int rank) const { return begin + rank * chunk; }
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Floats of optimizer-sized state this rank keeps per state buffer (its chunks, padded).
  int64_t shard_size() const { return shard_size_; }
  // Floats of parameters this rank holds: the flat buffer (stages 1 and 2), or its chunks
  // and the window of gathered buckets (stage 3).
  int64_t parameter_floats() const {
    if (zero_.stage < 3) return params_.size();
    return shard_size_ +
           static_cast<int64_t>(param_slots_.size()) * group_->size() * largest_chunk_;
  }
  // Bytes this rank sent in its last step, counting each reduce-scatter and all-gather as
  // a ring sends them ((N - 1) of a bucket's N chunks): stage 3's gathers for forward and
  // backward (and again after an eviction) included.
  double bytes_sent_last_step() const { return bytes_sent_; }
  // Stage 2: floats of the gradient window's slots (stage 1: 0).
  int64_t window_floats() const { return static_cast<int64_t>(slots_.size()) * slot_floats(); }

 private:
  void make_buckets();
  void on_ready(int64_t begin, int64_t end) override;
  void start_bucket(size_t i) override { start_reduce(i); }
  void before_micro(int p) override { first_micro_ = p == 0; }
  void after_micro(int p) override;
  // The bucket's gradients (stage 1: the flat buffer at its start; stage 2: its slot),
  // N chunks of C floats, the pad past its end included, and where its chunk's sum lands.
  float* bucket_grads(const Bucket& b);
  float* bucket_sum(const Bucket& b);
  // Stage 2: parameter id's gradient, in its bucket's slot (taken at the first ask).
  float* grad_in_slot(size_t id);
  size_t take_slot();
  int64_t slot_floats() const;
  // Stage 3: parameter id in its bucket's gathered slot (or the materialized copy).
  float* param_in_window(size_t id);
  void gather_bucket(size_t i, bool wait);
  size_t take_param_slot();
  void drop_window();                         // waits for the gathers, frees every slot
  void prefetch(int64_t begin, int64_t end);  // forward's announcement (about_to_use)
  void materialize();                         // every rank: the whole parameters in full_
  void scatter_from_full();                   // this rank's chunks of full_ into master_
  // Waits for bucket i's reduce-scatter and, under stage 2, adds its sum into the reduced
  // chunks (the first micro-batch's lands there directly) and frees its slot.
  void finish_reduce(size_t i);
  void start_reduce(size_t index);
  void update(Bucket& b, float lr);
  void start_gather(Bucket& b);
  // Whether any rank's reduced chunks hold an inf or NaN (collective).
  bool overflow_anywhere();
  // The clip factor from the global norm of the reduced gradients (collective).
  float clip_factor();

  ZeroOptions zero_;
  std::vector<Bucket> buckets_;
  int64_t shard_size_ = 0;
  Tensor reduced_;            // this rank's reduced chunks, bucket after bucket (gradients)
  std::vector<Tensor> wire_;  // the codec's buffers
  // Stage 2's window: slots of N (N + 1 with accumulation) x the largest chunk, each lent
  // to one bucket.
  struct Slot {
    Tensor memory;
    int64_t bucket = -1;
  };
  std::vector<Slot> slots_;
  std::vector<int64_t> slot_of_bucket_;  // -1: none
  std::vector<size_t> bucket_of_param_;
  std::deque<size_t> in_flight_;  // buckets whose reduce-scatter runs, oldest first
  int64_t largest_chunk_ = 0;
  bool first_micro_ = true;  // stage 2: this micro-batch's sums replace the reduced chunks
  // Stage 3: this rank's chunks of the parameters (the fp32 master weights the optimizer
  // updates), a window of gathered buckets, and the whole parameters while materialized.
  static constexpr size_t kParamSlots = 4;
  struct ParamSlot {
    Tensor memory;
    int64_t bucket = -1;
    uint64_t last_use = 0;
    comm::Handle gathered{};
  };
  Tensor master_;
  std::vector<ParamSlot> param_slots_;
  std::vector<int64_t> param_slot_of_bucket_;  // -1: not gathered
  uint64_t use_clock_ = 0;
  double bytes_sent_ = 0;   // this step's, as a ring sends them
  double gather_wait_ = 0;  // stage 3: seconds forward and backward waited for gathers
  void count_sent(const Bucket& b) {
    bytes_sent_ += static_cast<double>(b.chunk) * sizeof(float) * (group_->size() - 1);
  }
  Tensor full_;
  optim::NamedTensors gathered_state_;  // rank 0, after gather_for_checkpoint()
  // The shard passed on at the last commit, while it is on the wire (zero_shard.cpp).
  struct Passing {
    comm::Handle handle;
    std::vector<uint8_t> header, left_header;
    StateShard* into = nullptr;  // null: none under way
  } passing_;
};

}  // namespace braid::parallel
