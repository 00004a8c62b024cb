// 1-bit Adam's codec over ranks as threads: the warm-up is the fp32 sum and its momentum is
// Adam's; after the freeze every rank holds the same bits, equal to a one-process reference
// of signs and scales summed in rank order; error feedback keeps the momentum's cumulative
// error bounded; the wire carries one bit per float and a scale per rank and bucket.
#include "parallel/codec_onebit_adam.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/inproc_ranks.h"
#include "core/error.h"
#include "optim/adam.h"

namespace braid::parallel {
namespace {

using Floats = std::vector<float>;
constexpr float kBeta1 = 0.9f;
constexpr float kBeta2 = 0.999f;  // CodecConfig's and Adam's defaults, as is eps
constexpr float kEps = 1e-8f;

// Buckets of these sizes, back to back (sizes off multiples of 32 exercise the last word).
std::vector<BucketLayout> layouts(const std::vector<int64_t>& sizes) {
  std::vector<BucketLayout> out;
  int64_t begin = 0;
  for (int64_t n : sizes) {
    out.push_back({begin, begin + n, {{0, n, 1}}});
    begin += n;
  }
  return out;
}

// A rank's gradient: a per-element mean of mixed magnitudes (so sign compression is biased
// without error feedback) plus noise that differs by rank and step.
float noise(int rank, int64_t step, int64_t i) {
  uint64_t x = (uint64_t(rank) << 40) ^ (uint64_t(step) << 20) ^ uint64_t(i);
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f;
}

float grad(int rank, int64_t step, int64_t i) {
  return 0.05f * static_cast<float>(i % 11 - 5) + 0.3f * noise(rank, step, i);
}

using Gradients = float (*)(int rank, int64_t step, int64_t i);

Floats grads_of(int rank, int64_t step, const BucketLayout& b, Gradients gen = grad) {
  Floats g(static_cast<size_t>(b.size()));
  for (int64_t i = 0; i < b.size(); ++i) g[static_cast<size_t>(i)] = gen(rank, step, b.begin + i);
  return g;
}

// What one rank saw: the codec's output per step and bucket, its moments after the
// warm-up, its reports, and its error memory at the end.
struct RankRun {
  std::vector<std::vector<Floats>> out;  // [step][bucket]
  std::vector<Floats> warm_momentum;     // [bucket], after step freeze - 1
  std::vector<Floats> warm_variance;     // [bucket], after step freeze - 1
  std::vector<CodecReport> reports;      // [step]
  std::vector<Floats> error;             // [bucket], at the end
};

std::vector<RankRun> run_codec(int n, int64_t freeze, int64_t steps,
                               const std::vector<BucketLayout>& buckets, Gradients gen = grad) {
  std::vector<RankRun> runs(static_cast<size_t>(n));
  const auto errors = comm::testing::run_group(n, [&](comm::Group& g) {
    RankRun& run = runs[static_cast<size_t>(g.rank())];
    std::vector<std::unique_ptr<uint32_t[]>> wire;
    CodecConfig config;
    config.name = "onebit_adam";
    config.freeze_step = freeze;
    config.beta1 = kBeta1;
    const auto codec = make_codec(config);
    codec->prepare(buckets, n, [&](size_t bytes) {
      wire.push_back(std::make_unique<uint32_t[]>(bytes / 4 + 1));  // zeroed
      return static_cast<void*>(wire.back().get());
    });
    const auto& onebit = dynamic_cast<const OnebitAdamCodec&>(*codec);
    for (int64_t s = 0; s < steps; ++s) {
      run.out.emplace_back();
      for (size_t b = 0; b < buckets.size(); ++b) {
        Floats g_local = grads_of(g.rank(), s, buckets[b], gen);
        codec->allreduce(g, b, g_local.data(), buckets[b].size(), s);
        run.out.back().push_back(std::move(g_local));
        if (s == freeze - 1) {
          const auto m = onebit.momentum(b);
          run.warm_momentum.emplace_back(m.begin(), m.end());
          const auto v = onebit.variance(b);
          run.warm_variance.emplace_back(v.begin(), v.end());
        }
      }
      run.reports.push_back(codec->take_report());
    }
    for (size_t b = 0; b < buckets.size(); ++b) {
      const auto e = onebit.error(b);
      run.error.emplace_back(e.begin(), e.end());
    }
  });
  comm::testing::rethrow_first(errors);
  return runs;
}

bool throws_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error&) {
    return true;
  }
  return false;
}

bool same_bits(const Floats& a, const Floats& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(OnebitAdamCodec, WarmUpIsBitwiseTheFp32Sum) {
  const auto buckets = layouts({37, 100});
  constexpr int64_t kFreeze = 4;
  const auto errors = comm::testing::run_group(3, [&](comm::Group& g) {
    std::vector<std::unique_ptr<uint32_t[]>> wire;
    OnebitAdamCodec codec(kFreeze, kBeta1, kBeta2, kEps);
    codec.prepare(buckets, g.size(), [&](size_t bytes) {
      wire.push_back(std::make_unique<uint32_t[]>(bytes / 4 + 1));
      return static_cast<void*>(wire.back().get());
    });
    for (int64_t s = 0; s < kFreeze; ++s) {
      for (size_t b = 0; b < buckets.size(); ++b) {
        Floats got = grads_of(g.rank(), s, buckets[b]), want = got;
        codec.allreduce(g, b, got.data(), buckets[b].size(), s);
        comm::allreduce(g, want.data(), want.size(), DType::f32, ReduceOp::sum);
        BRAID_CHECK(same_bits(got, want), "step ", s, " bucket ", b, " is not the fp32 sum");
      }
      const CodecReport r = codec.take_report();
      BRAID_CHECK(r.wire_bytes == r.dense_bytes && r.error_norm == 0, "warm-up report");
    }
  });
  EXPECT_NO_THROW(comm::testing::rethrow_first(errors));
}

// The codec's moments after the warm-up are the exp_avg and exp_avg_sq of braid's Adam
// stepped on the reducer's averages (sum x 1/N), computed here on its own.
TEST(OnebitAdamCodec, WarmUpMomentsAreAdamsOnTheAveragedGradients) {
  const auto buckets = layouts({37, 100});
  constexpr int kRanks = 3;
  constexpr int64_t kFreeze = 6;
  const std::vector<RankRun> runs = run_codec(kRanks, kFreeze, kFreeze, buckets);
  const int64_t total = buckets.back().end;
  optim::Adam adam({{"all", 0, total, false}}, total, {.beta1 = kBeta1});
  Floats params(static_cast<size_t>(total), 0.0f), average(static_cast<size_t>(total));
  for (int64_t s = 0; s < kFreeze; ++s) {
    for (size_t b = 0; b < buckets.size(); ++b)
      for (int64_t i = 0; i < buckets[b].size(); ++i)
        average[static_cast<size_t>(buckets[b].begin + i)] =
            runs[0].out[static_cast<size_t>(s)][b][static_cast<size_t>(i)] *
            (1.0f / static_cast<float>(kRanks));
    adam.step(params.data(), average.data(), 0.0f);
  }
  const float* exp_avg = adam.state()[0].second.f32();
  const float* exp_avg_sq = adam.state()[1].second.f32();
  for (const RankRun& run : runs) {
    for (size_t b = 0; b < buckets.size(); ++b) {
      const Floats want(exp_avg + buckets[b].begin, exp_avg + buckets[b].end);
      EXPECT_TRUE(same_bits(run.warm_momentum[b], want)) << "bucket " << b;
      const Floats want_sq(exp_avg_sq + buckets[b].begin, exp_avg_sq + buckets[b].end);
      EXPECT_TRUE(same_bits(run.warm_variance[b], want_sq)) << "bucket " << b;
    }
  }
}

// Adam's denominator with the variance frozen after `freeze` updates: sqrt(v) /
// sqrt(1 - beta2^freeze) + eps (0 where v is 0: the float does not move).
Floats denominators(const Floats& v, int64_t freeze) {
  const auto bc2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(double{kBeta2}, static_cast<double>(freeze))));
  Floats d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = v[i] > 0 ? std::sqrt(v[i]) / bc2_sqrt + kEps : 0;
  return d;
}

// One process doing what the ranks do together: from the same momentum and frozen
// denominators d, each rank's compensated momentum c to the sign of c / d with the scale
// RMS(c / d), summed in rank order and scaled back by d. (Buckets under 256 floats: one
// block, one scale.)
struct Reference {
  int n;
  Floats m;                                    // averaged momentum
  Floats d;                                    // frozen denominators
  std::vector<Floats> e;                       // per rank
  Floats step(const std::vector<Floats>& g) {  // g[rank]
    const size_t size = m.size();
    Floats sum(size, 0.0f);
    std::vector<float> decoded(size);
    for (int r = 0; r < n; ++r) {
      Floats c(size);
      double sq = 0;
      for (size_t i = 0; i < size; ++i) {
        c[i] = (kBeta1 * m[i] + static_cast<float>(1.0 - double{kBeta1}) * g[size_t(r)][i]) +
               e[size_t(r)][i];
        const double w = double{c[i]} / d[i];
        sq += w * w;
      }
      const auto scale = static_cast<float>(std::sqrt(sq / static_cast<double>(size)));
      for (size_t i = 0; i < size; ++i) {
        decoded[i] = std::signbit(c[i]) && c[i] != 0 ? -scale : scale;
        e[size_t(r)][i] = c[i] - decoded[i] * d[i];
        sum[i] = r == 0 ? decoded[i] : sum[i] + decoded[i];
      }
    }
    for (size_t i = 0; i < size; ++i) {
      sum[i] *= d[i];
      m[i] = sum[i] * (1.0f / static_cast<float>(n));
    }
    return sum;
  }
};

void expect_ranks_agree_with_reference(int n) {
  const auto buckets = layouts({37, 100, 64});
  constexpr int64_t kFreeze = 2, kSteps = 8;
  const std::vector<RankRun> runs = run_codec(n, kFreeze, kSteps, buckets);
  for (size_t b = 0; b < buckets.size(); ++b) {
    Reference ref{n, runs[0].warm_momentum[b], denominators(runs[0].warm_variance[b], kFreeze),
                  std::vector<Floats>(size_t(n))};
    for (Floats& e : ref.e) e.assign(ref.m.size(), 0.0f);
    for (int64_t s = kFreeze; s < kSteps; ++s) {
      std::vector<Floats> g;
      for (int r = 0; r < n; ++r) g.push_back(grads_of(r, s, buckets[b]));
      const Floats want = ref.step(g);
      for (int r = 0; r < n; ++r) {
        const Floats& got = runs[size_t(r)].out[size_t(s)][b];
        EXPECT_TRUE(same_bits(got, runs[0].out[size_t(s)][b]))
            << n << " ranks: rank " << r << " differs from rank 0 at step " << s << " bucket " << b;
        EXPECT_TRUE(same_bits(got, want))
            << n << " ranks: rank " << r << " differs from the reference at step " << s
            << " bucket " << b;
      }
    }
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(same_bits(runs[size_t(r)].error[b], ref.e[size_t(r)]))
          << "error memory of rank " << r << " bucket " << b;
  }
  // The reported error norm is the memory's L2 norm over every bucket.
  for (const RankRun& run : runs) {
    double sq = 0;
    for (const Floats& e : run.error)
      for (float x : e) sq += double{x} * x;
    EXPECT_GT(sq, 0);
    EXPECT_NEAR(run.reports.back().error_norm, std::sqrt(sq), 1e-9 * std::sqrt(sq));
  }
}

TEST(OnebitAdamCodec, AfterFreezeTwoRanksHoldTheReferenceBits) {
  expect_ranks_agree_with_reference(2);
}

TEST(OnebitAdamCodec, AfterFreezeThreeRanksHoldTheReferenceBits) {
  expect_ranks_agree_with_reference(3);
}

// The decoded momentum M(t) = sum / N against the exact one, M*(t) = b1 M*(t-1) + (1 - b1)
// mean_r g_r(t), from the same warm-up momentum. With D = M - M* and E = sum_r e_r, the
// memories, D(t) = b1 D(t-1) - (E(t) - E(t-1)) / N, so the cumulative difference
// S(T) = sum_{t<=T} D(t) is -(E(T) / N + b1 D(T)) / (1 - b1): as bounded as the memory is
// (checked, with the memory read from the codec), so S after 1600 steps is not twice
// S after 200. Without error feedback sign compression's bias makes S grow like T.
struct Drift {
  double cumulative = 0;  // ||S(T)||
  double identity = 0;    // ||(1 - b1) S(T) + b1 D(T) + E(T) / N||
};

Drift momentum_drift(int n, int64_t freeze, int64_t steps,
                     const std::vector<BucketLayout>& buckets) {
  const std::vector<RankRun> runs = run_codec(n, freeze, steps, buckets);
  Drift out;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const size_t size = static_cast<size_t>(buckets[b].size());
    std::vector<double> exact(runs[0].warm_momentum[b].begin(), runs[0].warm_momentum[b].end());
    std::vector<double> sum(size, 0.0), last(size, 0.0);
    for (int64_t s = freeze; s < steps; ++s) {
      for (size_t i = 0; i < size; ++i) {
        double mean = 0;
        for (int r = 0; r < n; ++r) mean += grad(r, s, buckets[b].begin + static_cast<int64_t>(i));
        exact[i] = kBeta1 * exact[i] + (1 - double{kBeta1}) * mean / n;
        last[i] = double{runs[0].out[size_t(s)][b][i]} / n - exact[i];
        sum[i] += last[i];
      }
    }
    for (size_t i = 0; i < size; ++i) {
      double memory = 0;
      for (const RankRun& run : runs) memory += run.error[b][i];
      const double rest = (1 - double{kBeta1}) * sum[i] + kBeta1 * last[i] + memory / n;
      out.cumulative += sum[i] * sum[i];
      out.identity += rest * rest;
    }
  }
  out.cumulative = std::sqrt(out.cumulative);
  out.identity = std::sqrt(out.identity);
  return out;
}

TEST(OnebitAdamCodec, ErrorFeedbackKeepsTheCumulativeMomentumErrorBounded) {
  const auto buckets = layouts({100, 60});
  constexpr int64_t kFreeze = 20;  // a variance of 20 steps (of one, d is one gradient)
  for (int n : {2, 3}) {
    const Drift short_run = momentum_drift(n, kFreeze, 200, buckets);
    const Drift long_run = momentum_drift(n, kFreeze, 1600, buckets);
    std::printf(
        "%d ranks: ||S|| %.4g after 200 steps, %.4g after 1600; identity residue %.3g, %.3g\n", n,
        short_run.cumulative, long_run.cumulative, short_run.identity, long_run.identity);
    EXPECT_LT(short_run.identity, 1e-4 * short_run.cumulative) << n << " ranks";
    EXPECT_LT(long_run.identity, 1e-4 * long_run.cumulative) << n << " ranks";
    EXPECT_LT(long_run.cumulative, 2 * short_run.cumulative) << n << " ranks";
  }
}

// A run resumed after the warm-up from a checkpoint (the optimizer's exp_avg and exp_avg_sq
// in the flat layout) goes on with the bits of the run that never stopped: the codec's
// moments are the optimizer's, and its error memory is zero at the freeze either way.
TEST(OnebitAdamCodec, RestoredFromTheOptimizerStateItGoesOnAsIfNeverStopped) {
  const auto buckets = layouts({37, 300});
  constexpr int64_t kFreeze = 4, kSteps = 9;
  const int64_t total = buckets.back().end;
  const auto errors = comm::testing::run_group(2, [&](comm::Group& g) {
    std::vector<std::unique_ptr<uint32_t[]>> wire;
    const auto allocate = [&](size_t bytes) {
      wire.push_back(std::make_unique<uint32_t[]>(bytes / 4 + 1));
      return static_cast<void*>(wire.back().get());
    };
    OnebitAdamCodec straight(kFreeze, kBeta1, kBeta2, kEps), resumed(kFreeze, kBeta1, kBeta2, kEps);
    straight.prepare(buckets, g.size(), allocate);
    resumed.prepare(buckets, g.size(), allocate);
    for (int64_t s = 0; s < kFreeze; ++s)
      for (size_t b = 0; b < buckets.size(); ++b) {
        Floats grads = grads_of(g.rank(), s, buckets[b]);
        straight.allreduce(g, b, grads.data(), buckets[b].size(), s);
      }
    optim::NamedTensors state;
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      Tensor t = Tensor::empty(Shape{total}, DType::f32);
      for (size_t b = 0; b < buckets.size(); ++b) {
        const auto from =
            std::string(name) == "exp_avg" ? straight.momentum(b) : straight.variance(b);
        std::copy(from.begin(), from.end(), t.f32() + buckets[b].begin);
      }
      state.emplace_back(name, std::move(t));
    }
    resumed.restore(state);
    for (int64_t s = kFreeze; s < kSteps; ++s)
      for (size_t b = 0; b < buckets.size(); ++b) {
        Floats want = grads_of(g.rank(), s, buckets[b]), got = want;
        straight.allreduce(g, b, want.data(), buckets[b].size(), s);
        resumed.allreduce(g, b, got.data(), buckets[b].size(), s);
        BRAID_CHECK(same_bits(got, want), "step ", s, " bucket ", b, " differs after the restore");
      }
    optim::NamedTensors missing;
    missing.emplace_back("exp_avg", Tensor::empty(Shape{total}, DType::f32));
    BRAID_CHECK(throws_error([&] { resumed.restore(missing); }), "a state without exp_avg_sq");
  });
  EXPECT_NO_THROW(comm::testing::rethrow_first(errors));
}

// Per block of 256 floats, one float with a large, steady gradient among floats of small
// noise: the block's momenta and variances differ by four orders of magnitude. After the
// freeze, the step each float makes, u = M / d (M the decoded averaged momentum, d its
// frozen denominator), stays within Adam's own bound (1 - b1) / sqrt(1 - b2), about 3.2:
// the floats of a block share a step size. (Signed in momentum units, the small floats
// would receive the large float's momentum, and steps of hundreds.)
float block_sparse(int rank, int64_t step, int64_t i) {
  return (i % 256 == 0 ? 10.0f : 0.0f) + 1e-3f * noise(rank, step, i);
}

TEST(OnebitAdamCodec, FloatsOfOneBlockMakeStepsOfAdamsSize) {
  const auto buckets = layouts({512, 300});
  constexpr int kRanks = 2;
  constexpr int64_t kFreeze = 20, kSteps = 120;
  const std::vector<RankRun> runs = run_codec(kRanks, kFreeze, kSteps, buckets, block_sparse);
  double largest = 0, largest_small = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Floats d = denominators(runs[0].warm_variance[b], kFreeze);
    for (int64_t s = kFreeze; s < kSteps; ++s)
      for (size_t i = 0; i < d.size(); ++i) {
        ASSERT_GT(d[i], 0) << "every float had a gradient in the warm-up";
        const double u = std::fabs(double{runs[0].out[size_t(s)][b][i]} / kRanks / d[i]);
        largest = std::max(largest, u);
        if (i % 256 != 0) largest_small = std::max(largest_small, u);
      }
  }
  std::printf("largest step |M / d| after the freeze: %.3g (small floats %.3g)\n", largest,
              largest_small);
  EXPECT_LT(largest, (1 - double{kBeta1}) / std::sqrt(1 - double{kBeta2}));
  EXPECT_GT(largest_small, 0.01) << "the small floats move too";
}

// A float whose variance froze at 0 had no gradient in the warm-up: it is sent as 0 and
// keeps no memory, even when gradients reach it after the freeze.
float late_gradient(int rank, int64_t step, int64_t i) {
  return i == 5 ? (step < 3 ? 0.0f : 1.0f) : grad(rank, step, i);
}

TEST(OnebitAdamCodec, AFloatWhoseVarianceFrozeAtZeroStaysAtZero) {
  const std::vector<RankRun> runs = run_codec(2, 3, 10, layouts({64}), late_gradient);
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.warm_variance[0][5], 0.0f);
    for (int64_t s = 3; s < 10; ++s) EXPECT_EQ(run.out[size_t(s)][0][5], 0.0f) << "step " << s;
    EXPECT_EQ(run.error[0][5], 0.0f);
    EXPECT_NE(run.out[9][0][4], 0.0f);
  }
}

TEST(OnebitAdamCodec, WireBytesAreOneBitPerFloatAndAScalePerBlock) {
  // (N - 1) x 4 (ceil(n / 32) + ceil(n / 256)) per bucket: 100 floats are 4 words and a
  // scale, 64 are 2 and a scale.
  const auto buckets = layouts({100, 64});
  for (int n : {2, 3}) {
    const std::vector<RankRun> runs = run_codec(n, 1, 2, buckets);
    for (const RankRun& run : runs) {
      const double dense = dense_allreduce_bytes(164, n);
      EXPECT_DOUBLE_EQ(run.reports[0].wire_bytes, dense) << "warm-up is fp32";
      EXPECT_DOUBLE_EQ(run.reports[1].dense_bytes, dense);
      EXPECT_EQ(run.reports[1].wire_bytes, (n - 1) * 4.0 * ((4 + 1) + (2 + 1))) << n << " ranks";
    }
  }
  // A bucket of 3200 floats between 2 ranks: 100 words of signs and 13 scales, 452 bytes
  // for fp32's 12800.
  const std::vector<RankRun> big = run_codec(2, 1, 2, layouts({3200}));
  EXPECT_EQ(big[0].reports[1].wire_bytes, 452);
  EXPECT_GT(big[0].reports[1].ratio(), 28.3);
}

TEST(OnebitAdamCodec, MadeByNameAndChecksItsKnobs) {
  CodecConfig config;
  config.name = "onebit_adam";
  EXPECT_EQ(make_codec(config)->name(), "onebit_adam");
  config.freeze_step = 0;
  EXPECT_THROW(make_codec(config), Error);
  config.freeze_step = 10;
  config.beta1 = 1.0f;
  EXPECT_THROW(make_codec(config), Error);
  config.beta1 = 0.9f;
  config.beta2 = 1.0f;
  EXPECT_THROW(make_codec(config), Error);
  config.beta2 = 0.999f;
  config.eps = -1e-8f;
  EXPECT_THROW(make_codec(config), Error);
}

}  // namespace
}  // namespace braid::parallel
