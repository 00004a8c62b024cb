// GELU: y = x * Phi(x), elementwise, as torch.nn.GELU. approximate=none uses erf;
// approximate=tanh uses 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's choice).
// Any input shape; the output has the same shape. The cache keeps x for backward.
#pragma once

#include "nn/module.h"

namespace braid::nn {

enum class GeluApprox { none, tanh };

class Gelu : public Module {
 public:
  explicit Gelu(GeluApprox approximate = GeluApprox::none) : approx_(approximate) {}

  std::string_view kind() const override { return "GELU"; }
  Shape output_shape(const Shape& in) const override { return in; }
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

  std::unique_ptr<Cache> make_cache() const override;

  GeluApprox approximate() const { return approx_; }
  // The output feeds only a Linear: under bf16 it is written in bf16 (rounded_output.h).
  void set_output_feeds_product(bool on) { feeds_product_ = on; }

 private:
  GeluApprox approx_;
  bool feeds_product_ = false;
};

// The kernels, exposed for fused callers: y = gelu(x) and dx = dy * gelu'(x) over n values.
// dx may alias dy.
void gelu_forward(GeluApprox approx, const float* x, float* y, int64_t n);
void gelu_backward(GeluApprox approx, const float* x, const float* dy, float* dx, int64_t n);

}  // namespace braid::nn
