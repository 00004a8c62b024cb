// GEMM through OpenBLAS. Row-major C[M,N] = alpha * op(A) op(B) + beta * C, where op(X)
// is X or its transpose. lda/ldb/ldc default to the packed row length.
#pragma once

#include <cstdint>
#include <string>

namespace braid {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           const float* B, float beta, float* C, int64_t lda = 0, int64_t ldb = 0, int64_t ldc = 0);

// OpenBLAS's kernel set ("SkylakeX", "Haswell", ...) and thread count, for the log.
std::string blas_config();
void set_blas_threads(int threads);

}  // namespace braid
