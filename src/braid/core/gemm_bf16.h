// bf16 GEMM with fp32 accumulation, the product under mixed precision: row-major
// C[M,N] = alpha * op(A) op(B) + beta * C with A and B in bf16 and C in fp32 (lda/ldb/ldc
// default to the packed row length).
//
// Two paths, the same arithmetic up to the order of the fp32 sums (a product of two bf16
// numbers is exact in fp32):
//  - onednn: oneDNN's matmul primitive, made once per shape and thread and cached; it
//    runs VDPBF16PS where the CPU has AVX512_BF16 (twice the fp32 FMA rate) and emulates
//    bf16 on other AVX-512 CPUs;
//  - widen: both operands widened to fp32 and multiplied by sgemm, where oneDNN has no
//    bf16 kernel for the CPU (AVX2 only). Correct, no faster than fp32; said once.
// Below fp32's normal range the onednn path may flush inputs and results to zero
// (VDPBF16PS's DAZ and FTZ, whatever MXCSR says); mixed precision keeps such values out
// of products by scaling (fp16's loss scale) or accepts them as zero (bf16's range is fp32's).
// bias (optional, N floats) is added to every row of C, inside oneDNN's kernel: one pass
// over C where a broadcast before the product would take two.
// The path is chosen once per process (oneDNN asked whether it implements bf16 here) and
// can be forced (tests compare the two).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace braid {

enum class Bf16GemmPath { onednn, widen };

const char* bf16_gemm_path_name(Bf16GemmPath path);
// The path this process uses: oneDNN when it has a bf16 matmul for this CPU, else widen.
Bf16GemmPath bf16_gemm_path();
// Forces a path (tests); forcing onednn where oneDNN has no bf16 kernel is an error.
void set_bf16_gemm_path(Bf16GemmPath path);

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const BFloat16* A, const BFloat16* B, float beta, float* C, int64_t lda = 0,
               int64_t ldb = 0, int64_t ldc = 0, const float* bias = nullptr);

}  // namespace braid
