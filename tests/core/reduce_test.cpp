// Reduction kernels (core/reduce.h) against a scalar reference written here, bit for bit:
// every dtype and op, lengths around the vector widths, aliased and misaligned operands
// (which take other code paths and must give the same bits), NaN propagation, integer
// wrap-around, and divide_by for avg.
#include "core/reduce.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/convert.h"
#include "core/error.h"

namespace braid {
namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::bf16,
                             DType::f16, DType::i32, DType::i64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max,
                             ReduceOp::prod};
constexpr size_t kLengths[] = {0, 1, 3, 7, 8, 15, 16, 17, 63, 1023, 1024, 1025, 4099};

template <typename T>
T ref_op(ReduceOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case ReduceOp::prod:
        return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case ReduceOp::min:
        return a < b ? a : b;
      case ReduceOp::max:
        return a > b ? a : b;
    }
  } else {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        return a + b;
      case ReduceOp::prod:
        return a * b;
      case ReduceOp::min:
        return (a < b || std::isnan(a)) ? a : b;
      case ReduceOp::max:
        return (a > b || std::isnan(a)) ? a : b;
    }
  }
  return a;
}

// The reference for one element given as raw bytes.
void ref_element(DType t, ReduceOp op, void* out, const void* a, const void* b) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T x, y;
    std::memcpy(&x, a, sizeof(T));
    std::memcpy(&y, b, sizeof(T));
    const T z = ref_op(op, x, y);
    std::memcpy(out, &z, sizeof(T));
  };
  switch (t) {
    case DType::f32:
      return run(float{});
    case DType::f64:
      return run(double{});
    case DType::i32:
      return run(int32_t{});
    case DType::i64:
      return run(int64_t{});
    case DType::bf16:
    case DType::f16: {
      uint16_t x, y;
      std::memcpy(&x, a, 2);
      std::memcpy(&y, b, 2);
      const bool bf = t == DType::bf16;
      const float fx = bf ? bf16_to_float({x}) : half_to_float({x});
      const float fy = bf ? bf16_to_float({y}) : half_to_float({y});
      const float fz = ref_op(op, fx, fy);
      const uint16_t z = bf ? float_to_bf16(fz).bits : float_to_half(fz).bits;
      std::memcpy(out, &z, 2);
      return;
    }
  }
}

// Random operands, with NaNs, infinities and signed zeros sprinkled into the float types.
std::vector<uint8_t> operands(DType t, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> real(-4.0, 4.0);
  std::vector<uint8_t> v(n * dtype_size(t) + 1);
  for (size_t i = 0; i < n; ++i) {
    double x = real(gen);
    const int special = static_cast<int>(gen() % 64);
    if (special == 0) x = std::numeric_limits<double>::quiet_NaN();
    if (special == 1) x = std::numeric_limits<double>::infinity();
    if (special == 2) x = -0.0;
    uint8_t* at = v.data() + i * dtype_size(t);
    switch (t) {
      case DType::f32: {
        const auto f = static_cast<float>(x);
        std::memcpy(at, &f, 4);
        break;
      }
      case DType::f64:
        std::memcpy(at, &x, 8);
        break;
      case DType::bf16: {
        const auto h = float_to_bf16(static_cast<float>(x));
        std::memcpy(at, &h, 2);
        break;
      }
      case DType::f16: {
        const auto h = float_to_half(static_cast<float>(x));
        std::memcpy(at, &h, 2);
        break;
      }
      case DType::i32: {
        const auto k = static_cast<int32_t>(gen());
        std::memcpy(at, &k, 4);
        break;
      }
      case DType::i64: {
        const auto k = static_cast<int64_t>((uint64_t{gen()} << 32) | gen());
        std::memcpy(at, &k, 8);
        break;
      }
    }
  }
  return v;
}

std::vector<uint8_t> reference(DType t, ReduceOp op, const uint8_t* a, const uint8_t* b, size_t n) {
  const size_t es = dtype_size(t);
  std::vector<uint8_t> out(n * es);
  for (size_t i = 0; i < n; ++i) ref_element(t, op, out.data() + i * es, a + i * es, b + i * es);
  return out;
}

std::string where(DType t, ReduceOp op, size_t n) {
  return std::string(dtype_name(t)) + " " + std::string(reduce_op_name(op)) +
         " n=" + std::to_string(n);
}

// memcmp with a null pointer is undefined even for zero bytes; empty vectors give null.
bool same_bytes(const uint8_t* x, const uint8_t* y, size_t bytes) {
  return bytes == 0 || std::memcmp(x, y, bytes) == 0;
}

TEST(Reduce, EveryDtypeAndOpMatchesTheScalarReferenceBitwise) {
  for (DType t : kDTypes)
    for (ReduceOp op : kOps)
      for (size_t n : kLengths) {
        const size_t bytes = n * dtype_size(t);
        const auto a = operands(t, n, 1), b = operands(t, n, 2);
        const auto want = reference(t, op, a.data(), b.data(), n);

        auto dst = a;  // reduce_into: dst = op(dst, src)
        reduce_into(t, op, dst.data(), b.data(), n);
        ASSERT_TRUE(same_bytes(dst.data(), want.data(), bytes)) << where(t, op, n);

        std::vector<uint8_t> out(bytes + 1);  // reduce_pair, three buffers
        reduce_pair(t, op, out.data(), a.data(), b.data(), n);
        ASSERT_TRUE(same_bytes(out.data(), want.data(), bytes)) << where(t, op, n);

        auto aliased_a = a;  // out == a
        reduce_pair(t, op, aliased_a.data(), aliased_a.data(), b.data(), n);
        ASSERT_TRUE(same_bytes(aliased_a.data(), want.data(), bytes)) << where(t, op, n);

        auto aliased_b = b;  // out == b: still op(a, b), not op(b, a)
        reduce_pair(t, op, aliased_b.data(), a.data(), aliased_b.data(), n);
        ASSERT_TRUE(same_bytes(aliased_b.data(), want.data(), bytes)) << where(t, op, n);

        // Misaligned for the type: the staged path gives the same bits.
        std::vector<uint8_t> ua(bytes + 1), ub(bytes + 1);
        if (bytes) {
          std::memcpy(ua.data() + 1, a.data(), bytes);
          std::memcpy(ub.data() + 1, b.data(), bytes);
        }
        reduce_into(t, op, ua.data() + 1, ub.data() + 1, n);
        ASSERT_TRUE(same_bytes(ua.data() + 1, want.data(), bytes))
            << where(t, op, n) << " misaligned";

        auto self = a;  // dst == src
        const auto want_self = reference(t, op, a.data(), a.data(), n);
        reduce_into(t, op, self.data(), self.data(), n);
        ASSERT_TRUE(same_bytes(self.data(), want_self.data(), bytes)) << where(t, op, n) << " self";
      }
}

TEST(Reduce, FloatMinMaxKeepNaNs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float a[4] = {nan, 1.0f, nan, 2.0f};
  const float b[4] = {1.0f, nan, nan, 3.0f};
  float mx[4];
  reduce_pair(DType::f32, ReduceOp::max, mx, a, b, 4);
  reduce_into(DType::f32, ReduceOp::min, a, b, 4);
  EXPECT_TRUE(std::isnan(a[0]) && std::isnan(a[1]) && std::isnan(a[2]));
  EXPECT_EQ(a[3], 2.0f);
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]) && std::isnan(mx[2]));
  EXPECT_EQ(mx[3], 3.0f);
}

TEST(Reduce, IntegersWrapAround) {
  int32_t a[2] = {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  const int32_t b[2] = {1, -1};
  reduce_into(DType::i32, ReduceOp::sum, a, b, 2);
  EXPECT_EQ(a[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(a[1], std::numeric_limits<int32_t>::max());
  int64_t c = int64_t{1} << 62;
  const int64_t d = 4;
  reduce_into(DType::i64, ReduceOp::prod, &c, &d, 1);
  EXPECT_EQ(c, 0);
}

TEST(Reduce, SixteenBitFloatsRoundOnceFromF32) {
  // 1 + 2^-8 is not a bf16: the f32 sum rounds to even (1.0) on the way back.
  const BFloat16 one = float_to_bf16(1.0f), tiny = float_to_bf16(std::ldexp(1.0f, -8));
  BFloat16 x = one;
  reduce_into(DType::bf16, ReduceOp::sum, &x, &tiny, 1);
  EXPECT_EQ(x.bits, one.bits);
  // f16 overflow rounds to inf.
  Half h = float_to_half(60000.0f);
  const Half g = float_to_half(10000.0f);
  reduce_into(DType::f16, ReduceOp::sum, &h, &g, 1);
  EXPECT_TRUE(std::isinf(half_to_float(h)));
}

TEST(Reduce, DivideBy) {
  std::vector<float> f = {3.0f, -6.0f, 1.0f};
  divide_by(DType::f32, f.data(), f.size(), 3);
  EXPECT_EQ(f[0], 3.0f * (1.0f / 3.0f));
  EXPECT_EQ(f[1], -6.0f * (1.0f / 3.0f));
  EXPECT_EQ(f[2], 1.0f / 3.0f);
  std::vector<double> d = {1.0, 10.0};
  divide_by(DType::f64, d.data(), d.size(), 4);
  EXPECT_EQ(d[0], 0.25);
  EXPECT_EQ(d[1], 2.5);
  std::vector<int32_t> i = {7, -7, 6};
  divide_by(DType::i32, i.data(), i.size(), 2);
  EXPECT_EQ(i, (std::vector<int32_t>{3, -3, 3}));  // truncation toward zero
  std::vector<int64_t> l = {-9, int64_t{1} << 40};
  divide_by(DType::i64, l.data(), l.size(), 4);
  EXPECT_EQ(l, (std::vector<int64_t>{-2, int64_t{1} << 38}));
  std::vector<BFloat16> b(3000, float_to_bf16(3.0f));
  divide_by(DType::bf16, b.data(), b.size(), 2);
  for (auto v : b) ASSERT_EQ(bf16_to_float(v), 1.5f);
  std::vector<Half> h(5, float_to_half(1.0f));
  divide_by(DType::f16, h.data(), h.size(), 3);
  for (auto v : h) ASSERT_EQ(v.bits, float_to_half(1.0f / 3.0f).bits) << half_to_float(v);
  // Misaligned f32: the same bits as aligned.
  std::vector<uint8_t> raw(1 + 4 * 1500);
  std::vector<float> aligned(1500);
  for (size_t k = 0; k < aligned.size(); ++k) aligned[k] = static_cast<float>(k) * 0.37f;
  std::memcpy(raw.data() + 1, aligned.data(), 4 * aligned.size());
  divide_by(DType::f32, raw.data() + 1, aligned.size(), 7);
  divide_by(DType::f32, aligned.data(), aligned.size(), 7);
  EXPECT_EQ(0, std::memcmp(raw.data() + 1, aligned.data(), 4 * aligned.size()));
  EXPECT_THROW(divide_by(DType::f32, f.data(), f.size(), 0), Error);
}

TEST(Reduce, OpNames) {
  EXPECT_EQ(reduce_op_name(ReduceOp::sum), "sum");
  EXPECT_EQ(reduce_op_name(ReduceOp::avg), "avg");
  EXPECT_EQ(reduce_op_name(ReduceOp::min), "min");
  EXPECT_EQ(reduce_op_name(ReduceOp::max), "max");
  EXPECT_EQ(reduce_op_name(ReduceOp::prod), "prod");
}

}  // namespace
}  // namespace braid
