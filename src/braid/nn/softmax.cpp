// Softmax kernels (contract in softmax.h): one pass per row for the max, one for exp and
// the sum, one to scale; rows are contiguous, so every loop runs over D floats in a row.
#include "nn/softmax.h"

#include <cmath>

#include "core/multiversion.h"

namespace braid::nn {
namespace {

// x, y: [rows, D]. A row of all -inf (or one holding +inf or NaN) gives NaN, as in PyTorch.
void softmax_forward(const float* x, float* y, int64_t rows, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    float m = xr[0];
    for (int64_t i = 1; i < D; ++i) m = xr[i] > m ? xr[i] : m;
    float sum = 0.0f;
    // std::exp is a scalar libm call (see Tanh in activations.cpp): this loop does not
    // vectorise.
    for (int64_t i = 0; i < D; ++i) {
      yr[i] = std::exp(xr[i] - m);
      sum += yr[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < D; ++i) yr[i] *= inv;
  }
}

// y, dy, dx: [rows, D].
BRAID_MULTIVERSION void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows,
                                         int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * D;
    const float* dyr = dy + r * D;
    float* dxr = dx + r * D;
    float dot = 0.0f;
    for (int64_t i = 0; i < D; ++i) dot += dyr[i] * yr[i];
    for (int64_t i = 0; i < D; ++i) dxr[i] = yr[i] * (dyr[i] - dot);
  }
}

}  // namespace

Shape Softmax::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() >= 1 && in[-1] >= 1, "Softmax: expects input [..., D] with D >= 1, got ",
              in.str());
  return in;
}

const Tensor& Softmax::forward(const Tensor& x, Cache& cache, const ForwardContext&) {
  BRAID_CHECK(x.dtype() == DType::f32, "Softmax: input must be f32, got ", dtype_name(x.dtype()),
              " of shape ", x.shape().str());
  output_shape(x.shape());
  cache.out.ensure(x.shape());
  const int64_t D = x.shape()[-1];
  softmax_forward(x.f32(), cache.out.f32(), x.numel() / D, D);
  return cache.out;
}

const Tensor& Softmax::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  BRAID_CHECK(cache.out.defined(), "Softmax: backward called before forward on this cache");
  BRAID_CHECK(dy.shape() == cache.out.shape(), "Softmax: gradient shape ", dy.shape().str(),
              " differs from output shape ", cache.out.shape().str());
  if (!need_dx) return no_grad();
  cache.dx.ensure(dy.shape(), DType::f32, MemCategory::activation_grads);
  const int64_t D = dy.shape()[-1];
  softmax_backward(cache.out.f32(), dy.f32(), cache.dx.f32(), dy.numel() / D, D);
  return cache.dx;
}

}  // namespace braid::nn
