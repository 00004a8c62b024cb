// Both GEMM libraries against a naive double-precision product: every transpose, alpha
// and beta, padded leading dimensions, sizes that are not multiples of any kernel's tile.
// A call repeated gives the same bits. (sgemm's choice between them: gemm_choice_test.)
#include "core/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"

namespace braid {
namespace {

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
};

std::vector<float> random_values(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(-1.0f, 1.0f);
  return v;
}

// C = alpha op(A) op(B) + beta C with padded leading dimensions (3 extra columns each).
void check(GemmLibrary library, const Case& c) {
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + 3, ldb = b_cols + 3, ldc = c.N + 3;
  const std::vector<float> A = random_values(a_rows * lda, 1), B = random_values(b_rows * ldb, 2);
  const std::vector<float> C0 = random_values(c.M * ldc, 3);
  std::vector<float> C = C0;
  sgemm_with(library, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), B.data(), c.beta, C.data(), lda,
             ldb, ldc);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double ref = 0, magnitude = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = c.ta ? A[k * lda + i] : A[i * lda + k];
        const double b = c.tb ? B[j * ldb + k] : B[k * ldb + j];
        ref += a * b;
        magnitude += std::fabs(a * b);
      }
      ref = c.alpha * ref + c.beta * C0[i * ldc + j];
      // fp32 accumulation: error grows with K and the terms' magnitude.
      const double tol = 1e-6 * (std::fabs(c.alpha) * magnitude + std::fabs(c.beta) + 1) *
                         std::sqrt(static_cast<double>(c.K) + 1) * 4;
      ASSERT_NEAR(C[i * ldc + j], ref, tol)
          << gemm_library_name(library) << " ta=" << c.ta << " tb=" << c.tb << " " << c.M << "x"
          << c.N << "x" << c.K << " at (" << i << ", " << j << ")";
    }
  // Padding columns of C are untouched.
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = c.N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]);
}

TEST(Gemm, BothLibrariesMatchANaiveProduct) {
  const Case cases[] = {
      {false, false, 7, 5, 3, 1.0f, 0.0f},     {false, true, 33, 17, 65, 1.0f, 1.0f},
      {true, false, 64, 31, 129, 0.5f, 0.0f},  {true, true, 9, 40, 16, -1.0f, 0.25f},
      {true, false, 130, 70, 128, 1.0f, 1.0f}, {false, false, 1, 1, 1, 2.0f, 0.0f},
  };
  for (const GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn})
    for (const Case& c : cases) check(library, c);
}

TEST(Gemm, RepeatedCallsGiveTheSameBits) {
  const std::vector<float> A = random_values(96 * 80, 4), B = random_values(80 * 112, 5);
  for (const GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
    std::vector<float> C1(96 * 112), C2(96 * 112);
    sgemm_with(library, false, false, 96, 112, 80, 1.0f, A.data(), B.data(), 0.0f, C1.data());
    sgemm_with(library, false, false, 96, 112, 80, 1.0f, A.data(), B.data(), 0.0f, C2.data());
    EXPECT_EQ(C1, C2) << gemm_library_name(library);
  }
}

TEST(Gemm, ZeroRowsOrColumnsDoNothing) {
  std::vector<float> C = {5.0f};
  const float a = 1.0f;
  for (const GemmLibrary library : {GemmLibrary::openblas, GemmLibrary::onednn}) {
    sgemm_with(library, false, false, 0, 1, 1, 1.0f, &a, &a, 0.0f, C.data());
    sgemm_with(library, false, false, 1, 0, 1, 1.0f, &a, &a, 0.0f, C.data());
  }
  EXPECT_EQ(C[0], 5.0f);
}

}  // namespace
}  // namespace braid
