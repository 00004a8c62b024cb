// Conversions between fp32 and the 16-bit float types bf16 and f16 (IEEE binary16).
//
// Contract, identical on every instruction-set path (the scalar helpers below are the
// reference; tests compare every vector path with them bit for bit):
//   f32 -> bf16: round to nearest, ties to even. Overflow rounds to inf; inf stays inf.
//                A NaN stays NaN: its top 16 bits are kept and the quiet bit is set
//                (what VCVTNEPS2BF16 does). fp32 subnormals round to bf16 subnormals
//                (VCVTNEPS2BF16 would flush them; that path corrects those lanes).
//   bf16 -> f32: exact (a shift); NaN payloads pass through unchanged.
//   f32 -> f16:  round to nearest, ties to even, including into f16's subnormal range;
//                |x| >= 65520 becomes inf. NaN: sign, quiet bit and the top 9 payload
//                bits are kept (what VCVTPS2PH does).
//   f16 -> f32:  exact; f16 subnormals become normal floats; a NaN is quieted with its
//                payload kept (what VCVTPH2PS does).
// The vector paths assume MXCSR's DAZ bit is clear (the default); the results above do
// not depend on the rounding mode.
//
// The array functions take n >= 0 elements; in and out must not overlap.
#pragma once

#include <bit>
#include <cstdint>

#include "core/cpu.h"
#include "core/dtype.h"

namespace braid {

inline float bf16_to_float(BFloat16 h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h.bits) << 16);
}

inline BFloat16 float_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return {static_cast<uint16_t>((x >> 16) | 0x0040u)};
  // Adding 0x7FFF plus the lowest kept bit carries into the kept half exactly when the
  // dropped half is above one half, or equal to it with an odd kept half. A carry out of
  // the mantissa bumps the exponent, which is the right answer (up to inf).
  const uint32_t lsb = (x >> 16) & 1u;
  return {static_cast<uint16_t>((x + 0x7FFFu + lsb) >> 16)};
}

inline float half_to_float(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1Fu;
  uint32_t mantissa = h.bits & 0x3FFu;
  uint32_t x;
  if (exponent == 0x1F) {
    x = sign | 0x7F800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {
    x = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    x = sign;
  } else {
    // Subnormal: m * 2^-24. Normalise so the leading one becomes the implicit bit.
    const int shift = std::countl_zero(mantissa) - 21;  // moves the top bit to bit 10
    mantissa = (mantissa << shift) & 0x3FFu;
    x = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(x);
}

inline Half float_to_half(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t x = bits & 0x7FFFFFFFu;
  if (x > 0x7F800000u) return {static_cast<uint16_t>(sign | 0x7E00u | ((x >> 13) & 0x3FFu))};
  // 65520 is halfway between the largest half, 65504 (odd mantissa), and 2^16: ties go up.
  if (x >= 0x477FF000u) return {static_cast<uint16_t>(sign | 0x7C00u)};
  if (x >= 0x38800000u) {  // normal half: rebias the exponent 127 -> 15, round 13 bits
    const uint32_t lsb = (x >> 13) & 1u;
    return {static_cast<uint16_t>(sign | ((x - 0x38000000u + 0xFFFu + lsb) >> 13))};
  }
  // Subnormal half h * 2^-24. At or below 2^-25 (a tie with zero, even) the result is zero.
  if (x <= 0x33000000u) return {sign};
  const uint32_t exponent = x >> 23;  // 102..112
  const uint32_t mantissa = (x & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  uint32_t h = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half_way = 1u << (shift - 1u);
  if (rest > half_way || (rest == half_way && (h & 1u))) ++h;  // may reach 0x400: min normal
  return {static_cast<uint16_t>(sign | h)};
}

// Array conversions on the best path this CPU has.
void f32_to_bf16(const float* in, BFloat16* out, int64_t n);
void bf16_to_f32(const BFloat16* in, float* out, int64_t n);
void f32_to_f16(const float* in, Half* out, int64_t n);
void f16_to_f32(const Half* in, float* out, int64_t n);

// The same on a chosen path, for tests and benchmarks. Throws braid::Error if this CPU
// lacks `isa` or n < 0. Levels without a special kernel for a conversion use the next
// lower one (e.g. f16 has no avx512_bf16 kernel and runs the avx512 one).
void f32_to_bf16(const float* in, BFloat16* out, int64_t n, Isa isa);
void bf16_to_f32(const BFloat16* in, float* out, int64_t n, Isa isa);
void f32_to_f16(const float* in, Half* out, int64_t n, Isa isa);
void f16_to_f32(const Half* in, float* out, int64_t n, Isa isa);

}  // namespace braid
