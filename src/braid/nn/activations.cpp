#include "nn/activations.h"

#include <cmath>

#include "core/multiversion.h"

namespace braid::nn {
namespace {

// `x < 0 ? 0 : x` rather than std::max: NaN fails the comparison and propagates.
BRAID_MULTIVERSION void relu_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

// dy is loaded unconditionally so the select becomes a blend: `y > 0 ? dy[i] : 0` reads
// dy[i] only on one side, which GCC will not vectorise, and a branch per element
// mispredicts half the time. A select (not dy * mask) keeps dx = 0 where dy is inf/NaN,
// as torch's threshold_backward does.
BRAID_MULTIVERSION void relu_backward(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = dy[i];
    dx[i] = y[i] > 0.0f ? g : 0.0f;
  }
}

BRAID_MULTIVERSION void tanh_backward(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

BRAID_MULTIVERSION void sigmoid_backward(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

// As relu_forward: NaN fails `x > 0` and becomes slope * NaN = NaN.
BRAID_MULTIVERSION void leaky_relu_forward(const float* x, float* y, int64_t n, float slope) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
}

BRAID_MULTIVERSION void leaky_relu_backward(const float* y, const float* dy, float* dx, int64_t n,
                                            float slope) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = dy[i];
    dx[i] = y[i] > 0.0f ? g : slope * g;
  }
}

// std::exp is a scalar libm call, so these loops do not vectorise (see Tanh below).
void silu_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

// d/dx x s(x) = s + x s (1 - s). For x -> -inf, exp(-x) overflows to inf and s = 0: the
// product x * (1 - s) is finite, so the gradient is 0, not NaN.
void silu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + std::exp(-x[i]));
    dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
  }
}

}  // namespace

const Tensor& Elementwise::forward(const Tensor& x, Cache& cache, const ForwardContext&) {
  BRAID_CHECK(x.dtype() == DType::f32, kind(), ": input must be f32, got ", dtype_name(x.dtype()),
              " of shape ", x.shape().str());
  cache.out.ensure(x.shape());
  forward_kernel(x.f32(), cache.out.f32(), x.numel());
  return cache.out;
}

const Tensor& Elementwise::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  BRAID_CHECK(cache.out.defined(), kind(), ": backward called before forward on this cache");
  BRAID_CHECK(dy.shape() == cache.out.shape(), kind(), ": gradient shape ", dy.shape().str(),
              " differs from output shape ", cache.out.shape().str());
  if (!need_dx) return no_grad();
  cache.dx.ensure(dy.shape(), DType::f32, MemCategory::activation_grads);
  backward_kernel(cache.out.f32(), dy.f32(), cache.dx.f32(), dy.numel());
  return cache.dx;
}

void ReLU::forward_kernel(const float* x, float* y, int64_t n) const { relu_forward(x, y, n); }
void ReLU::backward_kernel(const float* y, const float* dy, float* dx, int64_t n) const {
  relu_backward(y, dy, dx, n);
}

// std::tanh and std::exp are scalar libm calls (GCC vectorises them only under
// -ffast-math); a vectorised exp in core/kernels would speed these up.
void Tanh::forward_kernel(const float* x, float* y, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}
void Tanh::backward_kernel(const float* y, const float* dy, float* dx, int64_t n) const {
  tanh_backward(y, dy, dx, n);
}

void Sigmoid::forward_kernel(const float* x, float* y, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}
void Sigmoid::backward_kernel(const float* y, const float* dy, float* dx, int64_t n) const {
  sigmoid_backward(y, dy, dx, n);
}

LeakyReLU::LeakyReLU(float negative_slope) : slope_(negative_slope) {
  BRAID_CHECK(std::isfinite(slope_) && slope_ >= 0.0f, "LeakyReLU: negative_slope must be a ",
              "finite number >= 0, got ", slope_,
              " (the gradient is read off the saved output, which a negative slope makes "
              "ambiguous)");
}

void LeakyReLU::forward_kernel(const float* x, float* y, int64_t n) const {
  leaky_relu_forward(x, y, n, slope_);
}
void LeakyReLU::backward_kernel(const float* y, const float* dy, float* dx, int64_t n) const {
  leaky_relu_backward(y, dy, dx, n, slope_);
}

const Tensor& SiLU::forward(const Tensor& x, Cache& cache, const ForwardContext&) {
  BRAID_CHECK(x.dtype() == DType::f32, "SiLU: input must be f32, got ", dtype_name(x.dtype()),
              " of shape ", x.shape().str());
  cache.x = x;
  cache.out.ensure(x.shape());
  silu_forward(x.f32(), cache.out.f32(), x.numel());
  return cache.out;
}

const Tensor& SiLU::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  BRAID_CHECK(cache.x.defined(), "SiLU: backward called before forward on this cache");
  BRAID_CHECK(dy.shape() == cache.x.shape(), "SiLU: gradient shape ", dy.shape().str(),
              " differs from output shape ", cache.x.shape().str());
  if (!need_dx) return no_grad();
  cache.dx.ensure(dy.shape(), DType::f32, MemCategory::activation_grads);
  silu_backward(cache.x.f32(), dy.f32(), cache.dx.f32(), dy.numel());
  return cache.dx;
}

}  // namespace braid::nn
