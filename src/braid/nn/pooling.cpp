// Pooling kernels (contracts in pooling.h). Each output pixel is C contiguous floats and
// so is each input tap, so every inner loop is a straight vector loop over channels; the
// max uses selects rather than branches so it vectorises too.
#include "nn/pooling.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/multiversion.h"

namespace braid::nn {
namespace {

class MaxPoolCache : public Cache {
 public:
  Tensor argmax;  // int32 [B, OH, OW, C]: iy * W + ix of the maximum
};

struct PoolGeometry {
  int64_t B, H, W, C, OH, OW, k, stride;
};

PoolGeometry pool_geometry(const Shape& in, const Shape& out, int64_t k, int64_t stride) {
  return {in[0], in[1], in[2], in[3], out[1], out[2], k, stride};
}

BRAID_MULTIVERSION void max_pool_forward(const PoolGeometry& g, const float* x, float* y,
                                         int32_t* arg) {
  const int64_t C = g.C;
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t oy = 0; oy < g.OH; ++oy)
      for (int64_t ox = 0; ox < g.OW; ++ox) {
        const int64_t o = ((b * g.OH + oy) * g.OW + ox) * C;
        float* yo = y + o;
        int32_t* ao = arg + o;
        for (int64_t ky = 0; ky < g.k; ++ky)
          for (int64_t kx = 0; kx < g.k; ++kx) {
            const int64_t iy = oy * g.stride + ky, ix = ox * g.stride + kx;
            const float* xi = x + ((b * g.H + iy) * g.W + ix) * C;
            const int32_t pos = static_cast<int32_t>(iy * g.W + ix);
            if (ky == 0 && kx == 0) {
              for (int64_t c = 0; c < C; ++c) yo[c] = xi[c], ao[c] = pos;
              continue;
            }
            for (int64_t c = 0; c < C; ++c) {
              const float v = xi[c];
              // Strictly greater: the first maximum wins; v != v: a NaN wins, as in PyTorch.
              const bool take = v > yo[c] || v != v;
              yo[c] = take ? v : yo[c];
              ao[c] = take ? pos : ao[c];
            }
          }
      }
}

BRAID_MULTIVERSION void max_pool_backward(const PoolGeometry& g, const float* dy,
                                          const int32_t* arg, float* dx) {
  const int64_t C = g.C, plane = g.H * g.W * C;
  if (g.stride != g.k) {
    // Overlapping or gapped windows: clear, then scatter-add.
    std::memset(dx, 0, static_cast<size_t>(g.B * plane) * sizeof(float));
    for (int64_t b = 0; b < g.B; ++b) {
      float* dxb = dx + b * plane;
      for (int64_t p = 0; p < g.OH * g.OW; ++p) {
        const int64_t o = (b * g.OH * g.OW + p) * C;
        for (int64_t c = 0; c < C; ++c) dxb[arg[o + c] * C + c] += dy[o + c];
      }
    }
    return;
  }
  // Windows tile the image: every covered input pixel is written once, with a select,
  // and only the strip the floor left uncovered is cleared.
  const int64_t cover_h = g.OH * g.k, cover_w = g.OW * g.k;
  for (int64_t b = 0; b < g.B; ++b) {
    float* dxb = dx + b * plane;
    for (int64_t oy = 0; oy < g.OH; ++oy)
      for (int64_t ox = 0; ox < g.OW; ++ox) {
        const int64_t o = ((b * g.OH + oy) * g.OW + ox) * C;
        for (int64_t ky = 0; ky < g.k; ++ky)
          for (int64_t kx = 0; kx < g.k; ++kx) {
            const int64_t iy = oy * g.k + ky, ix = ox * g.k + kx;
            const int32_t pos = static_cast<int32_t>(iy * g.W + ix);
            float* d = dxb + pos * C;
            for (int64_t c = 0; c < C; ++c) d[c] = arg[o + c] == pos ? dy[o + c] : 0.0f;
          }
      }
    for (int64_t iy = 0; iy < g.H; ++iy) {
      const int64_t from = iy < cover_h ? cover_w : 0;
      std::fill(dxb + (iy * g.W + from) * C, dxb + (iy + 1) * g.W * C, 0.0f);
    }
  }
}

BRAID_MULTIVERSION void avg_pool_forward(const PoolGeometry& g, const float* x, float* y) {
  const int64_t C = g.C;
  const float inv = 1.0f / static_cast<float>(g.k * g.k);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t oy = 0; oy < g.OH; ++oy)
      for (int64_t ox = 0; ox < g.OW; ++ox) {
        float* yo = y + ((b * g.OH + oy) * g.OW + ox) * C;
        std::fill(yo, yo + C, 0.0f);
        for (int64_t ky = 0; ky < g.k; ++ky)
          for (int64_t kx = 0; kx < g.k; ++kx) {
            const float* xi = x + ((b * g.H + oy * g.stride + ky) * g.W + ox * g.stride + kx) * C;
            for (int64_t c = 0; c < C; ++c) yo[c] += xi[c];
          }
        for (int64_t c = 0; c < C; ++c) yo[c] *= inv;
      }
}

BRAID_MULTIVERSION void avg_pool_backward(const PoolGeometry& g, const float* dy, float* dx) {
  const int64_t C = g.C;
  const float inv = 1.0f / static_cast<float>(g.k * g.k);
  std::memset(dx, 0, static_cast<size_t>(g.B * g.H * g.W * C) * sizeof(float));
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t oy = 0; oy < g.OH; ++oy)
      for (int64_t ox = 0; ox < g.OW; ++ox) {
        const float* d = dy + ((b * g.OH + oy) * g.OW + ox) * C;
        for (int64_t ky = 0; ky < g.k; ++ky)
          for (int64_t kx = 0; kx < g.k; ++kx) {
            float* xi = dx + ((b * g.H + oy * g.stride + ky) * g.W + ox * g.stride + kx) * C;
            for (int64_t c = 0; c < C; ++c) xi[c] += d[c] * inv;
          }
      }
}

// y[b, c] = mean over the P = H*W pixels of x[b, :, :, c].
BRAID_MULTIVERSION void global_avg_forward(const float* x, float* y, int64_t B, int64_t P,
                                           int64_t C) {
  const float inv = 1.0f / static_cast<float>(P);
  for (int64_t b = 0; b < B; ++b) {
    float* yb = y + b * C;
    std::fill(yb, yb + C, 0.0f);
    for (int64_t p = 0; p < P; ++p) {
      const float* xp = x + (b * P + p) * C;
      for (int64_t c = 0; c < C; ++c) yb[c] += xp[c];
    }
    for (int64_t c = 0; c < C; ++c) yb[c] *= inv;
  }
}

BRAID_MULTIVERSION void global_avg_backward(const float* dy, float* dx, int64_t B, int64_t P,
                                            int64_t C) {
  const float inv = 1.0f / static_cast<float>(P);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < P; ++p) {
      float* d = dx + (b * P + p) * C;
      for (int64_t c = 0; c < C; ++c) d[c] = dy[b * C + c] * inv;
    }
}

void check_dy(const Module& m, const Tensor& dy, const Cache& cache) {
  BRAID_CHECK(dy.shape() == cache.out.shape(), m.kind(), ": backward got dy ", dy.shape().str(),
              ", forward produced ", cache.out.shape().str());
}

}  // namespace

Pool2dBase::Pool2dBase(int64_t kernel, int64_t stride)
    : k_(kernel), stride_(stride == 0 ? kernel : stride) {
  BRAID_CHECK(k_ > 0 && stride_ > 0, "pooling kernel ", kernel, " and stride ", stride,
              " must be positive (stride 0 means stride = kernel)");
}

Shape Pool2dBase::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() == 4, kind(), "(kernel ", k_, ", stride ", stride_,
              "): expects NHWC input [B, H, W, C], got ", in.str());
  BRAID_CHECK(in[1] >= k_ && in[2] >= k_, kind(), "(kernel ", k_, ", stride ", stride_, "): input ",
              in.str(), " is smaller than the ", k_, "x", k_, " window");
  return {in[0], (in[1] - k_) / stride_ + 1, (in[2] - k_) / stride_ + 1, in[3]};
}

std::unique_ptr<Cache> MaxPool2d::make_cache() const { return std::make_unique<MaxPoolCache>(); }

const Tensor& MaxPool2d::forward(const Tensor& x, Cache& cache_base, const ForwardContext&) {
  auto& cache = static_cast<MaxPoolCache&>(cache_base);
  const Shape out = output_shape(x.shape());
  BRAID_CHECK(x.shape()[1] * x.shape()[2] <= INT32_MAX, kind(), ": input ", x.shape().str(),
              " has too many pixels for int32 argmax positions");
  cache.x = x;
  cache.out.ensure(out);
  cache.argmax.ensure(out, DType::i32);
  max_pool_forward(pool_geometry(x.shape(), out, k_, stride_), x.f32(), cache.out.f32(),
                   cache.argmax.data<int32_t>());
  return cache.out;
}

const Tensor& MaxPool2d::backward(const Tensor& dy, Cache& cache_base, bool need_dx) {
  auto& cache = static_cast<MaxPoolCache&>(cache_base);
  check_dy(*this, dy, cache);
  if (!need_dx) return no_grad();
  cache.dx.ensure(cache.x.shape(), DType::f32, MemCategory::activation_grads);
  max_pool_backward(pool_geometry(cache.x.shape(), dy.shape(), k_, stride_), dy.f32(),
                    cache.argmax.data<int32_t>(), cache.dx.f32());
  return cache.dx;
}

const Tensor& AvgPool2d::forward(const Tensor& x, Cache& cache, const ForwardContext&) {
  const Shape out = output_shape(x.shape());
  cache.x = x;
  cache.out.ensure(out);
  avg_pool_forward(pool_geometry(x.shape(), out, k_, stride_), x.f32(), cache.out.f32());
  return cache.out;
}

const Tensor& AvgPool2d::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  check_dy(*this, dy, cache);
  if (!need_dx) return no_grad();
  cache.dx.ensure(cache.x.shape(), DType::f32, MemCategory::activation_grads);
  avg_pool_backward(pool_geometry(cache.x.shape(), dy.shape(), k_, stride_), dy.f32(),
                    cache.dx.f32());
  return cache.dx;
}

Shape GlobalAvgPool::output_shape(const Shape& in) const {
  BRAID_CHECK(in.rank() == 4 && in[1] * in[2] > 0, "GlobalAvgPool: expects NHWC input [B, H, W, C]",
              " with at least one pixel, got ", in.str());
  return {in[0], in[3]};
}

const Tensor& GlobalAvgPool::forward(const Tensor& x, Cache& cache, const ForwardContext&) {
  const Shape& s = x.shape();
  cache.x = x;
  cache.out.ensure(output_shape(s));
  global_avg_forward(x.f32(), cache.out.f32(), s[0], s[1] * s[2], s[3]);
  return cache.out;
}

const Tensor& GlobalAvgPool::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  check_dy(*this, dy, cache);
  if (!need_dx) return no_grad();
  const Shape& s = cache.x.shape();
  cache.dx.ensure(s, DType::f32, MemCategory::activation_grads);
  global_avg_backward(dy.f32(), cache.dx.f32(), s[0], s[1] * s[2], s[3]);
  return cache.dx;
}

}  // namespace braid::nn
