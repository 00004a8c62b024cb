// Top-k sparsification with Deep Gradient Compression's corrections (Lin, Han, Mao, Wang,
// Dally, "Deep Gradient Compression", ICLR 2018): each rank sends only the k entries of a
// bucket with the largest accumulated magnitude and keeps the rest for later steps.
//
// One bucket, one step, on every rank (g: this rank's gradient of the bucket):
//   1. Local clipping (clip_norm > 0; DGC section 3.2): g *= min(1, clip_norm / sqrt(N) /
//      ||g||), so that the N ranks' sum is bounded by clip_norm as a whole-batch clip would
//      bound it. Per bucket, not per model: a bucket is the unit the codec sees.
//   2. Momentum correction (m = topk_momentum > 0; DGC section 3.1): u = m u + g, v = v + u.
//      The velocity u is accumulated here, before sparsification, instead of in the
//      optimizer, so a delayed entry arrives with the momentum it would have had. With
//      m = 0: v = v + g, plain error-feedback top-k (Stich et al. 2018).
//   3. Selection: the k entries of largest |v| (nth_element over a reused index buffer,
//      ties to the lower index, NaN above every number so that it reaches the loss scaler).
//   4. Wire: this rank's k (index, value) pairs, as k int32 indices then k fp32 values
//      (2k 32-bit words), all-gathered: every rank sends (N-1) x 8k bytes, ring or direct.
//   5. Decode: grad := 0, then every rank adds rank 0's pairs, rank 1's, ... rank N-1's, so
//      every rank adds the same floats in the same order and holds the same bits.
//   6. Memory: v[i] = 0 for the sent i (the residual v is the error feedback), and with
//      momentum u[i] = 0 too (momentum-factor masking, DGC section 3.2: a sent entry's stale
//      momentum would otherwise push it again).
//
// k = topk_count(count, ...): max(1, round(fraction x count)), at most count; once
// k >= count every entry is sent and, with m = 0 and no clipping, the result is the fp32
// sum of the ranks' gradients added in rank order (0 + g_0 + g_1 + ... + g_{N-1}).
//
// Warm-up (DGC section 3.3): over the first W = warmup_steps steps the kept fraction falls
// exponentially from 25 % to r = topk_ratio:
//   fraction(t) = 0.25^(1 - t/W) x r^(t/W)  for 0 <= t < W (and r < 0.25),
//   fraction(t) = r                          for t >= W (or r >= 0.25).
// DGC's 75 %, 93.75 %, 98.4 %, 99.6 %, 99.9 % sparsity, one per epoch, is this curve sampled
// at t = 0, W/4, ... for r = 0.001; here it moves every step. Every rank computes k from
// the step alone, so the gathered pieces agree in size.
//
// The optimizer must not add momentum of its own on top (DGC moves it into the codec): the
// config layer requires the optimizer's momentum to be 0 when topk_momentum > 0.
//
// State per bucket: u (when m > 0) and v, count floats each, sized in prepare(); one index
// buffer and one gather buffer (N x 2 k_max words, from the reducer's wire allocator)
// shared by the buckets, which the progress thread runs one at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "parallel/codec.h"
#include "parallel/compressed_allreduce.h"

namespace braid::parallel {

// The kept fraction at `step` (see above); ratio in (0, 1], warmup_steps >= 0.
double topk_kept_fraction(double ratio, int64_t warmup_steps, int64_t step);
// Entries sent of a bucket of `count`: max(1, round(fraction x count)), at most count.
int64_t topk_count(int64_t count, double ratio, int64_t warmup_steps, int64_t step);
// order[0, k) := the indices of the k largest |v[i]| of v[0, n), ascending (ties to the lower
// index, NaN above every number). order must hold n entries.
void topk_largest(const float* v, int64_t n, int64_t k, int32_t* order);

class TopkCodec : public GradientCodec {
 public:
  // Checks topk_ratio in (0, 1], topk_momentum in [0, 1), clip_norm >= 0, warmup_steps >= 0.
  explicit TopkCodec(const CodecConfig& config);

  std::string_view name() const override { return "topk"; }
  void prepare(const std::vector<BucketLayout>& buckets, int ranks,
               const WireAllocator& wire) override;
  void allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count, int64_t step) override;

  // This rank's error-feedback memory v and velocity u of a bucket (u is empty when
  // momentum is 0): for tests and diagnostics, between steps.
  std::span<const float> residual(size_t bucket) const;
  std::span<const float> velocity(size_t bucket) const;

 private:
  struct Bucket {
    std::vector<float> velocity;  // u: empty without momentum
    std::vector<float> residual;  // v
    double residual_norm2 = 0;    // ||v||^2 after the last step, for the report
  };

  void clip(float* grad, int64_t count, int ranks) const;
  void accumulate(Bucket& b, const float* grad, int64_t count) const;
  const int32_t* select(const Bucket& b, int64_t count, int64_t k);
  void pack_and_mask(Bucket& b, const int32_t* chosen, int64_t k, int32_t* piece) const;
  void scatter_add(const int32_t* gathered, int ranks, int64_t k, float* grad, int64_t count) const;
  void report(Bucket& b, int64_t count, int64_t k, int ranks);

  double ratio_;
  float momentum_;
  float clip_norm_;
  int64_t warmup_steps_;
  int ranks_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<int32_t> order_;   // candidate indices, reordered by selection
  int32_t* gathered_ = nullptr;  // N pieces of 2 k_max words: the all-gather's buffer
  int64_t gathered_words_ = 0;
};

// Top-k as a fixed-size encoding (a parameter-server push, ps_push_codec.h): plain
// error-feedback top-k (Stich et al. 2018), memory += in, then the k = topk_count(n, ratio)
// entries of largest |memory| as k int32 indices and k fp32 values, which leave the memory.
// No momentum correction and no warm-up: the servers' optimizer keeps the momentum, and a
// push's size is fixed by its range alone.
class TopkEncoder : public ChunkEncoder {
 public:
  explicit TopkEncoder(double ratio);  // in (0, 1]
  size_t encoded_bytes(int64_t floats) const override;
  double encode(const float* in, float* memory, int64_t n, std::byte* out,
                const EncodeSite& site) const override;
  void decode(const std::byte* in, int64_t n, float* out) const override;
  void decode_add(const std::byte* in, int64_t n, float* sum) const override;

 private:
  int64_t kept(int64_t floats) const { return floats > 0 ? topk_count(floats, ratio_, 0, 0) : 0; }
  double ratio_;
};

}  // namespace braid::parallel
