// Megatron's pair of linear layers cut by width (Shoeybi et al. 2019), the building blocks
// of a tensor-parallel MLP: a column-parallel Linear makes this rank's out/T outputs (its
// rows of W and b), elementwise layers act on that part, and a row-parallel Linear takes
// the part as its input columns, its products summed over the ranks (TensorReducer), then
// the bias once. In backward the column-parallel layer's dL/dx is its part of the whole,
// summed over the ranks; the row-parallel layer's is already this rank's part.
// Parameters are named as the Linear's ("<prefix>weight", "<prefix>bias") with local shapes.
#pragma once

#include "nn/linear.h"
#include "nn/tensor_reducer.h"

namespace braid::nn {

class ColumnParallelLinear : public Module {
 public:
  // out_local = this rank's share of the outputs.
  ColumnParallelLinear(int64_t in, int64_t out_local, bool bias, TensorReducer& reducer);

  std::string_view kind() const override { return "ColumnParallelLinear"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  Shape output_shape(const Shape& in) const override { return linear_.output_shape(in); }
  std::unique_ptr<Cache> make_cache() const override { return linear_.make_cache(); }
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

 private:
  Linear linear_;
  TensorReducer& reducer_;
};

class RowParallelLinear : public Module {
 public:
  // in_local = this rank's share of the inputs.
  RowParallelLinear(int64_t in_local, int64_t out, bool bias, TensorReducer& reducer);

  std::string_view kind() const override { return "RowParallelLinear"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  Shape output_shape(const Shape& in) const override { return linear_.output_shape(in); }
  std::unique_ptr<Cache> make_cache() const override { return linear_.make_cache(); }
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

 private:
  Linear linear_;  // without bias: the bias is added once, after the sum
  bool has_bias_;
  int64_t out_;
  TensorReducer& reducer_;
  ParamSet* params_ = nullptr;
  ParamSet::Id bias_ = 0;
};

}  // namespace braid::nn
