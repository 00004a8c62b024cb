// The top-k codec (Deep Gradient Compression) on 2, 3 and 4 thread-ranks: sending every
// entry is the rank-order fp32 sum bit for bit; error feedback keeps the sum of decoded
// updates within the residual memory of the sum of true gradients; momentum correction
// and masking match a 3-step example worked by hand; the warm-up's k at chosen steps;
// local clipping; identical bits on every rank and against a dense reference of the
// algorithm; the wire bytes of the all-gather.
#include "parallel/codec_topk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "comm/inproc_ranks.h"
#include "parallel/expect_error.h"

namespace braid::parallel {
namespace {

using comm::testing::rethrow_first;
using comm::testing::run_group;

// grads[rank][step][i], outs[rank][step][i]: what each rank fed the codec and got back.
using PerRank = std::vector<std::vector<std::vector<float>>>;

// The reducer's wire memory, private to one rank here.
class PrivateWire {
 public:
  WireAllocator allocator() {
    return [this](size_t bytes) {
      blocks_.push_back(std::make_unique<std::byte[]>(std::max<size_t>(bytes, 1)));
      return static_cast<void*>(blocks_.back().get());
    };
  }

 private:
  std::vector<std::unique_ptr<std::byte[]>> blocks_;
};

std::vector<BucketLayout> layouts(const std::vector<int64_t>& sizes) {
  std::vector<BucketLayout> out;
  int64_t begin = 0;
  for (const int64_t size : sizes) {
    out.push_back({begin, begin + size, {{0, size, 1}}});
    begin += size;
  }
  return out;
}

CodecConfig topk(double ratio, float momentum = 0, float clip_norm = 0, int64_t warmup = 0) {
  CodecConfig c;
  c.name = "topk";
  c.topk_ratio = ratio;
  c.topk_momentum = momentum;
  c.clip_norm = clip_norm;
  c.warmup_steps = warmup;
  return c;
}

// A gradient of `count` in [bias - 1, bias + 1), a function of (rank, step, bucket) only.
std::vector<float> random_grad(int rank, int64_t step, size_t bucket, int64_t count,
                               float bias = 0) {
  std::mt19937 rng(static_cast<uint32_t>(rank * 1'000'003 + step * 7919 + bucket * 31 + 1));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> g(static_cast<size_t>(count));
  for (float& x : g) x = bias + uniform(rng);
  return g;
}

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// Runs `steps` steps of one codec per rank over buckets of `sizes`; grad_of(rank, step,
// bucket) gives each input. Returns outs[rank][step x buckets + bucket]; `after` sees each
// rank's codec at the end.
PerRank run_codec(int n, const CodecConfig& config, const std::vector<int64_t>& sizes,
                  int64_t steps,
                  const std::function<std::vector<float>(int, int64_t, size_t)>& grad_of,
                  const std::function<void(int, const TopkCodec&)>& after = {}) {
  PerRank outs(static_cast<size_t>(n));
  rethrow_first(run_group(n, [&](comm::Group& g) {
    PrivateWire wire;
    TopkCodec codec(config);
    codec.prepare(layouts(sizes), g.size(), wire.allocator());
    auto& mine = outs[static_cast<size_t>(g.rank())];
    for (int64_t t = 0; t < steps; ++t) {
      for (size_t b = 0; b < sizes.size(); ++b) {
        std::vector<float> grad = grad_of(g.rank(), t, b);
        codec.allreduce(g, b, grad.data(), sizes[b], t);
        mine.push_back(std::move(grad));
      }
    }
    if (after) after(g.rank(), codec);
  }));
  return outs;
}

TEST(CodecTopk, SendingEveryEntryIsTheRankOrderFp32SumBitForBit) {
  const std::vector<int64_t> sizes = {1, 7, 1000};
  for (const int n : {2, 3, 4}) {
    SCOPED_TRACE(n);
    constexpr int64_t kSteps = 2;  // the second step shows nothing stayed behind
    const auto grad_of = [](int r, int64_t t, size_t b) {
      return random_grad(r, t, b, std::vector<int64_t>{1, 7, 1000}[b]);
    };
    const PerRank outs =
        run_codec(n, topk(1.0), sizes, kSteps, grad_of, [&](int, const TopkCodec& c) {
          for (size_t b = 0; b < sizes.size(); ++b)
            for (const float x : c.residual(b)) EXPECT_EQ(x, 0.0f);
        });
    for (int64_t t = 0; t < kSteps; ++t) {
      for (size_t b = 0; b < sizes.size(); ++b) {
        std::vector<float> sum = grad_of(0, t, b);
        for (int r = 1; r < n; ++r) {
          const std::vector<float> g = grad_of(r, t, b);
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
        }
        for (int r = 0; r < n; ++r) {
          const std::vector<float>& got = outs[static_cast<size_t>(r)][t * sizes.size() + b];
          for (size_t i = 0; i < sum.size(); ++i)
            ASSERT_TRUE(same_bits(got[i], sum[i]))
                << "rank " << r << " step " << t << " bucket " << b << " float " << i << ": "
                << got[i] << " vs " << sum[i];
        }
      }
    }
  }
}

// Error feedback (momentum 0): what was not sent stays in v, so
//   sum_t decoded_t + sum_r v_r = sum_t sum_r g_r,t
// up to float rounding, and the gap between decoded and true sums (that is, sum_r v_r)
// stays bounded as T grows. The gradients have a bias so that a lost residual would grow
// the gap linearly in T.
TEST(CodecTopk, ErrorFeedbackKeepsTheDecodedSumWithinTheResidualOfTheTrueSum) {
  const int n = 3;
  const std::vector<int64_t> sizes = {7, 1000};
  const auto grad_of = [&](int r, int64_t t, size_t b) {
    return random_grad(r, t, b, sizes[b], 0.5f);
  };
  std::vector<double> gaps;  // max_i |decoded - true| at T = 50, then 200
  for (const int64_t steps : {50, 200}) {
    SCOPED_TRACE(steps);
    std::vector<std::vector<std::vector<float>>> residuals(n);  // [rank][bucket]
    const PerRank outs =
        run_codec(n, topk(0.05), sizes, steps, grad_of, [&](int r, const TopkCodec& c) {
          for (size_t b = 0; b < sizes.size(); ++b)
            residuals[static_cast<size_t>(r)].emplace_back(c.residual(b).begin(),
                                                           c.residual(b).end());
        });
    double worst_gap = 0;
    for (size_t b = 0; b < sizes.size(); ++b) {
      const auto count = static_cast<size_t>(sizes[b]);
      std::vector<double> decoded(count, 0), truth(count, 0), magnitude(count, 0);
      for (int64_t t = 0; t < steps; ++t) {
        const std::vector<float>& out = outs[0][t * sizes.size() + b];
        for (size_t i = 0; i < count; ++i) decoded[i] += out[i];
        for (int r = 0; r < n; ++r) {
          const std::vector<float> g = grad_of(r, t, b);
          for (size_t i = 0; i < count; ++i) {
            truth[i] += g[i];
            magnitude[i] += std::fabs(g[i]);
          }
        }
      }
      for (size_t i = 0; i < count; ++i) {
        double memory = 0;
        for (int r = 0; r < n; ++r) memory += residuals[static_cast<size_t>(r)][b][i];
        ASSERT_NEAR(decoded[i] + memory, truth[i], 1e-5 * magnitude[i])
            << "bucket " << b << " float " << i;
        worst_gap = std::max(worst_gap, std::fabs(decoded[i] - truth[i]));
      }
    }
    // Each rank holds an entry back for about 1 / 0.05 = 20 steps of bias 0.5 before it is
    // among the largest: a gap of order N x 10 (26 here), whatever T is. Without the
    // residual it would be 0.95 x 0.5 x N x T (70 at T = 50, 285 at T = 200).
    EXPECT_LT(worst_gap, 40.0);
    gaps.push_back(worst_gap);
  }
  EXPECT_LT(gaps[1], 1.5 * gaps[0]) << "the gap grows with T";
}

// 2 ranks, 4 floats, k = 1, m = 0.5; every value is exact in binary, so floats are exact.
//   rank 0 g: t0 [1 -2 3 .5]  t1 [2 1 -1 1]  t2 [0 1 1 4]
//   rank 1 g: t0 [-1 0 0 2]   t1 [1 3 0 -2]  t2 [2 0 -1 1]
// t0: r0 u=v=[1 -2 3 .5] sends (2, 3); r1 u=v=[-1 0 0 2] sends (3, 2).  out [0 0 3 2]
//     masked: r0 u=v=[1 -2 0 .5]; r1 u=v=[-1 0 0 0]
// t1: r0 u=.5u+g=[2.5 0 -1 1.25] v=[3.5 -2 -1 1.75] sends (0, 3.5)
//     r1 u=[.5 3 0 -2] v=[-.5 3 0 -2] sends (1, 3)                        out [3.5 3 0 0]
//     masked: r0 u=[0 0 -1 1.25] v=[0 -2 -1 1.75]; r1 u=[.5 0 0 -2] v=[-.5 0 0 -2]
// t2: r0 u=[0 1 .5 4.625] v=[0 -1 -.5 6.375] sends (3, 6.375)
//     r1 u=[2.25 0 -1 0] v=[1.75 0 -1 -2] sends (3, -2)                   out [0 0 0 4.375]
//     masked: r0 u=[0 1 .5 0] v=[0 -1 -.5 0]; r1 u=[2.25 0 -1 0] v=[1.75 0 -1 0]
TEST(CodecTopk, MomentumCorrectionAndMaskingMatchAHandWorkedExample) {
  const std::vector<std::vector<std::vector<float>>> grads = {
      {{1, -2, 3, 0.5f}, {2, 1, -1, 1}, {0, 1, 1, 4}},
      {{-1, 0, 0, 2}, {1, 3, 0, -2}, {2, 0, -1, 1}},
  };
  std::vector<std::vector<float>> u(2), v(2);
  const PerRank outs = run_codec(
      2, topk(0.25, 0.5f), {4}, 3,
      [&](int r, int64_t t, size_t) {
        return grads[static_cast<size_t>(r)][static_cast<size_t>(t)];
      },
      [&](int r, const TopkCodec& c) {
        u[static_cast<size_t>(r)].assign(c.velocity(0).begin(), c.velocity(0).end());
        v[static_cast<size_t>(r)].assign(c.residual(0).begin(), c.residual(0).end());
      });
  const std::vector<std::vector<float>> want = {{0, 0, 3, 2}, {3.5f, 3, 0, 0}, {0, 0, 0, 4.375f}};
  for (int r = 0; r < 2; ++r)
    for (size_t t = 0; t < 3; ++t)
      EXPECT_EQ(outs[static_cast<size_t>(r)][t], want[t]) << "step " << t;
  EXPECT_EQ(u[0], (std::vector<float>{0, 1, 0.5f, 0}));
  EXPECT_EQ(v[0], (std::vector<float>{0, -1, -0.5f, 0}));
  EXPECT_EQ(u[1], (std::vector<float>{2.25f, 0, -1, 0}));
  EXPECT_EQ(v[1], (std::vector<float>{1.75f, 0, -1, 0}));
}

// fraction(t) = 0.25^(1 - t/W) ratio^(t/W): with ratio 2^-8 and W = 4, log2 fraction =
// -2 - 1.5 t, so a bucket of 1024 keeps 2^(10 - 2 - 1.5 t): 256, 90.5, 32, 11.3, then 4.
TEST(CodecTopk, WarmupFallsExponentiallyFromAQuarterToTheRatio) {
  const double ratio = 1.0 / 256;
  EXPECT_DOUBLE_EQ(topk_kept_fraction(ratio, 4, 0), 0.25);
  EXPECT_DOUBLE_EQ(topk_kept_fraction(ratio, 4, 2), 1.0 / 32);
  EXPECT_DOUBLE_EQ(topk_kept_fraction(ratio, 4, 4), ratio);
  EXPECT_DOUBLE_EQ(topk_kept_fraction(ratio, 4, 1000), ratio);
  const std::vector<int64_t> want = {256, 91, 32, 11, 4, 4};
  for (int64_t t = 0; t < 6; ++t)
    EXPECT_EQ(topk_count(1024, ratio, 4, t), want[static_cast<size_t>(t)]) << t;
  EXPECT_EQ(topk_count(1024, ratio, 0, 0), 4);  // no warm-up
  EXPECT_EQ(topk_count(100, 0.5, 10, 0), 50);   // a ratio above 25 % needs none
  EXPECT_EQ(topk_count(7, 0.01, 0, 0), 1);      // never fewer than one
  EXPECT_EQ(topk_count(1, 0.01, 5, 0), 1);
  EXPECT_EQ(topk_count(7, 1.0, 0, 0), 7);  // never more than the bucket
}

// Each rank's bucket gradient is scaled to norm clip_norm / sqrt(N) when it is above that.
TEST(CodecTopk, LocalClippingBoundsEachRanksGradientByClipNormOverSqrtN) {
  for (const int n : {2, 4}) {
    SCOPED_TRACE(n);
    const float clip = 3.0f;
    const double limit = clip / std::sqrt(static_cast<double>(n));
    // Bucket 0: rank 0 huge, the others zero. Bucket 1: every rank small, unclipped.
    const auto grad_of = [&](int r, int64_t t, size_t b) {
      if (b == 0) {
        std::vector<float> g = random_grad(r, t, b, 1000);
        for (float& x : g) x = r == 0 ? x * 1e6f : 0.0f;
        return g;
      }
      std::vector<float> g = random_grad(r, t, b, 7);
      for (float& x : g) x *= 0.1f;  // norm below 0.27 < limit
      return g;
    };
    const PerRank outs = run_codec(n, topk(1.0, 0, clip), {1000, 7}, 1, grad_of);
    const std::vector<float> huge = grad_of(0, 0, 0);
    double norm2 = 0, huge_norm2 = 0;
    for (size_t i = 0; i < huge.size(); ++i) {
      norm2 += static_cast<double>(outs[0][0][i]) * outs[0][0][i];
      huge_norm2 += static_cast<double>(huge[i]) * huge[i];
    }
    EXPECT_NEAR(std::sqrt(norm2), limit, 1e-5 * limit);
    const double scale = limit / std::sqrt(huge_norm2);
    for (size_t i = 0; i < huge.size(); ++i)
      ASSERT_NEAR(outs[0][0][i], huge[i] * scale, 1e-6 * std::fabs(huge[i] * scale) + 1e-12) << i;
    std::vector<float> sum = grad_of(0, 0, 1);
    for (int r = 1; r < n; ++r) {
      const std::vector<float> g = grad_of(r, 0, 1);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
    }
    EXPECT_EQ(outs[0][1], sum);  // unclipped: the plain rank-order sum
  }
}

// The algorithm as the header states it, dense and slow: a full sort for the selection.
struct ReferenceRank {
  std::vector<float> u, v;
};

std::vector<float> reference_step(std::vector<ReferenceRank>& ranks,
                                  std::vector<std::vector<float>> grads, const CodecConfig& c,
                                  int64_t step) {
  const int n = static_cast<int>(ranks.size());
  const auto count = static_cast<int64_t>(grads[0].size());
  const int64_t k = topk_count(count, c.topk_ratio, c.warmup_steps, step);
  std::vector<float> out(static_cast<size_t>(count), 0.0f);
  for (int r = 0; r < n; ++r) {
    ReferenceRank& s = ranks[static_cast<size_t>(r)];
    std::vector<float>& g = grads[static_cast<size_t>(r)];
    double norm2 = 0;
    for (const float x : g) norm2 += static_cast<double>(x) * x;
    const double limit = c.clip_norm / std::sqrt(static_cast<double>(n));
    if (c.clip_norm > 0 && std::sqrt(norm2) > limit)
      for (float& x : g) x *= static_cast<float>(limit / std::sqrt(norm2));
    for (size_t i = 0; i < g.size(); ++i) {
      s.u[i] = c.topk_momentum * s.u[i] + g[i];
      s.v[i] += c.topk_momentum > 0 ? s.u[i] : g[i];
    }
    std::vector<int64_t> order(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return std::fabs(s.v[static_cast<size_t>(a)]) > std::fabs(s.v[static_cast<size_t>(b)]);
    });
    std::vector<std::pair<int64_t, float>> sent;
    for (int64_t j = 0; j < k; ++j) {
      const auto i = static_cast<size_t>(order[static_cast<size_t>(j)]);
      sent.emplace_back(i, s.v[i]);
      s.v[i] = 0;
      s.u[i] = 0;
    }
    for (const auto& [i, x] : sent) out[static_cast<size_t>(i)] += x;
  }
  return out;
}

TEST(CodecTopk, EveryRankHoldsTheReferencesBits) {
  const int n = 3;
  const std::vector<int64_t> sizes = {1, 7, 1000, 4099};
  const CodecConfig config = topk(0.01, 0.9f, 20.0f, 4);
  constexpr int64_t kSteps = 8;
  // Every other (rank, step) draws at 1 / 10 size, so clipping (at 20 / sqrt 3 = 11.5)
  // bites on some and leaves the others alone.
  const auto grad_of = [&](int r, int64_t t, size_t b) {
    std::vector<float> g = random_grad(r, t, b, sizes[b]);
    if ((r + t) % 2)
      for (float& x : g) x *= 0.1f;
    return g;
  };
  const PerRank outs = run_codec(n, config, sizes, kSteps, grad_of);
  for (size_t b = 0; b < sizes.size(); ++b) {
    const auto count = static_cast<size_t>(sizes[b]);
    std::vector<ReferenceRank> ref(n, {std::vector<float>(count, 0), std::vector<float>(count, 0)});
    for (int64_t t = 0; t < kSteps; ++t) {
      std::vector<std::vector<float>> grads;
      for (int r = 0; r < n; ++r) grads.push_back(grad_of(r, t, b));
      const std::vector<float> want = reference_step(ref, grads, config, t);
      for (int r = 0; r < n; ++r) {
        const std::vector<float>& got = outs[static_cast<size_t>(r)][t * sizes.size() + b];
        for (size_t i = 0; i < count; ++i)
          ASSERT_TRUE(same_bits(got[i], want[i]))
              << "rank " << r << " step " << t << " bucket " << b << " float " << i << ": "
              << got[i] << " vs " << want[i];
      }
    }
  }
}

// Equal magnitudes: the lower indices go first, on every run.
TEST(CodecTopk, TiesGoToTheLowerIndex) {
  const std::vector<float> g = {1, -1, 1, -1, 1, -1, 1};
  const PerRank outs = run_codec(2, topk(2.0 / 7), {7}, 2, [&](int, int64_t, size_t) { return g; });
  EXPECT_EQ(outs[0][0], (std::vector<float>{2, -2, 0, 0, 0, 0, 0}));
  // Step 1: entries 2..6 hold 2 x g, entries 0 and 1 hold g: 2 and 3 go.
  EXPECT_EQ(outs[1][1], (std::vector<float>{0, 0, 4, -4, 0, 0, 0}));
}

// A NaN outranks every number, so an overflow reaches the loss scaler instead of waiting
// in the residual.
TEST(CodecTopk, ANanIsSentFirst) {
  const PerRank outs = run_codec(2, topk(0.001), {1000}, 1, [](int r, int64_t t, size_t b) {
    std::vector<float> g = random_grad(r, t, b, 1000);
    g[3] = 1e30f;
    if (r == 1) g[500] = std::numeric_limits<float>::quiet_NaN();
    return g;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(std::isnan(outs[static_cast<size_t>(r)][0][500])) << "rank " << r;
    EXPECT_EQ(outs[static_cast<size_t>(r)][0][3], 1e30f) << "rank 0 sent its largest";
  }
}

// A ring or direct all-gather of 2k 32-bit words sends (N-1) x 8k bytes from every rank.
TEST(CodecTopk, ReportsTheAllGathersBytesAndTheResidualsNorm) {
  const int n = 3;
  const std::vector<int64_t> sizes = {7, 1000};
  // ratio 0.1, W = 3: k(1000) = 250, 184, 136, then 100; k(7) = 2, then 1.
  const std::vector<std::vector<int64_t>> k = {{2, 1, 1, 1, 1}, {250, 184, 136, 100, 100}};
  std::vector<std::vector<CodecReport>> reports(n);
  std::vector<std::vector<double>> norms(n);
  rethrow_first(run_group(n, [&](comm::Group& g) {
    PrivateWire wire;
    TopkCodec codec(topk(0.1, 0.9f, 0, 3));
    codec.prepare(layouts(sizes), g.size(), wire.allocator());
    for (int64_t t = 0; t < 5; ++t) {
      for (size_t b = 0; b < sizes.size(); ++b) {
        std::vector<float> grad = random_grad(g.rank(), t, b, sizes[b]);
        codec.allreduce(g, b, grad.data(), sizes[b], t);
      }
      double norm2 = 0;
      for (size_t b = 0; b < sizes.size(); ++b)
        for (const float x : codec.residual(b)) norm2 += static_cast<double>(x) * x;
      reports[static_cast<size_t>(g.rank())].push_back(codec.take_report());
      norms[static_cast<size_t>(g.rank())].push_back(std::sqrt(norm2));
    }
  }));
  for (int r = 0; r < n; ++r) {
    for (size_t t = 0; t < 5; ++t) {
      const CodecReport& got = reports[static_cast<size_t>(r)][t];
      EXPECT_EQ(got.wire_bytes, (n - 1) * 8.0 * static_cast<double>(k[0][t] + k[1][t])) << t;
      EXPECT_EQ(got.dense_bytes, dense_allreduce_bytes(7, n) + dense_allreduce_bytes(1000, n));
      EXPECT_NEAR(got.error_norm, norms[static_cast<size_t>(r)][t], 1e-12 * got.error_norm);
      EXPECT_GT(got.error_norm, 0.0);
    }
  }
}

TEST(CodecTopk, TheRegistryMakesItAndRefusesBadKnobs) {
  EXPECT_EQ(make_codec(topk(0.01))->name(), "topk");
  expect_error_naming([] { make_codec(topk(0.0)); }, "topk_ratio");
  expect_error_naming([] { make_codec(topk(1.5)); }, "topk_ratio");
  expect_error_naming([] { make_codec(topk(0.01, 1.0f)); }, "topk_momentum");
  expect_error_naming([] { make_codec(topk(0.01, 0, -1.0f)); }, "clip_norm");
  expect_error_naming([] { make_codec(topk(0.01, 0, 0, -1)); }, "warmup_steps");
}

}  // namespace
}  // namespace braid::parallel
