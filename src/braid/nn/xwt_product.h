// The three products of y = x W^T, shared by Linear and the GPT's tied head, under a
// Precision (module.h): fp32 sgemm, or bf16 operands with fp32 accumulation
// (core/gemm_bf16.h). x and dy are rounded to bf16 as they arrive, W once per forward
// into scratch; y, dx and dW are fp32, so the parameters and the optimizer stay fp32.
// fp16 rounds the operands to binary16 alike (values past 65504 become inf, as in fp16
// training) and multiplies them widened, with sgemm: no CPU braid runs on multiplies fp16
// faster than fp32 (that needs AVX512-FP16), so fp16 is there for its semantics.
//
// Per step: forward() (x kept in bf16 in the caller's cache for the weight gradient), then
// in backward take_dy() once, then weight_grad() and input_grad() in either order, before
// another product's take_dy() on the same thread. The weight copy is the module's and
// stays valid from forward to backward; dy's copy is the thread's.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "nn/module.h"

namespace braid::nn {

class XWtProduct {
 public:
  // y[rows, out] = x[rows, in] W[out, in]^T (+ bias[out] on every row, when given);
  // x_rounded receives x rounded for the weight gradient (bf16 values; under fp16,
  // binary16 values kept as fp32).
  void forward(Precision precision, const float* x, const float* w, const float* bias, int64_t rows,
               int64_t in, int64_t out, float* y, Tensor& x_rounded);
  // forward() with x already rounded to bf16 by its producer (precision bf16); the weight
  // gradient then takes x itself as x_rounded.
  void forward_rounded(const BFloat16* x, const float* w, const float* bias, int64_t rows,
                       int64_t in, int64_t out, float* y);
  // Rounds dy[rows, out] for the two products below (bf16, fp16) and, when bias_grad is
  // given, adds dy's column sums to it (the bias gradient) in the same pass over dy.
  void take_dy(Precision precision, const float* dy, int64_t rows, int64_t out, float* bias_grad);
  // dW[out, in] (+)= dy^T x: overwrite (beta 0) or accumulate; x or x_rounded by precision.
  void weight_grad(Precision precision, const float* dy, const float* x, const Tensor& x_rounded,
                   int64_t rows, int64_t in, int64_t out, bool overwrite, float* dw);
  // dx[rows, in] = dy W.
  void input_grad(Precision precision, const float* dy, const float* w, int64_t rows, int64_t in,
                  int64_t out, float* dx);

 private:
  // W rounded (MemCategory::workspace): bf16, or binary16 values kept as fp32.
  Tensor w_rounded_;
  // dy rounded alike: a handle on the thread's scratch, shared by every product, valid
  // from take_dy() to the end of this backward call.
  Tensor dy_rounded_;
};

}  // namespace braid::nn
