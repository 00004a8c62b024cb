// Batch normalisation over the channel (last) axis, as torch.nn.BatchNorm1d on [B, C]
// and torch.nn.BatchNorm2d on NHWC [B, H, W, C]: statistics run over every axis but C.
//
// Train mode normalises with the batch mean and biased variance, and updates the running
// statistics with momentum 0.1 using the unbiased variance (PyTorch's convention);
// num_batches_tracked counts those updates. Eval mode normalises with the running
// statistics. eps = 1e-5. y = (x - mean) / sqrt(var + eps) * weight + bias.
//
// Names follow PyTorch's state_dict: <prefix>weight, bias (parameters, no weight decay),
// running_mean, running_var (f32 [C]) and num_batches_tracked (i64, rank 0) as buffers.
// The module owns the buffers from construction; declare() shares them with the
// ParamSet, init() resets them with the parameters.
#pragma once

#include "nn/module.h"

namespace braid::nn {

class BatchNorm : public Module {
 public:
  static constexpr double kEps = 1e-5;
  static constexpr double kMomentum = 0.1;

  // spatial_dims: 0 for BatchNorm1d ([B, C]), 2 for BatchNorm2d ([B, H, W, C]).
  BatchNorm(int64_t channels, int spatial_dims);

  std::string_view kind() const override;
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override;
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

  int64_t channels() const { return C_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  int64_t num_batches_tracked() const { return *num_batches_tracked_.data<int64_t>(); }

 private:
  int64_t C_;
  int spatial_dims_;
  ParamSet* params_ = nullptr;
  ParamSet::Id weight_ = 0, bias_ = 0;
  Tensor running_mean_, running_var_, num_batches_tracked_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t channels) : BatchNorm(channels, 0) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t channels) : BatchNorm(channels, 2) {}
};

}  // namespace braid::nn
