#include "nn/flatten.h"

#include <algorithm>

namespace braid::nn {
namespace {

class FlattenCache : public Cache {
 public:
  Shape in_shape;
  // Ranks 2 and 3, and images whose transpose is the identity, hand back handles of the caller's
  // tensors in out and dx; they must be dropped before ensure() or a later rank-4 pass would write
  // into the caller's memory.
  bool aliased = false;
};

// dst[c][r] = src[r][c] for src [rows, cols]. Tiles keep both the strided reads and the
// contiguous writes within a few cache lines.
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
    }
  }
}

}  // namespace

Shape Flatten::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() >= 2 && in.rank() <= 4, "Flatten: input shape ", in.str(), " has rank ",
              in.rank(), "; expected [B, F], [B, A, D] or NHWC [B, H, W, C]");
  int64_t features = 1;
  for (int i = 1; i < in.rank(); ++i) features *= in[i];
  return Shape{in[0], features};
}

std::unique_ptr<Cache> Flatten::make_cache() const { return std::make_unique<FlattenCache>(); }

const Tensor& Flatten::forward(const Tensor& x, Cache& cache, const ForwardContext&) {
  auto& c = static_cast<FlattenCache&>(cache);
  BRAID_CHECK(x.dtype() == DType::f32, "Flatten: input must be f32, got ", dtype_name(x.dtype()),
              " of shape ", x.shape().str());
  const Shape out_shape = output_shape(x.shape());
  c.in_shape = x.shape();
  // With one channel (or one pixel) the NHWC -> C,H,W transpose is the identity.
  if (x.rank() < 4 || x.dim(3) == 1 || x.dim(1) * x.dim(2) == 1) {
    c.aliased = true;
    c.out = x.reshape(out_shape);
    return c.out;
  }
  if (c.aliased) {
    c.out = Tensor();
    c.dx = Tensor();
    c.aliased = false;
  }
  // Per image: x[b] is [H*W, C], out[b] is its transpose [C, H*W].
  const int64_t batch = x.dim(0), hw = x.dim(1) * x.dim(2), channels = x.dim(3);
  c.out.ensure(out_shape);
  const float* src = x.f32();
  float* dst = c.out.f32();
  for (int64_t b = 0; b < batch; ++b)
    transpose(src + b * hw * channels, hw, channels, dst + b * hw * channels);
  return c.out;
}

const Tensor& Flatten::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  auto& c = static_cast<FlattenCache&>(cache);
  BRAID_CHECK(c.out.defined(), "Flatten: backward called before forward on this cache");
  BRAID_CHECK(dy.shape() == c.out.shape(), "Flatten: gradient shape ", dy.shape().str(),
              " differs from output shape ", c.out.shape().str());
  if (!need_dx) return no_grad();
  if (c.aliased) {
    c.dx = dy.reshape(c.in_shape);
    return c.dx;
  }
  // Per image: dy[b] is [C, H*W], dx[b] is its transpose [H*W, C].
  const int64_t batch = c.in_shape[0], hw = c.in_shape[1] * c.in_shape[2], channels = c.in_shape[3];
  c.dx.ensure(c.in_shape, DType::f32, MemCategory::activation_grads);
  const float* src = dy.f32();
  float* dst = c.dx.f32();
  for (int64_t b = 0; b < batch; ++b)
    transpose(src + b * hw * channels, channels, hw, dst + b * hw * channels);
  return c.dx;
}

}  // namespace braid::nn
