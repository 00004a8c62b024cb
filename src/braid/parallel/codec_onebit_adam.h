// 1-bit Adam's codec (Tang et al. 2021, "1-bit Adam: Communication Efficient Large-Scale
// Training with Adam's Convergence Speed", arXiv:2102.02888; DeepSpeed's OnebitAdam and its
// compressed_allreduce). It works as a pair with the optimizer of the same name
// (optim/onebit_adam.h): after the warm-up, what this codec leaves in the bucket is the
// sum over ranks of each rank's compressed momentum, which the reducer divides by N and
// the optimizer takes as its momentum m.
//
// Warm-up, step < freeze_step (0-based; the optimizer's 1-based steps 1..freeze_step, which
// are plain Adam): an fp32 allreduce (sum) of the bucket. The codec also follows the
// momentum of the averaged gradient, m = beta1 m + (1 - beta1) (sum / N), with Adam's
// arithmetic and the reducer's division (a product with 1/N), so its m has the bits of
// Adam's exp_avg when the optimizer has no L2 weight decay.
//
// Compression, step >= freeze_step: each rank
//   1. forms its local momentum from its own gradient, m_local = beta1 m + (1 - beta1) g;
//   2. adds its error-feedback memory, c = m_local + e;
//   3. sends one bit per element, sign(c) (0 counts as +), and one fp32 scale per block of
//      kBlock floats, s = ||c||_2 / sqrt(kBlock) over the block, DeepSpeed's choice: the
//      decoded s sign(c) has c's L2 norm, so the momentum that the frozen variance divides
//      keeps its size (mean |c|, the least-squares scale, would shrink it; error feedback
//      corrects either over steps). Per block, not per bucket: a bucket spans layers whose
//      momenta differ by orders of magnitude, and one scale gave the small ones steps far
//      too large once their variance froze (a cnn went to NaN right after the freeze);
//   4. keeps e = c - s sign(c), what the encoding lost, for its next step.
// The exchange is one all-gather of every rank's scales and packed signs,
// ceil(n / kBlock) + ceil(n / 32) words each: fixed size, no second compression round
// (DeepSpeed's server stage), so the only error is the worker's, and it is fed back. Every
// rank decodes the N messages in rank order and sums them in fp32, so all ranks hold the
// same bits; m = sum / N (the averaged momentum, for the next step) and the bucket := sum.
// Wire bytes per rank and bucket: (N - 1) 4 (ceil(n / kBlock) + ceil(n / 32)); about 1/28 of
// an fp32 ring allreduce's 4 n with 2 ranks.
//
// Assumes the reducer divides the sum by the group size N (DDP without deterministic
// micro-batch sums) and that no step is skipped (a skipped step would leave the codec's m
// one step ahead of the optimizer's). The codec's m and e are not checkpointed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "parallel/codec.h"

namespace braid::parallel {

class OnebitAdamCodec : public GradientCodec {
 public:
  static constexpr int64_t kBlock = 256;  // floats sharing one scale (a multiple of 32)

  OnebitAdamCodec(int64_t freeze_step, float beta1);

  std::string_view name() const override { return "onebit_adam"; }
  void prepare(const std::vector<BucketLayout>& buckets, int ranks,
               const WireAllocator& wire) override;
  void allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count, int64_t step) override;

  // The averaged momentum and the error-feedback memory of a bucket (for tests, metrics).
  std::span<const float> momentum(size_t bucket) const;
  std::span<const float> error(size_t bucket) const;

 private:
  struct Bucket {
    int64_t offset = 0, size = 0;  // into momentum_ and error_
    int64_t blocks = 0;            // scales: one per kBlock floats
    uint32_t* wire = nullptr;      // N messages of `blocks` + `words` words: scales, then signs
    int64_t words = 0;             // ceil(size / 32)
    double error_sq = 0;           // ||e||^2 after its last step
  };
  void warm_up(comm::Group& g, Bucket& b, float* grad, int64_t count);
  void compress(comm::Group& g, Bucket& b, float* grad, int64_t count);

  int64_t freeze_step_;
  float beta1_;
  int ranks_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<float> momentum_, error_;  // every bucket's, back to back
};

}  // namespace braid::parallel
