#include "core/gemm.h"

#include <cblas.h>

extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
}

namespace braid {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           const float* B, float beta, float* C, int64_t lda, int64_t ldb, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (lda == 0) lda = trans_a ? M : K;
  if (ldb == 0) ldb = trans_b ? K : N;
  if (ldc == 0) ldc = N;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M), static_cast<blasint>(N),
              static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda), B,
              static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

std::string blas_config() {
  return std::string(openblas_get_config()) + " core=" + openblas_get_corename() +
         " threads=" + std::to_string(openblas_get_num_threads());
}

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

}  // namespace braid
