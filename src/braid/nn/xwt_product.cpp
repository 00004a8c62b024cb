#include "nn/xwt_product.h"

#include <algorithm>

#include "core/convert.h"
#include "core/gemm.h"
#include "core/gemm_bf16.h"
#include "core/kernels.h"

namespace braid::nn {
namespace {

// Scratch of the calling thread, shared by every product: dy's rounded copy lives only
// inside one backward call (take_dy, then the two products) and fp16's staging inside one
// rounding, so a model's products need one of each between them, not one each (gpt-tiny
// in bf16: 42 MB of workspace was per-layer dy copies).
Tensor& thread_dy_scratch() {
  thread_local Tensor t;
  return t;
}

// out = in rounded to binary16 and widened back (kept in fp32 for sgemm).
void round_to_f16(const float* in, float* out, int64_t n) {
  thread_local Tensor staging;
  staging.ensure({n}, DType::f16, MemCategory::workspace);
  f32_to_f16(in, staging.data<Half>(), n);
  f16_to_f32(staging.data<Half>(), out, n);
}

// y[r, :] = bias for every row, for a product that then accumulates (beta 1): one pass
// over y more, as PyTorch's addmm on CPU. Returns the product's beta.
float broadcast_bias(const float* bias, int64_t rows, int64_t out, float* y) {
  if (bias == nullptr) return 0.0f;
  for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + out, y + r * out);
  return 1.0f;
}

}  // namespace

void XWtProduct::forward(Precision precision, const float* x, const float* w, const float* bias,
                         int64_t rows, int64_t in, int64_t out, float* y, Tensor& x_rounded) {
  if (precision == Precision::fp32) {
    const float beta = broadcast_bias(bias, rows, out, y);
    sgemm(false, true, rows, out, in, 1.0f, x, w, beta, y);
    return;
  }
  if (precision == Precision::fp16) {
    x_rounded.ensure({rows, in}, DType::f32, MemCategory::activations);
    round_to_f16(x, x_rounded.f32(), rows * in);
    w_rounded_.ensure({out, in}, DType::f32, MemCategory::workspace);
    round_to_f16(w, w_rounded_.f32(), out * in);
    const float beta = broadcast_bias(bias, rows, out, y);
    sgemm(false, true, rows, out, in, 1.0f, x_rounded.f32(), w_rounded_.f32(), beta, y);
    return;
  }
  x_rounded.ensure({rows, in}, DType::bf16, MemCategory::activations);
  f32_to_bf16(x, x_rounded.data<BFloat16>(), rows * in);
  forward_rounded(x_rounded.data<BFloat16>(), w, bias, rows, in, out, y);
}

void XWtProduct::forward_rounded(const BFloat16* x, const float* w, const float* bias, int64_t rows,
                                 int64_t in, int64_t out, float* y) {
  w_rounded_.ensure({out, in}, DType::bf16, MemCategory::workspace);
  f32_to_bf16(w, w_rounded_.data<BFloat16>(), out * in);
  // The bias goes into oneDNN's kernel: the broadcast pass over y is the price of a
  // separate GEMM library, and at bf16's speed it was 3 % of gpt-tiny's step.
  gemm_bf16(false, true, rows, out, in, 1.0f, x, w_rounded_.data<BFloat16>(), 0.0f, y, 0, 0, 0,
            bias);
}

void XWtProduct::take_dy(Precision precision, const float* dy, int64_t rows, int64_t out,
                         float* bias_grad) {
  if (precision == Precision::fp32) {
    if (bias_grad != nullptr) sum_rows_into(dy, bias_grad, rows, out);
    return;
  }
  if (precision == Precision::fp16) {
    thread_dy_scratch().ensure({rows, out}, DType::f32, MemCategory::workspace);
    dy_rounded_ = thread_dy_scratch();
    round_to_f16(dy, dy_rounded_.f32(), rows * out);
    if (bias_grad != nullptr) sum_rows_into(dy, bias_grad, rows, out);
    return;
  }
  thread_dy_scratch().ensure({rows, out}, DType::bf16, MemCategory::workspace);
  dy_rounded_ = thread_dy_scratch();
  BFloat16* rounded = dy_rounded_.data<BFloat16>();
  if (bias_grad == nullptr) {
    f32_to_bf16(dy, rounded, rows * out);
    return;
  }
  // Blocks of rows small enough to stay in L1 between the rounding and the sums: dy is
  // read from memory once. The sums run row by row, as sum_rows_into's, to the same bits.
  const int64_t block = std::max<int64_t>(1, 8192 / out);
  for (int64_t r = 0; r < rows; r += block) {
    const int64_t n = std::min(block, rows - r);
    f32_to_bf16(dy + r * out, rounded + r * out, n * out);
    sum_rows_into(dy + r * out, bias_grad, n, out);
  }
}

void XWtProduct::weight_grad(Precision precision, const float* dy, const float* x,
                             const Tensor& x_rounded, int64_t rows, int64_t in, int64_t out,
                             bool overwrite, float* dw) {
  const float beta = overwrite ? 0.0f : 1.0f;
  if (precision == Precision::fp32)
    sgemm(true, false, out, in, rows, 1.0f, dy, x, beta, dw);
  else if (precision == Precision::fp16)
    sgemm(true, false, out, in, rows, 1.0f, dy_rounded_.f32(), x_rounded.f32(), beta, dw);
  else
    gemm_bf16(true, false, out, in, rows, 1.0f, dy_rounded_.data<BFloat16>(),
              x_rounded.data<BFloat16>(), beta, dw);
}

void XWtProduct::input_grad(Precision precision, const float* dy, const float* w, int64_t rows,
                            int64_t in, int64_t out, float* dx) {
  if (precision == Precision::fp32)
    sgemm(false, false, rows, in, out, 1.0f, dy, w, 0.0f, dx);
  else if (precision == Precision::fp16)
    sgemm(false, false, rows, in, out, 1.0f, dy_rounded_.f32(), w_rounded_.f32(), 0.0f, dx);
  else
    gemm_bf16(false, false, rows, in, out, 1.0f, dy_rounded_.data<BFloat16>(),
              w_rounded_.data<BFloat16>(), 0.0f, dx);
}

}  // namespace braid::nn
