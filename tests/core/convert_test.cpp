// fp32 <-> bf16 / f16 conversions: the scalar reference against exact arithmetic in
// double (nearest value, ties to even) and against the compiler's _Float16, then every
// vector path this CPU has against the scalar reference, bit for bit.
#include "core/convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"

namespace braid {
namespace {

constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16};

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas)
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

// Hand-picked patterns: zeros, infinities, NaNs (quiet, signalling, payload only in
// bits a conversion drops), extremes, subnormals, and the rounding boundaries of both
// 16-bit formats.
std::vector<uint32_t> edge_patterns() {
  std::vector<uint32_t> v = {
      0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  // zeros, infinities
      0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,  // NaNs
      0x7FA00000, 0x7F802000, 0x7F801000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F7FFFFF,
      0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001,                          // bf16 overflow edge
      0x7F7E8000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00008000, 0x00018000,  // subnormals
      0x00800000, 0x3F800000, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0xBF808000,
      0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,              // f16 overflow edge
      0x38800000, 0x387FFFFF, 0x387FF000, 0x33000000, 0x33000001, 0x32FFFFFF,  // f16 subnormals
      0x33800000, 0x33C00000, 0x34000000, 0x34200000, 0xB3000001};
  // Every halfway point between adjacent f16 subnormals: (2j+1) * 2^-25.
  for (int j = 0; j < 1024; j += 7) v.push_back(to_bits(std::ldexp(2.0f * j + 1, -25)));
  return v;
}

// Random patterns, a quarter of them exact ties for bf16 or f16 and their neighbours.
std::vector<uint32_t> random_patterns(size_t count, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<uint32_t> v;
  v.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    auto b = static_cast<uint32_t>(gen());
    switch (i % 8) {
      case 0:
        b = (b & 0xFFFF0000u) | 0x8000u;
        break;  // bf16 tie
      case 1:
        b = (b & 0xFFFFE000u) | 0x1000u;
        break;  // f16 tie (normal range)
      case 2:
        b = (b & 0x807FFFFFu) | (static_cast<uint32_t>(gen() % 30 + 100) << 23);
        break;
      default:
        break;
    }
    v.push_back(b);
  }
  return v;
}

// Value of a 16-bit float in double; inf counts as the next power of two, which is the
// value IEEE rounding treats it as when deciding overflow.
double value16(uint16_t bits, int mantissa_bits, int bias) {
  const int exponent_max = (1 << (15 - mantissa_bits)) - 1;
  const int e = (bits >> mantissa_bits) & exponent_max;
  const int m = bits & ((1 << mantissa_bits) - 1);
  double mag = e == 0 ? std::ldexp(m, 1 - bias - mantissa_bits)
                      : std::ldexp((1 << mantissa_bits) + m, e - bias - mantissa_bits);
  return (bits & 0x8000) ? -mag : mag;
}

// Checks that `got` is the nearest 16-bit value to finite x, ties to even mantissa.
void expect_nearest(float x, uint16_t got, int mantissa_bits, int bias) {
  SCOPED_TRACE(::testing::Message() << "x bits 0x" << std::hex << to_bits(x) << " got 0x" << got);
  ASSERT_EQ(got >> 15, to_bits(x) >> 31) << "sign";
  const uint16_t mag = got & 0x7FFF;
  const uint16_t inf = static_cast<uint16_t>(((1 << (15 - mantissa_bits)) - 1) << mantissa_bits);
  ASSERT_LE(mag, inf) << "finite input became NaN";
  const double ax = std::fabs(static_cast<double>(x));
  const double d = std::fabs(ax - value16(mag, mantissa_bits, bias));
  if (mag > 0) {
    const double below = std::fabs(ax - value16(mag - 1, mantissa_bits, bias));
    EXPECT_TRUE(d < below || (d == below && (mag & 1) == 0)) << "a smaller value is nearer";
  }
  if (mag < inf) {
    const double above = std::fabs(ax - value16(mag + 1, mantissa_bits, bias));
    EXPECT_TRUE(d < above || (d == above && (mag & 1) == 0)) << "a larger value is nearer";
  }
}

TEST(Convert, ScalarRoundsToNearestEven) {
  std::vector<uint32_t> patterns = edge_patterns();
  const std::vector<uint32_t> more = random_patterns(200000, 1);
  patterns.insert(patterns.end(), more.begin(), more.end());
  for (uint32_t b : patterns) {
    const float x = from_bits(b);
    if (std::isnan(x)) continue;
    expect_nearest(x, float_to_bf16(x).bits, 7, 127);
    expect_nearest(x, float_to_half(x).bits, 10, 15);
    if (HasFailure()) return;
  }
}

#ifdef __FLT16_MANT_DIG__
TEST(Convert, ScalarHalfMatchesCompilerFloat16) {
  std::vector<uint32_t> patterns = edge_patterns();
  const std::vector<uint32_t> more = random_patterns(1 << 20, 2);
  patterns.insert(patterns.end(), more.begin(), more.end());
  for (uint32_t b : patterns) {
    const float x = from_bits(b);
    if (std::isnan(x)) continue;
    const auto expected = std::bit_cast<uint16_t>(static_cast<_Float16>(x));
    ASSERT_EQ(float_to_half(x).bits, expected) << "x bits 0x" << std::hex << b;
  }
}
#endif

TEST(Convert, NaNsStayQuietNaNsInfinitiesStay) {
  EXPECT_EQ(float_to_bf16(from_bits(0x7F800001)).bits, 0x7FC0);  // signalling -> quiet
  EXPECT_EQ(float_to_bf16(from_bits(0xFF800001)).bits, 0xFFC0);
  EXPECT_EQ(float_to_bf16(from_bits(0x7FA00000)).bits, 0x7FE0);  // payload kept
  EXPECT_EQ(float_to_bf16(from_bits(0x7FFFFFFF)).bits, 0x7FFF);  // no rounding into sign
  EXPECT_EQ(float_to_bf16(from_bits(0x7F800000)).bits, 0x7F80);
  EXPECT_EQ(float_to_bf16(from_bits(0xFF800000)).bits, 0xFF80);
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7FFFFF)).bits, 0x7F80);  // max float rounds to inf
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7F7FFF)).bits, 0x7F7F);
  EXPECT_EQ(float_to_bf16(from_bits(0x00000001)).bits, 0x0000);  // subnormals kept, rounded
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000)).bits, 0x0002);
  EXPECT_EQ(float_to_half(from_bits(0x7F800001)).bits, 0x7E00);
  EXPECT_EQ(float_to_half(from_bits(0xFF802000)).bits, 0xFE01);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()).bits, 0x7C00);
  EXPECT_EQ(float_to_half(65504.0f).bits, 0x7BFF);
  EXPECT_EQ(float_to_half(65519.99f).bits, 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f).bits, 0x7C00);
  EXPECT_EQ(float_to_half(-1e30f).bits, 0xFC00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)).bits, 0x0000);  // tie with zero: even
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)).bits, 0x0002);  // tie 1.5 ulp: even
  EXPECT_EQ(float_to_half(-0.0f).bits, 0x8000);
  EXPECT_EQ(to_bits(half_to_float({0x7C01})), 0x7FC02000u);  // quieted, payload kept
  EXPECT_TRUE(std::isnan(bf16_to_float({0x7F81})));
}

TEST(Convert, EveryHalfAndBf16ConvertsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = half_to_float({bits});
    const float g = bf16_to_float({bits});
    EXPECT_EQ(to_bits(g), h << 16);
    if ((bits & 0x7C00) == 0x7C00 && (bits & 0x3FF) != 0) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_EQ(float_to_half(f).bits, bits | 0x0200) << "a NaN comes back quieted";
      continue;
    }
    const double expected =
        (bits & 0x7FFF) == 0x7C00 ? std::numeric_limits<double>::infinity() : value16(bits, 10, 15);
    EXPECT_EQ(static_cast<double>(std::fabs(f)), std::fabs(expected)) << "half 0x" << std::hex << h;
    EXPECT_EQ(std::signbit(f), (bits & 0x8000) != 0);
    EXPECT_EQ(float_to_half(f).bits, bits) << "round trip of half 0x" << std::hex << h;
    EXPECT_EQ(float_to_bf16(g).bits, bits) << "round trip of bf16 0x" << std::hex << h;
    if (HasFailure()) return;
  }
}

// Runs all four array conversions on `isa` and on the scalar reference and compares bits.
void expect_paths_agree(const std::vector<uint32_t>& patterns, Isa isa) {
  SCOPED_TRACE(::testing::Message() << "isa " << isa_name(isa));
  const auto n = static_cast<int64_t>(patterns.size());
  std::vector<float> in(patterns.size());
  for (size_t i = 0; i < patterns.size(); ++i) in[i] = from_bits(patterns[i]);
  std::vector<BFloat16> b_ref(n), b_got(n);
  std::vector<Half> h_ref(n), h_got(n);
  f32_to_bf16(in.data(), b_ref.data(), n, Isa::scalar);
  f32_to_bf16(in.data(), b_got.data(), n, isa);
  f32_to_f16(in.data(), h_ref.data(), n, Isa::scalar);
  f32_to_f16(in.data(), h_got.data(), n, isa);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(b_got[i].bits, b_ref[i].bits) << "f32_to_bf16 of 0x" << std::hex << patterns[i];
    ASSERT_EQ(h_got[i].bits, h_ref[i].bits) << "f32_to_f16 of 0x" << std::hex << patterns[i];
  }
  // The 16-bit side: reuse the pattern bits as bf16 and f16 inputs (both halves of each).
  std::vector<BFloat16> b_in(2 * n);
  std::vector<Half> h_in(2 * n);
  for (int64_t i = 0; i < n; ++i)
    for (int k = 0; k < 2; ++k) {
      const auto bits = static_cast<uint16_t>(patterns[i] >> (16 * k));
      b_in[2 * i + k] = {bits};
      h_in[2 * i + k] = {bits};
    }
  std::vector<float> f_ref(2 * n), f_got(2 * n);
  bf16_to_f32(b_in.data(), f_ref.data(), 2 * n, Isa::scalar);
  bf16_to_f32(b_in.data(), f_got.data(), 2 * n, isa);
  for (int64_t i = 0; i < 2 * n; ++i)
    ASSERT_EQ(to_bits(f_got[i]), to_bits(f_ref[i]))
        << "bf16_to_f32 of 0x" << std::hex << b_in[i].bits;
  f16_to_f32(h_in.data(), f_ref.data(), 2 * n, Isa::scalar);
  f16_to_f32(h_in.data(), f_got.data(), 2 * n, isa);
  for (int64_t i = 0; i < 2 * n; ++i)
    ASSERT_EQ(to_bits(f_got[i]), to_bits(f_ref[i]))
        << "f16_to_f32 of 0x" << std::hex << h_in[i].bits;
}

TEST(Convert, EveryPathMatchesScalarBitwise) {
  std::vector<uint32_t> patterns = edge_patterns();
  const std::vector<uint32_t> more = random_patterns(1 << 21, 3);
  patterns.insert(patterns.end(), more.begin(), more.end());
  for (Isa isa : supported_isas()) expect_paths_agree(patterns, isa);
  for (Isa isa : kAllIsas)
    if (!isa_supported(isa))
      std::printf("[ note ] %s not on this CPU: not tested\n", isa_name(isa).data());
}

// Short and misaligned arrays: vector bodies, scalar tails, and a subnormal (which the
// AVX512_BF16 path must redo) at every position of a vector.
TEST(Convert, TailsAndOffsetsMatchScalar) {
  const std::vector<uint32_t> base = random_patterns(200, 4);
  for (Isa isa : supported_isas())
    for (size_t offset = 0; offset < 3; ++offset)
      for (size_t n = 0; n <= 40; ++n) {
        std::vector<uint32_t> p(base.begin() + offset, base.begin() + offset + n);
        if (n > 0) p[(n * 7) % n] = 0x00018000;  // a subnormal somewhere
        expect_paths_agree(p, isa);
        if (HasFatalFailure()) return;
      }
}

TEST(Convert, DefaultPathIsTheBestPath) {
  const std::vector<uint32_t> p = random_patterns(1000, 5);
  std::vector<float> in(p.size());
  for (size_t i = 0; i < p.size(); ++i) in[i] = from_bits(p[i]);
  const auto n = static_cast<int64_t>(in.size());
  std::vector<BFloat16> a(n), b(n);
  f32_to_bf16(in.data(), a.data(), n);
  f32_to_bf16(in.data(), b.data(), n, Isa::scalar);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i].bits, b[i].bits);
}

TEST(Convert, BadArgumentsThrow) {
  float f = 1.0f;
  BFloat16 b{};
  EXPECT_THROW(f32_to_bf16(&f, &b, -1), Error);
  f32_to_bf16(nullptr, nullptr, 0);  // empty is fine
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) {
      EXPECT_THROW(f32_to_bf16(&f, &b, 1, isa), Error);
    }
  }
}

TEST(Cpu, LevelsAreNestedAndDescribed) {
  EXPECT_TRUE(isa_supported(Isa::scalar));
  EXPECT_TRUE(isa_supported(best_isa()));
  EXPECT_TRUE(!isa_supported(Isa::avx512_bf16) || isa_supported(Isa::avx512));
  EXPECT_TRUE(!isa_supported(Isa::avx512) || isa_supported(Isa::avx2));
  EXPECT_EQ(isa_supported(Isa::avx2),
            cpu_features().avx2 && cpu_features().fma && cpu_features().f16c);
  const std::string d = cpu_description();
  EXPECT_NE(d.find(std::string("kernels: ") + std::string(isa_name(best_isa()))), std::string::npos)
      << d;
}

// All 2^32 floats on every path; several minutes. Run with --gtest_also_run_disabled_tests.
TEST(Convert, DISABLED_ExhaustiveEveryPathMatchesScalar) {
  constexpr uint64_t kChunk = 1 << 22;
  std::vector<uint32_t> p(kChunk);
  for (uint64_t start = 0; start < (uint64_t{1} << 32); start += kChunk) {
    for (uint64_t i = 0; i < kChunk; ++i) p[i] = static_cast<uint32_t>(start + i);
    for (Isa isa : supported_isas())
      if (isa != Isa::scalar) expect_paths_agree(p, isa);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace braid
