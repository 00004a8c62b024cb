// ZeroPad2d: zeros around an NHWC image, as torch.nn.ZeroPad2d(p) on NCHW: [B, H, W, C] ->
// [B, H + 2p, W + 2p, C]. Fashion-MNIST's 28 x 28 padded to the 32 x 32 that CIFAR-style
// networks (resnet18) are built for. Backward crops dy back to the input's pixels.
#pragma once

#include "nn/module.h"

namespace braid::nn {

class ZeroPad2d : public Module {
 public:
  explicit ZeroPad2d(int64_t padding);
  std::string_view kind() const override { return "ZeroPad2d"; }
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

 private:
  int64_t pad_;
};

}  // namespace braid::nn
