// Pooling layers on NHWC activations [B, H, W, C], as torch.nn's (no padding, no
// dilation, floor output size: OH = (H - k) / stride + 1, stride defaults to k).
//  - MaxPool2d: y = window maximum; ties go to the first maximum in scan order (ky, kx),
//    a NaN in the window wins, as in PyTorch. Argmax positions (int32, iy*W + ix) are
//    kept in the cache for backward.
//  - AvgPool2d: y = window mean.
//  - GlobalAvgPool: [B, H, W, C] -> [B, C], the mean over all pixels
//    (torch.nn.AdaptiveAvgPool2d(1) followed by flatten).
// All loops run over C innermost, so they vectorise.
#pragma once

#include "nn/module.h"

namespace braid::nn {

// Window geometry shared by the two windowed pools.
class Pool2dBase : public Module {
 public:
  Pool2dBase(int64_t kernel, int64_t stride);
  Shape output_shape(const Shape& in) const override;
  int64_t kernel() const { return k_; }
  int64_t stride() const { return stride_; }

 protected:
  int64_t k_, stride_;
};

class MaxPool2d : public Pool2dBase {
 public:
  // stride 0 means stride = kernel (PyTorch's default).
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0) : Pool2dBase(kernel, stride) {}
  std::string_view kind() const override { return "MaxPool2d"; }
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
};

class AvgPool2d : public Pool2dBase {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = 0) : Pool2dBase(kernel, stride) {}
  std::string_view kind() const override { return "AvgPool2d"; }
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
};

class GlobalAvgPool : public Module {
 public:
  std::string_view kind() const override { return "GlobalAvgPool"; }
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
};

}  // namespace braid::nn
