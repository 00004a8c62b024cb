// AVX-512 conversion loops (see convert.h for the contract they must meet bit for bit).
// With AVX512_BF16, VCVTNEPS2BF16 rounds 16 floats in one instruction, but it flushes
// fp32 subnormal inputs to zero; the rare vector holding one is redone with the integer
// rounding of the plain AVX-512 path, so results stay identical to the reference.
// GCC 12.2's AVX-512 intrinsics seed results with a self-initialised "undefined" vector,
// which -Wmaybe-uninitialized reports at every inlined use (GCC bug 105593, fixed in
// 12.3 and 13). The warning is about the header, not this code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "core/convert_kernels.h"

#define BRAID_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))
#define BRAID_TARGET_AVX512BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c,fma")))

namespace braid::detail {
namespace {

// Sixteen floats' bits -> sixteen bf16 in the low 16 bits of each 32-bit lane.
BRAID_TARGET_AVX512 inline __m512i round_to_bf16(__m512i x) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i biased = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb);
  const __m512i rounded = _mm512_srli_epi32(biased, 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  const __m512i magnitude = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7F800000));
  return _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
}

}  // namespace

BRAID_TARGET_AVX512 int64_t f32_to_bf16_avx512(const float* in, BFloat16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i r = round_to_bf16(_mm512_loadu_si512(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(r));
  }
  return i;
}

BRAID_TARGET_AVX512BF16 int64_t f32_to_bf16_avx512bf16(const float* in, BFloat16* out, int64_t n) {
  const __m512i exponent_bits = _mm512_set1_epi32(0x7F800000);
  const __m512i mantissa_bits = _mm512_set1_epi32(0x007FFFFF);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(in + i);
    const __mmask16 subnormal =
        _mm512_testn_epi32_mask(x, exponent_bits) & _mm512_test_epi32_mask(x, mantissa_bits);
    __m256i h;
    if (subnormal == 0) [[likely]] {
      h = (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(x));
    } else {
      h = _mm512_cvtepi32_epi16(round_to_bf16(x));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  return i;
}

BRAID_TARGET_AVX512 int64_t bf16_to_f32_avx512(const BFloat16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  return i;
}

BRAID_TARGET_AVX512 int64_t f32_to_f16_avx512(const float* in, Half* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  return i;
}

BRAID_TARGET_AVX512 int64_t f16_to_f32_avx512(const Half* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  return i;
}

}  // namespace braid::detail
