// Linear: y = x W^T + b, as torch.nn.Linear. W is [out, in] (PyTorch's layout), b [out].
// Input [..., in] (leading dimensions are flattened into rows), output [..., out]. Under
// Precision::bf16 its products take bf16 operands (xwt_product.h).
#pragma once

#include "nn/module.h"
#include "nn/xwt_product.h"

namespace braid::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  std::string_view kind() const override { return "Linear"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override;
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;
  std::unique_ptr<Cache> make_cache() const override;
  double forward_flops(const Shape& in) const override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  ParamSet::Id weight_id() const { return weight_; }
  bool has_bias() const { return has_bias_; }

 private:
  int64_t in_, out_;
  bool has_bias_;
  ParamSet* params_ = nullptr;
  ParamSet::Id weight_ = 0, bias_ = 0;
  XWtProduct product_;
};

}  // namespace braid::nn
