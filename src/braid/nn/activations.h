// Elementwise activations as torch.nn.ReLU, Tanh and Sigmoid: any shape, f32, no
// parameters, output shape == input shape.
//
// Each saves only its output (cache.out) and computes dL/dx from it (relu: dy*(y>0),
// tanh: dy*(1-y^2), sigmoid: dy*y*(1-y)), so the input need not stay alive for backward:
// an activation adds no saved tensor beyond the output the next layer keeps anyway.
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

}  // namespace braid::nn
