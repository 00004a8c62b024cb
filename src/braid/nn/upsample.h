// Nearest-neighbour upsampling of NHWC images by an integer factor s on H and W, as
// torch.nn.Upsample(scale_factor=s, mode='nearest'): [B, H, W, C] -> [B, H*s, W*s, C],
// y[b, oy, ox, c] = x[b, oy / s, ox / s, c]. No parameters.
//
// Only integer factors: each input pixel then owns an exact s x s block of the output, so
// backward is a plain block sum (dx[b, iy, ix] = sum of dy over its block) and needs
// nothing saved but the input's shape. A fractional factor would make blocks of uneven
// size that depend on PyTorch's float rounding of 1/s, which a checkpoint twin would have
// to reproduce.
#pragma once

#include "nn/module.h"

namespace braid::nn {

class Upsample : public Module {
 public:
  explicit Upsample(int64_t scale_factor);
  std::string_view kind() const override { return "Upsample"; }
  int64_t scale_factor() const { return s_; }
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  // out [B, H*s, W*s, C] = x [B, H, W, C] with each pixel repeated s x s
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  // dx [B, H, W, C] = dy [B, H*s, W*s, C] summed over each pixel's s x s block
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

 private:
  int64_t s_;
};

}  // namespace braid::nn
