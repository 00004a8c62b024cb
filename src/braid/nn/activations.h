// Elementwise activations as torch.nn.ReLU, Tanh, Sigmoid, LeakyReLU and SiLU: any shape,
// f32, no parameters, output shape == input shape.
//
// All but SiLU save only their output (cache.out) and compute dL/dx from it (relu:
// dy*(y>0), tanh: dy*(1-y^2), sigmoid: dy*y*(1-y), leaky_relu: y>0 ? dy : slope*dy), so
// the input need not stay alive for backward: such an activation adds no saved tensor
// beyond the output the next layer keeps anyway. SiLU is not invertible and keeps its
// input too (see there).
#pragma once

#include "nn/module.h"

namespace braid::nn {

// Shared forward/backward plumbing: shape checks, cache handling, one kernel call per
// tensor (never a virtual call per element).
class Elementwise : public Module {
 public:
  Shape output_shape(const Shape& in) const override { return in; }
  // out [...] = f(x [...])
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  // dx [...] = dy [...] * f'(x), with f' written in terms of the saved output y
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

 protected:
  virtual void forward_kernel(const float* x, float* y, int64_t n) const = 0;
  virtual void backward_kernel(const float* y, const float* dy, float* dx, int64_t n) const = 0;
};

// y = max(x, 0); NaN propagates as in PyTorch.
class ReLU : public Elementwise {
 public:
  std::string_view kind() const override { return "ReLU"; }

 protected:
  void forward_kernel(const float* x, float* y, int64_t n) const override;
  void backward_kernel(const float* y, const float* dy, float* dx, int64_t n) const override;
};

class Tanh : public Elementwise {
 public:
  std::string_view kind() const override { return "Tanh"; }

 protected:
  void forward_kernel(const float* x, float* y, int64_t n) const override;
  void backward_kernel(const float* y, const float* dy, float* dx, int64_t n) const override;
};

// y = 1 / (1 + exp(-x)); saturates cleanly to 0 and 1 (exp overflow gives 1/inf = 0).
class Sigmoid : public Elementwise {
 public:
  std::string_view kind() const override { return "Sigmoid"; }

 protected:
  void forward_kernel(const float* x, float* y, int64_t n) const override;
  void backward_kernel(const float* y, const float* dy, float* dx, int64_t n) const override;
};

// y = x > 0 ? x : slope * x, as torch.nn.LeakyReLU(negative_slope). The gradient is read
// off the saved output, which is valid only because, for slope >= 0, y > 0 exactly where
// x > 0 (x == 0 and NaN get slope * dy, as in PyTorch). A negative slope maps negative x
// to positive y, the output no longer tells the branch, so it is refused here rather than
// paid for with a saved input; slope 0 is ReLU.
class LeakyReLU : public Elementwise {
 public:
  explicit LeakyReLU(float negative_slope = 0.01f);
  std::string_view kind() const override { return "LeakyReLU"; }
  float negative_slope() const { return slope_; }

 protected:
  void forward_kernel(const float* x, float* y, int64_t n) const override;
  void backward_kernel(const float* y, const float* dy, float* dx, int64_t n) const override;

 private:
  float slope_;
};

// y = x * sigmoid(x), as torch.nn.SiLU (swish). SiLU is not monotone (its minimum is at
// x ~ -1.28), so y does not determine x and the gradient s * (1 + x * (1 - s)),
// s = sigmoid(x), needs the input: the cache keeps a handle on x (no copy, but the
// previous layer's output must stay alive until backward, which the Elementwise
// activations do not require) and backward recomputes s, one exp per element, rather than
// saving a third activation-sized tensor.
class SiLU : public Module {
 public:
  std::string_view kind() const override { return "SiLU"; }
  Shape output_shape(const Shape& in) const override { return in; }
  // out [...] = x * sigmoid(x)
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  // dx [...] = dy * s * (1 + x * (1 - s)), s = sigmoid(x) recomputed from the saved x
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
};

}  // namespace braid::nn
