// Softmax over the last dimension, as torch.nn.Softmax(dim=-1): any shape [..., D], f32,
// no parameters, output shape == input shape; each of the numel / D rows sums to 1.
//
// Each row is shifted by its maximum before exp, so no exp sees a positive argument and
// nothing overflows (softmax is invariant to the shift; the largest term becomes exp(0) =
// 1, so the sum is >= 1 and never 0). Backward needs only the output: the Jacobian of a
// row is diag(y) - y y^T, so dx = y * (dy - sum(dy * y)) per row, and the input need not
// stay alive, as for the Elementwise activations.
#pragma once

#include "nn/module.h"

namespace braid::nn {

class Softmax : public Module {
 public:
  std::string_view kind() const override { return "Softmax"; }
  Shape output_shape(const Shape& in) const override;
  // out [..., D] = exp(x - max) / sum(exp(x - max)), per row of D
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  // dx [..., D] = y * (dy - <dy, y>), per row
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
};

}  // namespace braid::nn
