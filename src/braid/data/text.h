// Byte-level language-model data: a corpus of bytes split 90/10 into train and validation,
// cut into windows of T+1 bytes. A window at s gives inputs bytes[s, s+T) and targets
// bytes[s+1, s+T+1) (the next byte at every position), both as i32 token ids in [0, 256).
//
// Training draws windows at uniformly random starts; validation walks consecutive
// non-overlapping windows starting at 0 with stride T, dropping the last partial one, so
// every validation run scores exactly the same tokens.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "data/dataset.h"

namespace braid::data {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
inline constexpr int64_t kVocabBytes = 256;

class TextCorpus {
 public:
  // The bytes, train = the first floor(0.9 * N), validation = the rest.
  static TextCorpus from_bytes(std::string_view bytes);
  // The files concatenated in the given order.
  static TextCorpus from_files(const std::vector<std::string>& paths);
  // Every regular file directly in `dir` (no symlinks, no names containing '.', which
  // skips fortune's *.dat indexes and *.u8 links), sorted by name, concatenated.
  static TextCorpus fortunes(const std::string& dir = kFortunesDir);
  // The file list fortunes() reads, in order.
  static std::vector<std::string> fortune_files(const std::string& dir = kFortunesDir);

  int64_t size() const { return size_; }
  int64_t train_size() const { return train_size_; }
  int64_t validation_size() const { return size_ - train_size_; }
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(bytes_.data()); }
  const uint8_t* train() const { return bytes(); }
  const uint8_t* validation() const { return bytes() + train_size_; }

  // Windows of T tokens (T+1 bytes) the train split holds: floor((train_size - 1) / T).
  int64_t num_train_windows(int64_t T) const;
  // A uniformly random window start in [0, train_size - T - 1].
  int64_t draw_train_start(Rng& rng, int64_t T) const;
  // Fills inputs/targets [B, T] (i32) with B random training windows drawn from rng.
  void sample_train_batch(Rng& rng, Tensor& inputs, Tensor& targets) const;

  // floor((validation_size - 1) / T) windows at starts 0, T, 2T, ... of the split.
  int64_t num_validation_windows(int64_t T) const;
  int64_t num_validation_batches(int64_t B, int64_t T) const;
  // Fills rows of inputs/targets [B, T] with windows [i*B, i*B + rows) and returns rows,
  // which is B except for the last batch. Rows past the returned count are untouched.
  int64_t fill_validation_batch(int64_t i, Tensor& inputs, Tensor& targets) const;

  // Writes inputs = data[start, start+T), targets = data[start+1, start+T+1).
  static void copy_window(const uint8_t* data, int64_t start, int64_t T, int32_t* inputs,
                          int32_t* targets);

 private:
  TextCorpus(Buffer bytes, int64_t size);
  Buffer bytes_;  // MemCategory::data
  int64_t size_ = 0, train_size_ = 0;
};

// Random training windows; an epoch is num_train_windows(T) samples (or samples_per_epoch
// when given). The sample index is ignored: the start comes from sample_rng.
class TextTrainSource : public Source {
 public:
  TextTrainSource(std::shared_ptr<const TextCorpus> corpus, int64_t T,
                  int64_t samples_per_epoch = 0);
  std::string_view kind() const override { return "text-train"; }
  int64_t size() const override { return samples_; }
  Shape input_shape() const override { return Shape{T_}; }
  DType input_dtype() const override { return DType::i32; }
  Shape target_shape() const override { return Shape{T_}; }
  void fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
            Tensor& targets) const override;

 private:
  std::shared_ptr<const TextCorpus> corpus_;
  int64_t T_, samples_;
};

// Validation windows in order: sample i is the window at start i*T of the split. Use with
// shuffle off and drop_last off to score the whole split.
class TextValidationSource : public Source {
 public:
  TextValidationSource(std::shared_ptr<const TextCorpus> corpus, int64_t T);
  std::string_view kind() const override { return "text-validation"; }
  int64_t size() const override { return corpus_->num_validation_windows(T_); }
  Shape input_shape() const override { return Shape{T_}; }
  DType input_dtype() const override { return DType::i32; }
  Shape target_shape() const override { return Shape{T_}; }
  void fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
            Tensor& targets) const override;

 private:
  std::shared_ptr<const TextCorpus> corpus_;
  int64_t T_;
};

}  // namespace braid::data
