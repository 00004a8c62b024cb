// 1-bit Adam's codec (Tang et al. 2021, "1-bit Adam: Communication Efficient Large-Scale
// Training with Adam's Convergence Speed", arXiv:2102.02888; DeepSpeed's OnebitAdam and its
// compressed_allreduce). It works as a pair with the optimizer of the same name
// (optim/onebit_adam.h): after the warm-up, what this codec leaves in the bucket is the
// sum over ranks of each rank's compressed momentum, which the reducer divides by N and
// the optimizer takes as its momentum m.
//
// Warm-up, step < freeze_step (0-based; the optimizer's 1-based steps 1..freeze_step, which
// are plain Adam): an fp32 allreduce (sum) of the bucket. The codec also follows Adam's
// moments of the averaged gradient g = sum / N, m = beta1 m + (1 - beta1) g and
// v = beta2 v + (1 - beta2) g^2, with Adam's arithmetic and the reducer's division (a
// product with 1/N), so they have the bits of the optimizer's exp_avg and exp_avg_sq (its
// weight decay is decoupled, outside the moments). Every rank holds the same v: it is
// formed from the sum.
//
// Compression, step >= freeze_step: v is frozen (T = freeze_step updates), and with it each
// float's denominator d = sqrt(v) / sqrt(1 - beta2^T) + eps, the optimizer's: a momentum m
// moves its float by lr' m / d. Each rank
//   1. forms its local momentum from its own gradient, m_local = beta1 m + (1 - beta1) g;
//   2. adds its error-feedback memory, c = m_local + e;
//   3. sends, per float, the sign of the step c makes, w = c / d (0 counts as +), and per
//      block of kBlock floats one fp32 scale s = mean |w|;
//   4. keeps e = c - s sign(w) d, what the encoding lost, for its next step.
// The decoded momentum is s sign(w) d: every float of a block moves by the same lr' s.
// Two departures from DeepSpeed's compressed_allreduce, which signs c itself with one scale
// ||c||_2 / sqrt(n) per tensor, each measured as a divergence here:
// - Signs of the step, not of the momentum. A block of the momentum mixes floats whose
//   momenta and variances differ by orders of magnitude (a large weight beside dead
//   units). Signed in momentum units, every float of the block receives the momentum of
//   the large one, and a float of tiny frozen variance then moves by s / d, thousands of
//   times Adam's step: the cnn went to NaN 5 steps after its freeze, gpt-tiny 12 after.
//   Weighted by 1 / d, the block's floats share a step size, as Adam's steps do (Adam's
//   |m / d| is at most about (1 - beta1) / sqrt(1 - beta2)).
// - The scale is the mean of |w|, not its RMS: with the mean, what the encoding loses is a
//   contraction (||w - s sign(w)||^2 = ||w||^2 - ||w||_1^2 / n < ||w||^2), the condition
//   under which error feedback keeps its memory bounded; with the RMS, a block whose weight
//   sits on one float loses more than it had, and the memory grows step after step.
// A float whose variance froze at 0 never had a gradient in the warm-up (an embedding row
// of an unseen token); the optimizer leaves it where it is, and the codec sends it as 0
// and keeps no memory for it.
// The exchange is one all-gather of every rank's scales and packed signs,
// ceil(n / kBlock) + ceil(n / 32) words each: fixed size, no second compression round
// (DeepSpeed's server stage), so the only error is the worker's, and it is fed back. Every
// rank decodes the N messages in rank order, sums s sign(w) in fp32 and multiplies by d, so
// all ranks hold the same bits; m = sum / N (the averaged momentum, for the next step) and
// the bucket := sum.
// Wire bytes per rank and bucket: (N - 1) 4 (ceil(n / kBlock) + ceil(n / 32)); about 1/28 of
// an fp32 ring allreduce's 4 n with 2 ranks.
//
// Assumes the reducer divides the sum by the group size N (DDP without deterministic
// micro-batch sums) and that no step is skipped (a skipped step would leave the codec's m
// one step ahead of the optimizer's). The codec's m and v are the optimizer's exp_avg and
// exp_avg_sq, bit for bit, so a checkpoint holds them: restore() takes them back from a
// loaded optimizer state. The error-feedback memory is not kept; it restarts at zero.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "parallel/codec.h"

namespace braid::parallel {

class OnebitAdamCodec : public GradientCodec {
 public:
  static constexpr int64_t kBlock = 256;  // floats sharing one scale (a multiple of 32)

  OnebitAdamCodec(int64_t freeze_step, float beta1, float beta2, float eps);

  std::string_view name() const override { return "onebit_adam"; }
  void prepare(const std::vector<BucketLayout>& buckets, int ranks,
               const WireAllocator& wire) override;
  void allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count, int64_t step) override;
  // m and v := the optimizer's exp_avg and exp_avg_sq over each bucket's floats; e := 0.
  void restore(const optim::NamedTensors& optimizer_state) override;

  // The averaged momentum, the variance (frozen after the warm-up) and the error-feedback
  // memory of a bucket (for tests, metrics).
  std::span<const float> momentum(size_t bucket) const;
  std::span<const float> variance(size_t bucket) const;
  std::span<const float> error(size_t bucket) const;

 private:
  struct Bucket {
    int64_t offset = 0, size = 0;  // into momentum_, variance_ and error_
    int64_t begin = 0;             // the bucket's first float in the flat buffer
    int64_t blocks = 0;            // scales: one per kBlock floats
    uint32_t* wire = nullptr;      // N messages of `blocks` + `words` words: scales, then signs
    int64_t words = 0;             // ceil(size / 32)
    double error_sq = 0;           // ||e||^2 after its last step
    bool frozen = false;           // denominator_ formed
  };
  void warm_up(comm::Group& g, Bucket& b, float* grad, int64_t count);
  void freeze(Bucket& b);
  void compress(comm::Group& g, Bucket& b, float* grad, int64_t count);

  int64_t freeze_step_;
  float beta1_, beta2_, eps_;
  int ranks_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<float> momentum_, variance_, error_;  // every bucket's, back to back
  std::vector<float> denominator_;  // d, formed at a bucket's first compressed step (0: v = 0)
};

}  // namespace braid::parallel
