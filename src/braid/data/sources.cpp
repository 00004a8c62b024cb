// Batch filling for image and array datasets.
#include "data/sources.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace braid::data {
namespace {

bool augmenting(const AugmentOptions& a) { return a.flip || a.crop_pad > 0 || a.erase > 0; }

}  // namespace

ImageSource::ImageSource(std::shared_ptr<const ImageDataset> dataset, Normalize normalize)
    : dataset_(std::move(dataset)), table_(normalize) {
  BRAID_CHECK(dataset_, "ImageSource needs a dataset");
  BRAID_CHECK(dataset_->h > 0 && dataset_->w > 0 && dataset_->c > 0, "image dataset has size ",
              dataset_->h, "x", dataset_->w, "x", dataset_->c);
  const ImageDataset& d = *dataset_;
  BRAID_CHECK(d.n >= 0 && d.pixels.bytes() >= static_cast<size_t>(d.n * d.image_bytes()) &&
                  d.labels.dtype() == DType::i32 && d.labels.rank() == 1 && d.labels.dim(0) == d.n,
              "image dataset of ", d.n, " images holds ", d.pixels.bytes(),
              " pixel bytes and labels ", d.labels.shape().str(), "; expected ",
              d.n * d.image_bytes(), " bytes and [", d.n, "]");
}

void ImageSource::fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
                       Tensor& targets) const {
  const ImageGeometry g{dataset_->h, dataset_->w, dataset_->c};
  const int64_t numel = dataset_->image_bytes();
  float* in = inputs.f32();
  int32_t* tg = targets.data<int32_t>();
  const int32_t* labels = dataset_->label_data();
  const bool augment = augmenting(ctx.augment);
  for (size_t r = 0; r < samples.size(); ++r) {
    const int64_t i = samples[r].index;
    float* dst = in + static_cast<int64_t>(r) * numel;
    if (augment) {
      Rng rng = sample_rng(ctx, samples[r].position);
      const CropFlip cf = draw_crop_flip(ctx.augment, rng);
      transform_u8(dataset_->image(i), g, table_, cf, dst);
      erase(draw_erase(ctx.augment, g, rng), g, dst);
    } else {
      transform_u8(dataset_->image(i), g, table_, CropFlip{}, dst);
    }
    tg[r] = labels[i];
  }
}

ArraySource::ArraySource(std::shared_ptr<const ArrayDataset> dataset)
    : dataset_(std::move(dataset)) {
  BRAID_CHECK(dataset_ && dataset_->features.rank() >= 2, "ArraySource needs features [N, ...]");
  if (dataset_->numeric_targets()) {
    const Tensor& t = dataset_->targets;
    BRAID_CHECK(dataset_->features.dtype() == DType::f32 && t.dtype() == DType::f32 &&
                    (t.rank() == 1 || t.rank() == 2) && t.dim(0) == dataset_->size(),
                "ArraySource needs f32 features [N, ...] and f32 targets [N] or [N, K], got ",
                dataset_->features.shape().str(), " and ", t.shape().str());
    if (t.rank() == 2) target_shape_ = Shape{t.dim(1)};
  } else {
    BRAID_CHECK(dataset_->features.dtype() == DType::f32 &&
                    dataset_->labels.dtype() == DType::i32 && dataset_->labels.rank() == 1 &&
                    dataset_->labels.dim(0) == dataset_->size(),
                "ArraySource needs f32 features [N, ...] and i32 labels [N], got ",
                dataset_->features.shape().str(), " and ", dataset_->labels.shape().str());
  }
  std::vector<int64_t> dims = dataset_->features.shape().to_vector();
  dims.erase(dims.begin());
  sample_shape_ = Shape(dims);
  sample_numel_ = sample_shape_.numel();
}

void ArraySource::fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
                       Tensor& targets) const {
  const bool augment = augmenting(ctx.augment);
  BRAID_CHECK(
      !augment || sample_shape_.rank() == 3,
      "crop/flip/erase augmentation needs image features [N, H, W, C], got samples of shape ",
      sample_shape_.str());
  const float* src = dataset_->features.f32();
  const bool numeric = dataset_->numeric_targets();
  const int32_t* labels = numeric ? nullptr : dataset_->labels.data<int32_t>();
  int32_t* tg = numeric ? nullptr : targets.data<int32_t>();
  const float* values = numeric ? dataset_->targets.f32() : nullptr;
  float* tv = numeric ? targets.f32() : nullptr;
  const int64_t k = target_shape_.numel();  // 1 for a scalar target
  float* in = inputs.f32();
  for (size_t r = 0; r < samples.size(); ++r) {
    const int64_t i = samples[r].index;
    float* dst = in + static_cast<int64_t>(r) * sample_numel_;
    if (augment) {
      Rng rng = sample_rng(ctx, samples[r].position);
      const ImageGeometry g{sample_shape_[0], sample_shape_[1], sample_shape_[2]};
      const CropFlip cf = draw_crop_flip(ctx.augment, rng);
      transform_f32(src + i * sample_numel_, g, cf, dst);
      erase(draw_erase(ctx.augment, g, rng), g, dst);
    } else {
      std::memcpy(dst, src + i * sample_numel_, static_cast<size_t>(sample_numel_) * sizeof(float));
    }
    if (numeric)
      std::copy_n(values + i * k, k, tv + static_cast<int64_t>(r) * k);
    else
      tg[r] = labels[i];
  }
}

}  // namespace braid::data
