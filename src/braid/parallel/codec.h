// Gradient codecs: how a bucket of gradients crosses the wire (docs/ARCHITECTURE.md,
// "Gradient reducer and codecs"). PyTorch's communication hook, in braid's terms: the
// reducer (gradient_reducer.h) hands a codec one bucket at a time, on the progress thread,
// and the codec does whatever collectives it needs over the group and leaves the result
// in place. The shape of the exchange is the codec's: a 16-bit allreduce (casts), an
// all-to-all of quantised chunks, summed, re-quantised and all-gathered (int8, sign), an
// all-gather of (index, value) pairs (top-k), two small allreduces of low-rank factors
// (PowerSGD).
//
// Contract, for every codec:
// - Result: after allreduce(), every rank holds the same bits in grad[0, count): the sum
//   over the group's ranks of what each rank's gradient decodes to. Not the mean: the
//   reducer divides by the number of terms, as it does for fp32.
// - Error feedback: what a rank's encoding lost this step is kept (per bucket) and added to
//   its next step's gradient of that bucket before encoding, so the sum of decoded updates
//   over T steps tracks the sum of true gradients within a bound independent of T.
// - State: per bucket, sized once in prepare() (nothing allocated per step in the steady
//   state). A codec object serves one strategy's buckets of one group.
// - Threads: prepare() runs on the compute thread before the first step; allreduce() and
//   reduce_scatter() on the progress thread, one bucket at a time, in submission order;
//   take_report() on the compute thread after every bucket of the step was waited for.
// - Agreement: every rank makes the same calls in the same order (the collectives check).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "optim/optimizer.h"

namespace braid::comm {
class Group;
}

namespace braid::parallel {

// One parameter inside a bucket, for codecs that work per tensor (PowerSGD, which
// compresses matrices and leaves vectors alone).
struct CodecTensor {
  int64_t offset = 0;  // floats from the bucket's first float
  int64_t rows = 0;    // shape[0]
  int64_t cols = 0;    // numel / rows: 1 for a vector
};

struct BucketLayout {
  int64_t begin = 0, end = 0;        // floats of the flat gradient buffer
  std::vector<CodecTensor> tensors;  // by offset, covering [0, end - begin) up to alignment gaps
  int64_t size() const { return end - begin; }
};

// What a codec did since the last take_report(): for metrics and the timeline.
struct CodecReport {
  double wire_bytes = 0;   // bytes this rank sent
  double dense_bytes = 0;  // what an fp32 ring allreduce of the same buckets sends
  double error_norm = 0;   // L2 norm of the error-feedback memory over every bucket (0: none)
  double ratio() const { return wire_bytes > 0 ? dense_bytes / wire_bytes : 1.0; }
};

// Bytes an fp32 ring allreduce of `floats` sends from each of `ranks` ranks: 2 (N-1)/N x 4.
double dense_allreduce_bytes(int64_t floats, int ranks);

// Memory for what a codec puts on the wire, from the reducer: in memory every rank on the
// host maps when the gradients are (so a shared-memory collective reads peers' buffers in
// place), else private. Zeroed; lives as long as the reducer.
using WireAllocator = std::function<void*(size_t bytes)>;

class GradientCodec {
 public:
  virtual ~GradientCodec() = default;
  virtual std::string_view name() const = 0;

  // Sizes the per-bucket state for these buckets (index = bucket number) and a group of
  // `ranks`. Called once, before the first allreduce; on every rank alike (`wire` may be
  // collective).
  virtual void prepare(const std::vector<BucketLayout>& buckets, int ranks,
                       const WireAllocator& wire) = 0;

  // grad[0, count) of bucket `bucket` := the sum over ranks of the decoded contributions.
  // `step`: the optimizer step (0-based), for warm-ups and start iterations.
  virtual void allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count,
                         int64_t step) = 0;

  // For ZeRO: chunk_sum[0, chunk) := chunk g.rank() of that sum (its floats past `count`
  // zero), where grad[0, count) holds the bucket, which may be used as scratch. The floats
  // from count up to g.size() x chunk are ZeRO's (stage 1: the bucket above's gradients):
  // readable, but nothing they hold may reach chunk_sum's first count floats. The default
  // runs allreduce() over the count floats and copies the chunk out (the same bits as under
  // DDP); a codec with a cheaper native form overrides it.
  virtual void reduce_scatter(comm::Group& g, size_t bucket, float* grad, int64_t count,
                              float* chunk_sum, int64_t chunk, int64_t step);

  // Whether allreduce() is the plain fp32 sum: what deterministic mode's rank-ordered
  // exchange and priority scheduling's pieces do in its place, and what local SGD may sum
  // in place in the shared parameters.
  virtual bool plain_sum() const { return false; }

  // The optimizer's state was loaded (a checkpoint, a resumed or re-formed run), in the
  // layout of the flat buffer the buckets index. A codec that follows the optimizer's
  // moments takes them from it; its error-feedback memory starts again at zero.
  virtual void restore(const optim::NamedTensors& /*optimizer_state*/) {}

  // The numbers since the last call, then zeroed.
  CodecReport take_report();

 protected:
  CodecReport report_;
};

// The codecs by name and their knobs (the config's `compression` section).
struct CodecConfig {
  std::string name = "none";  // none, bf16, fp16, int8, sign, topk, powersgd, onebit_adam
  // int8: floats sharing one scale; stochastic rounding (unbiased) instead of nearest.
  int64_t int8_chunk = 256;
  bool stochastic_rounding = false;
  // sign: floats sharing one scale (a multiple of 32).
  int64_t sign_chunk = 32;  // train/config.h says why
  uint64_t seed = 0;        // stochastic rounding's stream (with the rank and the step)
  // topk (Deep Gradient Compression): the fraction of each bucket sent, the momentum the
  // codec accumulates in place of the optimizer's (momentum correction; 0: plain
  // error-feedback top-k), local clipping of each rank's gradient at clip_norm / sqrt(N)
  // (0: none), and a warm-up over `warmup_steps` during which the kept fraction falls
  // exponentially from 25 % to `topk_ratio` (DGC's 75 %, 93.75 %, ... sparsity).
  double topk_ratio = 0.01;
  float topk_momentum = 0.9f;
  float clip_norm = 0;
  int64_t warmup_steps = 0;
  // powersgd: the rank r of the factors; `start_iter` plain fp32 steps first; a matrix
  // whose compression rate (rows x cols) / ((rows + cols) r) is below
  // `min_compression_rate` is sent uncompressed, as are vectors.
  int powersgd_rank = 4;
  int64_t start_iter = 10;
  double min_compression_rate = 2.0;
  // onebit_adam: Adam's moments; plain Adam for `freeze_step` steps, then the variance is
  // frozen and the momentum crosses the wire as signs with a scale (error feedback); the
  // optimizer's beta2 and eps weigh each float's sign by the step it makes.
  int64_t freeze_step = 100;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// Throws braid::Error naming the codecs when `config.name` is not one.
std::unique_ptr<GradientCodec> make_codec(const CodecConfig& config);
// The names make_codec knows, for errors and help.
const std::vector<std::string>& codec_names();

}  // namespace braid::parallel
