// PowerSGD (parallel/codec_powersgd.h) on 2 and 3 thread-ranks, against references the
// test computes itself in double:
//  - full rank: P spans the column space of the summed matrix, so the output is the fp32
//    sum up to rounding, step after step (error feedback included);
//  - before start_iter, and for vectors, low-rate matrices and gaps after it: the exact sum
//    (values on a 1/8 grid, so any order of addition gives the same bits);
//  - error feedback: sum_t output - sum_t true sum = -(sum over ranks of the last error),
//    bounded by the ranks' error norms and not growing from T = 25 to T = 100;
//  - warm start, orthogonalisation and the per-rank error, one step ahead: from step t's
//    output (which gives span P_t and Q_t) and the ranks' gradients, step t+1's output is
//    the projection of the summed matrix onto span(S_{t+1} Q_t);
//  - every rank's bits are the same, and the wire bytes are the exact allreduce counts.
#include "parallel/codec_powersgd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "comm/inproc_ranks.h"
#include "core/error.h"
#include "core/rng.h"

namespace braid::parallel {
namespace {

using comm::testing::rethrow_first;
using comm::testing::run_group;

struct Shape {
  int64_t rows = 0, cols = 0;
  int64_t gap_after = 0;  // alignment floats after the tensor
};

BucketLayout layout_of(const std::vector<Shape>& shapes, int64_t begin = 0) {
  BucketLayout b;
  b.begin = begin;
  int64_t at = 0;
  for (const Shape& s : shapes) {
    b.tensors.push_back({at, s.rows, s.cols});
    at += s.rows * s.cols + s.gap_after;
  }
  b.end = begin + at;
  return b;
}

CodecConfig powersgd(int rank, int64_t start_iter, double min_rate = 2.0) {
  CodecConfig c;
  c.name = "powersgd";
  c.powersgd_rank = rank;
  c.start_iter = start_iter;
  c.min_compression_rate = min_rate;
  c.seed = 7;
  return c;
}

// A rank's whole flat gradient buffer at a step.
using GradientFn = std::function<std::vector<float>(int rank, int64_t step)>;

struct CodecRun {
  std::vector<std::vector<std::vector<float>>> outputs;  // [rank][step]: the flat buffer
  std::vector<std::vector<CodecReport>> reports;         // [rank][step]
};

// `steps` steps of the codec over every bucket of the flat buffer, as a reducer calls it.
CodecRun run_codec(int n, const CodecConfig& config, const std::vector<BucketLayout>& buckets,
                   int64_t steps, const GradientFn& gradient) {
  CodecRun run;
  run.outputs.resize(static_cast<size_t>(n));
  run.reports.resize(static_cast<size_t>(n));
  rethrow_first(run_group(n, [&](comm::Group& g) {
    std::vector<std::unique_ptr<float[]>> wire_memory;
    const WireAllocator wire = [&](size_t bytes) -> void* {
      wire_memory.push_back(std::make_unique<float[]>((bytes + 3) / 4));  // zeroed
      return wire_memory.back().get();
    };
    auto codec = make_codec(config);
    codec->prepare(buckets, n, wire);
    std::vector<std::vector<float>> outputs;
    std::vector<CodecReport> reports;
    for (int64_t t = 0; t < steps; ++t) {
      std::vector<float> grad = gradient(g.rank(), t);
      for (size_t i = 0; i < buckets.size(); ++i)
        codec->allreduce(g, i, grad.data() + buckets[i].begin, buckets[i].size(), t);
      outputs.push_back(std::move(grad));
      reports.push_back(codec->take_report());
    }
    run.outputs[static_cast<size_t>(g.rank())] = std::move(outputs);
    run.reports[static_cast<size_t>(g.rank())] = std::move(reports);
  }));
  return run;
}

void expect_same_bits_on_every_rank(const CodecRun& run) {
  for (size_t r = 1; r < run.outputs.size(); ++r)
    for (size_t t = 0; t < run.outputs[0].size(); ++t) {
      const std::vector<float>& a = run.outputs[0][t];
      const std::vector<float>& b = run.outputs[r][t];
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "rank " << r << " step " << t;
    }
}

std::vector<float> gaussian(int64_t size, uint64_t seed, int rank, int64_t step) {
  Rng rng = Rng(seed).fork(static_cast<uint64_t>(rank)).fork(static_cast<uint64_t>(step));
  std::vector<float> v(static_cast<size_t>(size));
  for (float& x : v) x = rng.normal();
  return v;
}

// Values on a 1/8 grid in [-2, 2]: every partial sum is exact in fp32.
std::vector<float> on_grid(int64_t size, int rank, int64_t step) {
  Rng rng = Rng(3).fork(static_cast<uint64_t>(rank)).fork(static_cast<uint64_t>(step));
  std::vector<float> v(static_cast<size_t>(size));
  for (float& x : v) x = (static_cast<float>(rng.below(33)) - 16.0f) / 8.0f;
  return v;
}

std::vector<double> sum_over_ranks(int n, int64_t step, const GradientFn& gradient) {
  std::vector<double> sum;
  for (int r = 0; r < n; ++r) {
    const std::vector<float> g = gradient(r, step);
    sum.resize(g.size(), 0.0);
    for (size_t k = 0; k < g.size(); ++k) sum[k] += g[k];
  }
  return sum;
}

// --- dense row-major matrices in double, for the references ------------------------------

struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c), 0.0) {}
  double& at(int64_t i, int64_t j) { return v[static_cast<size_t>(i * cols + j)]; }
  double at(int64_t i, int64_t j) const { return v[static_cast<size_t>(i * cols + j)]; }
};

template <typename T>
Mat matrix_at(const std::vector<T>& flat, int64_t offset, int64_t rows, int64_t cols) {
  Mat m(rows, cols);
  for (int64_t k = 0; k < rows * cols; ++k)
    m.v[static_cast<size_t>(k)] = static_cast<double>(flat[static_cast<size_t>(offset + k)]);
  return m;
}

Mat product(const Mat& a, const Mat& b, bool transpose_a = false) {
  const int64_t rows = transpose_a ? a.cols : a.rows, inner = transpose_a ? a.rows : a.cols;
  Mat c(rows, b.cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < inner; ++k) {
      const double aik = transpose_a ? a.at(k, i) : a.at(i, k);
      for (int64_t j = 0; j < b.cols; ++j) c.at(i, j) += aik * b.at(k, j);
    }
  return c;
}

Mat transpose(const Mat& a) {
  Mat t(a.cols, a.rows);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < a.cols; ++j) t.at(j, i) = a.at(i, j);
  return t;
}

// An orthonormal basis of a's column space (Gram-Schmidt twice, dropping columns that fall
// below `relative` of the largest).
Mat column_basis(const Mat& a, double relative = 1e-4) {
  double largest = 0;
  for (int64_t j = 0; j < a.cols; ++j) {
    double s = 0;
    for (int64_t i = 0; i < a.rows; ++i) s += a.at(i, j) * a.at(i, j);
    largest = std::max(largest, std::sqrt(s));
  }
  std::vector<std::vector<double>> basis;
  for (int64_t j = 0; j < a.cols; ++j) {
    std::vector<double> c(static_cast<size_t>(a.rows));
    for (int64_t i = 0; i < a.rows; ++i) c[static_cast<size_t>(i)] = a.at(i, j);
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& b : basis) {
        double d = 0;
        for (size_t i = 0; i < c.size(); ++i) d += b[i] * c[i];
        for (size_t i = 0; i < c.size(); ++i) c[i] -= d * b[i];
      }
    double norm = 0;
    for (double x : c) norm += x * x;
    norm = std::sqrt(norm);
    if (norm <= relative * largest) continue;
    for (double& x : c) x /= norm;
    basis.push_back(std::move(c));
  }
  Mat out(a.rows, static_cast<int64_t>(basis.size()));
  for (int64_t j = 0; j < out.cols; ++j)
    for (int64_t i = 0; i < a.rows; ++i) out.at(i, j) = basis[static_cast<size_t>(j)][i];
  return out;
}

// B B^T m.
Mat project(const Mat& basis, const Mat& m) { return product(basis, product(basis, m, true)); }

double max_abs_difference(const Mat& a, const Mat& b) {
  double d = 0;
  for (size_t k = 0; k < a.v.size(); ++k) d = std::max(d, std::abs(a.v[k] - b.v[k]));
  return d;
}

double max_abs(const Mat& a) {
  double d = 0;
  for (double x : a.v) d = std::max(d, std::abs(x));
  return d;
}

// --- the tests -----------------------------------------------------------------------

TEST(PowerSgd, IsMadeByName) {
  EXPECT_EQ(make_codec(powersgd(4, 10))->name(), "powersgd");
  EXPECT_THROW(make_codec(powersgd(0, 10)), Error);
}

// (a) With r = min(rows, cols) and Q of full rank, P = S Q spans S's column space, so
// P P^T S = S: the output is the plain sum. The errors e_i = M_i - P P^T M_i need not
// vanish (P spans the sum's columns, not each rank's), but they sum to zero, so later
// steps stay exact too. The rounding bound: each output element comes from products of
// length up to rows + cols over the n ranks' values, made a few times (M Q, M^T P,
// P Q^T), with the error carried across the steps.
TEST(PowerSgd, FullRankIsTheFp32SumUpToRounding) {
  const std::vector<Shape> shapes = {{20, 8, 0}, {6, 14, 0}, {10, 10, 0}};
  const BucketLayout layout = layout_of(shapes);
  for (int n : {2, 3}) {
    const GradientFn gradient = [&](int rank, int64_t step) {
      return gaussian(layout.size(), 11, rank, step);
    };
    constexpr int64_t kSteps = 6;
    const CodecRun run = run_codec(n, powersgd(64, 1, 0.0), {layout}, kSteps, gradient);
    expect_same_bits_on_every_rank(run);
    for (int64_t t = 1; t < kSteps; ++t) {
      const std::vector<double> sum = sum_over_ranks(n, t, gradient);
      const std::vector<float>& out = run.outputs[0][static_cast<size_t>(t)];
      for (const CodecTensor& m : layout.tensors) {
        const Mat expected = matrix_at(sum, m.offset, m.rows, m.cols);
        const double tolerance =
            8.0 * FLT_EPSILON * static_cast<double>((m.rows + m.cols) * n) * max_abs(expected);
        EXPECT_LE(max_abs_difference(matrix_at(out, m.offset, m.rows, m.cols), expected), tolerance)
            << n << " ranks, step " << t << ", " << m.rows << " x " << m.cols;
      }
    }
  }
}

// (b) Before start_iter the bucket is one fp32 allreduce: the exact sum of grid values.
// At start_iter a compressed matrix stops being exact.
TEST(PowerSgd, BeforeStartIterIsThePlainSum) {
  const BucketLayout layout = layout_of({{24, 16, 0}, {16, 1, 0}});
  for (int n : {2, 3}) {
    const GradientFn gradient = [&](int rank, int64_t step) {
      return on_grid(layout.size(), rank, step);
    };
    const CodecRun run = run_codec(n, powersgd(2, 3), {layout}, 4, gradient);
    expect_same_bits_on_every_rank(run);
    for (int64_t t = 0; t < 4; ++t) {
      const std::vector<double> sum = sum_over_ranks(n, t, gradient);
      int64_t differing = 0;
      for (int64_t k = 0; k < 24 * 16; ++k)
        differing += run.outputs[0][static_cast<size_t>(t)][static_cast<size_t>(k)] !=
                     static_cast<float>(sum[static_cast<size_t>(k)]);
      if (t < 3)
        EXPECT_EQ(differing, 0) << n << " ranks, step " << t;
      else
        EXPECT_GT(differing, 24 * 16 / 2) << n << " ranks: compressed from step 3";
      EXPECT_EQ(run.reports[0][static_cast<size_t>(t)].error_norm == 0, t < 3);
    }
  }
}

// (c) Vectors, matrices below the compression rate and alignment gaps are summed in fp32,
// exactly, while the compressed matrices of the same bucket are not.
TEST(PowerSgd, VectorsLowRateMatricesAndGapsAreSummedExactly) {
  // 24 x 16 at r = 2: rate 4.8, compressed; 5 x 3: rate 0.94, plain; 12 x 20: rate 3.75.
  const BucketLayout layout = layout_of({{16, 1, 3}, {24, 16, 0}, {5, 3, 5}, {12, 20, 0}});
  const std::vector<bool> compressed = {false, true, false, true};
  for (int n : {2, 3}) {
    const GradientFn gradient = [&](int rank, int64_t step) {
      return on_grid(layout.size(), rank, step);
    };
    const CodecRun run = run_codec(n, powersgd(2, 0), {layout}, 3, gradient);
    expect_same_bits_on_every_rank(run);
    for (int64_t t = 0; t < 3; ++t) {
      const std::vector<double> sum = sum_over_ranks(n, t, gradient);
      const std::vector<float>& out = run.outputs[0][static_cast<size_t>(t)];
      std::vector<bool> in_compressed(static_cast<size_t>(layout.size()), false);
      for (size_t i = 0; i < layout.tensors.size(); ++i) {
        const CodecTensor& m = layout.tensors[i];
        if (compressed[i]) std::fill_n(in_compressed.begin() + m.offset, m.rows * m.cols, true);
      }
      int64_t exact_plain = 0, plain = 0, exact_compressed = 0;
      for (size_t k = 0; k < out.size(); ++k) {
        const bool exact = out[k] == static_cast<float>(sum[k]);
        if (in_compressed[k]) {
          exact_compressed += exact;
        } else {
          ++plain;
          exact_plain += exact;
        }
      }
      EXPECT_EQ(plain, 16 + 3 + 15 + 5);
      EXPECT_EQ(exact_plain, plain) << n << " ranks, step " << t;
      EXPECT_LT(exact_compressed, (24 * 16 + 12 * 20) / 10) << n << " ranks, step " << t;
    }
  }
}

// Gradients with a fixed rank-3 mean, rank-3 fluctuations in the same subspaces and noise:
// at r = 2 the third direction of the mean is lost every step unless error feedback
// brings it back.
GradientFn low_rank_plus_noise(const BucketLayout& layout) {
  return [layout](int rank, int64_t step) {
    std::vector<float> g(static_cast<size_t>(layout.size()), 0.0f);
    Rng noise = Rng(21).fork(static_cast<uint64_t>(rank)).fork(static_cast<uint64_t>(step));
    for (size_t i = 0; i < layout.tensors.size(); ++i) {
      const CodecTensor& m = layout.tensors[i];
      constexpr int64_t kRank = 3;
      Rng fixed = Rng(20).fork(i);  // U, V: the same at every step and rank
      Mat u(m.rows, kRank), v(m.cols, kRank), a(kRank, kRank);
      for (double& x : u.v) x = fixed.normal();
      for (double& x : v.v) x = fixed.normal();
      for (int64_t k = 0; k < kRank; ++k) a.at(k, k) = 1.0 - 0.3 * static_cast<double>(k);
      for (double& x : a.v) x += 0.3 * noise.normal();
      const Mat low_rank = product(product(u, a), transpose(v));
      for (int64_t k = 0; k < m.rows * m.cols; ++k)
        g[static_cast<size_t>(m.offset + k)] =
            static_cast<float>(low_rank.v[static_cast<size_t>(k)] + 0.3 * noise.normal());
    }
    return g;
  };
}

// (d) Per rank, sum_t decoded + e(T) = sum_t gradient, so the accumulated output misses
// the accumulated true sum by exactly the sum of the ranks' last errors: bounded by their
// error norms, and no larger after 100 steps than after 25. Steps before start_iter
// (exact, no error kept) are part of the sums.
TEST(PowerSgd, ErrorFeedbackKeepsTheAccumulatedGapBounded) {
  const BucketLayout layout = layout_of({{24, 16, 0}, {16, 12, 4}});
  const GradientFn gradient = low_rank_plus_noise(layout);
  for (int n : {2, 3}) {
    constexpr int64_t kSteps = 100;
    const CodecRun run = run_codec(n, powersgd(2, 5), {layout}, kSteps, gradient);
    expect_same_bits_on_every_rank(run);
    std::vector<double> gap(static_cast<size_t>(layout.size()), 0.0);
    std::vector<double> gap_norm, error_bound, true_norm;
    std::vector<double> true_total(gap.size(), 0.0);
    for (int64_t t = 0; t < kSteps; ++t) {
      const std::vector<double> sum = sum_over_ranks(n, t, gradient);
      const std::vector<float>& out = run.outputs[0][static_cast<size_t>(t)];
      double g2 = 0, s2 = 0;
      for (size_t k = 0; k < gap.size(); ++k) {
        gap[k] += out[k] - sum[k];
        true_total[k] += sum[k];
        g2 += gap[k] * gap[k];
        s2 += true_total[k] * true_total[k];
      }
      gap_norm.push_back(std::sqrt(g2));
      true_norm.push_back(std::sqrt(s2));
      double errors = 0;
      for (int r = 0; r < n; ++r)
        errors += run.reports[static_cast<size_t>(r)][static_cast<size_t>(t)].error_norm;
      error_bound.push_back(errors);
    }
    for (int64_t t = 0; t < kSteps; ++t)
      EXPECT_LE(gap_norm[static_cast<size_t>(t)],
                error_bound[static_cast<size_t>(t)] * 1.001 + 1e-4 * true_norm[t])
          << n << " ranks, step " << t;
    const double at_25 = *std::max_element(gap_norm.begin(), gap_norm.begin() + 25);
    const double at_100 = *std::max_element(gap_norm.begin(), gap_norm.end());
    // Bounded: about 1.5x from the fluctuation of the error memory. A gap growing with T
    // grows 4x (lost every step, as without error feedback) or 2x (a random walk).
    EXPECT_LT(at_100, 2.5 * at_25) << n << " ranks: the gap grows with T";
    EXPECT_LT(at_100, 0.05 * true_norm.back()) << n << " ranks";
  }
}

// (e) One step ahead: step t's output P_t Q_t^T gives span P_t and, from it, Q_t (up to a
// rotation, which changes no span); each rank's error e_i = M_i - P_t P_t^T M_i. With warm
// start, step t+1's P spans S_{t+1} Q_t, S_{t+1} = sum_i (g_i + e_i), and its output is
// the projection of S_{t+1} onto that span. A fresh Q, a missing error or a P that is not
// orthonormal all miss this prediction by far more than rounding.
TEST(PowerSgd, WarmStartErrorAndOrthogonalisationPredictTheNextStep) {
  const std::vector<Shape> shapes = {{24, 16, 0}, {10, 30, 0}};
  const BucketLayout layout = layout_of(shapes);
  const GradientFn gradient = low_rank_plus_noise(layout);
  for (int n : {2, 3}) {
    constexpr int64_t kStart = 2, kSteps = 12;
    const CodecRun run = run_codec(n, powersgd(2, kStart), {layout}, kSteps, gradient);
    expect_same_bits_on_every_rank(run);
    for (const CodecTensor& m : layout.tensors) {
      std::vector<Mat> error(static_cast<size_t>(n), Mat(m.rows, m.cols));
      Mat basis(m.rows, 0), previous(m.rows, m.cols);  // span P and output of step t-1
      for (int64_t t = kStart; t < kSteps; ++t) {
        const Mat out = matrix_at(run.outputs[0][static_cast<size_t>(t)], m.offset, m.rows, m.cols);
        std::vector<Mat> own;  // M_i = g_i + e_i
        Mat summed(m.rows, m.cols);
        for (int r = 0; r < n; ++r) {
          Mat mi = matrix_at(gradient(r, t), m.offset, m.rows, m.cols);
          for (size_t k = 0; k < mi.v.size(); ++k) mi.v[k] += error[static_cast<size_t>(r)].v[k];
          for (size_t k = 0; k < mi.v.size(); ++k) summed.v[k] += mi.v[k];
          own.push_back(std::move(mi));
        }
        if (t > kStart) {
          const Mat q = product(previous, basis, true);  // Q_{t-1} = out^T P
          const Mat next_basis = column_basis(product(summed, q));
          const Mat expected = project(next_basis, summed);
          EXPECT_LE(max_abs_difference(out, expected), 1e-4 * max_abs(summed))
              << n << " ranks, step " << t << ", " << m.rows << " x " << m.cols;
        }
        basis = column_basis(out);
        previous = out;
        ASSERT_EQ(basis.cols, 2) << "the output has rank r";
        for (int r = 0; r < n; ++r) {
          const Mat kept = project(basis, own[static_cast<size_t>(r)]);
          Mat& e = error[static_cast<size_t>(r)];
          for (size_t k = 0; k < e.v.size(); ++k)
            e.v[k] = own[static_cast<size_t>(r)].v[k] - kept.v[k];
        }
      }
    }
  }
}

// Gradients of rank below r: every rank's matrix is u v_i^T for one u, so the summed
// matrix has rank 1 and P = S Q one independent column; the other r - 1 are rounding
// noise, which one Gram-Schmidt pass leaves far from orthogonal to the first (P P^T would
// be no projection). A zero gradient (a frozen layer) must give zeros, not NaN. Both
// outputs are then the sum (min rate 1: both matrices are compressed at r = 4).
TEST(PowerSgd, RankDeficientAndZeroGradientsGiveTheSum) {
  const BucketLayout layout = layout_of({{24, 16, 0}, {12, 20, 0}});
  const CodecTensor& zero = layout.tensors[1];
  const GradientFn gradient = [&](int rank, int64_t step) {
    std::vector<float> g(static_cast<size_t>(layout.size()), 0.0f);
    const std::vector<float> u = gaussian(24, 51, 0, 0);
    const std::vector<float> v = gaussian(16, 52, rank, step);
    for (size_t i = 0; i < 24; ++i)
      for (size_t j = 0; j < 16; ++j) g[i * 16 + j] = u[i] * v[j];
    return g;
  };
  for (int n : {2, 3}) {
    const CodecRun run = run_codec(n, powersgd(4, 0, 1.0), {layout}, 4, gradient);
    expect_same_bits_on_every_rank(run);
    for (int64_t t = 0; t < 4; ++t) {
      const std::vector<float>& out = run.outputs[0][static_cast<size_t>(t)];
      const Mat expected = matrix_at(sum_over_ranks(n, t, gradient), 0, 24, 16);
      EXPECT_LE(max_abs_difference(matrix_at(out, 0, 24, 16), expected),
                8.0 * FLT_EPSILON * (24 + 16) * n * max_abs(expected))
          << n << " ranks, step " << t;
      for (int64_t k = 0; k < zero.rows * zero.cols; ++k)
        ASSERT_EQ(out[static_cast<size_t>(zero.offset + k)], 0.0f) << n << " ranks, step " << t;
    }
  }
}

// (f) Two buckets with their own state, 3 ranks, compressed and plain steps: every rank
// holds the same bits after every step.
TEST(PowerSgd, EveryRankEndsWithTheSameBits) {
  const BucketLayout first = layout_of({{24, 16, 0}, {16, 1, 0}});
  const BucketLayout second = layout_of({{12, 20, 2}, {9, 9, 0}}, first.end);
  const GradientFn gradient = [&](int rank, int64_t step) {
    return gaussian(second.end, 31, rank, step);
  };
  const CodecRun run = run_codec(3, powersgd(3, 2, 1.0), {first, second}, 6, gradient);
  expect_same_bits_on_every_rank(run);
}

// (g) The bytes of each allreduce, 2 (N-1)/N x 4 per float: the whole bucket before
// start_iter; after it the plain floats (vector, 5 x 3 matrix, gaps), all P's and all Q's.
TEST(PowerSgd, ReportsTheExactWireBytes) {
  const BucketLayout layout = layout_of({{16, 1, 0}, {5, 3, 4}, {24, 16, 0}, {12, 20, 0}});
  const int64_t count = 16 + 15 + 4 + 24 * 16 + 12 * 20;
  const int64_t plain = 16 + 15 + 4, p = 24 * 2 + 12 * 2, q = 16 * 2 + 20 * 2;
  for (int n : {2, 3}) {
    const double per_float = 2.0 * (n - 1) / n * 4.0;
    const GradientFn gradient = [&](int rank, int64_t step) {
      return gaussian(layout.size(), 41, rank, step);
    };
    const CodecRun run = run_codec(n, powersgd(2, 1), {layout}, 3, gradient);
    for (int64_t t = 0; t < 3; ++t) {
      const CodecReport& report = run.reports[0][static_cast<size_t>(t)];
      EXPECT_DOUBLE_EQ(report.dense_bytes, per_float * static_cast<double>(count));
      EXPECT_DOUBLE_EQ(report.wire_bytes,
                       per_float * static_cast<double>(t < 1 ? count : plain + p + q))
          << n << " ranks, step " << t;
    }
  }
}

}  // namespace
}  // namespace braid::parallel
