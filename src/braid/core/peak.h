// Measurements behind `braid bench peak`: what one core can do, to put the engine's
// own numbers in proportion. Each runs on the calling thread, takes many short timed
// samples and reports the best (what the hardware can do) and the median (what it
// typically did; the gap shows interference from other work on the machine).
// Nothing here asserts on time; a measurement the CPU cannot run reports
// available = false and zeros.
#pragma once

#include <cstdint>

#include "core/cpu.h"
#include "core/gemm.h"

namespace braid {

struct PeakResult {
  bool available = false;
  double best_gflops = 0;    // GFLOP/s of the fastest sample
  double median_gflops = 0;  // GFLOP/s of the median sample
  int64_t samples = 0;
};

// fp32 FMA throughput of one core: independent chains of vector FMAs (16 zmm chains for
// the avx512 levels, 12 ymm for avx2), 2 flops per lane. Runs for about `seconds` (at
// least one sample). Isa::scalar is unavailable. Throws braid::Error if seconds <= 0 or
// the CPU lacks `isa`.
PeakResult measure_fma_peak(Isa isa, double seconds);

// bf16 dot-product throughput with VDPBF16PS: each instruction does 32 bf16 multiply-adds
// into 16 fp32 lanes, counted as 64 flops. Unavailable without AVX512_BF16.
PeakResult measure_bf16_dot_peak(double seconds);

// sgemm on `library`: C[M,N] = op(A) op(B), 2*M*N*K flops per call, with whatever BLAS
// threads are configured. Buffers are allocated and warmed once; then `repeats` timed
// calls. Throws braid::Error unless M, N, K, repeats >= 1.
PeakResult measure_sgemm(GemmLibrary library, bool trans_a, bool trans_b, int64_t M, int64_t N,
                         int64_t K, int repeats);

}  // namespace braid
