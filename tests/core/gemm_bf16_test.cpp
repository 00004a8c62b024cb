// The bf16 GEMM against a double-precision product of the same bf16 values: every
// transpose, alpha, beta and a bias, padded leading dimensions, odd sizes, and adversarial
// magnitudes (large, tiny, subnormal bf16). A product of two bf16 numbers is exact in fp32,
// so the only error is fp32 accumulation: bounded by K ulps of the sum of |terms|; below
// fp32's normal range the hardware may flush to zero (within the smallest normal float).
// Both paths (oneDNN, widened to fp32) meet it, and agree with each other within it.
#include "core/gemm_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "core/rng.h"

namespace braid {
namespace {

constexpr double kMinNormal = std::numeric_limits<float>::min();

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  bool bias = false;  // a bias added to every row (alpha 1)
};

// bf16 values: uniform in [-1, 1) scaled by `scale` (1e30, 1, 1e-30, 1e-39 subnormal).
std::vector<BFloat16> random_bf16(int64_t n, uint64_t seed, float scale) {
  Rng rng(seed);
  std::vector<BFloat16> v(static_cast<size_t>(n));
  for (auto& x : v) x = float_to_bf16(rng.uniform(-1.0f, 1.0f) * scale);
  return v;
}

// Restores the detected path after a test forced one.
struct PathGuard {
  Bf16GemmPath saved = bf16_gemm_path();
  ~PathGuard() { set_bf16_gemm_path(saved); }
};

std::vector<float> run(const Case& c, const std::vector<BFloat16>& A,
                       const std::vector<BFloat16>& B, const std::vector<float>& C0, int64_t lda,
                       int64_t ldb, int64_t ldc, const std::vector<float>& bias = {}) {
  std::vector<float> C = C0;
  gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), B.data(), c.beta, C.data(), lda, ldb, ldc,
            c.bias ? bias.data() : nullptr);
  return C;
}

void check(const Case& c, float scale) {
  SCOPED_TRACE(::testing::Message() << "ta=" << c.ta << " tb=" << c.tb << " " << c.M << "x" << c.N
                                    << "x" << c.K << " alpha " << c.alpha << " beta " << c.beta
                                    << " bias " << c.bias << " scale " << scale);
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = c.N + 2;
  // Products of two operands at `scale` each: the second is kept near 1 so that products
  // stay in fp32's range (1e30 x 1e30 would overflow, which is fp32's limit, not bf16's).
  const auto A = random_bf16(a_rows * lda, 1, scale), B = random_bf16(b_rows * ldb, 2, 1.0f);
  std::vector<float> C0(static_cast<size_t>(c.M * ldc));
  Rng rng(3);
  for (float& x : C0) x = rng.uniform(-1.0f, 1.0f) * scale;
  std::vector<float> bias(static_cast<size_t>(c.N));
  for (float& x : bias) x = rng.uniform(-1.0f, 1.0f) * scale;

  std::vector<std::vector<float>> results;
  for (const Bf16GemmPath path : {Bf16GemmPath::onednn, Bf16GemmPath::widen}) {
    if (path == Bf16GemmPath::onednn && bf16_gemm_path() != Bf16GemmPath::onednn) continue;
    const PathGuard guard;
    set_bf16_gemm_path(path);
    results.push_back(run(c, A, B, C0, lda, ldb, ldc, bias));
  }
  for (const auto& C : results)
    for (int64_t i = 0; i < c.M; ++i) {
      for (int64_t j = 0; j < c.N; ++j) {
        double ref = 0, magnitude = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          const double a = bf16_to_float(c.ta ? A[k * lda + i] : A[i * lda + k]);
          const double b = bf16_to_float(c.tb ? B[j * ldb + k] : B[k * ldb + j]);
          ref += a * b;
          magnitude += std::fabs(a * b);
        }
        const double c0 = C0[static_cast<size_t>(i * ldc + j)];
        const double b0 = c.bias ? bias[static_cast<size_t>(j)] : 0.0;
        ref = c.alpha * ref + c.beta * c0 + b0;
        // fp32 accumulation of K terms, then alpha and beta: a few ulps per term of the
        // magnitudes involved. Below fp32's normal range VDPBF16PS treats inputs as zero and
        // flushes results (DAZ and FTZ whatever MXCSR says), so there the error may be as
        // large as the smallest normal float.
        const double flush = magnitude < kMinNormal || std::fabs(c0) < kMinNormal ? kMinNormal : 0;
        const double tol =
            (std::fabs(c.alpha) * magnitude + std::fabs(c.beta * c0) + std::fabs(b0)) *
                (static_cast<double>(c.K) + 2) * 1.2e-7 +
            flush + std::numeric_limits<float>::denorm_min();
        ASSERT_NEAR(C[static_cast<size_t>(i * ldc + j)], ref, tol)
            << "at (" << i << ", " << j << ")";
      }
      for (int64_t j = c.N; j < ldc; ++j)
        ASSERT_EQ(C[static_cast<size_t>(i * ldc + j)], C0[static_cast<size_t>(i * ldc + j)])
            << "padding of C written";
    }
}

TEST(GemmBf16, BothPathsMatchADoublePrecisionProductOfTheBf16Values) {
  const Case cases[] = {
      {false, false, 7, 5, 3, 1.0f, 0.0f},         {false, true, 33, 17, 65, 1.0f, 1.0f},
      {true, false, 64, 31, 129, 0.5f, 0.0f},      {true, true, 9, 40, 16, -1.0f, 0.25f},
      {false, true, 130, 70, 200, 1.0f, 1.0f},     {false, false, 1, 1, 1, 2.0f, 0.0f},
      {false, true, 33, 17, 65, 1.0f, 0.0f, true}, {true, true, 9, 40, 16, 1.0f, 0.25f, true},
  };
  for (const Case& c : cases) check(c, 1.0f);
}

TEST(GemmBf16, LargeTinyAndSubnormalValues) {
  for (const float scale : {1e30f, 1e-30f, 1e-39f})
    check({false, true, 24, 19, 37, 1.0f, 1.0f, true}, scale);
}

TEST(GemmBf16, ThePathsAgreeOnAModelSizedProduct) {
  const int64_t M = 128, N = 256, K = 512;
  const auto A = random_bf16(M * K, 4, 1.0f), B = random_bf16(N * K, 5, 1.0f);
  const std::vector<float> C0(static_cast<size_t>(M * N), 0.0f);
  if (bf16_gemm_path() != Bf16GemmPath::onednn) GTEST_SKIP() << "oneDNN has no bf16 here";
  std::vector<float> fast, widened;
  {
    const PathGuard guard;
    fast = run({false, true, M, N, K, 1.0f, 0.0f}, A, B, C0, K, K, N);
    set_bf16_gemm_path(Bf16GemmPath::widen);
    widened = run({false, true, M, N, K, 1.0f, 0.0f}, A, B, C0, K, K, N);
  }
  for (size_t i = 0; i < fast.size(); ++i)
    ASSERT_NEAR(fast[i], widened[i], 1e-4 * std::sqrt(static_cast<double>(K))) << i;
}

}  // namespace
}  // namespace braid
