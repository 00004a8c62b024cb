#include "nn/xwt_product.h"

#include "core/convert.h"
#include "core/gemm.h"
#include "core/gemm_bf16.h"

namespace braid::nn {
namespace {

// out = in rounded to binary16 and widened back (kept in fp32 for sgemm).
void round_to_f16(const float* in, float* out, int64_t n, Tensor& staging) {
  staging.ensure({n}, DType::f16, MemCategory::workspace);
  f32_to_f16(in, staging.data<Half>(), n);
  f16_to_f32(staging.data<Half>(), out, n);
}

}  // namespace

void XWtProduct::forward(Precision precision, const float* x, const float* w, int64_t rows,
                         int64_t in, int64_t out, float beta, float* y, Tensor& x_rounded) {
  if (precision == Precision::fp32) {
    sgemm(false, true, rows, out, in, 1.0f, x, w, beta, y);
    return;
  }
  if (precision == Precision::fp16) {
    x_rounded.ensure({rows, in}, DType::f32, MemCategory::activations);
    round_to_f16(x, x_rounded.f32(), rows * in, half_);
    w_rounded_.ensure({out, in}, DType::f32, MemCategory::workspace);
    round_to_f16(w, w_rounded_.f32(), out * in, half_);
    sgemm(false, true, rows, out, in, 1.0f, x_rounded.f32(), w_rounded_.f32(), beta, y);
    return;
  }
  x_rounded.ensure({rows, in}, DType::bf16, MemCategory::activations);
  f32_to_bf16(x, x_rounded.data<BFloat16>(), rows * in);
  w_rounded_.ensure({out, in}, DType::bf16, MemCategory::workspace);
  f32_to_bf16(w, w_rounded_.data<BFloat16>(), out * in);
  gemm_bf16(false, true, rows, out, in, 1.0f, x_rounded.data<BFloat16>(),
            w_rounded_.data<BFloat16>(), beta, y);
}

void XWtProduct::take_dy(Precision precision, const float* dy, int64_t rows, int64_t out) {
  if (precision == Precision::fp32) return;
  if (precision == Precision::fp16) {
    dy_rounded_.ensure({rows, out}, DType::f32, MemCategory::workspace);
    round_to_f16(dy, dy_rounded_.f32(), rows * out, half_);
    return;
  }
  dy_rounded_.ensure({rows, out}, DType::bf16, MemCategory::workspace);
  f32_to_bf16(dy, dy_rounded_.data<BFloat16>(), rows * out);
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
