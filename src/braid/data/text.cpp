// Byte corpus loading and window extraction.
#include "data/text.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace braid::data {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFortunesHint =
    "install the fortunes package (apt-get install fortunes) or pass your own text files";

uint64_t file_bytes(const std::string& path) {
  std::error_code ec;
  const uint64_t n = fs::file_size(path, ec);
  if (ec) BRAID_THROW(IoError, path, ": cannot read text file (", ec.message(), ")");
  return n;
}

void read_whole(const std::string& path, uint8_t* dst, uint64_t n) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    const int err = errno;
    BRAID_THROW(IoError, path, ": cannot open (", std::strerror(err), ")");
  }
  const uint64_t got = std::fread(dst, 1, n, f);
  std::fclose(f);
  if (got != n)
    BRAID_THROW(IoError, path, ": read ", got, " of ", n, " bytes (did the file change?)");
}

void check_window_tensors(const Tensor& inputs, const Tensor& targets) {
  BRAID_CHECK(inputs.rank() == 2 && inputs.dtype() == DType::i32 &&
                  inputs.shape() == targets.shape() && targets.dtype() == DType::i32,
              "text batches are i32 [B, T] inputs and targets, got ", inputs.shape().str(), " ",
              dtype_name(inputs.dtype()), " and ", targets.shape().str(), " ",
              dtype_name(targets.dtype()));
}

}  // namespace

TextCorpus::TextCorpus(Buffer bytes, int64_t size)
    : bytes_(std::move(bytes)), size_(size), train_size_(size * 9 / 10) {}

TextCorpus TextCorpus::from_bytes(std::string_view bytes) {
  Buffer b(bytes.size(), MemCategory::data);
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return TextCorpus(std::move(b), static_cast<int64_t>(bytes.size()));
}

TextCorpus TextCorpus::from_files(const std::vector<std::string>& paths) {
  BRAID_CHECK(!paths.empty(), "a text corpus needs at least one file");
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const auto& p : paths) {
    sizes.push_back(file_bytes(p));
    total += sizes.back();
  }
  Buffer b(total, MemCategory::data);
  uint64_t at = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    read_whole(paths[i], static_cast<uint8_t*>(b.data()) + at, sizes[i]);
    at += sizes[i];
  }
  return TextCorpus(std::move(b), static_cast<int64_t>(total));
}

std::vector<std::string> TextCorpus::fortune_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) BRAID_THROW(IoError, dir, ": no such directory; ", kFortunesHint);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find('.') != std::string::npos) continue;
    if (!fs::is_regular_file(entry.symlink_status())) continue;
    names.push_back(name);
  }
  if (ec) BRAID_THROW(IoError, dir, ": cannot list (", ec.message(), "); ", kFortunesHint);
  if (names.empty()) BRAID_THROW(IoError, dir, ": holds no fortune files; ", kFortunesHint);
  std::sort(names.begin(), names.end());
  for (auto& n : names) n = (fs::path(dir) / n).string();
  return names;
}

TextCorpus TextCorpus::fortunes(const std::string& dir) { return from_files(fortune_files(dir)); }

void TextCorpus::copy_window(const uint8_t* data, int64_t start, int64_t T, int32_t* inputs,
                             int32_t* targets) {
  const uint8_t* src = data + start;
  for (int64_t t = 0; t < T; ++t) inputs[t] = src[t];
  for (int64_t t = 0; t < T; ++t) targets[t] = src[t + 1];
}

int64_t TextCorpus::num_train_windows(int64_t T) const {
  BRAID_CHECK(T > 0, "context length T must be positive, got ", T);
  return train_size_ > 0 ? (train_size_ - 1) / T : 0;
}

int64_t TextCorpus::draw_train_start(Rng& rng, int64_t T) const {
  BRAID_CHECK(T > 0 && train_size_ >= T + 1, "the train split has ", train_size_,
              " bytes, too few for one window of T+1 = ", T + 1, "; use more text or a smaller T");
  return static_cast<int64_t>(rng.below(static_cast<uint64_t>(train_size_ - T)));
}

void TextCorpus::sample_train_batch(Rng& rng, Tensor& inputs, Tensor& targets) const {
  check_window_tensors(inputs, targets);
  const int64_t B = inputs.dim(0), T = inputs.dim(1);
  int32_t* in = inputs.data<int32_t>();
  int32_t* tg = targets.data<int32_t>();
  for (int64_t b = 0; b < B; ++b)
    copy_window(train(), draw_train_start(rng, T), T, in + b * T, tg + b * T);
}

int64_t TextCorpus::num_validation_windows(int64_t T) const {
  BRAID_CHECK(T > 0, "context length T must be positive, got ", T);
  const int64_t v = validation_size();
  return v > 0 ? (v - 1) / T : 0;
}

int64_t TextCorpus::num_validation_batches(int64_t B, int64_t T) const {
  BRAID_CHECK(B > 0, "batch size must be positive, got ", B);
  return (num_validation_windows(T) + B - 1) / B;
}

int64_t TextCorpus::fill_validation_batch(int64_t i, Tensor& inputs, Tensor& targets) const {
  check_window_tensors(inputs, targets);
  const int64_t B = inputs.dim(0), T = inputs.dim(1);
  const int64_t windows = num_validation_windows(T);
  BRAID_CHECK(i >= 0 && i < num_validation_batches(B, T), "validation batch ", i, " of ",
              num_validation_batches(B, T));
  const int64_t rows = std::min(B, windows - i * B);
  int32_t* in = inputs.data<int32_t>();
  int32_t* tg = targets.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r)
    copy_window(validation(), (i * B + r) * T, T, in + r * T, tg + r * T);
  return rows;
}

TextTrainSource::TextTrainSource(std::shared_ptr<const TextCorpus> corpus, int64_t T,
                                 int64_t samples_per_epoch)
    : corpus_(std::move(corpus)), T_(T) {
  BRAID_CHECK(corpus_, "TextTrainSource needs a corpus");
  BRAID_CHECK(T > 0 && corpus_->train_size() >= T + 1, "the train split has ",
              corpus_->train_size(), " bytes, too few for one window of T+1 = ", T + 1,
              "; use more text or a smaller T");
  BRAID_CHECK(samples_per_epoch >= 0, "samples_per_epoch must be >= 0, got ", samples_per_epoch);
  samples_ = samples_per_epoch > 0 ? samples_per_epoch : corpus_->num_train_windows(T);
}

void TextTrainSource::fill(std::span<const SampleRef> samples, const FillContext& ctx,
                           Tensor& inputs, Tensor& targets) const {
  int32_t* in = inputs.data<int32_t>();
  int32_t* tg = targets.data<int32_t>();
  for (size_t r = 0; r < samples.size(); ++r) {
    Rng rng = sample_rng(ctx, samples[r].position);
    const int64_t start = corpus_->draw_train_start(rng, T_);
    TextCorpus::copy_window(corpus_->train(), start, T_, in + r * T_, tg + r * T_);
  }
}

TextValidationSource::TextValidationSource(std::shared_ptr<const TextCorpus> corpus, int64_t T)
    : corpus_(std::move(corpus)), T_(T) {
  BRAID_CHECK(corpus_, "TextValidationSource needs a corpus");
  BRAID_CHECK(T > 0 && corpus_->num_validation_windows(T) > 0, "the validation split has ",
              corpus_->validation_size(), " bytes, too few for one window of T+1 = ", T + 1,
              "; use more text or a smaller T");
}

void TextValidationSource::fill(std::span<const SampleRef> samples, const FillContext&,
                                Tensor& inputs, Tensor& targets) const {
  int32_t* in = inputs.data<int32_t>();
  int32_t* tg = targets.data<int32_t>();
  for (size_t r = 0; r < samples.size(); ++r)
    TextCorpus::copy_window(corpus_->validation(), samples[r].index * T_, T_, in + r * T_,
                            tg + r * T_);
}

}  // namespace braid::data
