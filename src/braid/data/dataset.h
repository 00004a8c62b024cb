// Common data types: in-memory datasets and the Source interface the Loader draws from.
//
// A Source turns sample indices into rows of a batch. Its fill() must be a pure function
// of (the samples, the FillContext): every random choice (augmentation, a text window's
// start) comes from sample_rng(ctx, position), never from hidden state, so a batch is a
// function of (seed, epoch, position) and a resumed run sees bitwise-identical batches.
// Sources are immutable after construction and fill() is const: the Loader calls it on
// its worker thread while the owner keeps a shared_ptr<const Source>.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/memory.h"
#include "core/rng.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace braid::data {

enum class Split : uint8_t { train, test };
std::string_view split_name(Split s);

// u8 images [N, H, W, C] (NHWC) with i32 labels [N] in [0, num_classes).
struct ImageDataset {
  Buffer pixels;  // N*H*W*C bytes, MemCategory::data
  Tensor labels;  // i32 [N]
  int64_t n = 0, h = 0, w = 0, c = 0;
  int32_t num_classes = 0;

  // A zero-filled dataset of the given geometry, for callers that fill it themselves.
  static ImageDataset allocate(int64_t n, int64_t h, int64_t w, int64_t c, int32_t num_classes);
  int64_t image_bytes() const { return h * w * c; }
  const uint8_t* image(int64_t i) const {
    return static_cast<const uint8_t*>(pixels.data()) + i * image_bytes();
  }
  uint8_t* mutable_image(int64_t i) {
    return static_cast<uint8_t*>(pixels.data()) + i * image_bytes();
  }
  const int32_t* label_data() const { return labels.data<int32_t>(); }
};

// f32 features [N, ...] with i32 labels [N], e.g. a user's own .npy arrays; or, for
// regression and multi-label losses, f32 targets [N] or [N, K] in place of the labels.
struct ArrayDataset {
  Tensor features;          // f32 [N, ...], MemCategory::data
  Tensor labels;            // i32 [N]; undefined when targets are set
  Tensor targets;           // f32 [N] or [N, K]; undefined for class labels
  int32_t num_classes = 0;  // labels: max + 1; targets: K (1 for [N])
  int64_t size() const { return features.dim(0); }
  bool numeric_targets() const { return targets.defined(); }
};

// Loader options that change sample content (augmentation applies to image sources).
struct AugmentOptions {
  bool flip = false;     // random horizontal flip with probability 1/2
  int64_t crop_pad = 0;  // pad by this many pixels, then crop back at a random offset
  float erase = 0.0f;    // probability of random erasing (Zhong et al. 2017), after the crop
};

struct FillContext {
  uint64_t seed = 0;
  int64_t epoch = 0;
  AugmentOptions augment{};
};

// One row of a batch: which sample, and its position in the epoch's global (all-rank)
// order. Randomness is keyed by the position, so rank r of w at local step k draws
// exactly what a single process does at the same global positions.
struct SampleRef {
  int64_t index = 0;
  int64_t position = 0;
};

// Words of the Philox stream reserved per sample; a sample drawing more than this
// overlaps the next sample's words, which stays deterministic.
inline constexpr uint64_t kWordsPerSample = 64;
// The sampler's permutation uses stream = epoch; sample randomness lives in the upper half
// of the stream space so the two never meet.
inline constexpr uint64_t kSampleStreamBit = 1ull << 63;

inline Rng sample_rng(const FillContext& ctx, int64_t position) {
  return Rng(ctx.seed, kSampleStreamBit | static_cast<uint64_t>(ctx.epoch),
             static_cast<uint64_t>(position) * kWordsPerSample);
}

class Source {
 public:
  virtual ~Source() = default;
  virtual std::string_view kind() const = 0;
  // Samples per epoch (before sharding across ranks).
  virtual int64_t size() const = 0;
  // Per-sample shapes and dtypes; a batch of n is [n, ...shape].
  virtual Shape input_shape() const = 0;
  virtual DType input_dtype() const = 0;
  virtual Shape target_shape() const = 0;  // rank 0 for a class label
  virtual DType target_dtype() const { return DType::i32; }
  // Writes samples.size() rows into inputs and targets, already shaped [samples.size(), ...].
  virtual void fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
                    Tensor& targets) const = 0;
};

// [n, ...per_sample]
Shape batch_shape(int64_t n, const Shape& per_sample);

}  // namespace braid::data
