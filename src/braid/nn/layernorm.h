// LayerNorm over the last dimension, as torch.nn.LayerNorm(D, eps):
// y = (x - mean) / sqrt(var + eps) * weight + bias, var biased, per row of D values.
// Input [..., D] f32, output the same shape. weight starts at ones, bias at zeros; neither
// takes weight decay. The cache keeps x and each row's mean and 1/std for backward.
#pragma once

#include "nn/module.h"

namespace braid::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f);

  std::string_view kind() const override { return "LayerNorm"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override;
  Shape output_shape(const Shape& in) const override;
  std::unique_ptr<Cache> make_cache() const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

  int64_t dim() const { return dim_; }
  // The output feeds only a Linear: under bf16 it is written in bf16 (rounded_output.h).
  void set_output_feeds_product(bool on) { feeds_product_ = on; }

 private:
  int64_t dim_;
  bool feeds_product_ = false;
  float eps_;
  ParamSet* params_ = nullptr;
  ParamSet::Id weight_ = 0, bias_ = 0;
};

}  // namespace braid::nn
