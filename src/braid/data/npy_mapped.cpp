// Mapped .npy sources: validation of every file up front, then rows converted on demand.
#include "data/npy_mapped.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "data/transforms.h"

namespace braid::data {
namespace {

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

bool augmenting(const AugmentOptions& a) { return a.flip || a.crop_pad > 0 || a.erase > 0; }

}  // namespace

MappedNpySource::MappedNpySource(std::vector<NpyFilePair> files, MappedNpyOptions options)
    : pairs_(std::move(files)), options_(options) {
  BRAID_CHECK(!pairs_.empty(), "a mapped .npy dataset needs at least one file");
  int64_t total = 0;
  for (size_t f = 0; f < pairs_.size(); ++f) {
    const std::string& path = pairs_[f].features;
    const NpyFileLayout layout = read_npy_layout(path);
    check_npy_features(path, layout.header);
    const std::vector<int64_t> per_sample(layout.header.shape.begin() + 1,
                                          layout.header.shape.end());
    if (f == 0) {
      type_ = layout.header.type;
      stored_shape_ = per_sample;
    } else if (per_sample != stored_shape_ || !(layout.header.type == type_)) {
      BRAID_THROW(IoError, path, ": samples of shape ", shape_text(per_sample), " and dtype ",
                  npy_type_descr(layout.header.type), " but ", pairs_[0].features, " holds ",
                  shape_text(stored_shape_), " and ", npy_type_descr(type_),
                  "; every file of a dataset must hold the same kind of sample");
    }
    const int64_t n = layout.header.shape[0];
    File file;
    file.path = path;
    file.first = total;
    if (options_.map) {
      auto mapping = std::make_unique<MappedFile>(path, MappedFile::Access::random);
      // Invariant: read_npy_layout checked the size; a file replaced in between is caught.
      if (mapping->size() != layout.data_offset + layout.data_bytes)
        BRAID_THROW(IoError, path, ": changed while being opened (", mapping->size(),
                    " bytes, the header declares ", layout.data_offset + layout.data_bytes, ")");
      file.mapping = mapping.get();
      file.rows_offset = layout.data_offset;
      file.rows = mapping->data() + layout.data_offset;
      mappings_.push_back(std::move(mapping));
    } else {
      NpyArray array = read_npy(path);
      file.rows = static_cast<const unsigned char*>(array.data.data());
      buffers_.push_back(std::move(array.data));
    }
    files_.push_back(std::move(file));
    feature_bytes_ += layout.data_bytes;

    NpyLabels labels = read_npy_labels(pairs_[f].labels, n, path);
    const int32_t* l = labels.labels.data<int32_t>();
    labels_.insert(labels_.end(), l, l + n);
    num_classes_ = std::max(num_classes_, labels.num_classes);
    total += n;
  }
  BRAID_CHECK(total > 0, pairs_[0].features, pairs_.size() > 1 ? " and the others hold" : " holds",
              " no samples");
  sample_numel_ = 1;
  for (const int64_t d : stored_shape_) sample_numel_ *= d;
  row_bytes_ = static_cast<uint64_t>(sample_numel_) * npy_type_size(type_);
  const bool nchw = stored_shape_.size() == 3 && options_.layout == ImageLayout::nchw;
  sample_shape_ =
      nchw ? Shape{stored_shape_[1], stored_shape_[2], stored_shape_[0]} : Shape(stored_shape_);
  epoch_size_ = options_.epoch_size > 0 ? options_.epoch_size : total;
  BRAID_CHECK(epoch_size_ >= total, "an epoch of ", epoch_size_, " samples is shorter than the ",
              total, " the files hold");
}

const MappedNpySource::File& MappedNpySource::file_of(int64_t i) const {
  // The last file whose first row is <= i.
  const auto it = std::upper_bound(files_.begin(), files_.end(), i,
                                   [](int64_t v, const File& f) { return v < f.first; });
  return *(it - 1);
}

void MappedNpySource::read_row(const File& file, int64_t row, float* dst, float* scratch) const {
  const unsigned char* src = file.rows + static_cast<uint64_t>(row) * row_bytes_;
  const bool nchw = stored_shape_.size() == 3 && options_.layout == ImageLayout::nchw;
  float* raw = nchw ? scratch : dst;
  npy_to_f32(type_, src, static_cast<uint64_t>(sample_numel_), raw);
  // A NaN or Inf would surface steps later as a diverged loss: name the file and row.
  if (type_.is_float())
    for (int64_t e = 0; e < sample_numel_; ++e)
      if (!std::isfinite(raw[e]))
        BRAID_THROW(IoError, file.path, ": sample ", row, " holds ", raw[e], " (element ", e,
                    " of its ", sample_numel_,
                    "); features must be finite: clean or drop that sample (np.isfinite)");
  if (nchw) {
    // [C, H, W] -> [H, W, C]
    const int64_t c = stored_shape_[0], hw = stored_shape_[1] * stored_shape_[2];
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) dst[p * c + ch] = raw[ch * hw + p];
  }
}

void MappedNpySource::fill(std::span<const SampleRef> samples, const FillContext& ctx,
                           Tensor& inputs, Tensor& targets) const {
  const bool augment = augmenting(ctx.augment);
  BRAID_CHECK(
      !augment || sample_shape_.rank() == 3,
      "crop/flip/erase augmentation needs image features [N, H, W, C], got samples of shape ",
      sample_shape_.str());
  const int64_t total = this->samples();
  // Ask for every row of the batch first, so their page faults are served together.
  if (options_.map)
    for (const SampleRef& s : samples) {
      const File& f = file_of(s.index % total);
      f.mapping->will_need(row_offset(f, s.index % total), row_bytes_);
    }
  // Scratch: the stored row (before NCHW's transpose) and the [H, W, C] one (augmenting).
  thread_local std::vector<float> scratch;
  if (scratch.size() < 2 * static_cast<size_t>(sample_numel_))
    scratch.resize(2 * static_cast<size_t>(sample_numel_));
  float* in = inputs.f32();
  int32_t* tg = targets.data<int32_t>();
  for (size_t r = 0; r < samples.size(); ++r) {
    const int64_t i = samples[r].index % total;
    const File& f = file_of(i);
    float* dst = in + static_cast<int64_t>(r) * sample_numel_;
    if (augment) {
      float* image = scratch.data() + sample_numel_;
      read_row(f, i - f.first, image, scratch.data());
      Rng rng = sample_rng(ctx, samples[r].position);
      const ImageGeometry g{sample_shape_[0], sample_shape_[1], sample_shape_[2]};
      const CropFlip cf = draw_crop_flip(ctx.augment, rng);
      transform_f32(image, g, cf, dst);
      erase(draw_erase(ctx.augment, g, rng), g, dst);
    } else {
      read_row(f, i - f.first, dst, scratch.data());
    }
    tg[r] = labels_[static_cast<size_t>(i)];
  }
  // The rows are copied: unmap their pages, so RSS stays at a batch's rows, not at all the
  // rows the run ever read (the page cache keeps them while memory allows).
  if (options_.map)
    for (const SampleRef& s : samples) {
      const File& f = file_of(s.index % total);
      f.mapping->release(row_offset(f, s.index % total), row_bytes_);
    }
}

}  // namespace braid::data
