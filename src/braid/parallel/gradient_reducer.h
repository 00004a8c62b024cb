// The one gradient path of the data-parallel strategies (docs/ARCHITECTURE.md, "Gradient
// reducer and codecs"): DDP and ZeRO 1-3 (and local SGD's DDP steps) cut their gradients
// into buckets here, start each bucket's exchange on the progress thread as backward
// finishes it, and wait for each in turn before its update.
//
// - Buckets: whole parameters in reverse layer order (buckets.h). In reduce-scatter mode
//   (ZeRO) a bucket of L floats is cut into N chunks of C = ceil(L / N) and rank r receives
//   the sum of chunk r.
// - Each bucket's exchange is a codec's (codec.h): the fp32 sum by default, bf16/fp16
//   casts, or a compressing codec with error feedback. The codec runs on the progress
//   thread as one submitted task per bucket, so it may use any collectives.
// - Deterministic mode (fp32 only) sums every bucket in rank order: the ranks exchange
//   their shares with an all-to-all, each adds the N copies of its share in the fixed tree
//   of tree_sum.h, and (allreduce mode) an all-gather hands the sums round. N ranks then
//   give the bits of one process accumulating N micro-batches.
// - The reducer counts what each bucket still waits for from backward (arm, on_ready), so
//   a strategy only says where a bucket's floats are when it starts.
// - Priority scheduling (ByteScheduler, Peng et al. SOSP 2019), fp32 only: the step's
//   exchange runs as one task on the progress thread that cuts buckets into pieces of at
//   most partition_bytes and sends, among the pieces every rank has ready, the input side's
//   first (the next forward needs them first), so a bucket finished late overtakes queued
//   ones. Every rank must pick the same piece without a round trip of its own: each piece
//   carries one float per bucket, 1 where this rank's bucket is ready, and after its sum
//   every rank knows which buckets are ready everywhere. A piece is chosen only from those
//   (the highest bucket first); when none is, the first unsent bucket in backward's order,
//   which every rank will have. The first piece of a step is always bucket 0's. Sums are
//   per float as without pieces (bitwise FIFO's in deterministic mode; at 2 ranks always).
// Nothing is allocated per step. Not thread-safe: the compute thread calls it; the tasks it
// submits touch only their bucket's floats and the codec.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/progress_engine.h"
#include "core/timeline.h"
#include "nn/params.h"
#include "parallel/buckets.h"
#include "parallel/codec.h"

namespace braid::parallel {

struct ReducerOptions {
  size_t bucket_bytes = size_t{25} << 20;
  size_t first_bucket_bytes = size_t{1} << 20;
  bool reduce_scatter = false;  // ZeRO: rank r receives chunk r of each bucket's sum
  bool deterministic = false;   // rank-ordered sums (needs the fp32 codec)
  CodecConfig codec;            // how buckets cross the wire
  // Only parameters [first_param, end_param) (a pipeline stage's): buckets cover their range.
  size_t first_param = 0, end_param = SIZE_MAX;
  // Priority scheduling of pieces of at most partition_bytes (fp32 codec only).
  bool priority = false;
  size_t partition_bytes = size_t{4} << 20;
};

class GradientReducer {
 public:
  struct Bucket {
    int64_t begin = 0, end = 0;  // floats of the flat buffers
    int64_t chunk = 0;           // reduce-scatter: C, floats per rank's chunk (last padded)
    int64_t pending = 0;         // floats not yet reported final in this backward
    comm::Handle handle;
    int64_t size() const { return end - begin; }
    int64_t chunk_begin(int rank) const { return begin + rank * chunk; }
  };

  // Cuts `params` (declared and laid out) into buckets for a group of `group`'s size; the
  // exchanges run over `group`, which must be driven by the engine given to use_engine().
  GradientReducer(const nn::ParamSet& params, std::shared_ptr<comm::Group> group,
                  ReducerOptions options);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Sizes the codec's state. `wire` allocates what the codec sends (shared memory or
  // private); collective when it is: every rank calls this at the same point, on a thread
  // that may drive the group (before the engine exists, or inside an engine task).
  void prepare(const WireAllocator& wire);
  void use_engine(comm::ProgressEngine* engine) { engine_ = engine; }

  std::vector<Bucket>& buckets() { return buckets_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const GradientCodec& codec() const { return *codec_; }
  // The optimizer's state was loaded (codec.h's restore); no bucket may be in flight.
  void restore_codec(const optim::NamedTensors& optimizer_state) {
    codec_->restore(optimizer_state);
  }
  const ReducerOptions& options() const { return options_; }
  // The largest chunk over buckets (reduce-scatter), and the largest bucket.
  int64_t largest_chunk() const { return largest_chunk_; }

  // A backward whose buckets go out begins (optimizer step `step`): every bucket pending.
  void arm(int64_t step);
  // Backward reports [begin, end) final; start(i) is called for each bucket it completes.
  template <typename Start>
  void on_ready(int64_t begin, int64_t end, Start&& start) {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      Bucket& b = buckets_[i];
      const int64_t lo = std::max(b.begin, begin), hi = std::min(b.end, end);
      if (lo >= hi) continue;
      b.pending -= hi - lo;
      if (b.pending == 0) start(i);
    }
  }
  // Starts bucket i's exchange. Allreduce mode: `data` holds its L floats and receives the
  // sum in place. Reduce-scatter mode: `data` holds N x C floats (the bucket, then zeros or
  // the floats above it: read only) and `sum` receives chunk rank's C floats.
  void start(size_t i, float* data, float* sum = nullptr);
  // Waits for bucket i, recording its communication and the wait into `timeline` (may be
  // null). Returns the seconds the caller waited.
  double wait(size_t i, Timeline* timeline);
  // What the codec sent since the last call (for metrics and the timeline).
  CodecReport take_report();
  // Priority mode: the buckets of the last step's pieces in the order they were sent.
  std::vector<int> last_order() const;
  // Priority mode: pieces of at most `bytes` from the next step on (between steps; the
  // partition tuner's choice, partition_tuner.h). The same on every rank.
  void set_partition_bytes(size_t bytes);
  size_t partition_bytes() const { return options_.partition_bytes; }
  // The largest bucket, in floats.
  int64_t largest_bucket() const { return largest_bucket_; }
  // Priority mode: stops a step's exchange that waits for a bucket backward will not finish
  // (the strategy is going away after an error); its handle then fails.
  void abort();

 private:
  void ordered_allreduce(comm::Group& g, float* data, int64_t len);
  void zero_gaps(size_t i, float* data) const;
  void cut_pieces();
  // Priority mode: the step's whole exchange, on the progress thread.
  void run_pieces(comm::Group& g);
  struct Piece {
    size_t bucket = 0;
    int64_t offset = 0, size = 0;  // floats, from the bucket's first
  };
  void ordered_reduce_scatter(comm::Group& g, const Bucket& b, const float* data, float* sum);

  std::shared_ptr<comm::Group> group_;
  ReducerOptions options_;
  std::unique_ptr<GradientCodec> codec_;
  std::vector<Bucket> buckets_;
  std::vector<BucketLayout> layouts_;
  std::vector<std::vector<FloatRange>> gaps_;  // per bucket: floats between its parameters
  int64_t largest_chunk_ = 0;
  int64_t largest_bucket_ = 0;
  int64_t step_ = 0;
  std::vector<float> send_, recv_;  // deterministic mode's exchange
  comm::ProgressEngine* engine_ = nullptr;
  // Priority mode. The compute thread marks buckets ready (start) and waits for them
  // (wait); the progress thread's task sends the pieces and marks buckets done.
  std::vector<Piece> pieces_;
  std::vector<size_t> first_piece_;  // per bucket, and one past the last bucket's
  std::vector<float> piece_buffer_;  // a piece and the readiness floats
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<float*> data_;        // guarded by mu_
  std::vector<char> ready_, done_;  // guarded by mu_
  std::vector<int> order_;          // guarded by mu_
  bool aborted_ = false;            // guarded by mu_
  comm::Handle pieces_handle_;
  CodecReport pieces_report_;  // written by the task, read after its buckets were waited for
};

}  // namespace braid::parallel
