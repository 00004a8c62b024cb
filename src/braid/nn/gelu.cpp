#include "nn/gelu.h"

#include <cmath>
#include <cstdint>

#include "nn/fast_math.h"
#include "nn/rounded_output.h"

namespace braid::nn {
namespace {

using fast_math::tanh_approx;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

[[gnu::always_inline]] inline void gelu_tanh_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_approx(kSqrt2OverPi * (v + kCubic * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
}

// d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
[[gnu::always_inline]] inline void gelu_tanh_backward(const float* x, const float* dy, float* dx,
                                                      int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_approx(kSqrt2OverPi * (v + kCubic * v * v * v));
    const float inner = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * inner);
  }
}

void gelu_erf_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

// d/dx = Phi(x) + x phi(x).
void gelu_erf_backward(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

class GeluCache : public Cache {
 public:
  Tensor block;  // fp32 values before rounding, when the output is bf16
};

}  // namespace

void gelu_forward(GeluApprox approx, const float* x, float* y, int64_t n) {
  if (approx == GeluApprox::tanh)
    fast_math::run_best<gelu_tanh_forward>(x, y, n);
  else
    gelu_erf_forward(x, y, n);
}

void gelu_backward(GeluApprox approx, const float* x, const float* dy, float* dx, int64_t n) {
  if (approx == GeluApprox::tanh)
    fast_math::run_best<gelu_tanh_backward>(x, dy, dx, n);
  else
    gelu_erf_backward(x, dy, dx, n);
}

std::unique_ptr<Cache> Gelu::make_cache() const { return std::make_unique<GeluCache>(); }

const Tensor& Gelu::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  BRAID_CHECK(x.dtype() == DType::f32, "GELU: input must be f32, got ", dtype_name(x.dtype()));
  cache.x = x;
  if (feeds_product_ && ctx.precision == Precision::bf16) {
    const int64_t dim = x.shape()[-1];
    cache.out.ensure(x.shape(), DType::bf16);
    write_rows_rounded(x.numel() / dim, dim, static_cast<GeluCache&>(cache).block,
                       cache.out.data<BFloat16>(), [&](int64_t r, int64_t n, float* block) {
                         gelu_forward(approx_, x.f32() + r * dim, block, n * dim);
                       });
    return cache.out;
  }
  cache.out.ensure(x.shape());
  gelu_forward(approx_, x.f32(), cache.out.f32(), x.numel());
  return cache.out;
}

const Tensor& Gelu::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  if (!need_dx) return no_grad();
  BRAID_CHECK(dy.shape() == cache.x.shape(), "GELU: backward got dy ", dy.shape().str(),
              " for input ", cache.x.shape().str());
  cache.dx.ensure(cache.x.shape(), DType::f32, MemCategory::activation_grads);
  gelu_backward(approx_, cache.x.f32(), dy.f32(), cache.dx.f32(), dy.numel());
  return cache.dx;
}

}  // namespace braid::nn
