// im2col / col2im / pad_input for NHWC activations (contracts in conv2d_kernels.h).
//
// In NHWC a window row (k pixels at one iy) is k*C contiguous floats whenever it lies
// inside the image, and the tap-major column order puts it contiguously in the column
// row too, so the common case is one straight copy (or add) per (pixel, ky). Only windows
// touching the padding take the per-pixel path.
#include <algorithm>
#include <cstring>

#include "core/multiversion.h"
#include "nn/conv2d_kernels.h"

namespace braid::nn {

namespace {

// One body for fp32 and bf16 columns: the copies do not care what a 4- or 2-byte value is.
template <typename T>
inline void im2col_of(const ConvGeometry& g, const T* x, T* cols) {
  const int64_t k = g.k, C = g.C, K = g.taps(), span = k * C;
  for (int64_t b = 0; b < g.B; ++b) {
    const T* xb = x + b * g.H * g.W * C;
    for (int64_t oy = 0; oy < g.OH; ++oy) {
      for (int64_t ox = 0; ox < g.OW; ++ox) {
        T* row = cols + ((b * g.OH + oy) * g.OW + ox) * K;
        const int64_t ix0 = ox * g.stride - g.pad;
        for (int64_t ky = 0; ky < k; ++ky) {
          const int64_t iy = oy * g.stride - g.pad + ky;
          T* dst = row + ky * span;
          if (iy < 0 || iy >= g.H) {
            std::fill(dst, dst + span, T{});
            continue;
          }
          const T* src = xb + iy * g.W * C;
          if (ix0 >= 0 && ix0 + k <= g.W) {
            const T* s = src + ix0 * C;
            for (int64_t i = 0; i < span; ++i) dst[i] = s[i];
            continue;
          }
          for (int64_t kx = 0; kx < k; ++kx) {
            const int64_t ix = ix0 + kx;
            T* d = dst + kx * C;
            if (ix < 0 || ix >= g.W) {
              std::fill(d, d + C, T{});
            } else {
              const T* s = src + ix * C;
              for (int64_t c = 0; c < C; ++c) d[c] = s[c];
            }
          }
        }
      }
    }
  }
}

}  // namespace

BRAID_MULTIVERSION void im2col(const ConvGeometry& g, const float* x, float* cols) {
  im2col_of(g, x, cols);
}

void im2col(const ConvGeometry& g, const BFloat16* x, BFloat16* cols) { im2col_of(g, x, cols); }

BRAID_MULTIVERSION void col2im(const ConvGeometry& g, const float* dcols, float* dx) {
  const int64_t k = g.k, C = g.C, K = g.taps(), span = k * C;
  std::memset(dx, 0, static_cast<size_t>(g.B * g.H * g.W * C) * sizeof(float));
  for (int64_t b = 0; b < g.B; ++b) {
    float* xb = dx + b * g.H * g.W * C;
    for (int64_t oy = 0; oy < g.OH; ++oy) {
      for (int64_t ox = 0; ox < g.OW; ++ox) {
        const float* row = dcols + ((b * g.OH + oy) * g.OW + ox) * K;
        const int64_t ix0 = ox * g.stride - g.pad;
        for (int64_t ky = 0; ky < k; ++ky) {
          const int64_t iy = oy * g.stride - g.pad + ky;
          if (iy < 0 || iy >= g.H) continue;
          const float* src = row + ky * span;
          float* dst = xb + iy * g.W * C;
          if (ix0 >= 0 && ix0 + k <= g.W) {
            float* d = dst + ix0 * C;
            for (int64_t i = 0; i < span; ++i) d[i] += src[i];
            continue;
          }
          for (int64_t kx = 0; kx < k; ++kx) {
            const int64_t ix = ix0 + kx;
            if (ix < 0 || ix >= g.W) continue;
            float* d = dst + ix * C;
            const float* s = src + kx * C;
            for (int64_t c = 0; c < C; ++c) d[c] += s[c];
          }
        }
      }
    }
  }
}

void pad_input(const ConvGeometry& g, const float* x, float* xp) {
  const int64_t Hp = g.padded_h(), Wp = g.padded_w(), C = g.C, p = g.pad;
  std::memset(xp, 0, static_cast<size_t>(g.B * Hp * Wp * C) * sizeof(float));
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t y = 0; y < g.H; ++y)
      std::memcpy(xp + ((b * Hp + y + p) * Wp + p) * C, x + (b * g.H + y) * g.W * C,
                  static_cast<size_t>(g.W * C) * sizeof(float));
}

}  // namespace braid::nn
