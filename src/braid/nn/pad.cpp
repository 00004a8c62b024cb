#include "nn/pad.h"

#include <algorithm>
#include <cstring>

namespace braid::nn {

ZeroPad2d::ZeroPad2d(int64_t padding) : pad_(padding) {
  BRAID_CHECK(padding >= 0, "ZeroPad2d: padding must be >= 0, got ", padding);
}

Shape ZeroPad2d::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() == 4, "ZeroPad2d: input shape ", in.str(), " is not an image [B, H, W, C]");
  return Shape{in[0], in[1] + 2 * pad_, in[2] + 2 * pad_, in[3]};
}

const Tensor& ZeroPad2d::forward(const Tensor& x, Cache& cache, const ForwardContext&) {
  const Shape out_shape = output_shape(x.shape());
  cache.x = x;  // its shape, for backward
  cache.out.ensure(out_shape);
  const int64_t B = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  const int64_t OH = out_shape[1], OW = out_shape[2];
  const float* src = x.f32();
  float* dst = cache.out.f32();
  std::fill(dst, dst + cache.out.numel(), 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(dst + ((b * OH + h + pad_) * OW + pad_) * C, src + (b * H + h) * W * C,
                  static_cast<size_t>(W * C) * sizeof(float));
  return cache.out;
}

const Tensor& ZeroPad2d::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  if (!need_dx) return no_grad();
  const Shape& in = cache.x.shape();
  cache.dx.ensure(in, DType::f32, MemCategory::activation_grads);
  const int64_t B = in[0], H = in[1], W = in[2], C = in[3];
  const int64_t OH = H + 2 * pad_, OW = W + 2 * pad_;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(cache.dx.f32() + (b * H + h) * W * C,
                  dy.f32() + ((b * OH + h + pad_) * OW + pad_) * C,
                  static_cast<size_t>(W * C) * sizeof(float));
  return cache.dx;
}

}  // namespace braid::nn
