#include "parallel/codec_onebit_adam.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/collectives.h"
#include "core/error.h"
#include "core/multiversion.h"

namespace braid::parallel {
namespace {

// g = sum x 1/N, m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2: adam_kernel's
// expressions (optim/adam.cpp), multiversioned as it is, so that where its clones for
// x86-64-v3/v4 contract the sums of products into FMAs, this one does too and m and v keep
// Adam's bits.
BRAID_MULTIVERSION void average_into_moments(float* __restrict m, float* __restrict v,
                                             const float* __restrict sum, int64_t n, float inverse,
                                             float beta1, float one_minus_beta1, float beta2,
                                             float one_minus_beta2) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = sum[i] * inverse;
    const float mi = beta1 * m[i] + one_minus_beta1 * gi;
    const float vi = beta2 * v[i] + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

OnebitAdamCodec::OnebitAdamCodec(int64_t freeze_step, float beta1, float beta2, float eps)
    : freeze_step_(freeze_step), beta1_(beta1), beta2_(beta2), eps_(eps) {
  BRAID_CHECK(freeze_step >= 1, "onebit_adam codec: freeze_step = ", freeze_step,
              " must be >= 1 (the optimizer's variance is formed by the warm-up's Adam steps)");
  BRAID_CHECK(beta1 >= 0 && beta1 < 1, "onebit_adam codec: beta1 = ", beta1, " must be in [0, 1)");
  BRAID_CHECK(beta2 >= 0 && beta2 < 1, "onebit_adam codec: beta2 = ", beta2, " must be in [0, 1)");
  BRAID_CHECK(eps >= 0, "onebit_adam codec: eps = ", eps, " must be >= 0");
}

void OnebitAdamCodec::prepare(const std::vector<BucketLayout>& buckets, int ranks,
                              const WireAllocator& wire) {
  BRAID_CHECK(ranks >= 1, "onebit_adam codec: prepare() for ", ranks, " ranks");
  ranks_ = ranks;
  buckets_.assign(buckets.size(), Bucket{});
  int64_t floats = 0, wire_words = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    Bucket& b = buckets_[i];
    b.offset = floats;
    b.size = buckets[i].size();
    b.begin = buckets[i].begin;
    b.words = (b.size + 31) / 32;
    b.blocks = (b.size + kBlock - 1) / kBlock;
    floats += b.size;
    wire_words += (b.words + b.blocks) * ranks;
  }
  momentum_.assign(static_cast<size_t>(floats), 0.0f);
  variance_.assign(static_cast<size_t>(floats), 0.0f);
  error_.assign(static_cast<size_t>(floats), 0.0f);
  denominator_.assign(static_cast<size_t>(floats), 0.0f);
  auto* memory = static_cast<uint32_t*>(wire(static_cast<size_t>(wire_words) * sizeof(uint32_t)));
  for (Bucket& b : buckets_) {
    b.wire = memory;
    memory += (b.words + b.blocks) * ranks;
  }
}

void OnebitAdamCodec::restore(const optim::NamedTensors& optimizer_state) {
  const Tensor* exp_avg = nullptr;
  const Tensor* exp_avg_sq = nullptr;
  for (const auto& [name, t] : optimizer_state) {
    if (name == "exp_avg") exp_avg = &t;
    if (name == "exp_avg_sq") exp_avg_sq = &t;
  }
  BRAID_CHECK(exp_avg && exp_avg_sq, "onebit_adam codec: the optimizer state has no exp_avg ",
              "and exp_avg_sq to take the codec's moments from (optimizer onebit_adam keeps both)");
  for (Bucket& b : buckets_) {
    BRAID_CHECK(exp_avg->numel() >= b.begin + b.size && exp_avg_sq->numel() >= b.begin + b.size,
                "onebit_adam codec: the optimizer state holds ", exp_avg->numel(),
                " floats; bucket [", b.begin, ", ", b.begin + b.size, ") lies past them");
    std::copy_n(exp_avg->f32() + b.begin, b.size, momentum_.begin() + b.offset);
    std::copy_n(exp_avg_sq->f32() + b.begin, b.size, variance_.begin() + b.offset);
    std::fill_n(error_.begin() + b.offset, b.size, 0.0f);
    b.error_sq = 0;
    b.frozen = false;  // d is formed again from the restored v
  }
}

std::span<const float> OnebitAdamCodec::momentum(size_t bucket) const {
  BRAID_CHECK(bucket < buckets_.size(), "onebit_adam codec: no bucket ", bucket);
  const Bucket& b = buckets_[bucket];
  return {momentum_.data() + b.offset, static_cast<size_t>(b.size)};
}

std::span<const float> OnebitAdamCodec::variance(size_t bucket) const {
  BRAID_CHECK(bucket < buckets_.size(), "onebit_adam codec: no bucket ", bucket);
  const Bucket& b = buckets_[bucket];
  return {variance_.data() + b.offset, static_cast<size_t>(b.size)};
}

std::span<const float> OnebitAdamCodec::error(size_t bucket) const {
  BRAID_CHECK(bucket < buckets_.size(), "onebit_adam codec: no bucket ", bucket);
  const Bucket& b = buckets_[bucket];
  return {error_.data() + b.offset, static_cast<size_t>(b.size)};
}

void OnebitAdamCodec::allreduce(comm::Group& g, size_t bucket, float* grad, int64_t count,
                                int64_t step) {
  BRAID_CHECK(bucket < buckets_.size() && g.size() == ranks_, "onebit_adam codec: bucket ", bucket,
              " of a group of ", g.size(), " ranks; prepare() saw ", buckets_.size(),
              " buckets and ", ranks_, " ranks");
  Bucket& b = buckets_[bucket];
  BRAID_CHECK(count == b.size, "onebit_adam codec: bucket ", bucket, " holds ", count,
              " floats; prepare() sized it for ", b.size);
  report_.dense_bytes += dense_allreduce_bytes(count, g.size());
  if (step < freeze_step_)
    warm_up(g, b, grad, count);
  else
    compress(g, b, grad, count);
  double error_sq = 0;
  for (const Bucket& each : buckets_) error_sq += each.error_sq;
  report_.error_norm = std::sqrt(error_sq);
}

void OnebitAdamCodec::warm_up(comm::Group& g, Bucket& b, float* grad, int64_t count) {
  report_.wire_bytes += dense_allreduce_bytes(count, g.size());
  comm::allreduce(g, grad, static_cast<size_t>(count), DType::f32, ReduceOp::sum);
  // On the reducer's average: a product with 1/N (ddp.cpp's scale_into).
  average_into_moments(momentum_.data() + b.offset, variance_.data() + b.offset, grad, count,
                       1.0f / static_cast<float>(g.size()), beta1_,
                       static_cast<float>(1.0 - static_cast<double>(beta1_)), beta2_,
                       static_cast<float>(1.0 - static_cast<double>(beta2_)));
}

void OnebitAdamCodec::freeze(Bucket& b) {
  // The optimizer's denominator at its frozen bias correction, sqrt(1 - beta2^T).
  const auto bc2_sqrt = static_cast<float>(
      std::sqrt(1.0 - std::pow(static_cast<double>(beta2_), static_cast<double>(freeze_step_))));
  const float* v = variance_.data() + b.offset;
  float* d = denominator_.data() + b.offset;
  for (int64_t i = 0; i < b.size; ++i) d[i] = v[i] > 0 ? std::sqrt(v[i]) / bc2_sqrt + eps_ : 0.0f;
  b.frozen = true;
}

void OnebitAdamCodec::compress(comm::Group& g, Bucket& b, float* grad, int64_t count) {
  if (!b.frozen) freeze(b);
  const int n = g.size();
  const int64_t message = b.words + b.blocks;
  report_.wire_bytes += static_cast<double>(n - 1) * static_cast<double>(message) * 4;
  float* m = momentum_.data() + b.offset;
  float* e = error_.data() + b.offset;
  const float* d = denominator_.data() + b.offset;
  const auto one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(beta1_));

  // The compensated local momentum c, in place of the gradient, and per block the scale of
  // its steps, the RMS of c / d over the floats that move (d > 0).
  uint32_t* mine = b.wire + g.rank() * message;
  for (int64_t k = 0; k < b.blocks; ++k) {
    const int64_t lo = k * kBlock, hi = std::min(count, lo + kBlock);
    double norm_sq = 0;
    int64_t moving = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const float c = (beta1_ * m[i] + one_minus_beta1 * grad[i]) + e[i];
      grad[i] = c;
      if (d[i] > 0) {
        const double w = static_cast<double>(c) / d[i];
        norm_sq += w * w;
        ++moving;
      }
    }
    const float scale =
        moving > 0 ? static_cast<float>(std::sqrt(norm_sq / static_cast<double>(moving))) : 0.0f;
    std::memcpy(mine + k, &scale, sizeof scale);
  }

  // Encode into this rank's message; the error is what the decoded value misses (none is
  // kept for a float that does not move).
  double error_sq = 0;
  for (int64_t w = 0; w < b.words; ++w) {
    uint32_t word = 0;
    const int64_t first = w * 32, last = std::min(count, first + 32);
    float scale;
    std::memcpy(&scale, mine + first / kBlock, sizeof scale);
    for (int64_t i = first; i < last; ++i) {
      const bool positive = grad[i] >= 0;  // d > 0: the step's sign is the momentum's
      word |= static_cast<uint32_t>(positive) << (i - first);
      e[i] = d[i] > 0 ? grad[i] - (positive ? scale : -scale) * d[i] : 0.0f;
      error_sq += static_cast<double>(e[i]) * e[i];
    }
    mine[b.blocks + w] = word;
  }
  b.error_sq = error_sq;

  comm::allgather(g, mine, b.wire, static_cast<size_t>(message), DType::i32);

  // Every rank sums the same decoded steps in the same (rank) order and scales them by the
  // same d: the same bits.
  for (int r = 0; r < n; ++r) {
    const uint32_t* msg = b.wire + r * message;
    for (int64_t w = 0; w < b.words; ++w) {
      const uint32_t word = msg[b.blocks + w];
      const int64_t first = w * 32, last = std::min(count, first + 32);
      float s;
      std::memcpy(&s, msg + first / kBlock, sizeof s);
      for (int64_t i = first; i < last; ++i) {
        const float v = (word >> (i - first)) & 1u ? s : -s;
        grad[i] = r == 0 ? v : grad[i] + v;
      }
    }
  }
  const float inverse = 1.0f / static_cast<float>(n);
  for (int64_t i = 0; i < count; ++i) {
    grad[i] *= d[i];
    m[i] = grad[i] * inverse;
  }
}

}  // namespace braid::parallel
