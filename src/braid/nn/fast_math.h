// Vectorisable math for the nn kernels, and a run-time choice of the best instruction set.
//
// run_best<body>(args...) calls one of three builds of an always_inline loop `body`:
// AVX-512, AVX2 + FMA, or baseline x86-64, chosen once by CPU *feature*. (GCC's
// target_clones("arch=haswell") dispatches on the CPU *model*, so on AMD's AVX2 parts it
// falls back to the baseline build.)
//
// GCC does not if-convert float compares under its default -ftrapping-math, so a loop with
// std::min/std::max on floats stays scalar. The helpers below compare integer images of
// the float bits instead, which order like the values, and so keep loops vectorised.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

namespace braid::nn::fast_math {

enum class Isa { baseline, avx2, avx512 };

inline Isa detected_isa() {
  static const Isa isa = [] {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f")) return Isa::avx512;
    return avx2 ? Isa::avx2 : Isa::baseline;
  }();
  return isa;
}

// An upper bound on the build run_best picks, so tests can check every build the machine
// can run. Process-wide: change it only while no kernel runs.
inline std::atomic<Isa> isa_limit{Isa::avx512};

inline Isa best_isa() {
  const Isa limit = isa_limit.load(std::memory_order_relaxed);
  return detected_isa() < limit ? detected_isa() : limit;
}

template <auto Body, typename... Args>
__attribute__((target("avx512f,avx2,fma"))) void run_avx512(Args... args) {
  Body(args...);
}

template <auto Body, typename... Args>
__attribute__((target("avx2,fma"))) void run_avx2(Args... args) {
  Body(args...);
}

template <auto Body, typename... Args>
void run_best(Args... args) {
  switch (best_isa()) {
    case Isa::avx512:
      run_avx512<Body>(args...);
      break;
    case Isa::avx2:
      run_avx2<Body>(args...);
      break;
    case Isa::baseline:
      Body(args...);
      break;
  }
}

// An int32 that orders like the float x (total order, -0 < +0); its own inverse.
[[gnu::always_inline]] inline int32_t ordered_bits(float x) {
  const int32_t i = std::bit_cast<int32_t>(x);
  return i ^ ((i >> 31) & 0x7fffffff);
}
[[gnu::always_inline]] inline float from_ordered_bits(int32_t i) {
  return std::bit_cast<float>(i ^ ((i >> 31) & 0x7fffffff));
}

// min(a, b) for a, b >= 0: non-negative floats order like their bit patterns.
[[gnu::always_inline]] inline float min_nonneg(float a, float b) {
  const int32_t ia = std::bit_cast<int32_t>(a), ib = std::bit_cast<int32_t>(b);
  return std::bit_cast<float>(ia < ib ? ia : ib);
}

// exp(-a) for a >= 0 (relative error ~2e-7): exp(x) = 2^n exp(r), n = round(x / ln 2),
// |r| <= ln2 / 2 (ln 2 split as in Cephes), degree-6 Taylor polynomial. a is clamped at 87,
// giving ~1.6e-38 instead of smaller values.
[[gnu::always_inline]] inline float exp_neg(float a) {
  const float x = -min_nonneg(a, 87.0f);
  const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

// tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|): absolute error ~1e-7.
[[gnu::always_inline]] inline float tanh_approx(float u) {
  const float a = std::bit_cast<float>(std::bit_cast<int32_t>(u) & 0x7fffffff);
  const float e = exp_neg(2.0f * a);
  const float t = (1.0f - e) / (1.0f + e);
  return std::bit_cast<float>(std::bit_cast<int32_t>(t) | (std::bit_cast<int32_t>(u) & INT32_MIN));
}

}  // namespace braid::nn::fast_math
