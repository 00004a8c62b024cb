// Internal to the conversion kernels: the per-instruction-set loops that convert.cpp
// dispatches to. Each handles whole vectors only and returns how many elements it did;
// the caller finishes the tail with the scalar reference, so tails are bitwise right by
// construction. Callers must have checked that the CPU supports the level.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace braid::detail {

int64_t f32_to_bf16_avx2(const float* in, BFloat16* out, int64_t n);
int64_t bf16_to_f32_avx2(const BFloat16* in, float* out, int64_t n);
int64_t f32_to_f16_avx2(const float* in, Half* out, int64_t n);
int64_t f16_to_f32_avx2(const Half* in, float* out, int64_t n);

int64_t f32_to_bf16_avx512(const float* in, BFloat16* out, int64_t n);
int64_t f32_to_bf16_avx512bf16(const float* in, BFloat16* out, int64_t n);
int64_t bf16_to_f32_avx512(const BFloat16* in, float* out, int64_t n);
int64_t f32_to_f16_avx512(const float* in, Half* out, int64_t n);
int64_t f16_to_f32_avx512(const Half* in, float* out, int64_t n);

}  // namespace braid::detail
