// Embedding: a lookup table, as torch.nn.Embedding(num, dim). Input i32 ids of any shape
// [...] (each in [0, num)), output f32 [..., dim] with row ids[i] of the weight [num, dim].
// The weight starts N(0, 1) like torch (models such as GPT re-initialise it) and takes
// weight decay. Backward scatter-adds dy rows into the weight's gradient; ids have no
// gradient, so backward must be called with need_dx = false.
#pragma once

#include "nn/module.h"

namespace braid::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim);

  std::string_view kind() const override { return "Embedding"; }
  void declare(ParamSet& params, const std::string& prefix) override;
  void init(Rng& rng) override;
  Shape output_shape(const Shape& in) const override;
  const Tensor& forward(const Tensor& x, Cache& cache, const ForwardContext& ctx) override;
  const Tensor& backward(const Tensor& dy, Cache& cache, bool need_dx) override;

  int64_t num_embeddings() const { return num_; }
  int64_t dim() const { return dim_; }
  ParamSet::Id weight_id() const { return weight_; }

 private:
  int64_t num_, dim_;
  ParamSet* params_ = nullptr;
  ParamSet::Id weight_ = 0;
};

}  // namespace braid::nn
