// A Source restricted to some of another's samples: sample i of the subset is sample
// indices[i] of the base (a split's training or validation side, splits.h). Positions pass
// through unchanged, so per-sample randomness is keyed exactly as the base's would be.
// Immutable; fill() is const and allocates nothing, like every Source.
#pragma once

#include <memory>
#include <vector>

#include "data/dataset.h"

namespace braid::data {

class SubsetSource : public Source {
 public:
  // Every index must lie in [0, base->size()); repeats are allowed (oversampling).
  SubsetSource(std::shared_ptr<const Source> base, std::vector<int64_t> indices);
  std::string_view kind() const override { return base_->kind(); }
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Shape input_shape() const override { return base_->input_shape(); }
  DType input_dtype() const override { return base_->input_dtype(); }
  Shape target_shape() const override { return base_->target_shape(); }
  DType target_dtype() const override { return base_->target_dtype(); }
  void fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
            Tensor& targets) const override;

  const Source& base() const { return *base_; }
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Source> base_;
  std::vector<int64_t> indices_;
};

}  // namespace braid::data
