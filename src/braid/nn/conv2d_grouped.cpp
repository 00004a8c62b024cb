// Conv2d's grouped path: dilation > 1 or groups > 1 (contracts in conv2d.h and
// conv2d_kernels.h).
//
// How it works: im2col_grouped writes, for every output pixel, G blocks of kk*Cg taps
// (kk = k*k, Cg = C/G), each block the window of its group's input channels sampled every
// `dilation` pixels. Group gi's columns are then the column block [gi*Tg, (gi+1)*Tg) of
// cols[M, T] (Tg = kk*Cg, T = G*Tg), and its output channels the column block
// [gi*Og, (gi+1)*Og) of y[M, O]: one GEMM per group with leading dimensions T and O, no
// copies. The weight is repacked to wt[G, Tg, Og] (group gi: wt[gi][(ky*k + kx)*Cg + c][oo]
// = w[gi*Og + oo, c, ky, kx]). Backward mirrors it: per group dwt_gi = cols_gi^T dy_gi and
// dcols_gi = dy_gi wt_gi^T, then col2im_grouped.
//
// One path for all of dilation, groups and depthwise, fp32 under either precision, not
// timed against anything: correct first. Depthwise (Cg = 1) makes K = k*k, so a direct
// kernel vectorised over channels would beat it; that is left for later.
#include <algorithm>
#include <cstring>

#include "core/gemm.h"
#include "core/kernels.h"
#include "nn/conv2d.h"
#include "nn/conv2d_kernels.h"

namespace braid::nn {

void im2col_grouped(const ConvGeometry& g, const float* x, float* cols) {
  const int64_t k = g.k, C = g.C, G = g.groups, Cg = C / G, kk = k * k, T = g.taps();
  for (int64_t b = 0; b < g.B; ++b) {
    const float* xb = x + b * g.H * g.W * C;
    for (int64_t oy = 0; oy < g.OH; ++oy) {
      for (int64_t ox = 0; ox < g.OW; ++ox) {
        float* row = cols + ((b * g.OH + oy) * g.OW + ox) * T;
        for (int64_t gi = 0; gi < G; ++gi) {
          for (int64_t ky = 0; ky < k; ++ky) {
            const int64_t iy = oy * g.stride - g.pad + ky * g.dilation;
            for (int64_t kx = 0; kx < k; ++kx) {
              const int64_t ix = ox * g.stride - g.pad + kx * g.dilation;
              float* d = row + (gi * kk + ky * k + kx) * Cg;
              if (iy < 0 || iy >= g.H || ix < 0 || ix >= g.W) {
                std::fill(d, d + Cg, 0.0f);
              } else {
                const float* s = xb + (iy * g.W + ix) * C + gi * Cg;
                std::copy(s, s + Cg, d);
              }
            }
          }
        }
      }
    }
  }
}

void col2im_grouped(const ConvGeometry& g, const float* dcols, float* dx) {
  const int64_t k = g.k, C = g.C, G = g.groups, Cg = C / G, kk = k * k, T = g.taps();
  std::memset(dx, 0, static_cast<size_t>(g.B * g.H * g.W * C) * sizeof(float));
  for (int64_t b = 0; b < g.B; ++b) {
    float* xb = dx + b * g.H * g.W * C;
    for (int64_t oy = 0; oy < g.OH; ++oy) {
      for (int64_t ox = 0; ox < g.OW; ++ox) {
        const float* row = dcols + ((b * g.OH + oy) * g.OW + ox) * T;
        for (int64_t gi = 0; gi < G; ++gi) {
          for (int64_t ky = 0; ky < k; ++ky) {
            const int64_t iy = oy * g.stride - g.pad + ky * g.dilation;
            if (iy < 0 || iy >= g.H) continue;
            for (int64_t kx = 0; kx < k; ++kx) {
              const int64_t ix = ox * g.stride - g.pad + kx * g.dilation;
              if (ix < 0 || ix >= g.W) continue;
              const float* s = row + (gi * kk + ky * k + kx) * Cg;
              float* d = xb + (iy * g.W + ix) * C + gi * Cg;
              for (int64_t c = 0; c < Cg; ++c) d[c] += s[c];
            }
          }
        }
      }
    }
  }
}

void Conv2d::repack_weight_grouped() {
  const int64_t kk = k_ * k_, Cg = in_ / groups_, Og = out_ / groups_, Tg = kk * Cg;
  wt_.ensure({groups_ * Tg, Og}, DType::f32, MemCategory::workspace);
  const float* w = params_->param(weight_).f32();
  float* wt = wt_.f32();
  // w[o, c, ky, kx] (o = gi*Og + oo) -> wt[gi][(ky*k + kx)*Cg + c][oo]
  for (int64_t o = 0; o < out_; ++o) {
    const int64_t gi = o / Og, oo = o % Og;
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t s = 0; s < kk; ++s)
        wt[(gi * Tg + s * Cg + c) * Og + oo] = w[(o * Cg + c) * kk + s];
  }
}

// x [B, H, W, C] -> y [B, OH, OW, O]; cols [M, T] kept for backward.
void Conv2d::forward_grouped(const ConvGeometry& g, const float* x, const float* bias, Tensor& cols,
                             float* y) {
  const int64_t M = g.pixels(), T = g.taps(), G = g.groups, Tg = T / G, Og = g.O / G;
  cols.ensure({M, T}, DType::f32, MemCategory::workspace);
  im2col_grouped(g, x, cols.f32());
  repack_weight_grouped();
  if (bias)
    for (int64_t r = 0; r < M; ++r) std::copy(bias, bias + g.O, y + r * g.O);
  // y[:, gi*Og..] (ld O) = cols[:, gi*Tg..] (ld T) wt[gi] [Tg, Og]
  for (int64_t gi = 0; gi < G; ++gi)
    sgemm(false, false, M, Og, Tg, 1.0f, cols.f32() + gi * Tg, wt_.f32() + gi * Tg * Og,
          bias ? 1.0f : 0.0f, y + gi * Og, T, Og, g.O);
}

// dy [M, O]: adds into the weight (and bias) gradients; dx [B, H, W, C] unless null.
void Conv2d::backward_grouped(const ConvGeometry& g, const Tensor& cols, const float* dy,
                              float* dx) {
  const int64_t M = g.pixels(), T = g.taps(), G = g.groups, Tg = T / G, Og = g.O / G;
  const int64_t kk = k_ * k_, Cg = in_ / groups_;
  // dwt[gi] [Tg, Og] = cols[:, gi*Tg..]^T dy[:, gi*Og..]
  dwt_.ensure({G * Tg, Og}, DType::f32, MemCategory::workspace);
  for (int64_t gi = 0; gi < G; ++gi)
    sgemm(true, false, Tg, Og, M, 1.0f, cols.f32() + gi * Tg, dy + gi * Og, 0.0f,
          dwt_.f32() + gi * Tg * Og, T, g.O, Og);
  if (has_bias_) sum_rows_into(dy, params_->grad(bias_).f32(), M, g.O);
  // Back to PyTorch's layout: grad[o, c, ky, kx] += dwt[gi][(ky*k + kx)*Cg + c][oo].
  float* gw = params_->grad(weight_).f32();
  const float* dwt = dwt_.f32();
  for (int64_t o = 0; o < out_; ++o) {
    const int64_t gi = o / Og, oo = o % Og;
    for (int64_t c = 0; c < Cg; ++c)
      for (int64_t s = 0; s < kk; ++s)
        gw[(o * Cg + c) * kk + s] += dwt[(gi * Tg + s * Cg + c) * Og + oo];
  }
  if (!dx) return;
  // dcols[:, gi*Tg..] (ld T) = dy[:, gi*Og..] (ld O) wt[gi]^T, then back onto the pixels.
  repack_weight_grouped();
  dcols_.ensure({M, T}, DType::f32, MemCategory::workspace);
  for (int64_t gi = 0; gi < G; ++gi)
    sgemm(false, true, M, Tg, Og, 1.0f, dy + gi * Og, wt_.f32() + gi * Tg * Og, 0.0f,
          dcols_.f32() + gi * Tg, g.O, Og, T);
  col2im_grouped(g, dcols_.f32(), dx);
}

}  // namespace braid::nn
