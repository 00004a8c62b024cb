// Sources over in-memory image and array datasets (text sources live in text.h).
// Inputs are f32 [n, ...sample shape], targets i32 [n] class labels.
#pragma once

#include <memory>

#include "data/dataset.h"
#include "data/transforms.h"

namespace braid::data {

// u8 NHWC images normalised to f32 NHWC, with crop/flip augmentation when the
// FillContext asks for it.
class ImageSource : public Source {
 public:
  explicit ImageSource(std::shared_ptr<const ImageDataset> dataset, Normalize normalize = {});
  std::string_view kind() const override { return "image"; }
  int64_t size() const override { return dataset_->n; }
  Shape input_shape() const override { return Shape{dataset_->h, dataset_->w, dataset_->c}; }
  DType input_dtype() const override { return DType::f32; }
  Shape target_shape() const override { return Shape{}; }
  void fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
            Tensor& targets) const override;

 private:
  std::shared_ptr<const ImageDataset> dataset_;
  PixelTable table_;
};

// f32 feature rows copied as they are. Augmentation needs [N, H, W, C] features (treated
// as NHWC, padded with 0.0f); asking for it on other shapes is an error.
class ArraySource : public Source {
 public:
  explicit ArraySource(std::shared_ptr<const ArrayDataset> dataset);
  std::string_view kind() const override { return "array"; }
  int64_t size() const override { return dataset_->size(); }
  Shape input_shape() const override { return sample_shape_; }
  DType input_dtype() const override { return DType::f32; }
  // A class label, or the dataset's numeric targets per sample ([] for [N], [K] for [N, K]).
  Shape target_shape() const override { return target_shape_; }
  DType target_dtype() const override {
    return dataset_->numeric_targets() ? DType::f32 : DType::i32;
  }
  void fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
            Tensor& targets) const override;

 private:
  std::shared_ptr<const ArrayDataset> dataset_;
  Shape target_shape_;
  Shape sample_shape_;
  int64_t sample_numel_ = 0;
};

}  // namespace braid::data
