// Upsample kernels (contract in upsample.h). An output row oy reads input row oy / s;
// within it, each input pixel's C channels are copied to s neighbouring output pixels, so
// the inner loops are straight copies or adds of C contiguous floats.
#include "nn/upsample.h"

#include <algorithm>
#include <cstring>

#include "core/multiversion.h"

namespace braid::nn {
namespace {

// Backward needs only the input's shape, so the input itself is not kept alive.
class UpsampleCache : public Cache {
 public:
  Shape in;
};

struct UpsampleGeometry {
  int64_t B, H, W, C, s;
};

BRAID_MULTIVERSION void upsample_forward(const UpsampleGeometry& g, const float* x, float* y) {
  const int64_t C = g.C, OH = g.H * g.s, OW = g.W * g.s;
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t oy = 0; oy < OH; ++oy) {
      const float* xr = x + ((b * g.H + oy / g.s) * g.W) * C;
      float* yr = y + ((b * OH + oy) * OW) * C;
      for (int64_t ix = 0; ix < g.W; ++ix)
        for (int64_t k = 0; k < g.s; ++k)
          std::memcpy(yr + (ix * g.s + k) * C, xr + ix * C, static_cast<size_t>(C) * sizeof(float));
    }
}

// Every output row adds into its input row, so dx is cleared first; the s rows of a block
// are adjacent, so an input row stays in cache while its s output rows are summed in.
BRAID_MULTIVERSION void upsample_backward(const UpsampleGeometry& g, const float* dy, float* dx) {
  const int64_t C = g.C, OH = g.H * g.s, OW = g.W * g.s;
  std::fill(dx, dx + g.B * g.H * g.W * C, 0.0f);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t oy = 0; oy < OH; ++oy) {
      float* dxr = dx + ((b * g.H + oy / g.s) * g.W) * C;
      const float* dyr = dy + ((b * OH + oy) * OW) * C;
      for (int64_t ix = 0; ix < g.W; ++ix) {
        float* d = dxr + ix * C;
        for (int64_t k = 0; k < g.s; ++k) {
          const float* src = dyr + (ix * g.s + k) * C;
          for (int64_t c = 0; c < C; ++c) d[c] += src[c];
        }
      }
    }
}

}  // namespace

Upsample::Upsample(int64_t scale_factor) : s_(scale_factor) {
  BRAID_CHECK(s_ >= 1, "Upsample: scale_factor must be an integer >= 1, got ", scale_factor);
}

Shape Upsample::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() == 4, "Upsample(scale_factor ", s_,
              "): expects NHWC input [B, H, W, C], got ", in.str());
  return {in[0], in[1] * s_, in[2] * s_, in[3]};
}

std::unique_ptr<Cache> Upsample::make_cache() const { return std::make_unique<UpsampleCache>(); }

const Tensor& Upsample::forward(const Tensor& x, Cache& cache_base, const ForwardContext&) {
  auto& cache = static_cast<UpsampleCache&>(cache_base);
  BRAID_CHECK(x.dtype() == DType::f32, "Upsample: input must be f32, got ", dtype_name(x.dtype()),
              " of shape ", x.shape().str());
  const Shape& s = x.shape();
  cache.out.ensure(output_shape(s));
  cache.in = s;
  upsample_forward({s[0], s[1], s[2], s[3], s_}, x.f32(), cache.out.f32());
  return cache.out;
}

const Tensor& Upsample::backward(const Tensor& dy, Cache& cache_base, bool need_dx) {
  auto& cache = static_cast<UpsampleCache&>(cache_base);
  BRAID_CHECK(cache.out.defined(), "Upsample: backward called before forward on this cache");
  BRAID_CHECK(dy.shape() == cache.out.shape(), "Upsample: backward got dy ", dy.shape().str(),
              ", forward produced ", cache.out.shape().str());
  if (!need_dx) return no_grad();
  const Shape& s = cache.in;
  cache.dx.ensure(s, DType::f32, MemCategory::activation_grads);
  upsample_backward({s[0], s[1], s[2], s[3], s_}, dy.f32(), cache.dx.f32());
  return cache.dx;
}

}  // namespace braid::nn
