// AVX2 conversion loops (see convert.h for the contract they must meet bit for bit).
// bf16 rounds with integer arithmetic, the scalar reference's trick 8 lanes at a time;
// f16 uses the F16C instructions, whose rounding and NaN handling the reference copies.
#include <immintrin.h>

#include "core/convert_kernels.h"

#define BRAID_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace braid::detail {
namespace {

// Eight floats' bits -> eight bf16 in the low 16 bits of each 32-bit lane.
BRAID_TARGET_AVX2 inline __m256i round_to_bf16(__m256i x) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i biased = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb);
  const __m256i rounded = _mm256_srli_epi32(biased, 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  const __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}

}  // namespace

BRAID_TARGET_AVX2 int64_t f32_to_bf16_avx2(const float* in, BFloat16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = round_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    const __m256i b =
        round_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8)));
    // packus works within 128-bit halves: [a0-3 b0-3 | a4-7 b4-7]; put the quarters in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  return i;
}

BRAID_TARGET_AVX2 int64_t bf16_to_f32_avx2(const BFloat16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), x);
  }
  return i;
}

BRAID_TARGET_AVX2 int64_t f32_to_f16_avx2(const float* in, Half* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  return i;
}

BRAID_TARGET_AVX2 int64_t f16_to_f32_avx2(const Half* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  return i;
}

}  // namespace braid::detail
