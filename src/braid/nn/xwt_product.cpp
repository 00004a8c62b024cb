#include "nn/xwt_product.h"

#include "core/convert.h"
#include "core/gemm.h"
#include "core/gemm_bf16.h"

namespace braid::nn {

void XWtProduct::forward(Precision precision, const float* x, const float* w, int64_t rows,
                         int64_t in, int64_t out, float beta, float* y, Tensor& x_bf16) {
  if (precision == Precision::fp32) {
    sgemm(false, true, rows, out, in, 1.0f, x, w, beta, y);
    return;
  }
  x_bf16.ensure({rows, in}, DType::bf16, MemCategory::activations);
  f32_to_bf16(x, x_bf16.data<BFloat16>(), rows * in);
  w_bf16_.ensure({out, in}, DType::bf16, MemCategory::workspace);
  f32_to_bf16(w, w_bf16_.data<BFloat16>(), out * in);
  gemm_bf16(false, true, rows, out, in, 1.0f, x_bf16.data<BFloat16>(), w_bf16_.data<BFloat16>(),
            beta, y);
}

void XWtProduct::take_dy(Precision precision, const float* dy, int64_t rows, int64_t out) {
  if (precision == Precision::fp32) return;
  dy_bf16_.ensure({rows, out}, DType::bf16, MemCategory::workspace);
  f32_to_bf16(dy, dy_bf16_.data<BFloat16>(), rows * out);
}

void XWtProduct::weight_grad(Precision precision, const float* dy, const float* x,
                             const Tensor& x_bf16, int64_t rows, int64_t in, int64_t out,
                             bool overwrite, float* dw) {
  const float beta = overwrite ? 0.0f : 1.0f;
  if (precision == Precision::fp32)
    sgemm(true, false, out, in, rows, 1.0f, dy, x, beta, dw);
  else
    gemm_bf16(true, false, out, in, rows, 1.0f, dy_bf16_.data<BFloat16>(), x_bf16.data<BFloat16>(),
              beta, dw);
}

void XWtProduct::input_grad(Precision precision, const float* dy, const float* w, int64_t rows,
                            int64_t in, int64_t out, float* dx) {
  if (precision == Precision::fp32)
    sgemm(false, false, rows, in, out, 1.0f, dy, w, 0.0f, dx);
  else
    gemm_bf16(false, false, rows, in, out, 1.0f, dy_bf16_.data<BFloat16>(),
              w_bf16_.data<BFloat16>(), 0.0f, dx);
}

}  // namespace braid::nn
