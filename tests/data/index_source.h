// IndexSource: a Source whose sample rows say which sample they are, for tests that check
// which samples a loader took: input = the sample's position in the epoch's order, target =
// its index in the dataset.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/tensor.h"
#include "data/dataset.h"

namespace braid::data {

class IndexSource final : public Source {
 public:
  explicit IndexSource(int64_t n) : n_(n) {}
  std::string_view kind() const override { return "index"; }
  int64_t size() const override { return n_; }
  Shape input_shape() const override { return Shape{1}; }
  DType input_dtype() const override { return DType::f32; }
  Shape target_shape() const override { return Shape{}; }
  void fill(std::span<const SampleRef> samples, const FillContext&, Tensor& inputs,
            Tensor& targets) const override {
    for (size_t i = 0; i < samples.size(); ++i) {
      inputs.f32()[i] = static_cast<float>(samples[i].position);
      targets.data<int32_t>()[i] = static_cast<int32_t>(samples[i].index);
    }
  }

 private:
  int64_t n_;
};

}  // namespace braid::data
