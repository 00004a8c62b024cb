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
//
// SyncBatchNorm (torch.nn.SyncBatchNorm): given a StatsReducer, train mode normalises
// with the statistics of the batch of every rank of the reducer together, so N ranks each
// holding a shard of a batch compute what one layer would on the whole batch: the
// output, dx (through the statistics, dx depends on the other ranks' dy) and the running
// statistics (unbiased over the global count), identical on every rank. A shard may be
// empty. The weight and bias gradients stay local sums over the rank's own rows, as
// PyTorch's: the strategy's gradient allreduce adds them up as it does every parameter's.
// Forward makes one reducer call (an allgather of each rank's count, mean and squared
// deviations), backward one when dx is needed (a sum of sum(dy) and sum(dy * xhat));
// eval mode communicates nothing. Without a reducer (null), the layer is local.
#pragma once

#include <memory>

#include "nn/module.h"
#include "nn/stats_reducer.h"

namespace braid::nn {

class BatchNorm : public Module {
 public:
  static constexpr double kEps = 1e-5;
  static constexpr double kMomentum = 0.1;

  // spatial_dims: 0 for BatchNorm1d ([B, C]), 2 for BatchNorm2d ([B, H, W, C]).
  // reducer: the ranks to share statistics with (SyncBatchNorm), or null for none.
  BatchNorm(int64_t channels, int spatial_dims, std::shared_ptr<StatsReducer> reducer = nullptr);

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
  const std::shared_ptr<StatsReducer>& reducer() const { return reducer_; }

 private:
  int64_t C_;
  int spatial_dims_;
  ParamSet* params_ = nullptr;
  ParamSet::Id weight_ = 0, bias_ = 0;
  Tensor running_mean_, running_var_, num_batches_tracked_;
  std::shared_ptr<StatsReducer> reducer_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t channels, std::shared_ptr<StatsReducer> reducer = nullptr)
      : BatchNorm(channels, 0, std::move(reducer)) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t channels, std::shared_ptr<StatsReducer> reducer = nullptr)
      : BatchNorm(channels, 2, std::move(reducer)) {}
};

}  // namespace braid::nn
