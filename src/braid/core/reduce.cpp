// Reduction kernels for collectives (core/reduce.h). Each native type has two vectorised
// loops, dst = op(dst, src) and out = op(a, b), over __restrict pointers; the op is a
// switch outside the loop, so one multiversioned function per type covers every op.
// bf16 and f16 go through the f32 loops in L1-sized blocks: widen both operands with the
// conversion kernels of core/convert.h, combine in f32, round back. Every path performs
// the same IEEE operation per element, so results depend only on operand order.
//
// Semantics: integer sum and prod wrap around (two's complement); float min/max return a
// NaN operand when there is one (a NaN gradient must not vanish in a max).
#include "core/reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/convert.h"
#include "core/error.h"
#include "core/multiversion.h"

// ThreadSanitizer instruments the ifunc resolvers that target_clones generates, and the
// dynamic loader runs them before TSan's runtime is up, which crashes every TSan binary
// that links these kernels (the comm tests). TSan builds take the baseline loops.
#if defined(__SANITIZE_THREAD__)
#define BRAID_REDUCE_MULTIVERSION
#else
#define BRAID_REDUCE_MULTIVERSION BRAID_MULTIVERSION
#endif

namespace braid {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::prod:
      return "prod";
  }
  return "?";
}

namespace {

// Integers are combined as their unsigned counterparts so overflow wraps instead of
// being undefined.
template <typename T>
struct ArithOf {
  using type = T;
};
template <>
struct ArithOf<int32_t> {
  using type = uint32_t;
};
template <>
struct ArithOf<int64_t> {
  using type = uint64_t;
};
template <typename T>
using Arith = typename ArithOf<T>::type;

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) + static_cast<Arith<T>>(b));
  }
};
struct Prod {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) * static_cast<Arith<T>>(b));
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return (a < b || a != a) ? a : b;
    else
      return a < b ? a : b;
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return (a > b || a != a) ? a : b;
    else
      return a > b ? a : b;
  }
};

template <typename Op, typename T>
[[gnu::always_inline]] inline void into_loop(T* __restrict dst, const T* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(dst[i], src[i]);
}

template <typename Op, typename T>
[[gnu::always_inline]] inline void pair_loop(T* __restrict out, const T* __restrict a,
                                             const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

template <typename T>
[[gnu::always_inline]] inline void into_switch(ReduceOp op, T* __restrict dst,
                                               const T* __restrict src, size_t n) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      into_loop<Sum>(dst, src, n);
      break;
    case ReduceOp::min:
      into_loop<Min>(dst, src, n);
      break;
    case ReduceOp::max:
      into_loop<Max>(dst, src, n);
      break;
    case ReduceOp::prod:
      into_loop<Prod>(dst, src, n);
      break;
  }
}

template <typename T>
[[gnu::always_inline]] inline void pair_switch(ReduceOp op, T* __restrict out,
                                               const T* __restrict a, const T* __restrict b,
                                               size_t n) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      pair_loop<Sum>(out, a, b, n);
      break;
    case ReduceOp::min:
      pair_loop<Min>(out, a, b, n);
      break;
    case ReduceOp::max:
      pair_loop<Max>(out, a, b, n);
      break;
    case ReduceOp::prod:
      pair_loop<Prod>(out, a, b, n);
      break;
  }
}

// One multiversioned entry per native type and shape (target_clones cannot be templates).
BRAID_REDUCE_MULTIVERSION void into_f32(ReduceOp op, float* __restrict d, const float* __restrict s,
                                        size_t n) {
  into_switch(op, d, s, n);
}
BRAID_REDUCE_MULTIVERSION void into_f64(ReduceOp op, double* __restrict d,
                                        const double* __restrict s, size_t n) {
  into_switch(op, d, s, n);
}
BRAID_REDUCE_MULTIVERSION void into_i32(ReduceOp op, int32_t* __restrict d,
                                        const int32_t* __restrict s, size_t n) {
  into_switch(op, d, s, n);
}
BRAID_REDUCE_MULTIVERSION void into_i64(ReduceOp op, int64_t* __restrict d,
                                        const int64_t* __restrict s, size_t n) {
  into_switch(op, d, s, n);
}
BRAID_REDUCE_MULTIVERSION void pair_f32(ReduceOp op, float* __restrict o, const float* __restrict a,
                                        const float* __restrict b, size_t n) {
  pair_switch(op, o, a, b, n);
}
BRAID_REDUCE_MULTIVERSION void pair_f64(ReduceOp op, double* __restrict o,
                                        const double* __restrict a, const double* __restrict b,
                                        size_t n) {
  pair_switch(op, o, a, b, n);
}
BRAID_REDUCE_MULTIVERSION void pair_i32(ReduceOp op, int32_t* __restrict o,
                                        const int32_t* __restrict a, const int32_t* __restrict b,
                                        size_t n) {
  pair_switch(op, o, a, b, n);
}
BRAID_REDUCE_MULTIVERSION void pair_i64(ReduceOp op, int64_t* __restrict o,
                                        const int64_t* __restrict a, const int64_t* __restrict b,
                                        size_t n) {
  pair_switch(op, o, a, b, n);
}

BRAID_REDUCE_MULTIVERSION void scale_f32(float* __restrict x, float s, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}
BRAID_REDUCE_MULTIVERSION void scale_f64(double* __restrict x, double s, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

void into_native(DType t, ReduceOp op, void* d, const void* s, size_t n) {
  switch (t) {
    case DType::f32:
      into_f32(op, static_cast<float*>(d), static_cast<const float*>(s), n);
      break;
    case DType::f64:
      into_f64(op, static_cast<double*>(d), static_cast<const double*>(s), n);
      break;
    case DType::i32:
      into_i32(op, static_cast<int32_t*>(d), static_cast<const int32_t*>(s), n);
      break;
    case DType::i64:
      into_i64(op, static_cast<int64_t*>(d), static_cast<const int64_t*>(s), n);
      break;
    default:
      break;
  }
}

void pair_native(DType t, ReduceOp op, void* o, const void* a, const void* b, size_t n) {
  switch (t) {
    case DType::f32:
      pair_f32(op, static_cast<float*>(o), static_cast<const float*>(a),
               static_cast<const float*>(b), n);
      break;
    case DType::f64:
      pair_f64(op, static_cast<double*>(o), static_cast<const double*>(a),
               static_cast<const double*>(b), n);
      break;
    case DType::i32:
      pair_i32(op, static_cast<int32_t*>(o), static_cast<const int32_t*>(a),
               static_cast<const int32_t*>(b), n);
      break;
    case DType::i64:
      pair_i64(op, static_cast<int64_t*>(o), static_cast<const int64_t*>(a),
               static_cast<const int64_t*>(b), n);
      break;
    default:
      break;
  }
}

// Elements per block on the staged paths: three blocks of f32 stay in L1.
constexpr size_t kBlock = 1024;
constexpr size_t kBlockBytes = kBlock * sizeof(float);

bool is_16bit_float(DType t) { return t == DType::bf16 || t == DType::f16; }

void widen(DType t, const void* in, float* out, size_t n) {
  if (t == DType::bf16)
    bf16_to_f32(static_cast<const BFloat16*>(in), out, static_cast<int64_t>(n));
  else
    f16_to_f32(static_cast<const Half*>(in), out, static_cast<int64_t>(n));
}

void narrow(DType t, const float* in, void* out, size_t n) {
  if (t == DType::bf16)
    f32_to_bf16(in, static_cast<BFloat16*>(out), static_cast<int64_t>(n));
  else
    f32_to_f16(in, static_cast<Half*>(out), static_cast<int64_t>(n));
}

bool aligned_for(const void* p, size_t align) {
  return reinterpret_cast<uintptr_t>(p) % align == 0;
}

// A 16-bit operand block at `p`, through `staging` when `p` is not 2-byte aligned.
const void* aligned_16bit(const uint8_t* p, uint16_t* staging, size_t m) {
  if (aligned_for(p, 2)) return p;
  std::memcpy(staging, p, m * 2);
  return staging;
}

void narrow_to(DType t, const float* in, uint8_t* out, uint16_t* staging, size_t m) {
  if (aligned_for(out, 2)) return narrow(t, in, out, m);
  narrow(t, in, staging, m);
  std::memcpy(out, staging, m * 2);
}

// out = op(a, b) for bf16/f16, block by block through f32. Reading both operand blocks
// before writing the output block makes out == a or out == b safe.
void pair_16bit(DType t, ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  alignas(64) uint16_t staging[kBlock];
  auto* o = static_cast<uint8_t*>(out);
  auto* pa = static_cast<const uint8_t*>(a);
  auto* pb = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    const size_t off = i * 2;
    widen(t, aligned_16bit(pa + off, staging, m), fa, m);
    widen(t, aligned_16bit(pb + off, staging, m), fb, m);
    into_f32(op, fa, fb, m);
    narrow_to(t, fa, o + off, staging, m);
  }
}

// Slow path for native types when pointers alias or are misaligned for their type: copy
// operands into aligned blocks and run the same loops, so the bits are the same.
void pair_staged(DType t, ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  alignas(64) uint8_t ba[kBlockBytes * 2];
  alignas(64) uint8_t bb[kBlockBytes * 2];
  const size_t es = dtype_size(t);
  const size_t per_block = sizeof(ba) / es;
  auto* o = static_cast<uint8_t*>(out);
  auto* pa = static_cast<const uint8_t*>(a);
  auto* pb = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < n; i += per_block) {
    const size_t m = std::min(per_block, n - i);
    std::memcpy(ba, pa + i * es, m * es);
    std::memcpy(bb, pb + i * es, m * es);
    into_native(t, op, ba, bb, m);
    std::memcpy(o + i * es, ba, m * es);
  }
}

void check_dtype(DType t, const char* what) {
  BRAID_CHECK(dtype_size(t) != 0, what, ": unknown dtype ", static_cast<int>(t));
}

}  // namespace

void reduce_into(DType dtype, ReduceOp op, void* dst, const void* src, size_t count) {
  check_dtype(dtype, "reduce_into");
  if (count == 0) return;
  if (is_16bit_float(dtype)) return pair_16bit(dtype, op, dst, dst, src, count);
  const size_t es = dtype_size(dtype);
  if (dst == src || !aligned_for(dst, es) || !aligned_for(src, es))
    return pair_staged(dtype, op, dst, dst, src, count);
  into_native(dtype, op, dst, src, count);
}

void reduce_pair(DType dtype, ReduceOp op, void* out, const void* a, const void* b, size_t count) {
  check_dtype(dtype, "reduce_pair");
  if (count == 0) return;
  if (is_16bit_float(dtype)) return pair_16bit(dtype, op, out, a, b, count);
  const size_t es = dtype_size(dtype);
  const bool aligned = aligned_for(out, es) && aligned_for(a, es) && aligned_for(b, es);
  if (!aligned || out == b || a == b) return pair_staged(dtype, op, out, a, b, count);
  if (out == a) return into_native(dtype, op, out, b, count);
  pair_native(dtype, op, out, a, b, count);
}

void divide_by(DType dtype, void* x, size_t count, int64_t divisor) {
  BRAID_CHECK(divisor > 0, "divide_by: the divisor must be positive, got ", divisor);
  if (count == 0 || divisor == 1) return;
  const size_t es = dtype_size(dtype);
  auto* p = static_cast<uint8_t*>(x);
  const float inv_f32 = 1.0f / static_cast<float>(divisor);
  const double inv_f64 = 1.0 / static_cast<double>(divisor);
  switch (dtype) {
    case DType::f32:
      if (aligned_for(x, es)) return scale_f32(static_cast<float*>(x), inv_f32, count);
      break;
    case DType::f64:
      if (aligned_for(x, es)) return scale_f64(static_cast<double*>(x), inv_f64, count);
      break;
    case DType::bf16:
    case DType::f16: {
      alignas(64) float f[kBlock];
      alignas(64) uint16_t staging[kBlock];
      for (size_t i = 0; i < count; i += kBlock) {
        const size_t m = std::min(kBlock, count - i);
        widen(dtype, aligned_16bit(p + i * 2, staging, m), f, m);
        scale_f32(f, inv_f32, m);
        narrow_to(dtype, f, p + i * 2, staging, m);
      }
      return;
    }
    case DType::i32:
      for (size_t i = 0; i < count; ++i) {
        int32_t v;
        std::memcpy(&v, p + i * 4, 4);
        v = static_cast<int32_t>(v / divisor);
        std::memcpy(p + i * 4, &v, 4);
      }
      return;
    case DType::i64:
      for (size_t i = 0; i < count; ++i) {
        int64_t v;
        std::memcpy(&v, p + i * 8, 8);
        v /= divisor;
        std::memcpy(p + i * 8, &v, 8);
      }
      return;
    default:
      BRAID_THROW(Error, "divide_by: unknown dtype ", static_cast<int>(dtype));
  }
  // f32/f64 at an address misaligned for the type: the same scaling through aligned blocks.
  alignas(64) uint8_t block[kBlockBytes * 2];
  const size_t per_block = sizeof(block) / es;
  for (size_t i = 0; i < count; i += per_block) {
    const size_t m = std::min(per_block, count - i);
    std::memcpy(block, p + i * es, m * es);
    if (dtype == DType::f32)
      scale_f32(reinterpret_cast<float*>(block), inv_f32, m);
    else
      scale_f64(reinterpret_cast<double*>(block), inv_f64, m);
    std::memcpy(p + i * es, block, m * es);
  }
}

}  // namespace braid
