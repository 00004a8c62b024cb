// GEMM: row-major C[M,N] = alpha * op(A) op(B) + beta * C, where op(X) is X or its
// transpose; lda/ldb/ldc default to the packed row length.
//
// Two libraries multiply: OpenBLAS and oneDNN. Which one runs a shape is measured on this
// CPU the first time the shape is multiplied, or forced (gemm_choice.h). Both run on the
// threads set_blas_threads() gives.
#pragma once

#include <cstdint>
#include <string>

namespace braid {

enum class GemmLibrary { openblas, onednn };

const char* gemm_library_name(GemmLibrary library);

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           const float* B, float beta, float* C, int64_t lda = 0, int64_t ldb = 0, int64_t ldc = 0);
// The same product on a named library (benchmarks and tests compare the two).
void sgemm_with(GemmLibrary library, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float* A, const float* B, float beta, float* C, int64_t lda = 0,
                int64_t ldb = 0, int64_t ldc = 0);

// OpenBLAS's kernel set ("SkylakeX", "Haswell", ...), oneDNN's version and the thread
// count, for the log.
std::string blas_config();

// More would only oversubscribe: no machine braid runs on has this many cores per process.
inline constexpr int kMaxBlasThreads = 1024;
// Sets the threads both libraries multiply on. Throws braid::Error outside
// [1, kMaxBlasThreads]; warns once per process when `threads` exceeds the cores this
// process may run on (oversubscribed BLAS threads make each step slower, not faster).
void set_blas_threads(int threads);
// Applies set_blas_threads()'s count to oneDNN on the calling thread (OpenMP's count is
// per thread); every oneDNN call makes it first.
void apply_onednn_threads();

}  // namespace braid
