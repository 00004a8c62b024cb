// Test inputs and the dense reference for collective tests. The input of rank r at
// global element index i is a pure function of (dtype, op, seed, r, i), so every rank can
// compute what any result should be without communicating. Inputs are exactly
// representable in their dtype and keep results representable:
//   sum/avg: floats in [-1, 1], integers in [-1000, 1000];
//   prod:    floats in [0.5, 1.5], integers in {-3, -2, -1, 1, 2, 3} (|prod| <= 3^8);
//   min/max: floats in [-1, 1], integers in [-10^6, 10^6].
//
// Tolerances (the reference is computed in long double): min/max and every integer result are
// exact. A float sum of n terms, rounded to the dtype after each combination in any
// order, is within (n-1) u sum|x| of the exact sum (Higham, Accuracy and Stability of
// Numerical Algorithms, 2002, eq. 4.4), u the dtype's unit roundoff (f32 2^-24, f64 2^-53,
// bf16 2^-8, f16 2^-11); avg adds the rounding of 1/n and of the product (2u relative);
// a product of n terms is within (n-1) u |prod| (ibid. 3.1) to first order. The checks
// use n u, which also covers the second-order terms, plus f16's subnormal spacing 2^-24
// per combination where partial sums can be tiny.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

#include "core/convert.h"
#include "core/dtype.h"
#include "core/reduce.h"

namespace braid::comm::testing {

// Sanitizer builds run ~10x slower; sweeps there drop their largest counts and group sizes.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline bool is_float(DType t) { return t != DType::i32 && t != DType::i64; }

inline void encode(DType t, double x, void* out) {
  switch (t) {
    case DType::f32: {
      const auto v = static_cast<float>(x);
      std::memcpy(out, &v, 4);
      return;
    }
    case DType::f64:
      std::memcpy(out, &x, 8);
      return;
    case DType::bf16: {
      const auto v = float_to_bf16(static_cast<float>(x));
      std::memcpy(out, &v, 2);
      return;
    }
    case DType::f16: {
      const auto v = float_to_half(static_cast<float>(x));
      std::memcpy(out, &v, 2);
      return;
    }
    case DType::i32: {
      const auto v = static_cast<int32_t>(x);
      std::memcpy(out, &v, 4);
      return;
    }
    case DType::i64: {
      const auto v = static_cast<int64_t>(x);
      std::memcpy(out, &v, 8);
      return;
    }
  }
}

inline double decode(DType t, const void* p, size_t i) {
  const auto* at = static_cast<const uint8_t*>(p) + i * dtype_size(t);
  switch (t) {
    case DType::f32: {
      float v;
      std::memcpy(&v, at, 4);
      return v;
    }
    case DType::f64: {
      double v;
      std::memcpy(&v, at, 8);
      return v;
    }
    case DType::bf16: {
      BFloat16 v;
      std::memcpy(&v, at, 2);
      return bf16_to_float(v);
    }
    case DType::f16: {
      Half v;
      std::memcpy(&v, at, 2);
      return half_to_float(v);
    }
    case DType::i32: {
      int32_t v;
      std::memcpy(&v, at, 4);
      return v;
    }
    case DType::i64: {
      int64_t v;
      std::memcpy(&v, at, 8);
      return static_cast<double>(v);
    }
  }
  return 0;
}

inline double input_value(DType t, ReduceOp op, uint32_t seed, int rank, size_t i) {
  const uint64_t h = mix(mix(seed * 0x100000001B3ull + static_cast<uint64_t>(rank)) ^ i);
  const double unit = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
  double x;
  if (!is_float(t)) {
    static constexpr int kFactors[] = {-3, -2, -1, 1, 2, 3};
    if (op == ReduceOp::prod) return kFactors[h % 6];
    const int64_t range = (op == ReduceOp::min || op == ReduceOp::max) ? 1'000'000 : 1000;
    return static_cast<double>(static_cast<int64_t>(h % static_cast<uint64_t>(2 * range + 1)) -
                               range);
  }
  x = op == ReduceOp::prod ? 0.5 + unit : 2 * unit - 1;
  uint8_t buf[8];
  encode(t, x, buf);
  return decode(t, buf, 0);
}

// Fills `count` elements of rank `rank`'s input starting at global index `first`.
inline void fill_input(DType t, ReduceOp op, uint32_t seed, int rank, size_t first, void* out,
                       size_t count) {
  auto* p = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < count; ++i)
    encode(t, input_value(t, op, seed, rank, first + i), p + i * dtype_size(t));
}

inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::f32:
      return 0x1.0p-24;
    case DType::f64:
      return 0x1.0p-53;
    case DType::bf16:
      return 0x1.0p-8;
    case DType::f16:
      return 0x1.0p-11;
    default:
      return 0;
  }
}

// "" if got[0, count) is op over ranks 0..n-1 of the inputs at global indices first + i
// (within the tolerance above), else a description of the first bad element.
inline std::string check_reduced(DType t, ReduceOp op, uint32_t seed, int n, size_t first,
                                 const void* got, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    // long double (64-bit mantissa on x86) keeps the reference's own rounding far below
    // even f64's tolerance.
    long double acc = input_value(t, op, seed, 0, first + i), abs_sum = std::fabs(acc);
    for (int r = 1; r < n; ++r) {
      const long double x = input_value(t, op, seed, r, first + i);
      abs_sum += std::fabs(x);
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::avg:
          acc += x;
          break;
        case ReduceOp::prod:
          acc *= x;
          break;
        case ReduceOp::min:
          acc = std::min(acc, x);
          break;
        case ReduceOp::max:
          acc = std::max(acc, x);
          break;
      }
    }
    long double tol = 0;
    if (op == ReduceOp::avg) acc = is_float(t) ? acc / n : std::trunc(acc / n);
    if (is_float(t)) {
      const long double u = unit_roundoff(t);
      if (op == ReduceOp::sum) tol = n * u * abs_sum;
      if (op == ReduceOp::avg) tol = (n + 2) * u * abs_sum / n;
      if (op == ReduceOp::prod) tol = n * u * std::fabs(acc);
      if (t == DType::f16) tol += n * 0x1.0p-24L;
    }
    const long double v = decode(t, got, i);
    if (!(std::fabs(v - acc) <= tol)) {
      std::ostringstream s;
      s.precision(20);
      s << dtype_name(t) << " " << reduce_op_name(op) << " over " << n << " ranks: element " << i
        << " (global " << first + i << ") is " << v << ", expected " << acc << " +- " << tol;
      return s.str();
    }
  }
  return "";
}

// "" if got[0, count) equals rank `rank`'s input at global indices first + i, bit for bit.
inline std::string check_copied(DType t, ReduceOp op, uint32_t seed, int rank, size_t first,
                                const void* got, size_t count) {
  const size_t es = dtype_size(t);
  for (size_t i = 0; i < count; ++i) {
    uint8_t want[8];
    encode(t, input_value(t, op, seed, rank, first + i), want);
    if (std::memcmp(want, static_cast<const uint8_t*>(got) + i * es, es) != 0) {
      std::ostringstream s;
      s << dtype_name(t) << ": element " << i << " is " << decode(t, got, i) << ", expected rank "
        << rank << "'s input at " << first + i << " = " << decode(t, want, 0);
      return s.str();
    }
  }
  return "";
}

inline uint64_t digest(const void* p, size_t bytes) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001B3ull;
  return h;
}

}  // namespace braid::comm::testing
