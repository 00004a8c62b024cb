// Low-level kernels behind Conv2d on NHWC activations: im2col/col2im for the GEMM path
// and a direct convolution (and its weight gradient) for layers with few input channels.
//
// Every kernel sees the weight in "tap-major" order: a tap is one (ky, kx, c) triple,
// numbered t = (ky * k + kx) * C + c, which is the order in which an NHWC input row
// stores a k x k window (stride 1: a window row of k pixels is k*C contiguous floats).
// Conv2d repacks PyTorch's [out, in, kh, kw] weight into this order; it is tiny next to
// the activations.
//
// Kernels are single-threaded, allocate nothing and never throw; shapes are checked by
// Conv2d before they run.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace braid::nn {

// The shapes of one convolution: input [B, H, W, C], output [B, OH, OW, O], square
// kernel k, the same stride and zero padding on both spatial axes. dilation and groups
// are torch's; only the grouped kernels below read them (the others assume 1 and 1).
struct ConvGeometry {
  int64_t B = 0, H = 0, W = 0, C = 0;
  int64_t O = 0, k = 1, stride = 1, pad = 0;
  int64_t OH = 0, OW = 0;
  int64_t dilation = 1, groups = 1;

  int64_t taps() const { return k * k * C; }      // GEMM K: columns of im2col
  int64_t pixels() const { return B * OH * OW; }  // GEMM M: output positions
  int64_t padded_h() const { return H + 2 * pad; }
  int64_t padded_w() const { return W + 2 * pad; }
  // Whether only the grouped kernels can run it (conv2d_grouped.cpp).
  bool grouped() const { return dilation != 1 || groups != 1; }
};

// cols[B*OH*OW, taps] = the receptive field of every output pixel, zeros where the
// window reaches into the padding.
void im2col(const ConvGeometry& g, const float* x, float* cols);
// The same on bf16 values (Precision::bf16: the input rounded once, columns in bf16).
void im2col(const ConvGeometry& g, const BFloat16* x, BFloat16* cols);
// dx[B, H, W, C] = sum of each column entry back into the pixel it was read from
// (overwrites dx).
void col2im(const ConvGeometry& g, const float* dcols, float* dx);

// Dilation and groups (conv2d_grouped.cpp). Columns are grouped first: a row is G blocks
// of kk*Cg taps, tap (ky, kx, c) of group gi at (gi*k*k + ky*k + kx)*Cg + c, Cg = C/G,
// reading x[iy = oy*stride - pad + ky*dilation, ix likewise, gi*Cg + c]; so group gi's
// taps are one column block of a GEMM operand with leading dimension taps(). With
// G = 1 this is the tap order above.
void im2col_grouped(const ConvGeometry& g, const float* x, float* cols);
// dx = the columns scattered back (overwrites dx).
void col2im_grouped(const ConvGeometry& g, const float* dcols, float* dx);

// xp[B, H+2p, W+2p, C] = x with a zero border of width pad, so the direct kernels never
// test bounds.
void pad_input(const ConvGeometry& g, const float* x, float* xp);

// Direct convolution over a padded input xp (see pad_input):
// y[pixel, o] = bias[o] + sum_t xp[window(pixel), t] * wt[t, o], with wt[taps, O]
// (tap-major, output channels contiguous) and bias null for none.
void conv_direct_forward(const ConvGeometry& g, const float* xp, const float* wt, const float* bias,
                         float* y);
// dwt[taps, O] += sum_pixels xp[window(pixel), t] * dy[pixel, o], and, unless db is
// null, db[O] += sum_pixels dy[pixel, o].
void conv_direct_weight_grad(const ConvGeometry& g, const float* xp, const float* dy, float* dwt,
                             float* db);

}  // namespace braid::nn
