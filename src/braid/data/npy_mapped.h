// A dataset of .npy file pairs (features, labels) read on demand: the features files are
// memory-mapped and each batch's rows are converted to f32 as fill() copies them, on the
// loader's worker thread, so a dataset larger than memory trains with resident memory
// bounded by the OS's page cache, not by the data. Labels are small and read whole.
//
// The files are concatenated in order: sample i is row i - first(f) of the file f holding
// it. Every file is validated up front exactly as read_npy validates one (npy.h: magic,
// version, header, C order, the declared shape against the file's size), and the files
// must agree on the per-sample shape and the dtype; errors name the file. Features of 4
// dimensions are images in the given layout and come out [H, W, C], as load_npy_dataset
// gives them; other ranks come out as stored. Floating features are checked finite as
// their rows are filled (an IoError naming the file and the sample, rethrown by the
// loader's next()); load_npy_dataset checks them all at load instead.
//
// Wrapping (epoch_size > the files' samples): sample i is sample i mod samples(), so a
// rank whose files hold fewer samples than another's still offers the same number per
// epoch (npy_shards.h pads every rank to the largest this way, and the loader's
// ShardMode::local shuffles the padded range).
//
// Pages: the mappings are MADV_RANDOM (a shuffled epoch gains nothing from read-ahead),
// and fill() first asks for all of a batch's rows (MADV_WILLNEED) so their page faults are
// served together, then converts them, then unmaps them (MADV_DONTNEED: they stay in the
// page cache), so RSS stays near one batch's rows whatever was read before. Immutable after
// construction; fill() is const and allocates only one sample of scratch per thread, once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "data/dataset.h"
#include "data/npy.h"

namespace braid::data {

struct NpyFilePair {
  std::string features, labels;
};

struct MappedNpyOptions {
  ImageLayout layout = ImageLayout::nchw;
  // false: read each features file into memory instead (the same fill path; for data
  // that fits, where a page fault per row would cost more than the reading).
  bool map = true;
  // > 0: samples per epoch, at least the files' samples; sample i wraps to i mod samples().
  int64_t epoch_size = 0;
};

class MappedNpySource : public Source {
 public:
  MappedNpySource(std::vector<NpyFilePair> files, MappedNpyOptions options);
  std::string_view kind() const override { return "npy"; }
  int64_t size() const override { return epoch_size_; }
  Shape input_shape() const override { return sample_shape_; }
  DType input_dtype() const override { return DType::f32; }
  Shape target_shape() const override { return Shape{}; }
  void fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
            Tensor& targets) const override;

  // The files' samples (size() without wrapping) and their largest label + 1.
  int64_t samples() const { return static_cast<int64_t>(labels_.size()); }
  int32_t num_classes() const { return num_classes_; }
  const std::vector<int32_t>& labels() const { return labels_; }
  NpyType dtype() const { return type_; }
  // Bytes of features data over all files.
  uint64_t feature_bytes() const { return feature_bytes_; }
  const std::vector<NpyFilePair>& files() const { return pairs_; }

 private:
  struct File {
    std::string path;
    const unsigned char* rows = nullptr;  // the first row's first byte
    const MappedFile* mapping = nullptr;  // null when read into memory
    uint64_t rows_offset = 0;             // of `rows` within the mapping
    int64_t first = 0;                    // the global index of its row 0
  };
  // The file holding global sample i (< samples()).
  const File& file_of(int64_t i) const;
  // Where sample i's row starts in its file f (f = file_of(i)).
  uint64_t row_offset(const File& f, int64_t i) const {
    return f.rows_offset + static_cast<uint64_t>(i - f.first) * row_bytes_;
  }
  // Row `row` of `file` as f32 in [H, W, C] (4-D) or stored order, checked finite.
  void read_row(const File& file, int64_t row, float* dst, float* scratch) const;

  std::vector<NpyFilePair> pairs_;
  MappedNpyOptions options_;
  std::vector<std::unique_ptr<MappedFile>> mappings_;
  std::vector<Buffer> buffers_;
  std::vector<File> files_;
  std::vector<int32_t> labels_;
  int32_t num_classes_ = 0;
  NpyType type_;
  std::vector<int64_t> stored_shape_;  // per sample, as in the files
  Shape sample_shape_;                 // per sample, as filled
  int64_t sample_numel_ = 0;
  uint64_t row_bytes_ = 0, feature_bytes_ = 0;
  int64_t epoch_size_ = 0;
};

}  // namespace braid::data
