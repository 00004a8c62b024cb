#include "core/gemm.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>

#include "core/error.h"

extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
}

namespace braid {
namespace {

// oneDNN runs on OpenMP, whose thread count is per calling thread: each thread that
// multiplies applies the latest set_blas_threads() value before its next call.
std::atomic<int> g_threads{1};
std::atomic<int> g_threads_generation{1};

void apply_onednn_threads() {
  thread_local int applied_generation = 0;
  const int generation = g_threads_generation.load(std::memory_order_acquire);
  if (applied_generation == generation) return;
  omp_set_num_threads(g_threads.load(std::memory_order_relaxed));
  applied_generation = generation;
}

}  // namespace

const char* gemm_library_name(GemmLibrary library) {
  return library == GemmLibrary::onednn ? "onednn" : "openblas";
}

// On AVX2 (Zen 3), one thread, medians of alternated runs (`braid bench peak` and a
// harness over more shapes, 2026-11-23): with a short inner dimension (K <= 128) and
// neither side thin, oneDNN beats OpenBLAS whatever the transposes (mlp weight gradients
// at batch 128: 1.07-1.29x; gpt-tiny forwards with 128 inputs: 1.25-1.55x; conv input
// gradients with K = 64: 1.8-2x). With a long K they are even or OpenBLAS leads (mlp
// input gradient: 0.56-0.86x), and on thin outputs (10 rows) OpenBLAS leads.
GemmLibrary gemm_library_for(int64_t M, int64_t N, int64_t K) {
  constexpr int64_t kShortK = 128, kThin = 32;
  return K <= kShortK && std::min(M, N) >= kThin ? GemmLibrary::onednn : GemmLibrary::openblas;
}

void sgemm_with(GemmLibrary library, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float* A, const float* B, float beta, float* C, int64_t lda,
                int64_t ldb, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (lda == 0) lda = trans_a ? M : K;
  if (ldb == 0) ldb = trans_b ? K : N;
  if (ldc == 0) ldc = N;
  if (library == GemmLibrary::onednn) {
    apply_onednn_threads();
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K,
                                            alpha, A, lda, B, ldb, beta, C, ldc);
    BRAID_CHECK(status == dnnl_success, "oneDNN sgemm ", M, "x", N, "x", K, " failed with status ",
                static_cast<int>(status));
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(M), static_cast<blasint>(N),
              static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda), B,
              static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           const float* B, float beta, float* C, int64_t lda, int64_t ldb, int64_t ldc) {
  sgemm_with(gemm_library_for(M, N, K), trans_a, trans_b, M, N, K, alpha, A, B, beta, C, lda, ldb,
             ldc);
}

std::string blas_config() {
  const dnnl_version_t* v = dnnl_version();
  return std::string(openblas_get_config()) + " core=" + openblas_get_corename() + "; oneDNN " +
         std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + "; threads=" + std::to_string(openblas_get_num_threads());
}

void set_blas_threads(int threads) {
  BRAID_CHECK(threads >= 1, "BLAS threads must be >= 1, got ", threads);
  openblas_set_num_threads(threads);
  g_threads.store(threads, std::memory_order_relaxed);
  g_threads_generation.fetch_add(1, std::memory_order_release);
}

}  // namespace braid
