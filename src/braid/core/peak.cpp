// Peak measurements. The FMA loops keep every accumulator in a register and feed it
// constants, so they are limited only by FMA throughput: with latency L cycles and P
// FMA ports a core needs L*P independent chains (8 to 10 on current x86); 16 zmm or 12
// ymm chains cover that while leaving registers for the operands. The accumulators
// converge (acc = acc*a + b with |a| < 1), so no sample ever meets inf or a subnormal,
// and their sum goes to a volatile sink so the compiler cannot drop the loop. The inner
// loops are unrolled by pragma so the accumulator arrays live in registers at -O2 too
// (not under ASan, which keeps them in memory: sanitizer builds measure nothing useful).
#include "core/peak.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/error.h"
#include "core/gemm.h"
#include "core/memory.h"
#include "core/rng.h"

namespace braid {
namespace {

volatile float g_sink = 0;

// Adds the lanes into the sink (not _mm512_reduce_add_ps, which trips GCC 12.2's
// -Wuninitialized through its header, GCC bug 105593).
void sink_lanes(const float* lanes, int count) {
  float s = 0;
  for (int i = 0; i < count; ++i) s += lanes[i];
  g_sink = s;
}

// Iterations per timed sample: ~1M vector instructions, a fraction of a millisecond,
// long enough for the clock's resolution, short enough to dodge most interruptions.
constexpr int64_t kSampleIters = 1 << 16;

using Clock = std::chrono::steady_clock;

PeakResult summarise(std::vector<double>& gflops) {
  PeakResult r;
  r.available = true;
  r.samples = static_cast<int64_t>(gflops.size());
  std::sort(gflops.begin(), gflops.end());
  r.best_gflops = gflops.back();
  r.median_gflops = gflops[gflops.size() / 2];
  return r;
}

// Runs sample() (which returns the flops it did) until `seconds` have passed.
template <typename Sample>
PeakResult run_for(double seconds, Sample sample) {
  BRAID_CHECK(seconds > 0, "peak measurement: duration must be > 0 seconds, got ", seconds);
  std::vector<double> gflops;
  gflops.reserve(4096);
  const auto start = Clock::now();
  const auto limit = std::chrono::duration<double>(seconds);
  do {
    const auto t0 = Clock::now();
    const double flops = sample();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (dt > 0) gflops.push_back(flops / dt * 1e-9);
  } while (Clock::now() - start < limit || gflops.empty());
  return summarise(gflops);
}

__attribute__((target("avx512f"))) double fma_sample_avx512() {
  constexpr int kChains = 16;
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f);
  const __m512 b = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < kSampleIters; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, total);
  sink_lanes(lanes, 16);
  return 2.0 * 16 * kChains * static_cast<double>(kSampleIters);
}

__attribute__((target("avx2,fma"))) double fma_sample_avx2() {
  constexpr int kChains = 12;
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f);
  const __m256 b = _mm256_set1_ps(0.001f);
  for (int64_t i = 0; i < kSampleIters; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, total);
  sink_lanes(lanes, 8);
  return 2.0 * 8 * kChains * static_cast<double>(kSampleIters);
}

// acc += a*b over bf16 pairs. The increment per instruction is tiny (+-2^-19 per lane), so
// the sums stay finite for any run length.
__attribute__((target("avx512f,avx512bf16"))) double bf16_dot_sample() {
  constexpr int kChains = 16;
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_setzero_ps();
  const __m512 small = _mm512_set1_ps(1.0f / 1024);
  const __m512bh a = _mm512_cvtne2ps_pbh(small, small);
  const __m512bh b = _mm512_cvtne2ps_pbh(small, _mm512_set1_ps(-1.0f / 1024));
  for (int64_t i = 0; i < kSampleIters; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, total);
  sink_lanes(lanes, 16);
  return 64.0 * kChains * static_cast<double>(kSampleIters);
}

}  // namespace

PeakResult measure_fma_peak(Isa isa, double seconds) {
  require_isa(isa, "measure_fma_peak");
  BRAID_CHECK(seconds > 0, "measure_fma_peak: duration must be > 0 seconds, got ", seconds);
  switch (isa) {
    case Isa::avx512:
    case Isa::avx512_bf16:
      return run_for(seconds, fma_sample_avx512);
    case Isa::avx2:
      return run_for(seconds, fma_sample_avx2);
    case Isa::scalar:
      break;
  }
  return {};
}

PeakResult measure_bf16_dot_peak(double seconds) {
  BRAID_CHECK(seconds > 0, "measure_bf16_dot_peak: duration must be > 0 seconds, got ", seconds);
  if (!isa_supported(Isa::avx512_bf16)) return {};
  return run_for(seconds, bf16_dot_sample);
}

PeakResult measure_sgemm(GemmLibrary library, bool trans_a, bool trans_b, int64_t M, int64_t N,
                         int64_t K, int repeats) {
  BRAID_CHECK(M >= 1 && N >= 1 && K >= 1, "measure_sgemm: M, N, K must be >= 1, got ", M, "x", N,
              "x", K);
  BRAID_CHECK(repeats >= 1, "measure_sgemm: repeats must be >= 1, got ", repeats);
  Buffer a(sizeof(float) * M * K, MemCategory::workspace);
  Buffer b(sizeof(float) * K * N, MemCategory::workspace);
  Buffer c(sizeof(float) * M * N, MemCategory::workspace);
  float* A = static_cast<float*>(a.data());
  float* B = static_cast<float*>(b.data());
  float* C = static_cast<float*>(c.data());
  Rng rng(12345, 0, 0);
  for (int64_t i = 0; i < M * K; ++i) A[i] = rng.uniform(-0.5f, 0.5f);
  for (int64_t i = 0; i < K * N; ++i) B[i] = rng.uniform(-0.5f, 0.5f);
  // Warm: first touch of C, BLAS's own buffers and thread start-up stay out of the samples.
  auto multiply = [&] { sgemm_with(library, trans_a, trans_b, M, N, K, 1.0f, A, B, 0.0f, C); };
  multiply();
  const double flops =
      2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  std::vector<double> gflops;
  gflops.reserve(repeats);
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    multiply();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    gflops.push_back(dt > 0 ? flops / dt * 1e-9 : 0.0);
  }
  g_sink = C[M * N - 1];
  return summarise(gflops);
}

}  // namespace braid
