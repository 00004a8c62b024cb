#include "nn/parallel_linear.h"

#include "core/kernels.h"

namespace braid::nn {

ColumnParallelLinear::ColumnParallelLinear(int64_t in, int64_t out_local, bool bias,
                                           TensorReducer& reducer)
    : linear_(in, out_local, bias), reducer_(reducer) {}

void ColumnParallelLinear::declare(ParamSet& params, const std::string& prefix) {
  linear_.declare(params, prefix);
}

const Tensor& ColumnParallelLinear::forward(const Tensor& x, Cache& cache,
                                            const ForwardContext& ctx) {
  return linear_.forward(x, cache, ctx);
}

const Tensor& ColumnParallelLinear::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  const Tensor& dx = linear_.backward(dy, cache, need_dx);
  if (need_dx) reducer_.sum(dx.f32(), static_cast<size_t>(dx.numel()));  // every part's share
  return dx;
}

RowParallelLinear::RowParallelLinear(int64_t in_local, int64_t out, bool bias,
                                     TensorReducer& reducer)
    : linear_(in_local, out, /*bias=*/false), has_bias_(bias), out_(out), reducer_(reducer) {}

void RowParallelLinear::declare(ParamSet& params, const std::string& prefix) {
  params_ = &params;
  linear_.declare(params, prefix);
  if (has_bias_) bias_ = params.declare(prefix + "bias", {out_}, /*decay=*/false);
}

const Tensor& RowParallelLinear::forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) {
  const Tensor& y = linear_.forward(x, cache, ctx);
  reducer_.sum(y.f32(), static_cast<size_t>(y.numel()));
  if (has_bias_) add_bias_rows(y.f32(), params_->param(bias_).f32(), y.numel() / out_, out_);
  return y;
}

const Tensor& RowParallelLinear::backward(const Tensor& dy, Cache& cache, bool need_dx) {
  if (has_bias_) sum_rows_into(dy.f32(), params_->grad(bias_).f32(), dy.numel() / out_, out_);
  return linear_.backward(dy, cache, need_dx);
}

}  // namespace braid::nn
