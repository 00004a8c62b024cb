#include "data/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "core/memory.h"
#include "data/index_source.h"
#include "data/sources.h"
#include "data/transforms.h"

namespace braid::data {
namespace {

std::shared_ptr<const ImageDataset> small_images(int64_t n = 37) {
  auto d = std::make_shared<ImageDataset>(ImageDataset::allocate(n, 5, 4, 1, 10));
  Rng rng(99);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < d->image_bytes(); ++p)
      d->mutable_image(i)[p] = static_cast<uint8_t>(rng.below(256));
    d->labels.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  }
  return d;
}

// What batch k must hold, computed without the loader: sampler order, then per-sample
// crop/flip from sample_rng and normalisation.
struct Expected {
  std::vector<float> inputs;
  std::vector<int32_t> targets;
};
Expected reference_batch(const ImageDataset& d, const LoaderOptions& o, int64_t epoch, int64_t k) {
  Sampler s(d.n, {.shuffle = o.shuffle, .seed = o.seed, .rank = o.rank, .world = o.world});
  s.set_epoch(epoch);
  const int64_t begin = k * o.batch, end = std::min(begin + o.batch, s.num_samples());
  const PixelTable table(Normalize{});
  const FillContext ctx{o.seed, epoch, o.augment};
  Expected e;
  e.inputs.resize(static_cast<size_t>((end - begin) * d.image_bytes()));
  for (int64_t j = begin; j < end; ++j) {
    const int64_t i = s.index(j);
    Rng rng = sample_rng(ctx, s.global_position(j));
    const CropFlip cf = draw_crop_flip(o.augment, rng);
    transform_u8(d.image(i), {d.h, d.w, d.c}, table, cf,
                 e.inputs.data() + (j - begin) * d.image_bytes());
    e.targets.push_back(d.label_data()[i]);
  }
  return e;
}

void expect_batch(const Batch& b, const Expected& e) {
  ASSERT_EQ(b.size, static_cast<int64_t>(e.targets.size()));
  ASSERT_EQ(b.inputs.numel(), static_cast<int64_t>(e.inputs.size()));
  EXPECT_EQ(std::memcmp(b.inputs.raw(), e.inputs.data(), b.inputs.nbytes()), 0);
  EXPECT_EQ(std::memcmp(b.targets.raw(), e.targets.data(), b.targets.nbytes()), 0);
}

TEST(Loader, MatchesSynchronousReference) {
  const auto data = small_images();
  for (const bool drop_last : {false, true}) {
    const LoaderOptions o{.batch = 8,
                          .shuffle = true,
                          .drop_last = drop_last,
                          .augment = {.flip = true, .crop_pad = 1},
                          .seed = 17};
    Loader loader(std::make_shared<ImageSource>(data), o);
    EXPECT_EQ(loader.batches_per_epoch(), drop_last ? 4 : 5);
    for (const int64_t epoch : {0, 1, 5}) {
      loader.start_epoch(epoch);
      int64_t k = 0;
      while (const Batch* b = loader.next()) {
        SCOPED_TRACE(testing::Message() << "epoch " << epoch << " batch " << k);
        EXPECT_EQ(b->index, k);
        EXPECT_EQ(b->inputs.shape(), Shape({b->size, 5, 4, 1}));
        EXPECT_EQ(b->targets.shape(), Shape({b->size}));
        expect_batch(*b, reference_batch(*data, o, epoch, k));
        ++k;
      }
      EXPECT_EQ(k, loader.batches_per_epoch());
      EXPECT_EQ(loader.next(), nullptr);  // stays at the end
    }
  }
}

TEST(Loader, EvalKeepsThePartialLastBatch) {
  const auto data = small_images(37);
  Loader loader(std::make_shared<ImageSource>(data),
                {.batch = 8, .shuffle = false, .drop_last = false});
  loader.start_epoch(0);
  std::vector<int64_t> sizes;
  std::vector<int32_t> labels;
  while (const Batch* b = loader.next()) {
    sizes.push_back(b->size);
    for (int64_t r = 0; r < b->size; ++r) labels.push_back(b->targets.data<int32_t>()[r]);
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{8, 8, 8, 8, 5}));
  ASSERT_EQ(labels.size(), 37u);
  for (size_t i = 0; i < labels.size(); ++i) EXPECT_EQ(labels[i], static_cast<int32_t>(i % 10));
}

TEST(Loader, ResumeMidEpochGivesTheSameRemainingBatches) {
  const auto data = small_images();
  const LoaderOptions o{.batch = 6, .augment = {.flip = true, .crop_pad = 2}, .seed = 3};
  auto source = std::make_shared<ImageSource>(data);
  Loader a(source, o);
  a.start_epoch(2);
  for (int i = 0; i < 3; ++i) ASSERT_NE(a.next(), nullptr);
  const LoaderState saved = a.state();
  EXPECT_EQ(saved.epoch, 2);
  EXPECT_EQ(saved.position, 3);
  std::vector<std::vector<float>> rest;
  while (const Batch* b = a.next())
    rest.emplace_back(b->inputs.f32(), b->inputs.f32() + b->inputs.numel());

  Loader b(source, o);
  b.restore(saved);
  size_t i = 0;
  while (const Batch* x = b.next()) {
    ASSERT_LT(i, rest.size());
    EXPECT_EQ(std::vector<float>(x->inputs.f32(), x->inputs.f32() + x->inputs.numel()), rest[i++]);
  }
  EXPECT_EQ(i, rest.size());
  EXPECT_THROW(b.restore({2, 99}), Error);
}

TEST(Loader, ShardsTogetherEqualOneProcess) {
  // Rank r of 2 at batch 4 sees global positions {8k..8k+7}, as one process at batch 8.
  const auto data = small_images(40);
  auto source = std::make_shared<ImageSource>(data);
  const AugmentOptions aug{.flip = true, .crop_pad = 1};
  Loader whole(source, {.batch = 8, .augment = aug, .seed = 21});
  Loader r0(source, {.batch = 4, .augment = aug, .seed = 21, .rank = 0, .world = 2});
  Loader r1(source, {.batch = 4, .augment = aug, .seed = 21, .rank = 1, .world = 2});
  for (Loader* l : {&whole, &r0, &r1}) l->start_epoch(1);
  const int64_t numel = data->image_bytes();
  while (const Batch* w = whole.next()) {
    const Batch* a = r0.next();
    const Batch* b = r1.next();
    ASSERT_TRUE(a && b);
    std::vector<std::vector<float>> want, got;
    for (int64_t r = 0; r < 8; ++r)
      want.emplace_back(w->inputs.f32() + r * numel, w->inputs.f32() + (r + 1) * numel);
    for (const Batch* x : {a, b})
      for (int64_t r = 0; r < 4; ++r)
        got.emplace_back(x->inputs.f32() + r * numel, x->inputs.f32() + (r + 1) * numel);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(want, got);
  }
  EXPECT_EQ(r0.next(), nullptr);
}

TEST(Loader, SteadyStateAllocatesNothing) {
  auto source = std::make_shared<ImageSource>(small_images());
  Loader loader(source, {.batch = 8, .augment = {.flip = true, .crop_pad = 1}});
  loader.start_epoch(0);
  while (loader.next()) {
  }
  const int64_t before = MemoryTracker::process().allocations();
  for (int64_t e = 1; e < 4; ++e) {
    loader.start_epoch(e);
    while (loader.next()) {
    }
  }
  EXPECT_EQ(MemoryTracker::process().allocations(), before);
  EXPECT_GE(loader.wait_seconds(), 0.0);
  EXPECT_GE(loader.fill_seconds(), 0.0);
}

// Throws on every sample of index `bad` in epoch `bad_epoch`; optionally sleeps per fill.
class FlakySource : public Source {
 public:
  FlakySource(int64_t n, int64_t bad, int64_t bad_epoch, int sleep_ms = 0)
      : n_(n), bad_(bad), bad_epoch_(bad_epoch), sleep_ms_(sleep_ms) {}
  std::string_view kind() const override { return "flaky"; }
  int64_t size() const override { return n_; }
  Shape input_shape() const override { return Shape{2}; }
  DType input_dtype() const override { return DType::f32; }
  Shape target_shape() const override { return Shape{}; }
  void fill(std::span<const SampleRef> samples, const FillContext& ctx, Tensor& inputs,
            Tensor& targets) const override {
    if (sleep_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    for (size_t r = 0; r < samples.size(); ++r) {
      if (samples[r].index == bad_ && ctx.epoch == bad_epoch_)
        BRAID_THROW(IoError, "sample ", bad_, " is unreadable");
      inputs.f32()[2 * r] = inputs.f32()[2 * r + 1] = static_cast<float>(samples[r].index);
      targets.data<int32_t>()[r] = static_cast<int32_t>(samples[r].index);
    }
  }

 private:
  int64_t n_, bad_, bad_epoch_;
  int sleep_ms_;
};

TEST(Loader, WorkerExceptionReachesTheConsumer) {
  Loader loader(std::make_shared<FlakySource>(20, 13, 1), {.batch = 4, .shuffle = false});
  loader.start_epoch(1);
  for (int i = 0; i < 3; ++i) ASSERT_NE(loader.next(), nullptr);  // samples 0..11
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      loader.next();
      ADD_FAILURE() << "expected the worker's error";
    } catch (const IoError& e) {
      EXPECT_STREQ(e.what(), "sample 13 is unreadable");
    }
  }
  loader.start_epoch(2);  // a new epoch recovers
  int64_t batches = 0;
  while (loader.next()) ++batches;
  EXPECT_EQ(batches, 5);
}

TEST(Loader, ShutsDownCleanlyMidEpoch) {
  auto source = std::make_shared<FlakySource>(100, -1, 0, 20);
  {
    Loader loader(source, {.batch = 4});
    loader.start_epoch(0);
    ASSERT_NE(loader.next(), nullptr);
  }  // worker busy filling: the destructor waits for that fill only
  { Loader never_started(source, {.batch = 4}); }
  Loader restarted(source, {.batch = 4, .shuffle = false});
  restarted.start_epoch(0);
  restarted.next();
  restarted.start_epoch(0);  // abandons the in-flight prefetch
  const Batch* b = restarted.next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->index, 0);
  EXPECT_EQ(b->targets.data<int32_t>()[0], 0);
}

TEST(Loader, MisuseIsAnError) {
  auto source = std::make_shared<FlakySource>(10, -1, 0);
  EXPECT_THROW(Loader(source, {.batch = 0}), Error);
  EXPECT_THROW(Loader(nullptr, {}), Error);
  Loader loader(source, {.batch = 4});
  EXPECT_THROW(loader.next(), Error);  // no epoch started
  EXPECT_THROW(loader.start_epoch(-1), Error);
}

TEST(LoaderSteps, WorldDividingTheGlobalBatchGivesTodaysBatches) {
  // Training's options (pad, drop_last) at batch G / w against a global batch of G.
  const auto data = small_images(40);
  auto source = std::make_shared<ImageSource>(data);
  const AugmentOptions aug{.flip = true, .crop_pad = 1, .erase = 0.5f};
  for (const int w : {1, 2, 4}) {
    for (int r = 0; r < w; ++r) {
      Loader today(
          source,
          {.batch = 8 / w, .drop_last = true, .augment = aug, .seed = 21, .rank = r, .world = w});
      Loader steps(source, {.batch = 1,  // replaced by the share
                            .augment = aug,
                            .seed = 21,
                            .rank = r,
                            .world = w,
                            .global_batch = 8});
      EXPECT_EQ(steps.options().batch, 8 / w);
      EXPECT_EQ(steps.batches_per_epoch(), 5);
      EXPECT_EQ(today.batches_per_epoch(), 5);
      today.start_epoch(2);
      steps.start_epoch(2);
      while (const Batch* a = today.next()) {
        const Batch* b = steps.next();
        ASSERT_NE(b, nullptr);
        ASSERT_EQ(a->size, b->size);
        EXPECT_EQ(std::memcmp(a->inputs.raw(), b->inputs.raw(), a->inputs.nbytes()), 0);
        EXPECT_EQ(std::memcmp(a->targets.raw(), b->targets.raw(), a->targets.nbytes()), 0);
      }
      EXPECT_EQ(steps.next(), nullptr);
    }
  }
}

TEST(LoaderSteps, UnevenSharesAndWorldChangesCoverEachStepOnce) {
  const int64_t n = 150, G = 10;
  auto source = std::make_shared<IndexSource>(n);
  // The world of each step: loaders rebuilt at the same step position, as after a failure
  // (4 -> 3) and a replacement (-> 4).
  const int worlds[] = {4, 3, 3, 2, 4, 1, 3, 10, 7, 3, 4, 2, 5, 6, 9};
  const int64_t steps = n / G;
  ASSERT_EQ(static_cast<int64_t>(std::size(worlds)), steps);
  Sampler whole(n, {.seed = 8});
  whole.set_epoch(1);
  std::vector<int64_t> seen;
  for (int64_t t = 0; t < steps; ++t) {
    const int w = worlds[t];
    std::vector<int64_t> positions;
    for (int r = 0; r < w; ++r) {
      Loader l(source, {.seed = 8, .rank = r, .world = w, .global_batch = G});
      EXPECT_EQ(l.batches_per_epoch(), steps);  // the same at every world
      l.restore({.epoch = 1, .position = t});
      const Batch* b = l.next();
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(b->index, t);
      EXPECT_EQ(b->size, batch_share(G, r, w));
      for (int64_t i = 0; i < b->size; ++i) {
        const auto p = static_cast<int64_t>(b->inputs.f32()[i]);
        positions.push_back(p);
        EXPECT_EQ(b->targets.data<int32_t>()[i], whole.permutation()[static_cast<size_t>(p)]);
        seen.push_back(b->targets.data<int32_t>()[i]);
      }
      EXPECT_EQ(l.state().position, t + 1);
    }
    std::sort(positions.begin(), positions.end());
    std::vector<int64_t> block(static_cast<size_t>(G));
    std::iota(block.begin(), block.end(), t * G);
    EXPECT_EQ(positions, block) << "step " << t << " over " << w << " ranks";
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);  // n is a multiple of G: every sample once
}

TEST(LoaderSteps, TheTailIsSkippedAtEveryWorld) {
  auto source = std::make_shared<IndexSource>(37);
  for (const int w : {1, 2, 3, 5, 10}) {
    Loader l(source, {.shuffle = false, .rank = w - 1, .world = w, .global_batch = 10});
    EXPECT_EQ(l.batches_per_epoch(), 3) << w;
    l.start_epoch(0);
    int64_t last = -1;
    while (const Batch* b = l.next())
      for (int64_t i = 0; i < b->size; ++i)
        last = std::max<int64_t>(last, b->targets.data<int32_t>()[i]);
    EXPECT_LT(last, 30);
  }
}

}  // namespace
}  // namespace braid::data
