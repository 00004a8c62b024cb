// Flatten: the bridge from image features to a Linear head, matching torch.nn.Flatten on
// PyTorch's NCHW tensors, so the following Linear's weight is the same as torch's.
//
//   rank 4, x [B, H, W, C] (braid's NHWC)  ->  out [B, C*H*W], feature index c*H*W + h*W + w
//   rank 3, x [B, A, D]                     ->  out [B, A*D], a plain reshape (no permutation:
//                                               sequence layouts are the same in torch)
//   rank 2, x [B, F]                        ->  out [B, F], identity
// Ranks 2 and 3 return a handle of the input (no copy); rank 4 permutes into the cache.
// Any other rank is an error. Backward un-permutes dy into x's shape.
#pragma once

#include "nn/module.h"

namespace braid::nn {

class Flatten : public Module {
 public:
  std::string_view kind() const override { return "Flatten"; }
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
};

}  // namespace braid::nn
