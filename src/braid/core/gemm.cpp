#include "core/gemm.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "core/error.h"
#include "core/gemm_choice.h"
#include "core/log.h"

extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
}

namespace braid {
namespace {

std::atomic<int> g_threads{1};
std::atomic<int> g_threads_generation{1};

// The CPUs this process may run on (its affinity mask: taskset, cgroup cpusets), which
// can be fewer than the machine has.
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

// oneDNN runs on OpenMP, whose thread count is per calling thread: each thread that
// multiplies applies the latest set_blas_threads() value before its next call.
void apply_onednn_threads() {
  thread_local int applied_generation = 0;
  const int generation = g_threads_generation.load(std::memory_order_acquire);
  if (applied_generation == generation) return;
  omp_set_num_threads(g_threads.load(std::memory_order_relaxed));
  applied_generation = generation;
}

const char* gemm_library_name(GemmLibrary library) {
  return library == GemmLibrary::onednn ? "onednn" : "openblas";
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
  if (M == 0 || N == 0) return;
  if (lda == 0) lda = trans_a ? M : K;
  if (ldb == 0) ldb = trans_b ? K : N;
  if (ldc == 0) ldc = N;
  const GemmShape shape{trans_a, trans_b, M, N, K};
  std::optional<GemmMethod> method = chosen_gemm_method(shape);
  if (!method) method = choose_gemm_method(shape, alpha, A, lda, B, ldb, beta, C, ldc);
  sgemm_by(*method, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

std::string blas_config() {
  const dnnl_version_t* v = dnnl_version();
  return std::string(openblas_get_config()) + " core=" + openblas_get_corename() + "; oneDNN " +
         std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + "; threads=" + std::to_string(openblas_get_num_threads());
}

void set_blas_threads(int threads) {
  BRAID_CHECK(threads >= 1 && threads <= kMaxBlasThreads, "threads must be in [1, ",
              kMaxBlasThreads, "], got ", threads, " (this process may use ", usable_cores(),
              " cores)");
  static std::atomic<bool> warned{false};
  if (const int cores = usable_cores(); threads > cores && !warned.exchange(true))
    log_warn("threads ", threads, " exceeds the ", cores,
             " cores this process may use: oversubscribed BLAS threads make each step slower, "
             "not faster; use --threads ",
             cores, " or fewer");
  openblas_set_num_threads(threads);
  g_threads.store(threads, std::memory_order_relaxed);
  g_threads_generation.fetch_add(1, std::memory_order_release);
}

}  // namespace braid
